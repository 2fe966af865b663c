"""The daemon's actuators' writes of a service (preemption, rebalancing) leave no task of
it waiting for good: Swarm's scheduler never tries again a waiting task of an older
service revision (moby/swarmkit 807f25e, ``noSuitableNode``; docs/deploy.md), and a
write of labels alone replaces no task."""

from __future__ import annotations

from support.forged import DGX_F, R4090_F, RecordingSwarm, sw_node, sw_svc

from swarmgpu.core.config import Config, PreemptionConfig
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, assign_key, devices_key, gate_key
from swarmgpu.swarm.client import SwarmTask

P = "swarmgpu."
FACTS = {"n-dgx": DGX_F, "n-4090": R4090_F}
R_UUIDS = tuple(g.uuid for g in R4090_F.gpus)


def _victim_with_a_waiting_replica(waits: bool) -> RecordingSwarm:
    """batch (priority 0, 2 replicas of 8 GPUs) runs one replica on the RTX 4090 node;
    its second replica's task waits for a node (``waits``) or there is none; high
    (priority 100) asks for 2 of the 4090's GPUs."""
    held = Holding("batch", "n-4090", R_UUIDS, tuple(1000 for _ in R_UUIDS))
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", {assign_key(P, "batch"): held.label_value(),
                                            gate_key(P, "batch"): "true"})]
    batch = sw_svc("batch", {f"{P}gpus": "8", f"{P}priority": "0",
                             devices_key(P, "n-4090"): ",".join(R_UUIDS)},
                   replicas=2 if waits else 1)
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*",
                           f"{P}priority": "100"})
    tasks = [SwarmTask("t-batch-1", batch.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ())]
    if waits:
        tasks.append(SwarmTask("t-batch-2", batch.id, "", 2, "pending", "running", ()))
    return RecordingSwarm(nodes, [batch, high], tasks)


def _decided(sw: RecordingSwarm) -> list[str]:
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels())
    cfg = Config(preemption=PreemptionConfig(dry_run=False))
    pre = Preempter(cfg)
    return [p.describe() for p in pre.decide(snap, make_plan(snap, cfg), FACTS, None, 5000.0)]


def test_a_service_with_a_task_waiting_for_a_node_is_no_victim() -> None:
    """The victim's spec write (its device list gone, the preempted record: labels only)
    left its other replica's task, waiting for a node, of an older revision: Swarm never
    tried it again, and it stayed pending beside the replica placement gave back. A
    service with a task waiting for a node is no victim until none waits."""
    assert _decided(_victim_with_a_waiting_replica(False)) == [
        "preempt batch (priority 0) on gpu-node-2 for high (priority 100)"]
    assert _decided(_victim_with_a_waiting_replica(True)) == []
