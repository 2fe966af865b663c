"""GPU health: what the driver reports, what it means, and a state per GPU that does not flap.

Three parts, all pure (no I/O, no clock of their own):

* ``XIDS``: the one table of XID meanings (kind, effect on placement, suggested action).
  Source: NVIDIA's Xid catalogue for Ampere and newer GPUs
  (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, "Resolution
  Bucket (Immediate Action)"), and for which XIDs are the application's fault, the list the
  NVIDIA k8s-device-plugin ignores by default (13, 31, 43, 45, 68, 109). The actions are
  named as GPUd (leptonai/gpud) suggests them: reset the GPU, reboot the host, inspect or
  replace (RMA) the hardware.
* ``HealthSignals``: what one GPU reports (recent XID events, ECC counts, retired pages,
  row remapping, clock throttle reasons, NVLink error counters), served per GPU in
  ``/facts``; ``assess`` turns it into findings; ``signals_from_dcgm`` reads the same
  fields from a dcgm-exporter page.
* ``step``: the per-GPU state machine (healthy, degraded, failed) with hysteresis and a
  documented way back (docs/health.md): snapshot in, states out.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any


class Effect(enum.StrEnum):
    NONE = "none"  # the application's own error: the GPU is fine
    DEGRADE = "degrade"  # warn; the GPU is still used
    FAIL = "fail"  # no new work; holders are moved off


class Action(enum.StrEnum):
    NONE = "none"
    RESTART_APP = "restart-app"
    RESET_GPU = "reset-gpu"
    REBOOT = "reboot"
    RMA = "rma"  # inspect the hardware; replace it if it repeats


class Level(enum.StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    FAILED = "failed"


@dataclass(frozen=True)
class XidInfo:
    code: int
    name: str
    kind: str  # application, driver, hardware, ecc, bus, fabric
    effect: Effect
    action: Action


def _x(code: int, name: str, kind: str, effect: Effect, action: Action) -> XidInfo:
    return XidInfo(code, name, kind, effect, action)


_A, _D, _F = Effect.NONE, Effect.DEGRADE, Effect.FAIL
# The one XID table. Anything not in it is DEGRADE (warn, look it up), never silently fine.
XIDS: dict[int, XidInfo] = {
    x.code: x
    for x in (
        _x(
            8,
            "GPU stopped processing (channel idle timeout)",
            "application",
            _A,
            Action.RESTART_APP,
        ),
        _x(11, "invalid or corrupted push buffer stream", "application", _A, Action.RESTART_APP),
        _x(13, "graphics engine exception", "application", _A, Action.RESTART_APP),
        _x(31, "GPU memory page fault", "application", _A, Action.RESTART_APP),
        _x(32, "invalid or corrupted push buffer stream (PBDMA)", "bus", _D, Action.RESTART_APP),
        _x(43, "GPU stopped processing (reset channel)", "application", _A, Action.NONE),
        _x(45, "preemptive cleanup after earlier errors", "application", _A, Action.NONE),
        _x(48, "double-bit ECC error", "ecc", _F, Action.RESET_GPU),
        _x(57, "error programming video memory interface", "hardware", _F, Action.RMA),
        _x(58, "unstable video memory interface", "hardware", _F, Action.RMA),
        _x(61, "internal micro-controller breakpoint", "hardware", _F, Action.RESET_GPU),
        _x(62, "internal micro-controller halt", "hardware", _F, Action.RESET_GPU),
        _x(
            63,
            "row remapping / page retirement recorded (reset to apply)",
            "ecc",
            _D,
            Action.RESET_GPU,
        ),
        _x(64, "row remapping / page retirement failed", "ecc", _F, Action.RMA),
        _x(68, "video decoder exception", "application", _A, Action.RESTART_APP),
        _x(69, "graphics engine class error", "application", _A, Action.RESTART_APP),
        _x(74, "NVLink error", "fabric", _F, Action.RESET_GPU),
        _x(79, "GPU has fallen off the bus", "bus", _F, Action.REBOOT),
        _x(92, "high single-bit ECC error rate", "ecc", _D, Action.NONE),
        _x(94, "contained uncorrectable ECC error", "ecc", _D, Action.RESET_GPU),
        _x(95, "uncontained uncorrectable ECC error", "ecc", _F, Action.RESET_GPU),
        _x(109, "context switch timeout", "application", _A, Action.RESTART_APP),
        _x(119, "GSP RPC timeout", "driver", _F, Action.RESET_GPU),
        _x(120, "GSP error", "driver", _F, Action.RESET_GPU),
        _x(121, "C2C link corrected error", "fabric", _D, Action.NONE),
        _x(140, "unrecovered ECC error", "ecc", _F, Action.RESET_GPU),
        _x(143, "GPU initialization failure", "hardware", _F, Action.RESET_GPU),
    )
}
XID_SOURCE = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


def xid_info(code: int) -> XidInfo:
    """The table's row, or a DEGRADE row for an XID the table does not know."""
    return XIDS.get(code) or XidInfo(
        code,
        "not in swarmgpu's XID table; see " + XID_SOURCE,
        "unknown",
        Effect.DEGRADE,
        Action.NONE,
    )


