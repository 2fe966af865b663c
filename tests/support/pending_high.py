"""A preemptor pending on a full RTX 4090 node, for the preemption's settle tests."""

from __future__ import annotations

from support.forged import FACTS, R_UUIDS, P, sw_node, sw_svc
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import plan_placement
from swarmgpu.manager.placement.keys import assign_key, gate_key
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.swarm.client import SwarmTask


def pending_high() -> tuple[Snapshot, object]:
    """batch (priority 0, ``id-batch``) holds all 8 RTX 4090s; high (priority 100,
    ``id-high``) asks for 2 of them."""
    held = Holding("batch", "n-4090", R_UUIDS, tuple(1000 for _ in R_UUIDS))
    nodes = [sw_node("n-4090", "gpu-node-2", {assign_key(P, "batch"): held.label_value(),
                                            gate_key(P, "batch"): "true"})]
    batch = sw_svc("batch", {f"{P}gpus": "8", f"{P}priority": "0"})
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*",
                           f"{P}priority": "100"})
    tasks = [SwarmTask("t-batch", batch.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ())]
    snap = Snapshot(nodes, [batch, high], tasks, {})
    return snap, plan_placement(nodes, [batch, high], tasks, FACTS)
