"""Times the daemon reads back from Swarm (``core.stamps``): a label another manager
wrote by its own clock, or anyone with the manager API or a stack edited. A time ahead
of this clock by up to ``MAX_SKEW_S`` is another manager's clock and counts as written;
one further ahead no clock wrote: never does a budget hour or a cooldown count it for as
long as it is ahead (for ever, at 1e12), and never does it buy a budget slot either (a
move in flight so dated counts as started now)."""

from __future__ import annotations

from dataclasses import replace

from support.forged import RecordingSwarm, victim_cluster, victim_move

from swarmgpu.core.rebalanceconfig import FragmentationConfig, RebalanceConfig
from swarmgpu.core.stamps import HOUR_S, MAX_SKEW_S, in_hour, passed
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.placement import MOVE_STATE, read_ledger
from swarmgpu.manager.rebalance.budget import FINISHED, finished_times, with_finished
from swarmgpu.manager.rebalance.context import MOVED_AT, why_not_movable
from swarmgpu.manager.rebalance.mover import Mover
from swarmgpu.manager.rebalance.policies.health import HealthBudget
from swarmgpu.manager.rebalance.record import (
    HEALTH_SPENT,
    MoveState,
    drop_record,
    health_spent,
    record_key,
)
from swarmgpu.manager.services.requests import GpuRequest, parse_all

P = "swarmgpu."
NOW = 1_800_000_000.0
FAR = 1e12  # a hand edit: years ahead
SKEWED = NOW + MAX_SKEW_S / 2  # another manager's clock, a little ahead


def test_the_rule_for_a_time_read_back() -> None:
    assert in_hour(NOW - HOUR_S + 1, NOW) and in_hour(SKEWED, NOW)
    assert not in_hour(NOW - HOUR_S, NOW) and not in_hour(NOW + MAX_SKEW_S + 1, NOW)
    assert not any(in_hour(t, NOW) for t in (FAR, float("nan"), float("inf"), -FAR))
    assert passed(SKEWED, NOW) == NOW and passed(NOW - 5, NOW) == NOW - 5
    assert passed(0.0, NOW) == 0.0
    assert all(passed(t, NOW) is None for t in (FAR, float("nan"), float("inf"), float("-inf")))


def _health_record(sw: RecordingSwarm, started_at: float) -> None:
    svc = sw.service("id-victim")
    st = replace(MoveState.start(victim_move(), svc, started_at, surge=False), trigger="health")
    sw._swarm_labels[record_key(P, svc.id)] = st.to_json()


def test_a_health_move_dated_far_ahead_is_spent_from_now_not_for_ever() -> None:
    """A health record in flight started at 1e12 (a hand edit) counts as started now
    while in flight; its drop writes now into the health list, which the hour then
    forgets. Before: 1e12 went into the list, and ``now - t < HOUR_S`` kept it there,
    one of the hour's health moves spent for ever."""
    sw = victim_cluster({})
    _health_record(sw, FAR)
    assert health_spent(sw.swarm_labels(), P, NOW) == [NOW]
    drop_record(Writes(sw, dry_run=False, who="test", prefix=P), P, "id-victim", NOW)
    assert sw.swarm_labels()[P + HEALTH_SPENT] == f"{NOW:.0f}"
    assert health_spent(sw.swarm_labels(), P, NOW + HOUR_S / 2) == [NOW]
    assert health_spent(sw.swarm_labels(), P, NOW + HOUR_S) == []


def test_a_health_move_by_a_clock_a_little_ahead_counts_from_now() -> None:
    sw = victim_cluster({})
    _health_record(sw, SKEWED)
    assert health_spent(sw.swarm_labels(), P, NOW) == [NOW]
    drop_record(Writes(sw, dry_run=False, who="test", prefix=P), P, "id-victim", NOW)
    assert health_spent(sw.swarm_labels(), P, NOW + HOUR_S - 1) == [NOW]
    # the list as a manager whose clock is a little ahead wrote it: counted as written
    sw._swarm_labels[P + HEALTH_SPENT] = f"{SKEWED:.0f}"
    assert health_spent(sw.swarm_labels(), P, NOW + HOUR_S) == [round(SKEWED)]