# nvmlClocksEventReasons / nvmlClocksThrottleReasons bits (nvml.h) that mean the hardware
# protects itself; idle, application clocks and the software power cap are normal.
THROTTLE_HW_SLOWDOWN = 0x08
THROTTLE_SW_THERMAL = 0x20
THROTTLE_HW_THERMAL = 0x40
THROTTLE_HW_POWER_BRAKE = 0x80
THROTTLE_BAD: dict[int, str] = {
    THROTTLE_HW_SLOWDOWN: "HW slowdown",
    THROTTLE_SW_THERMAL: "SW thermal slowdown",
    THROTTLE_HW_THERMAL: "HW thermal slowdown",
    THROTTLE_HW_POWER_BRAKE: "HW power brake slowdown",
}
MAX_XID_EVENTS = 16
MAX_XID_AHEAD = 2 * MAX_XID_EVENTS  # future-dated events a state remembers (GpuState)


@dataclass(frozen=True)
class XidEvent:
    code: int
    at: float  # unix seconds when the agent saw it

    def to_dict(self) -> dict[str, Any]:
        return {"xid": self.code, "at": self.at}


@dataclass(frozen=True)
class HealthSignals:
    """What one GPU reports about its own health; ``None`` is unknown, never 0."""

    xid_events: tuple[XidEvent, ...] = ()  # the latest, oldest first, at most 16
    ecc_sbe_volatile: int | None = None  # correctable since the last reset
    ecc_dbe_volatile: int | None = None  # uncorrectable since the last reset
    ecc_sbe_aggregate: int | None = None  # correctable over the GPU's life
    ecc_dbe_aggregate: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    row_remap_correctable: int | None = None
    row_remap_uncorrectable: int | None = None
    row_remap_pending: bool | None = None
    row_remap_failed: bool | None = None
    throttle_reasons: int | None = None  # the nvmlClocksEventReasons bitmask
    nvlink_crc_errors: int | None = None  # summed over the GPU's links
    nvlink_replay_errors: int | None = None
    nvlink_recovery_errors: int | None = None

    @property
    def last_xid(self) -> int | None:
        return self.xid_events[-1].code if self.xid_events else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"xid_events": [e.to_dict() for e in self.xid_events]}
        for k in _COUNTERS + _FLAGS:
            out[k] = getattr(self, k)
        return out


