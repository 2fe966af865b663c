"""Preemption decides on the snapshot taken at the cycle's start, and the rebalancer
(its policies' mover and the health mover) runs before it in the same cycle. A service
whose move one of them started in that cycle is no victim: before, the snapshot had
no move of it, so preemption chose it, the mover refused to move it (a move in flight)
and it was stopped instead under its move; a roll-back of that move would reopen the
GPUs the preemptor had been given. Now the move records are read again from Swarm
before the decision (the daemon's own records: a move label alone protects nothing).

Built as the daemon's steps run: a snapshot, a mover's ``run_cycle`` on it (the
rebalance step), then ``Preempter.cycle`` on that same snapshot (the preemption step)."""

from __future__ import annotations

from typing import Any

import pytest
from loguru import logger
from support.forged import RecordingSwarm, sw_node, sw_svc
from support.move_then_preempt import (
    FACTS,
    REBALANCE,
    D,
    P,
    R,
    holds,
    move_then_preempt,
    run_moves,
    snapshot_of,
)

from swarmgpu.core.config import Config, PreemptionConfig, RebalanceConfig
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import MOVE_STATE, devices_key, gate_key
from swarmgpu.manager.placement.preempted import PREEMPTED_STATE
from swarmgpu.manager.rebalance.mover import read_records
from swarmgpu.manager.rebalance.moves import Move, Trigger
from swarmgpu.swarm.client import SwarmError, SwarmTask


def _cluster() -> RecordingSwarm:
    """small (priority 0, 2 GPUs) and filler (not preemptible, 6) fill n-4090; the DGX
    has whole GPUs free; high (priority 100) wants 2 RTX 4090s: small is its only
    victim."""
    labels = holds("n-4090", {"small": R[:2], "filler": R[2:]})
    nodes = [
        sw_node("n-mgr", "manager", role="manager"),
        sw_node("n-dgx", "gpu-node-1"),
        sw_node("n-4090", "gpu-node-2", labels),
    ]
    small = sw_svc("small", {f"{P}gpus": "2", devices_key(P, "n-4090"): ",".join(R[:2])})
    filler = sw_svc(
        "filler",
        {
            f"{P}gpus": "6",
            f"{P}priority": "50",
            f"{P}preemptible": "false",
            devices_key(P, "n-4090"): ",".join(R[2:]),
        },
    )
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*", f"{P}priority": "100"})
    tasks = [
        SwarmTask("t-small", small.id, "n-4090", 1, "running", "running", ()),
        SwarmTask("t-filler", filler.id, "n-4090", 1, "running", "running", ()),
        SwarmTask("t-high", high.id, "", 1, "pending", "running", ()),
    ]
    return RecordingSwarm(nodes, [small, filler, high], tasks)


def _small_to_dgx(trigger: Trigger) -> Move:
    return Move(
        service="small",
        service_id="id-small",
        source_node="n-4090",
        source_host="gpu-node-2",
        source_uuids=R[:2],
        source_milli=(1000, 1000),
        target_node="n-dgx",
        target_host="gpu-node-1",
        target_gpus=(0, 1),
        target_uuids=D[:2],
        target_milli=(1000, 1000),
        trigger=trigger,
        window_s=None,
        reason="test",
        gain="test",
    )


def _cycle(sw: RecordingSwarm, trigger: Trigger, moves: bool) -> list[Any]:
    """One daemon cycle's rebalance then preemption steps, on one snapshot."""
    cfg = Config(
        rebalance=REBALANCE if moves else RebalanceConfig(),
        preemption=PreemptionConfig(dry_run=False),
    )
    moving, done = move_then_preempt(sw, cfg, [_small_to_dgx(trigger)])
    assert moving == {"small"}
    return done


