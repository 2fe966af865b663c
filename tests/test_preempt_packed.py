"""A packed service preempts on its own node only: its replicas go only on the node they
are packed on (``placement.packing``; converge never moves a packed holding). Pending
for its owner's max_replicas_per_node below the replicas packed, it lacks no GPUs and
preempts nothing (before, it stopped a victim on another node for nothing, whose GPUs
nobody then took, again after each settle time); scaled up past its node's room, it
stops lower-priority holders there, for all the replicas it lacks (before, it preempted
nothing at all). Pure: the planner and the preemption step's decision on the two
captured nodes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from support.placement import DGX, FACTS, R4090, daemon_plans, settle, svc

from swarmgpu.manager.placement import (
    ServicePlan,
    assign_key,
    devices_key,
    gate_key,
    plan_placement,
)
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."


def test_a_pending_packed_service_preempts_nothing() -> None:
    """p (priority 100) is packed 4 x 1 GPU on gpu-node-1; low (priority 0) holds all of
    gpu-node-2. p's owner sets max_replicas_per_node 2: p is pending. Before: "would
    preempt low (priority 0) on gpu-node-2 for p", and the daemon stopped low, whose
    GPUs p could never use."""
    low = svc("low", {"swarmgpu.gpus": "8", "swarmgpu.gpu-product": "*4090*",
                      "swarmgpu.priority": "0"})
    p = svc("p", {"swarmgpu.gpus": "1", "swarmgpu.pack": "always",
                  "swarmgpu.priority": "100"}, replicas=4)
    nodes, (low, p), _ = settle([DGX, R4090], [low, p])
    p = replace(p, max_replicas_per_node=2, version=p.version + 1)
    tasks = [SwarmTask("t-low", low.id, "n-4090", 1, "running", "running", (),
                       force_update=low.force_update)]
    tasks += [SwarmTask(f"t-p{k}", p.id, "n-dgx" if k <= 2 else "", k,
                        "running" if k <= 2 else "pending", "running", (),
                        force_update=p.force_update) for k in range(1, 5)]
    got = daemon_plans(nodes, [low, p], tasks)
    assert got["p"].status == "pending" and got["p"].packed, got["p"]
    assert not [w for w in got["p"].warnings if "preempt" in w], got["p"].warnings


A100 = {"swarmgpu.gpu-product": "*A100*"}


def _scaled_past_the_room(most: int | None = None, queues: dict[str, Any] | None = None,
                          low_priority: str = "0") -> tuple[
        dict[str, ServicePlan], list[SwarmNode], SwarmService, SwarmService]:
    """p (priority 100) packed 4 x 1 GPU on gpu-node-1 (8 A100s, one split into MIG
    devices), low (priority 0, preemptible) holding 3 others there; p's owner scales it
    to 6 (and sets max_replicas_per_node ``most``). The daemon's plan with its
    preemption decision, the nodes, p and low."""
    q = ({"swarmgpu.queue": "a"}, {"swarmgpu.queue": "b"}) if queues else ({}, {})
    p = svc("p", {"swarmgpu.gpus": "1", "swarmgpu.pack": "always",
                  "swarmgpu.priority": "100", **A100, **q[0]}, replicas=4)
    low = svc("low", {"swarmgpu.gpus": "3", "swarmgpu.priority": low_priority, **A100,
                      **q[1]})
    nodes, (p, low), by = settle([DGX, R4090], [p, low])
    assert by["p"].packed and by["low"].placements[0].node_id == "n-dgx", by
    p = replace(p, replicas=6, version=p.version + 1,
                max_replicas_per_node=p.max_replicas_per_node if most is None else most)
    tasks = [SwarmTask("t-low", low.id, "n-dgx", 1, "running", "running", (),
                       force_update=low.force_update)]
    tasks += [SwarmTask(f"t-p{k}", p.id, "n-dgx" if k <= 4 else "", k,
                        "running" if k <= 4 else "pending", "running", (),
                        force_update=p.force_update) for k in range(1, 7)]
    got = daemon_plans(nodes, [p, low], tasks, queues)
    assert got["p"].status == "pending" and got["p"].packed, got["p"]
    return got, nodes, p, low


def test_a_packed_service_scaled_past_its_nodes_room_preempts_there() -> None:
    """p's 2 replicas beyond its node's room are pending for want of GPUs on the only
    node they may go, which a strictly lower, preemptible service holds: the priority
    rule lets p stop it (docs/requests.md, "Priority and preemption"). Before, a packed
    service never preempted: p stayed pending for good."""
    got, nodes, p, low = _scaled_past_the_room()
    said = [w for w in got["p"].warnings if "preempt" in w]
    assert len(said) == 1 and "low (priority 0)" in said[0] and "gpu-node-1" in said[0], said
    # The preemption's writes (low's ledger, gate and device list go): the next cycle
    # places p's two replicas there, and low waits.
    gone = (assign_key(P, "low"), gate_key(P, "low"))
    nodes = [replace(n, labels={k: v for k, v in n.labels.items() if k not in gone})
             for n in nodes]
    low = replace(low, labels={k: v for k, v in low.labels.items()
                               if not k.startswith(devices_key(P, ""))})
    after = {sp.name: sp for sp in plan_placement(nodes, [p, low], [], FACTS).services}
    assert after["p"].status == "placed" and len(after["p"].placements) == 6, after["p"]
    assert after["low"].status == "pending"


def test_a_packed_service_held_at_its_owners_max_replicas_preempts_nothing() -> None:
    """The owner's max_replicas_per_node 3 (not the 4 swarmgpu recorded) with 4 held:
    Swarm runs no more there, so GPUs freed for the 2 others would go unused."""
    got, _nodes, _p, _low = _scaled_past_the_room(most=3)
    assert not [w for w in got["p"].warnings if "preempt" in w], got["p"].warnings


def test_a_packed_reclaim_stays_within_its_queues_guarantee_for_every_replica() -> None:
    """p (queue a, guaranteed 5 GPUs, 4 held) lacks 2 replicas; low (queue b, nothing
    guaranteed, p's priority) holds 3 GPUs on p's node: only a quota reclaim could stop
    it, and a reclaim keeps the preemptor's queue within its guarantee. Before, the check
    counted one replica (4 + 1 <= 5) and p reclaimed for two, its queue at 6."""
    got, *_ = _scaled_past_the_room(queues={"a": {"guaranteed": 5}, "b": {"guaranteed": 0}},
                                    low_priority="100")
    assert not [w for w in got["p"].warnings if "preempt" in w], got["p"].warnings
    # guaranteed 6: both replicas fit within it, and low is reclaimed
    got, *_ = _scaled_past_the_room(queues={"a": {"guaranteed": 6}, "b": {"guaranteed": 0}},
                                    low_priority="100")
    said = [w for w in got["p"].warnings if "preempt" in w]
    assert len(said) == 1 and "low (priority 100)" in said[0], said


def test_a_packed_preemptor_stays_within_its_queues_max_for_every_replica() -> None:
    """p (queue a, max 6 GPUs, 4 held on gpu-node-1) lacks 2 replicas; q (queue a, a
    lower priority) is placed on gpu-node-2 in the same cycle, after p was visited: 5 of
    a's 6 GPUs then. The max check counted one replica of p (5 + 1 <= 6) and p preempted
    low for two: its queue at 7, so the next cycle's max held one back, and a victim's
    GPUs were freed for nothing. Every replica p lacks counts, as for the guarantee."""
    def run(most: int) -> ServicePlan:
        p = svc("p", {"swarmgpu.gpus": "1", "swarmgpu.pack": "always",
                      "swarmgpu.priority": "100", "swarmgpu.queue": "a", **A100}, replicas=4)
        low = svc("low", {"swarmgpu.gpus": "3", "swarmgpu.priority": "0", **A100})
        nodes, (p, low), by = settle([DGX, R4090], [p, low])
        assert by["p"].packed and by["low"].placements[0].node_id == "n-dgx", by
        p = replace(p, replicas=6, version=p.version + 1)
        q = svc("q", {"swarmgpu.gpus": "1", "swarmgpu.priority": "50",
                      "swarmgpu.queue": "a", "swarmgpu.gpu-product": "*4090*"})
        tasks = [SwarmTask("t-low", low.id, "n-dgx", 1, "running", "running", (),
                           force_update=low.force_update)]
        tasks += [SwarmTask(f"t-p{k}", p.id, "n-dgx" if k <= 4 else "", k,
                            "running" if k <= 4 else "pending", "running", (),
                            force_update=p.force_update) for k in range(1, 7)]
        got = daemon_plans(nodes, [p, low, q], tasks, {"a": {"max": most}})
        assert got["q"].status == "placed", got["q"]
        assert got["p"].status == "pending" and got["p"].packed, got["p"]
        return got["p"]

    assert not [w for w in run(6).warnings if "preempt" in w], run(6).warnings
    # max 7: both replicas fit within it, and low is preempted
    said = [w for w in run(7).warnings if "preempt" in w]
    assert len(said) == 1 and "low (priority 0)" in said[0], said
