"""The preemption step's mover, which moves victims, is given the GPUs held for the
live preemptors (their nominations, one made earlier in this very cycle too) beside
the stopping tasks', as the rebalance step's movers are (``Rebalancer.held``). Before,
it had the stopping tasks' alone: a victim moved for one preemption could land on GPUs
held for another preemptor while it settles. Its start (``room_for``) refuses them now,
and the victim is stopped instead. Pure, over the recording Swarm stand-in."""

from __future__ import annotations

from pathlib import Path

from support.forged import DGX_F, RecordingSwarm, sw_node, sw_svc
from support.move_then_preempt import REBALANCE, D, P, R, holds

from swarmgpu.core.config import Config, PreemptionConfig
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, PlacementPlan, devices_key
from swarmgpu.manager.placement.preempt import Candidate, Preemption, Relocation
from swarmgpu.manager.rebalance.mover import read_records
from swarmgpu.swarm.client import SwarmTask


def _world() -> RecordingSwarm:
    """batch (priority 0) holds 2 RTX 4090s, filler the rest; dfill fills 5 A100s of the
    DGX, whose other 2 are free in the ledger."""
    nodes = [sw_node("n-mgr", "manager", role="manager"),
             sw_node("n-dgx", "gpu-node-1", holds("n-dgx", {"dfill": D[:5]})),
             sw_node("n-4090", "gpu-node-2", holds("n-4090", {"batch": R[:2],
                                                              "filler": R[2:]}))]
    svcs = [sw_svc("batch", {f"{P}gpus": "2", devices_key(P, "n-4090"): ",".join(R[:2])}),
            sw_svc("filler", {f"{P}gpus": "6", f"{P}preemptible": "false",
                              devices_key(P, "n-4090"): ",".join(R[2:])}),
            sw_svc("dfill", {f"{P}gpus": "5", f"{P}preemptible": "false",
                             devices_key(P, "n-dgx"): ",".join(D[:5])}),
            sw_svc("wide", {f"{P}gpus": "3", f"{P}priority": "100"}),
            sw_svc("high", {f"{P}gpus": "2", f"{P}priority": "100"})]
    on = {"batch": "n-4090", "filler": "n-4090", "dfill": "n-dgx", "wide": "", "high": ""}
    tasks = [SwarmTask(f"t-{s.name}", s.id, on[s.name], 1,
                       "running" if on[s.name] else "pending", "running", ()) for s in svcs]
    return RecordingSwarm(nodes, svcs, tasks)


def test_a_victim_is_not_moved_onto_gpus_held_for_another_preemptor(tmp_path: Path) -> None:
    sw, t = _world(), 1000.0
    cfg = Config(state_dir=str(tmp_path), rebalance=REBALANCE,
                 preemption=PreemptionConfig(dry_run=False, preemptible_below=100))
    pre = Preempter(cfg, clock=lambda: t)
    # wide's preemption (earlier in this cycle) holds the DGX's two free GPUs for it
    pre.took(Preemption("wide", "id-wide", 100, "n-dgx", "gpu-node-1", (), held=D[5:7]),
             [], t)
    idx = tuple(next(g.index for g in DGX_F.gpus if g.uuid == u) for u in D[5:7])
    batch = Candidate("batch", "id-batch", "n-4090", 0, "", R[:2],
                      Holding("batch", "n-4090", R[:2], (1000, 1000)))
    p = Preemption("high", "id-high", 100, "n-4090", "gpu-node-2", (batch,),
                   moves={"batch": Relocation("n-dgx", "gpu-node-1", idx, D[5:7])},
                   held=R[:2])
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {})
    stopped, _ = pre._act(sw, snap, PlacementPlan(), p, "", t, [])  # type: ignore[arg-type]
    assert read_records(sw.swarm_labels(), P) == {}  # before: batch moved onto D[5:7]
    assert not pre.moving.get("high")
    assert [v.service for v in stopped] == ["batch"]  # stopped instead