_COUNTERS = (
    "ecc_sbe_volatile",
    "ecc_dbe_volatile",
    "ecc_sbe_aggregate",
    "ecc_dbe_aggregate",
    "retired_pages_sbe",
    "retired_pages_dbe",
    "row_remap_correctable",
    "row_remap_uncorrectable",
    "throttle_reasons",
    "nvlink_crc_errors",
    "nvlink_replay_errors",
    "nvlink_recovery_errors",
)
_FLAGS = ("retired_pages_pending", "row_remap_pending", "row_remap_failed")
HEALTH_KEYS = frozenset({"xid_events", *_COUNTERS, *_FLAGS})


def signals_from_dict(raw: Any, where: str) -> HealthSignals:
    """Parse the ``health`` object of one GPU in ``/facts``; ValueError names the field."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected an object")
    unknown = set(raw) - HEALTH_KEYS
    if unknown:
        shown = sorted(str(k)[:24] for k in list(unknown)[:3])
        raise ValueError(f"{where}: unknown key(s) {shown}; allowed: {sorted(HEALTH_KEYS)}")
    kw: dict[str, Any] = {}
    for k in _COUNTERS:
        v = raw.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**63):
            raise ValueError(f"{where}.{k}: expected a non-negative integer or null")
        kw[k] = v
    for k in _FLAGS:
        v = raw.get(k)
        if v is not None and not isinstance(v, bool):
            raise ValueError(f"{where}.{k}: expected true, false or null")
        kw[k] = v
    events_raw = raw.get("xid_events", [])
    if not isinstance(events_raw, list):
        raise ValueError(f"{where}.xid_events: expected a list")
    events = []
    for n, e in enumerate(events_raw[-MAX_XID_EVENTS:]):
        ew = f"{where}.xid_events[{n}]"
        if not isinstance(e, Mapping) or set(e) - {"xid", "at"}:
            raise ValueError(f"{ew}: expected {{xid: <int>, at: <unix seconds>}}")
        code, at = e.get("xid"), e.get("at")
        if isinstance(code, bool) or not isinstance(code, int) or not 0 < code < 100000:
            raise ValueError(f"{ew}.xid: expected an XID number")
        if (
            isinstance(at, bool) or not isinstance(at, int | float) or not 0 <= at < 1e11
        ):  # also refuses NaN
            raise ValueError(f"{ew}.at: expected unix seconds")
        events.append(XidEvent(code, float(at)))
    return HealthSignals(xid_events=tuple(events), **kw)


# dcgm-exporter field -> HealthSignals attribute (names as in dcgm-exporter's counters csv)
DCGM_HEALTH_FIELDS: dict[str, str] = {
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc_sbe_volatile",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_dbe_volatile",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": "ecc_sbe_aggregate",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": "ecc_dbe_aggregate",
    "DCGM_FI_DEV_RETIRED_SBE": "retired_pages_sbe",
    "DCGM_FI_DEV_RETIRED_DBE": "retired_pages_dbe",
    "DCGM_FI_DEV_RETIRED_PENDING": "retired_pages_pending",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "row_remap_correctable",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "row_remap_uncorrectable",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "row_remap_pending",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "row_remap_failed",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "throttle_reasons",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "nvlink_crc_errors",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": "nvlink_replay_errors",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": "nvlink_recovery_errors",
}
DCGM_XID = "DCGM_FI_DEV_XID_ERRORS"


def signals_from_dcgm(values: Mapping[str, float]) -> HealthSignals | None:
    """The same signals from a dcgm-exporter page's values of one GPU; None when the page
    has none of them. dcgm-exporter gives only the *last* XID (0: none), so it becomes one
    event whose time is unknown (``at`` 0): a standing condition until the page's last XID
    changes, which a GPU reset or reboot does (docs/health.md)."""
    kw: dict[str, Any] = {}
    for name, attr in DCGM_HEALTH_FIELDS.items():
        v = values.get(name)
        if v is None or not math.isfinite(v) or v < 0:
            continue
        kw[attr] = bool(v) if attr in _FLAGS else int(v)
    xid = values.get(DCGM_XID)
    events: tuple[XidEvent, ...] = ()
    if xid is not None and math.isfinite(xid) and 0 < xid < 100000:
        events = (XidEvent(int(xid), 0.0),)
    if not kw and xid is None:
        return None
    return HealthSignals(xid_events=events, **kw)


# --- what the signals mean ------------------------------------------------------------
@dataclass(frozen=True)
class Finding:
    effect: Effect
    reason: str
    action: Action
    xid_at: float | None = None  # set for an XID event: it counts once, not while listed
    xid: int = 0  # that event's XID, with xid_at what names the event


def assess(s: HealthSignals | None, *, lost: str | None = None) -> list[Finding]:
    """Every finding of one GPU's signals, worst first. ``lost``: the agent could not
    read the GPU at all (NVML lost, hung, or gone); that is a failure too."""
    out: list[Finding] = []
    if lost:
        out.append(Finding(Effect.FAIL, f"GPU lost: {lost}"[:200], Action.REBOOT))
    if s is not None:
        for e in s.xid_events:
            x = xid_info(e.code)
            if x.effect is not Effect.NONE:
                # at 0: time unknown (dcgm-exporter's last XID); it stands while listed
                timed = e.at > 0
                out.append(
                    Finding(
                        x.effect,
                        f"Xid {x.code}: {x.name}",
                        x.action,
                        e.at if timed else None,
                        x.code if timed else 0,
                    )
                )
        if s.ecc_dbe_volatile:
            out.append(
                Finding(
                    Effect.FAIL,
                    f"{s.ecc_dbe_volatile} uncorrectable (DBE) ECC error(s) since the last reset",
                    Action.RESET_GPU,
                )
            )
        if s.row_remap_failed:
            out.append(Finding(Effect.FAIL, "row remapping failed", Action.RMA))
        if s.row_remap_pending:
            out.append(
                Finding(Effect.DEGRADE, "row remapping pending (reset to apply)", Action.RESET_GPU)
            )
        if s.retired_pages_pending:
            out.append(
                Finding(
                    Effect.DEGRADE, "page retirement pending (reset to apply)", Action.RESET_GPU
                )
            )
        bad = [name for bit, name in THROTTLE_BAD.items() if (s.throttle_reasons or 0) & bit]
        if bad:
            out.append(Finding(Effect.DEGRADE, "clocks throttled: " + ", ".join(bad), Action.NONE))
        if s.nvlink_recovery_errors or s.nvlink_replay_errors:
            out.append(
                Finding(
                    Effect.DEGRADE,
                    "NVLink errors: "
                    f"{s.nvlink_recovery_errors or 0} recovery, "
                    f"{s.nvlink_replay_errors or 0} replay",
                    Action.RESET_GPU,
                )
            )
    out.sort(key=lambda f: f.effect is not Effect.FAIL)
    return out


# --- the state machine ----------------------------------------------------------------
@dataclass(frozen=True)
class HealthPolicy:
    clean_window_s: float = 600.0  # clean this long before failed/degraded is left
    flap_window_s: float = 3600.0  # failures within this window lengthen the clean window
    max_backoff: int = 8  # the clean window grows 2x per repeat failure, at most this much


@dataclass(frozen=True)
class GpuState:
    level: Level = Level.HEALTHY
    reason: str = ""
    action: Action = Action.NONE
    since: float = 0.0  # when this level was entered
    last_bad_at: float = 0.0  # the last time anything not healthy was seen
    failures: tuple[float, ...] = ()  # when it entered failed, within the flap window
    # XID events at or before this are already counted; never past the daemon's own now,
    # since the times are the agent's clock (docs/health.md).
    xid_seen_until: float = 0.0
    # Counted XID events (xid, at) dated after xid_seen_until: an agent's clock ahead.
    xid_ahead: tuple[tuple[int, float], ...] = ()
    operator_label: str = ""  # the operator label's value at the last step

    def to_dict(self, now: float) -> dict[str, Any]:
        return {
            "level": str(self.level),
            "reason": self.reason,
            "action": str(self.action),
            "since": self.since,
            "for_s": round(max(0.0, now - self.since), 1),
        }

    def shifted(self, step: float) -> GpuState:
        """This state with the daemon's own times moved by ``step`` s (its wall clock
        stepped: the windows keep their length); the XID marks are the agent's clock."""
        return replace(self, since=self.since + step,
                       last_bad_at=self.last_bad_at + step if self.last_bad_at else 0.0,
                       failures=tuple(t + step for t in self.failures))

    def to_saved(self) -> dict[str, Any]:
        """Everything, for the daemon's state file (a restart keeps the hysteresis)."""
        return {
            "level": str(self.level),
            "reason": self.reason,
            "action": str(self.action),
            "since": self.since,
            "last_bad_at": self.last_bad_at,
            "failures": list(self.failures),
            "xid_seen_until": self.xid_seen_until,
            "xid_ahead": [list(k) for k in self.xid_ahead],
            "operator_label": self.operator_label,
        }

    @classmethod
    def from_saved(cls, d: Any) -> GpuState | None:
        """The saved form back; None for anything malformed (the file is ours, but a
        damaged one must not stop the daemon)."""
        try:
            return cls(
                level=Level(d["level"]),
                reason=str(d["reason"])[:300],
                action=Action(d["action"]),
                since=_time(d["since"]),
                last_bad_at=_time(d["last_bad_at"]),
                failures=tuple(_time(t) for t in d["failures"][:64]),
                xid_seen_until=_time(d["xid_seen_until"]),
                xid_ahead=_xid_keys(d.get("xid_ahead", [])),
                operator_label=str(d["operator_label"])[:64],
            )
        except (KeyError, TypeError, ValueError, OverflowError):
            return None


