"""One daemon cycle's rebalance then preemption steps, built as the daemon runs them: a
snapshot, a mover's ``run_cycle`` on it (the rebalance step), then ``Preempter.cycle``
on that same snapshot (the preemption step); over the recording Swarm stand-in with the
DGX A100 and RTX 4090 captures.

First written in tests/test_preempt_after_moves.py."""

from __future__ import annotations

from support.forged import DGX_F, R4090_F, RecordingSwarm, sw_node, sw_svc
from swarmgpu.core.config import Config, RebalanceConfig
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, assign_key, devices_key, gate_key
from swarmgpu.manager.placement.preempt import Candidate, Preemption, Relocation
from swarmgpu.manager.rebalance.mover import Mover, read_records
from swarmgpu.manager.rebalance.moves import Move
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
R = tuple(g.uuid for g in R4090_F.gpus)  # 8 RTX 4090s on n-4090
D = tuple(g.uuid for g in DGX_F.gpus if not g.mig_enabled)
FACTS = {"n-dgx": DGX_F, "n-4090": R4090_F}
REBALANCE = RebalanceConfig(dry_run=False, max_moves_per_cycle=4, max_moves_per_node=4)


def holds(node: str, held: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """The node labels (ledger entry and open gate) of services holding whole GPUs."""
    labels: dict[str, str] = {}
    for name, uuids in held.items():
        h = Holding(name, node, uuids, tuple(1000 for _ in uuids))
        labels |= {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}
    return labels


def batch_world(wanting: tuple[SwarmService, ...] = ()) -> tuple[
        list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """Nodes, services and tasks: batch (priority 0) holds 2 RTX 4090s, filler the other
    6; dfill fills 5 A100s of the DGX, whose other 2 are free in the ledger, where batch
    can move; ``wanting`` (pending), then high (priority 100), want GPUs."""
    nodes = [sw_node("n-mgr", "manager", role="manager"),
             sw_node("n-dgx", "gpu-node-1", holds("n-dgx", {"dfill": D[:5]})),
             sw_node("n-4090", "gpu-node-2", holds("n-4090", {"batch": R[:2],
                                                              "filler": R[2:]}))]
    svcs = [sw_svc("batch", {f"{P}gpus": "2", devices_key(P, "n-4090"): ",".join(R[:2])}),
            sw_svc("filler", {f"{P}gpus": "6", f"{P}preemptible": "false",
                              devices_key(P, "n-4090"): ",".join(R[2:])}),
            sw_svc("dfill", {f"{P}gpus": "5", f"{P}preemptible": "false",
                             devices_key(P, "n-dgx"): ",".join(D[:5])}),
            *wanting,
            sw_svc("high", {f"{P}gpus": "2", f"{P}priority": "100"})]
    on = {"batch": "n-4090", "filler": "n-4090", "dfill": "n-dgx"}
    tasks = [SwarmTask(f"t-{s.name}", s.id, on.get(s.name, ""), 1,
                       "running" if s.name in on else "pending", "running", ())
             for s in svcs]
    return nodes, svcs, tasks


def batch_to_dgx() -> Preemption:
    """high's preemption of batch on n-4090, batch moved to the DGX's 2 free GPUs."""
    idx = tuple(next(g.index for g in DGX_F.gpus if g.uuid == u) for u in D[5:7])
    victim = Candidate("batch", "id-batch", "n-4090", 0, "", R[:2],
                       Holding("batch", "n-4090", R[:2], (1000, 1000)))
    return Preemption("high", "id-high", 100, "n-4090", "gpu-node-2", (victim,),
                      moves={"batch": Relocation("n-dgx", "gpu-node-1", idx, D[5:7])},
                      held=R[:2])


def snapshot_of(sw: RecordingSwarm) -> Snapshot:
    return Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels())


def run_moves(sw: RecordingSwarm, moves: list[Move], snap: Snapshot) -> set[str]:
    """The rebalance step's mover run on ``snap``: the services whose move records Swarm
    holds after it."""
    Mover(sw, REBALANCE, prefix=P, dry_run=False).run_cycle(  # type: ignore[arg-type]
        moves, snap.nodes, snap.services, snap.tasks)
    return {st.service for st in read_records(sw.swarm_labels(), P).values()}


def move_then_preempt(sw: RecordingSwarm, cfg: Config,
                      moves: list[Move]) -> tuple[set[str], list[Preemption]]:
    """One cycle at 5000 s: the services with move records after the rebalance step
    (none run where ``moves`` is empty), and what the preemption step preempted."""
    snap = snapshot_of(sw)
    plan = make_plan(snap, cfg)
    moving = run_moves(sw, moves, snap) if moves else set()
    return moving, Preempter(cfg).cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
