"""A move record's life read adversarially: a record dated ahead of the clock (another
manager's clock, a hand edit), a record that cannot be read of a service that is gone.
Pure, over the recording Swarm stand-in (tests/support/forged.py): victim moves from
gpu-node-1 (n-dgx) to gpu-node-2 (n-4090), whose task never runs.
"""

from __future__ import annotations

import json

from loguru import logger
from support.forged import P, RecordingSwarm, repin_move, victim_cluster, victim_move

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.core.stamps import MAX_SKEW_S
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import MOVE_STATE, gate_key
from swarmgpu.manager.rebalance.mover import Mover, forged_check, read_records, record_key
from swarmgpu.manager.rebalance.moves import Outcome


def _mover(sw: RecordingSwarm, now: list[float]) -> Mover:
    cfg = RebalanceConfig(dry_run=False, move_timeout_s=120.0)
    return Mover(
        sw,
        cfg,
        prefix=P,
        dry_run=False,  # type: ignore[arg-type]
        clock=lambda: now[0],
    )


def _cycle(sw: RecordingSwarm, m: Mover) -> list[Outcome]:
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    return [r.outcome for r in m.recent]


def test_a_move_record_dated_ahead_of_the_clock_still_times_out() -> None:
    # Before: its age (now - started_at) stayed below 0, so a move whose target never
    # ran its task was never rolled back: the surge, both gates and a budget slot held
    # until the clock reached the record's date (never, for 1e12).
    sw, now = victim_cluster({}), [1000.0]
    m = _mover(sw, now)
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    key = record_key(P, "id-victim")
    sw._swarm_labels[key] = json.dumps({**json.loads(sw._swarm_labels[key]), "started_at": 1e12})
    leader = _mover(sw, now)  # a new leader: it has not seen the move before
    assert _cycle(sw, leader) == []
    now[0] += 100.0
    assert _cycle(sw, leader) == []
    now[0] += 30.0
    assert _cycle(sw, leader) == [Outcome.ROLLED_BACK]
    assert "within 120s" in leader.recent[-1].detail
    assert read_records(sw.swarm_labels(), P) == {}
    assert P + MOVE_STATE not in sw.service("id-victim").labels
    assert gate_key(P, "victim") not in sw.node("n-4090").labels


def test_an_unreadable_move_record_of_a_service_that_is_gone_is_dropped() -> None:
    # Before: left for a human for good ("remove it by hand"), a move in flight against
    # max_moves_per_cycle and the health hour, where a readable record of a gone service
    # is dropped at once. Its service's own record, unreadable, still stays.
    sw, now = victim_cluster({}), [1000.0]
    gone, mine = record_key(P, "id-removed"), record_key(P, "id-victim")
    sw._swarm_labels[gone] = "{not json"
    sw._swarm_labels[mine] = "{not json"
    errors: list[str] = []
    sink = logger.add(lambda m: errors.append(str(m.record["message"])), level="WARNING")
    try:
        dry = Mover(sw, RebalanceConfig(), prefix=P, dry_run=True)  # type: ignore[arg-type]
        dry.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
        assert gone in sw.swarm_labels()  # dry-run writes nothing
        _cycle(sw, _mover(sw, now))
    finally:
        logger.remove(sink)
    assert gone not in sw.swarm_labels() and mine in sw.swarm_labels()
    assert any(gone in e and "names no service" in e and "dropped" in e for e in errors), errors
    found = forged_check(P)(
        Snapshot(
            sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels={**sw.swarm_labels(), gone: "x"}
        )
    )
    by = {f.key: f.message for f in found}
    assert "drops it on its next cycle" in by[gone] and "by hand" in by[mine], by


def test_a_readable_move_record_of_a_service_that_is_gone_is_dropped_with_a_log_line() -> None:
    # Before: dropped without a word (an unreadable one is said), so a move the log had
    # started vanished with no outcome and nothing naming its record.
    sw, now = victim_cluster({}), [1000.0]
    m = _mover(sw, now)
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    key = record_key(P, "id-victim")
    assert key in sw.swarm_labels()
    del sw._services["id-victim"]  # docker service rm mid-move
    said: list[str] = []
    sink = logger.add(lambda msg: said.append(str(msg.record["message"])), level="WARNING")
    try:
        _cycle(sw, m)
    finally:
        logger.remove(sink)
    assert key not in sw.swarm_labels()
    assert any(key in e and "victim" in e and "gone" in e and "dropped" in e for e in said), said