def _time(v: Any) -> float:
    """A saved time: a finite number (NaN or inf kept a GPU failed for good, or no later
    XID counted; an int past a float's range raised OverflowError)."""
    t = float(v)
    if not math.isfinite(t):
        raise ValueError(f"not a finite time: {v!r}")
    return t


def _xid_keys(v: Any) -> tuple[tuple[int, float], ...]:
    """Saved ``xid_ahead``: [xid, time] pairs (absent in a file of an earlier version)."""
    if not isinstance(v, list):
        raise ValueError(f"not a list: {v!r}"[:80])
    out = []
    for k in v[:MAX_XID_AHEAD]:
        if not isinstance(k, list) or len(k) != 2 or type(k[0]) is not int:
            raise ValueError(f"not an [xid, time] pair: {k!r}"[:80])
        out.append((k[0], _time(k[1])))
    return tuple(out)


@dataclass(frozen=True)
class Observation:
    """One GPU at one cycle: its findings, and the operator's label value ("" if none)."""

    uuid: str
    findings: Sequence[Finding] = ()
    operator_label: str = ""
    # When the GPU was read (the daemon's clock: its facts' age before ``now``); None: at
    # ``now``. A clean window ends on a read made that long after the failure: an agent
    # whose source hangs serves its last read again, which proves nothing clean since.
    read_at: float | None = None


