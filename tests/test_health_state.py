"""The per-GPU health state machine (core.health): XID classification, hysteresis, no
flapping, the operator's way back, and the node summary. Pure: snapshot in, states out."""

from __future__ import annotations

from swarmgpu.core.health import (
    XIDS,
    Action,
    Effect,
    Finding,
    GpuState,
    HealthPolicy,
    HealthSignals,
    Level,
    Observation,
    XidEvent,
    assess,
    signals_from_dcgm,
    signals_from_dict,
    step,
    step_one,
    summarise,
    xid_info,
)

P = HealthPolicy(clean_window_s=600, flap_window_s=3600, max_backoff=8)
XID79 = HealthSignals(xid_events=(XidEvent(79, 100.0),))


def _obs(s: HealthSignals | None, label: str = "") -> Observation:
    return Observation("GPU-a", assess(s), operator_label=label)


def test_xid_table_application_errors_do_not_fail() -> None:
    for code in (13, 31, 43, 45, 68, 109):
        assert XIDS[code].effect is Effect.NONE, code
    for code in (48, 64, 74, 79, 95, 119, 120):
        assert XIDS[code].effect is Effect.FAIL, code
    assert XIDS[79].action is Action.REBOOT and XIDS[64].action is Action.RMA
    assert XIDS[94].effect is Effect.DEGRADE and XIDS[63].effect is Effect.DEGRADE
    assert xid_info(9999).effect is Effect.DEGRADE  # unknown: warn, never silently fine


def test_assess_signals() -> None:
    assert assess(HealthSignals(xid_events=(XidEvent(13, 5.0),))) == []
    assert assess(HealthSignals(ecc_sbe_volatile=353)) == []  # correctable: normal
    f = assess(HealthSignals(ecc_dbe_volatile=1, row_remap_pending=True))
    assert [x.effect for x in f] == [Effect.FAIL, Effect.DEGRADE]
    assert assess(HealthSignals(row_remap_failed=True))[0].action is Action.RMA
    assert assess(HealthSignals(throttle_reasons=0x1 | 0x4)) == []  # idle, SW power cap
    t = assess(HealthSignals(throttle_reasons=0x40))
    assert t[0].effect is Effect.DEGRADE and "HW thermal" in t[0].reason
    assert assess(None, lost="GPU is lost")[0].effect is Effect.FAIL


def test_fail_at_once_then_clean_window_then_healthy() -> None:
    s = step_one(None, _obs(XID79), now=100)
    assert (s.level, s.action, s.since) == (Level.FAILED, Action.REBOOT, 100)
    assert s.reason.startswith("Xid 79")
    # The same event listed again is not a new failure; the window runs from it.
    s = step_one(s, _obs(XID79), now=400)
    assert s.level is Level.FAILED
    s = step_one(s, _obs(XID79), now=699)
    assert s.level is Level.FAILED
    s = step_one(s, _obs(XID79), now=700)
    assert s.level is Level.HEALTHY and "clean for 600s" in s.reason


def test_standing_condition_holds_the_state() -> None:
    dbe = HealthSignals(ecc_dbe_volatile=1)
    s = step_one(None, _obs(dbe), now=0)
    for t in range(0, 5000, 100):
        s = step_one(s, _obs(dbe), now=t)
        assert s.level is Level.FAILED and s.since == 0
    s = step_one(s, _obs(HealthSignals(ecc_dbe_volatile=0)), now=5000)
    assert s.level is Level.FAILED  # reset cleared it; clean window still runs
    s = step_one(s, _obs(HealthSignals(ecc_dbe_volatile=0)), now=5500)
    assert s.level is Level.HEALTHY


