"""A ``topology`` preemptor (nvlink, numa) takes a node for "room already" only where
the free GPUs give a set it can use (``Allocator.gpu_set``): enough GPUs free by count
but no NVLink pair among them, it preempts the lower-priority holder of the only pair,
as Kubernetes asks whether the pod fits once the victims go, with the same filters.
Before, it counted GPUs alone, took itself for pending for another reason and waited
for ever. Pure: the real planner and ``choose_preemptions`` over a forged snapshot."""

from __future__ import annotations

from dataclasses import replace

from support.forged import DGX_F, R4090_F, reserving, sw_node, sw_svc

from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement import Holding, assign_key, devices_key, gate_key, plan_placement
from swarmgpu.manager.placement.preempt import Preemption, choose_preemptions
from swarmgpu.manager.placement.records import Status
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
MIB = 1 << 20
# the 8 RTX 4090s with one NVLink bridge, between GPUs 0 and 1: the node's only pair
PAIR_F = replace(R4090_F, links=tuple(
    tuple("NV4" if {i, j} == {0, 1} else link for j, link in enumerate(row))
    for i, row in enumerate(R4090_F.links)))
U = tuple(g.uuid for g in PAIR_F.gpus)


def _choose(nodes: list[SwarmNode], facts: dict[str, NodeFacts], high: SwarmService,
            held: dict[str, tuple[int, ...]] | None = None) -> list[Preemption]:
    """``held`` (by default low on GPU 0) holds those GPUs of n-pair, the rest of it is
    free: low (priority 0) may be preempted, filler may not; ``high`` (priority 100)
    waits: the preemptions chosen for it, once the plan says it pends."""
    labels: dict[str, str] = {}
    services = []
    for name, idx in (held or {"low": (0,)}).items():
        mine = tuple(U[i] for i in idx)
        h = Holding(name, "n-pair", mine, (1000,) * len(mine))
        labels |= {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}
        services.append(sw_svc(name, {f"{P}gpus": str(len(mine)),
                                      devices_key(P, "n-pair"): ",".join(mine),
                                      **({f"{P}preemptible": "false"}
                                         if name == "filler" else {})}))
    nodes = [replace(n, labels=labels) if n.id == "n-pair" else n for n in nodes]
    tasks = [SwarmTask(f"t-{s.name}", s.id, "n-pair", 1, "running", "running", ())
             for s in services]
    services.append(high)
    tasks.append(SwarmTask("t-high", high.id, "", 1, "pending", "running", ()))
    plan = plan_placement(nodes, services, tasks, facts)
    assert [sp.status for sp in plan.services if sp.name == "high"] == [Status.PENDING]
    return choose_preemptions(plan, nodes, services, tasks, facts, prefix=P,
                              preemptible_below=100)


def _nvlink_pair(cpu_milli: int = 0) -> SwarmService:
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}topology": "nvlink", f"{P}priority": "100"})
    return reserving(high, cpu_milli) if cpu_milli else high


def test_an_nvlink_preemptor_stops_the_holder_of_the_only_pair_though_gpus_are_free() -> None:
    """Seven GPUs free, none NVLinked to another free one: low, on GPU 0 of the only
    pair, goes, and high is held that pair. Before, seven free GPUs were "room already":
    nothing was preempted, and high waited behind a single-GPU job of priority 0."""
    (p,) = _choose([sw_node("n-pair", "gpu-node-2")], {"n-pair": PAIR_F}, _nvlink_pair())
    assert [v.service for v in p.victims] == ["low"] and p.node_id == "n-pair"
    assert sorted(p.held) == sorted(U[:2])


def test_a_plain_request_of_two_still_takes_free_gpus_for_room() -> None:
    """Without a topology any two free GPUs do: planned there, nothing preempted (the
    plan places it, so it does not even pend)."""
    nodes = [replace(sw_node("n-pair", "gpu-node-2"), labels={
        assign_key(P, "low"): Holding("low", "n-pair", (U[0],), (1000,)).label_value(),
        gate_key(P, "low"): "true"})]
    low = sw_svc("low", {f"{P}gpus": "1", devices_key(P, "n-pair"): U[0]})
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}priority": "100"})
    tasks = [SwarmTask("t-low", low.id, "n-pair", 1, "running", "running", ()),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ())]
    plan = plan_placement(nodes, [low, high], tasks, {"n-pair": PAIR_F})
    assert [sp.status for sp in plan.services if sp.name == "high"] == [Status.PLACED]
    assert choose_preemptions(plan, nodes, [low, high], tasks, {"n-pair": PAIR_F},
                              prefix=P, preemptible_below=100) == []


def test_a_free_nvlink_pair_without_the_cpu_is_no_room_and_the_pair_elsewhere_is_freed(
) -> None:
    """The DGX has NVLinked GPUs free but too little CPU for high's reservation: high
    pends for its CPU there, which no stop frees (nothing there is a candidate), so low
    goes on n-pair, where high fits once it goes (Kubernetes asks per node). Room
    already is a usable set free on a node it may use with its CPU and memory left
    there too (``tests/test_preempt_room_cpu.py``); before, the DGX's pair was room
    already and high waited for ever."""
    nodes = [replace(sw_node("n-dgx", "gpu-node-1"), cpu_milli=1000),
             sw_node("n-pair", "gpu-node-2")]
    facts = {"n-dgx": DGX_F, "n-pair": PAIR_F}
    (p,) = _choose(nodes, facts, _nvlink_pair(cpu_milli=2000))
    assert [v.service for v in p.victims] == ["low"] and p.node_id == "n-pair"
    assert sorted(p.held) == sorted(U[:2])


def test_a_numa_preemptor_stops_a_holder_when_the_free_gpus_straddle_numa_nodes() -> None:
    """GPUs 0 and 4 free (one on each NUMA node), low on GPU 3, filler (not preemptible)
    on the rest: low goes, high gets 0 and 3 on NUMA node 0. Before, two free GPUs were
    room already for a request of two."""
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}topology": "numa", f"{P}priority": "100"})
    (p,) = _choose([sw_node("n-pair", "gpu-node-2")], {"n-pair": R4090_F}, high,
                   {"low": (3,), "filler": (1, 2, 5, 6, 7)})
    assert [v.service for v in p.victims] == ["low"]
    assert sorted(p.held) == sorted((U[0], U[3]))