OPERATOR_OK = "ok"


def step_one(
    prev: GpuState | None, obs: Observation, now: float, policy: HealthPolicy = HealthPolicy()
) -> GpuState:
    """The next state of one GPU. Fail and degrade are entered at once; they are left only
    after a clean window (longer for a GPU that keeps failing), or when the operator's label
    turns to ``ok`` (acknowledging everything seen so far)."""
    if (
        prev is not None
        and prev.level is Level.HEALTHY
        and not obs.findings
        and not prev.failures
        and obs.operator_label == prev.operator_label
    ):
        return prev  # nothing seen, nothing to forget: what the steps below would give
    st = prev or GpuState(since=now)
    # Only XID events the state has not counted yet; standing conditions always count.
    listed = [(f.xid, f.xid_at) for f in obs.findings if f.xid_at is not None]
    fresh = [
        f
        for f in obs.findings
        if f.xid_at is None
        or (f.xid_at > st.xid_seen_until and (f.xid, f.xid_at) not in st.xid_ahead)
    ]
    # The times are the agent's clock: the mark stops at the daemon's now, else an agent
    # running ahead put it in the future and, its clock put right, no XID counted until
    # then. The events dated past it are remembered by name instead, so each counts once.
    until = min(max([st.xid_seen_until, *(at for _x, at in listed)]), now)
    ahead = tuple(dict.fromkeys(k for k in (*listed, *st.xid_ahead) if k[1] > until))
    st = replace(st, xid_seen_until=until, xid_ahead=ahead[:MAX_XID_AHEAD])
    if obs.operator_label == OPERATOR_OK and st.operator_label != OPERATOR_OK:
        # The operator reset the GPU: what was seen is forgiven; standing conditions that
        # are still reported (a reset clears them) fail it again below.
        st = replace(
            st,
            level=Level.HEALTHY,
            reason="operator: health=ok",
            since=now,
            action=Action.NONE,
            failures=(),
            last_bad_at=0.0,
        )
        fresh = [f for f in fresh if f.xid_at is None]
    st = replace(st, operator_label=obs.operator_label)
    failures = tuple(t for t in st.failures if now - t <= policy.flap_window_s)
    worst = fresh[0] if fresh else None
    if worst is not None and worst.effect is Effect.FAIL:
        if st.level is not Level.FAILED:
            return replace(
                st,
                level=Level.FAILED,
                reason=worst.reason,
                action=worst.action,
                since=now,
                last_bad_at=now,
                failures=(*failures, now),
            )
        return replace(st, last_bad_at=now, failures=failures)
    if worst is not None:  # DEGRADE
        if st.level is Level.HEALTHY:
            return replace(
                st,
                level=Level.DEGRADED,
                reason=worst.reason,
                action=worst.action,
                since=now,
                last_bad_at=now,
                failures=failures,
            )
        return replace(st, last_bad_at=now, failures=failures)
    if st.level is Level.HEALTHY:
        return replace(st, failures=failures)
    window = policy.clean_window_s * min(policy.max_backoff, 2 ** max(0, len(failures) - 1))
    read_at = now if obs.read_at is None else min(now, obs.read_at)
    if read_at - st.last_bad_at >= window:
        return replace(
            st,
            level=Level.HEALTHY,
            since=now,
            action=Action.NONE,
            reason=f"clean for {window:g}s after: {st.reason}"[:200],
            failures=failures,
        )
    return replace(st, failures=failures)


def step(
    prev: Mapping[str, GpuState],
    observations: Sequence[Observation],
    now: float,
    policy: HealthPolicy = HealthPolicy(),
) -> dict[str, GpuState]:
    """Every GPU's next state. A GPU not observed this cycle (agent down, GPU gone) keeps
    its state: no news is not good news."""
    out = dict(prev)
    for obs in observations:
        out[obs.uuid] = step_one(prev.get(obs.uuid), obs, now, policy)
    return out


@dataclass(frozen=True)
class NodeHealth:
    """A node's summary, for its labels and the whole-node report."""

    healthy: int = 0
    degraded: int = 0
    failed: int = 0
    failed_uuids: tuple[str, ...] = field(default=())

    @property
    def usable(self) -> int:
        return self.healthy + self.degraded


def summarise(states: Mapping[str, GpuState], uuids: Sequence[str]) -> NodeHealth:
    levels = [states[u].level if u in states else Level.HEALTHY for u in uuids]
    return NodeHealth(
        healthy=levels.count(Level.HEALTHY),
        degraded=levels.count(Level.DEGRADED),
        failed=levels.count(Level.FAILED),
        failed_uuids=tuple(u for u, lv in zip(uuids, levels, strict=True) if lv is Level.FAILED),
    )