def test_flapping_moves_once_and_backs_off() -> None:
    """Failed, clean, failed, clean, failed within the window: one entry into failed while
    it flaps faster than the clean window, and each return lengthens the window."""
    entries = 0
    s: GpuState | None = None
    prev = Level.HEALTHY
    for k, t in enumerate(range(0, 1500, 50)):
        bad = k % 4 == 0  # a fresh XID 79 every 200 s, clean in between
        sig = HealthSignals(xid_events=(XidEvent(79, float(t)),)) if bad else HealthSignals()
        s = step_one(s, _obs(sig), now=t, policy=P)
        entries += s.level is Level.FAILED and prev is not Level.FAILED
        prev = s.level
    assert entries == 1 and s is not None and s.level is Level.FAILED
    # Back after a clean window; a new failure within the hour doubles the next window.
    s = step_one(s, _obs(HealthSignals()), now=1400 + 600, policy=P)
    assert s.level is Level.HEALTHY
    s = step_one(s, _obs(HealthSignals(xid_events=(XidEvent(79, 2100.0),))), now=2100,
                 policy=P)
    assert s.level is Level.FAILED and len(s.failures) == 2
    s = step_one(s, _obs(HealthSignals()), now=2100 + 600, policy=P)
    assert s.level is Level.FAILED  # 1200 s now
    s = step_one(s, _obs(HealthSignals()), now=2100 + 1200, policy=P)
    assert s.level is Level.HEALTHY


def test_degraded_is_entered_and_left_but_never_fails() -> None:
    pending = HealthSignals(row_remap_pending=True)
    s = step_one(None, _obs(pending), now=0)
    assert s.level is Level.DEGRADED and s.action is Action.RESET_GPU
    s = step_one(s, _obs(HealthSignals(xid_events=(XidEvent(13, 10.0),))), now=10)
    assert s.level is Level.DEGRADED
    s = step_one(s, _obs(HealthSignals()), now=700)
    assert s.level is Level.HEALTHY


def test_operator_reset_label() -> None:
    s = step_one(None, _obs(XID79), now=100)
    assert s.level is Level.FAILED
    s = step_one(s, _obs(XID79, label="ok"), now=150)
    assert s.level is Level.HEALTHY and s.reason == "operator: health=ok"
    # The label left in place does not forgive a later failure...
    later = HealthSignals(xid_events=(XidEvent(79, 100.0), XidEvent(48, 200.0)))
    s = step_one(s, _obs(later, label="ok"), now=200)
    assert s.level is Level.FAILED and s.reason.startswith("Xid 48")
    # ...setting it again (removed, then ok) does.
    s = step_one(s, _obs(later, label=""), now=210)
    assert s.level is Level.FAILED
    s = step_one(s, _obs(later, label="ok"), now=220)
    assert s.level is Level.HEALTHY
    # A standing condition still reported after the "reset" fails it again at once.
    s = step_one(s, _obs(HealthSignals(ecc_dbe_volatile=1), label=""), now=230)
    s = step_one(s, _obs(HealthSignals(ecc_dbe_volatile=1), label="ok"), now=240)
    assert s.level is Level.FAILED


def test_step_keeps_unobserved_and_summarises() -> None:
    states = step({}, [Observation("GPU-a", assess(XID79)), Observation("GPU-b")], now=100)
    states = step(states, [Observation("GPU-b")], now=200)  # GPU-a's agent is silent
    assert states["GPU-a"].level is Level.FAILED
    n = summarise(states, ["GPU-a", "GPU-b", "GPU-c"])
    assert (n.healthy, n.degraded, n.failed, n.usable) == (2, 0, 1, 2)
    assert n.failed_uuids == ("GPU-a",)
    assert states["GPU-a"].to_dict(160)["for_s"] == 60.0


def test_parse_and_dcgm_forms() -> None:
    s = HealthSignals(xid_events=(XidEvent(79, 5.0),), ecc_dbe_volatile=2,
                      row_remap_pending=True, throttle_reasons=0x41)
    assert signals_from_dict(s.to_dict(), "h") == s
    for bad in ({"ecc_dbe_volatile": -1}, {"row_remap_pending": 1}, {"nope": 1},
                {"xid_events": [{"xid": "79", "at": 1}]}):
        try:
            signals_from_dict(bad, "h")
        except ValueError as e:
            assert str(e).startswith("h")
        else:
            raise AssertionError(bad)
    d = signals_from_dcgm({"DCGM_FI_DEV_XID_ERRORS": 79.0, "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0.0})
    assert d is not None and d.last_xid == 79 and d.row_remap_failed is False
    # dcgm-exporter's last XID has no time: it stands while the page lists it.
    f = assess(d)
    assert f == [Finding(Effect.FAIL, "Xid 79: GPU has fallen off the bus", Action.REBOOT)]
    assert signals_from_dcgm({"DCGM_FI_DEV_GPU_UTIL": 5.0}) is None
    assert signals_from_dcgm({"DCGM_FI_DEV_XID_ERRORS": 0.0}) == HealthSignals()
