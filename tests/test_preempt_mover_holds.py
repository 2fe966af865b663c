"""The preemption step's mover, which moves victims, is given the GPUs held for the
live preemptors (their nominations, one made earlier in this very cycle too) beside
the stopping tasks', as the rebalance step's movers are (``Rebalancer.held``). Before,
it had the stopping tasks' alone: a victim moved for one preemption could land on GPUs
held for another preemptor while it settles. Its start (``room_for``) refuses them now,
and the victim is stopped instead. Pure, over the recording Swarm stand-in."""

from __future__ import annotations

from pathlib import Path

from support.forged import RecordingSwarm, sw_svc
from support.move_then_preempt import REBALANCE, D, P, batch_to_dgx, batch_world

from swarmgpu.core.config import Config, PreemptionConfig
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import PlacementPlan
from swarmgpu.manager.placement.preempt import Preemption
from swarmgpu.manager.rebalance.mover import read_records


def _world() -> RecordingSwarm:
    """batch (priority 0) holds 2 RTX 4090s, filler the rest; dfill fills 5 A100s of the
    DGX, whose other 2 are free in the ledger; wide wants 3, high 2."""
    wide = sw_svc("wide", {f"{P}gpus": "3", f"{P}priority": "100"})
    return RecordingSwarm(*batch_world((wide,)))


def test_a_victim_is_not_moved_onto_gpus_held_for_another_preemptor(tmp_path: Path) -> None:
    sw, t = _world(), 1000.0
    cfg = Config(state_dir=str(tmp_path), rebalance=REBALANCE,
                 preemption=PreemptionConfig(dry_run=False, preemptible_below=100))
    pre = Preempter(cfg, clock=lambda: t)
    # wide's preemption (earlier in this cycle) holds the DGX's two free GPUs for it
    pre.took(Preemption("wide", "id-wide", 100, "n-dgx", "gpu-node-1", (), held=D[5:7]),
             [], t)
    p = batch_to_dgx()
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {})
    stopped, _ = pre._act(sw, snap, PlacementPlan(), p, "", t, [])  # type: ignore[arg-type]
    assert read_records(sw.swarm_labels(), P) == {}  # before: batch moved onto D[5:7]
    assert not pre.moving.get("high")
    assert [v.service for v in stopped] == ["batch"]  # stopped instead