def test_audit_names_a_move_record_past_its_timeout() -> None:
    # Before: a record the daemon should have finished or rolled back long ago (the
    # daemon stopped, in dry-run, or its steps failing) was no finding at all.
    sw, now = victim_cluster({}), [1000.0]
    _mover(sw, now).run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    key = record_key(P, "id-victim")
    check = forged_check(P, move_timeout_s=120.0, cycle_s=30.0)

    def found(at: float) -> dict[str | None, str]:
        snap = Snapshot(
            sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels(), taken_at=at
        )
        return {f.key: f.message for f in check(snap) if f.kind == "move-record-stuck"}

    assert found(1000.0 + 140.0) == {}  # past the timeout, the daemon's next cycle is due
    stuck = found(1000.0 + 3600.0)
    assert key in stuck and "victim" in stuck[key] and "move_timeout_s" in stuck[key], stuck
    del sw._services["id-victim"]  # a record of a gone service, never dropped, too
    assert key in found(1000.0 + 3600.0)
    assert not any(
        f.kind == "move-record-stuck"
        for f in forged_check(P)(
            Snapshot(
                sw.nodes(),
                sw.services(),
                sw.tasks(),
                {},
                swarm_labels=sw.swarm_labels(),
                taken_at=1000.0 + 3600.0,
            )
        )
    )  # no timeout given: not judged


def test_audit_gives_a_repin_record_its_hold_limit() -> None:
    """A repin beside a running replica holds its writes while a task of it waits for a
    node, up to ``move_timeout_s`` past its timeout (repin.py): its record was said stuck
    (needs action) while the daemon was holding it on purpose."""
    sw, now = victim_cluster({}), [1000.0]
    _mover(sw, now).run_cycle([repin_move()], sw.nodes(), sw.services(), sw.tasks())
    key = record_key(P, "id-third")
    assert key in sw.swarm_labels()
    check = forged_check(P, move_timeout_s=120.0, cycle_s=30.0)

    def found(at: float) -> set[str | None]:
        snap = Snapshot(
            sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels(), taken_at=at
        )
        return {f.key for f in check(snap) if f.kind == "move-record-stuck"}

    assert found(1000.0 + 200.0) == set()  # held: within 2 x 120 s and one cycle
    assert key in found(1000.0 + 300.0 + MAX_SKEW_S)  # (and the clocks' skew)



def test_audit_gives_the_daemons_clock_its_skew_before_it_says_stuck() -> None:
    """The daemon times a move by its own clock (from the record's start, or from when it
    first saw it where that is earlier: ``FirstSeen``) and ends it at its first look past
    its limit; ``audit`` may run on another manager whose clock is up to
    ``stamps.MAX_SKEW_S`` ahead of the daemon's (after a leader change, the new leader's
    clock may be behind the one that wrote the start). Judged by the audit's clock with
    one cycle of margin only, a repin the daemon still held within its limit (its last
    look just before it, the next one a cycle later) was said stuck."""
    sw, now = victim_cluster({}), [1000.0]
    _mover(sw, now).run_cycle([repin_move()], sw.nodes(), sw.services(), sw.tasks())
    key = record_key(P, "id-third")
    check = forged_check(P, move_timeout_s=120.0, cycle_s=30.0)

    def found(at: float) -> set[str | None]:
        snap = Snapshot(
            sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels(), taken_at=at
        )
        return {f.key for f in check(snap) if f.kind == "move-record-stuck"}

    limit = 1000.0 + 2 * 120.0 + 30.0  # its hold limit and one cycle, by the daemon's clock
    assert found(limit + MAX_SKEW_S / 2) == set()  # the daemon's clock MAX_SKEW_S/2 behind
    assert key in found(limit + MAX_SKEW_S + 1.0)
