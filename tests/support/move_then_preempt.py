"""One daemon cycle's rebalance then preemption steps, built as the daemon runs them: a
snapshot, a mover's ``run_cycle`` on it (the rebalance step), then ``Preempter.cycle``
on that same snapshot (the preemption step); over the recording Swarm stand-in with the
DGX A100 and RTX 4090 captures.

First written in tests/test_preempt_after_moves.py."""

from __future__ import annotations

from support.forged import DGX_F, R4090_F, RecordingSwarm
from swarmgpu.core.config import Config, RebalanceConfig
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, assign_key, gate_key
from swarmgpu.manager.placement.preempt import Preemption
from swarmgpu.manager.rebalance.mover import Mover, read_records
from swarmgpu.manager.rebalance.moves import Move

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