@pytest.mark.parametrize("trigger", [Trigger.CONSOLIDATION, Trigger.HEALTH])
@pytest.mark.parametrize("moves", [True, False])
def test_a_service_whose_move_started_this_cycle_is_no_victim(
    trigger: Trigger, moves: bool
) -> None:
    """Its move goes on (its label, its record, its source still open), nothing of it
    is stopped or spent: the preemptor waits for the move (its GPUs free as it ends)."""
    sw = _cluster()
    assert _cycle(sw, trigger, moves) == []
    small = sw.service("id-small").labels
    assert f"{P}{PREEMPTED_STATE}" not in small and P + MOVE_STATE in small
    assert devices_key(P, "n-4090") in small
    assert gate_key(P, "small") in sw.node("n-4090").labels
    assert {st.service for st in read_records(sw.swarm_labels(), P).values()} == {"small"}


@pytest.mark.parametrize("trigger", [Trigger.CONSOLIDATION, Trigger.HEALTH])
def test_a_service_preempted_last_cycle_is_not_moved_by_the_next_cycles_movers(
    trigger: Trigger,
) -> None:
    """The converse holds as it was: preempted (its ledger entry and gate gone, its
    record on its spec), it holds nothing the movers could move; a move of its former
    holding is refused (not converged: 0 placed) and nothing is written."""
    sw = _cluster()
    snap = snapshot_of(sw)
    cfg = Config(preemption=PreemptionConfig(dry_run=False))
    (p,) = Preempter(cfg).cycle(
        sw,
        snap,
        make_plan(snap, cfg),
        FACTS,  # type: ignore[arg-type]
        now=5000.0,
    )
    assert [v.service for v in p.victims] == ["small"]
    assert f"{P}{PREEMPTED_STATE}" in sw.service("id-small").labels
    written = len(sw.calls)
    assert not run_moves(sw, [_small_to_dgx(trigger)], snapshot_of(sw))
    assert len(sw.calls) == written


def test_no_preemption_while_the_move_records_cannot_be_read_said_once() -> None:
    """A move started this cycle cannot be known then: nothing is stopped, said once."""

    class Unreadable(RecordingSwarm):
        def swarm_labels(self) -> Any:
            raise SwarmError("swarm inspect: 500 Server Error")

    c = _cluster()
    sw = Unreadable(c.nodes(), c.services(), c.tasks())
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels={})
    cfg = Config(preemption=PreemptionConfig(dry_run=False))
    pre, plan = Preempter(cfg), make_plan(snap, cfg)
    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m)), level="INFO")
    try:
        for now in (5000.0, 5010.0):
            assert pre.cycle(sw, snap, plan, FACTS, now=now) == []  # type: ignore[arg-type]
    finally:
        logger.remove(sink)
    assert sw.calls == [] and gate_key(P, "small") in sw.node("n-4090").labels
    assert len([m for m in said if "move records cannot be read" in m]) == 1, said


def test_dry_run_decides_on_the_snapshot_while_the_move_records_cannot_be_read() -> None:
    """Dry-run stops nothing, so a move unknown costs nothing: its decision is still
    made and noted (as `plan` and `status` show it), nothing written, said once."""

    class Unreadable(RecordingSwarm):
        def swarm_labels(self) -> Any:
            raise SwarmError("swarm inspect: 500 Server Error")

    c = _cluster()
    sw = Unreadable(c.nodes(), c.services(), c.tasks())
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels={})
    cfg = Config(preemption=PreemptionConfig(dry_run=True))
    pre, plan = Preempter(cfg), make_plan(snap, cfg)
    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m)), level="INFO")
    try:
        for now in (5000.0, 5010.0):
            done = pre.cycle(sw, snap, plan, FACTS, now=now)  # type: ignore[arg-type]
            assert [v.service for p in done for v in p.victims] == ["small"], said
    finally:
        logger.remove(sink)
    assert sw.calls == [] and gate_key(P, "small") in sw.node("n-4090").labels
    (high,) = [sp for sp in plan.services if sp.name == "high"]
    assert any("preemption.dry_run" in w for w in high.warnings), high
    assert len([m for m in said if "move records cannot be read" in m]) == 1, said