def test_a_health_list_entry_far_ahead_is_dropped_not_counted_for_ever() -> None:
    """The list as a hand edit leaves it: garbage and a time no clock wrote are not
    counted, and the next write leaves them out."""
    sw = victim_cluster({})
    sw._swarm_labels[P + HEALTH_SPENT] = f"{FAR:.0f},nan,inf,1e999,{NOW - 10:.0f}"
    assert health_spent(sw.swarm_labels(), P, NOW) == [NOW - 10]
    assert HealthBudget(per_hour=1).left(NOW, 5, [FAR])[0] == 1
    _health_record(sw, NOW)
    drop_record(Writes(sw, dry_run=False, who="test", prefix=P), P, "id-victim", NOW)
    assert sw.swarm_labels()[P + HEALTH_SPENT] == f"{NOW - 10:.0f},{NOW:.0f}"


def _frag_mover(sw: RecordingSwarm) -> Mover:
    rb = RebalanceConfig(
        fragmentation=FragmentationConfig(moves_per_hour=1, moves_per_100_placements=100)
    )
    return Mover(sw, rb, prefix=P, dry_run=True, clock=lambda: NOW)  # type: ignore[arg-type]


def test_the_fragmentation_hour_counts_a_move_dated_far_ahead_from_now() -> None:
    """A daemon starting to lead counts the hour's moves: a move in flight whose record
    says 1e12 counts as started now, and a finish time so far ahead in the mover's list
    is not counted. Before: both went into the budget's hour and ``now - t < HOUR_S``
    kept them, the per-hour budget spent for ever."""
    sw = victim_cluster({})
    svc = sw.service("id-victim")
    st = MoveState.start(victim_move(), svc, FAR, surge=False)
    sw._swarm_labels[record_key(P, svc.id)] = st.to_json()
    sw._services[svc.id] = replace(svc, labels={**svc.labels, P + MOVE_STATE: st.to_json()})
    m = _frag_mover(sw)
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert m.frag_budget.started == [NOW]
    assert m.frag_budget.left(NOW)[0] == 0  # in flight: this hour's one move
    assert m.frag_budget.left(NOW + HOUR_S)[0] == 1

    sw = victim_cluster({})
    sw._swarm_labels[P + FINISHED] = f"{FAR:.0f},{SKEWED:.0f}"
    m = _frag_mover(sw)
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert m.frag_budget.started == [round(SKEWED)]  # another manager's clock: as written
    assert m.frag_budget.left(NOW + HOUR_S + MAX_SKEW_S)[0] == 1
    assert with_finished(finished_times(sw.swarm_labels(), P), NOW) == (
        f"{SKEWED:.0f},{NOW:.0f}"
    )  # the next write leaves the far time out


def _why_not(moved_at: str, now: float, cooldown_s: float) -> str | None:
    sw = victim_cluster({})
    s = sw.service("id-victim")
    s = replace(s, labels={**s.labels, P + MOVED_AT: moved_at})
    req = parse_all(s.labels, prefix=P)
    assert isinstance(req, GpuRequest)
    holdings = read_ledger(sw.nodes(), P)["victim"]
    return why_not_movable(s, req, sw.tasks(), holdings, P, now, cooldown_s)


def test_a_moved_at_far_ahead_starts_no_cooldown_for_ever() -> None:
    """``moved-at`` is in the service's own labels (a stack writes it too). One no clock
    wrote (1e12, inf) is no time, as an unreadable one: the service cools down from no
    move (before: for as long as it was ahead, its rebalancing off for ever). One a
    little ahead is another manager's clock: the cooldown runs from now, and a cooldown
    of 0 (the health policy's, which never waits) is none. Before: that read as
    "cooling down (-30s left of 0s)", and a failed GPU's holder was not moved off it
    (released to placement, or left there)."""
    for far in (f"{FAR:.0f}", "inf", "1e999", "nan"):
        assert _why_not(far, NOW, 600.0) is None, far
    assert _why_not(f"{SKEWED:.0f}", NOW, 0.0) is None
    assert _why_not(f"{SKEWED:.0f}", NOW, 600.0) == "cooling down (600s left of 600s)"
    assert _why_not(f"{NOW - 100:.0f}", NOW, 600.0) == "cooling down (500s left of 600s)"
    assert _why_not("0", NOW, 600.0) is None
