"""The rebalancer runs after placement in one cycle, on the snapshot taken before
placement's writes: a service placement just put on a node has no task there yet, so
its CPU, memory and host-mode ports were not seen, and a move could take them. This
cycle's placement decisions (``Inputs.placed``, from the plan: ``placed_of``) now count
against a move's target as tasks do. Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from support.rebalance import CFG, FACTS, P, cluster, feed, service

from swarmgpu.manager.cycle.rebalance import placed_of
from swarmgpu.manager.placement import PlacementPlan, read_ledger
from swarmgpu.manager.placement.records import ReplicaPlacement, ServicePlan
from swarmgpu.manager.rebalance.context import Inputs
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.signals import Signals
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

HOT = {float(t): {0: 97.0} for t in range(13)}  # gpu-node-2 GPU 0, shared by a and b
PORT = {"EndpointSpec": {"Ports": [{"Protocol": "tcp", "TargetPort": 80,
                                    "PublishedPort": 8000, "PublishMode": "host"}]}}
ONE_CPU = {"TaskTemplate": {"Resources": {"Reservations": {"NanoCPUs": 10**9}}}}


def _targets(nodes: list[SwarmNode], svcs: list[SwarmService], tasks: list[SwarmTask],
             placed: Mapping[str, tuple[str, ...]]) -> list[tuple[str, str]]:
    sig = Signals(CFG)
    times = [float(t) for t in range(13)]
    feed(sig, nodes, times, HOT)
    prop = plan_moves(Inputs(nodes, svcs, tasks, FACTS, read_ledger(nodes, P), sig.gpus,
                             sig.nodes, CFG, times[-1], (), P, placed=placed))
    return [(m.service, m.target_host) for m in prop.moves]


def _spec(s: SwarmService, spec: Mapping[str, object]) -> SwarmService:
    return dataclasses.replace(s, spec={"Name": s.name, **spec})


def test_a_host_port_placement_just_claimed_is_no_target() -> None:
    """q (publishing 8000 in host mode, as a does) was placed on gpu-node-1 this cycle."""
    nodes, svcs, tasks = cluster()
    q = _spec(dataclasses.replace(service("q", {}), constraints=()), PORT)
    svcs = [*(_spec(s, PORT) for s in svcs), q]
    assert _targets(nodes, svcs, tasks, {}) == [("a", "gpu-node-1")]
    assert _targets(nodes, svcs, tasks, {"q": ("n1",)}) == []
    assert _targets(nodes, svcs, tasks, {"q": ("n2",)}) == [("a", "gpu-node-1")]


def test_cpu_placement_just_reserved_is_no_target() -> None:
    """gpu-node-1 has 4 CPUs; q (3.5 reserved) was placed there this cycle; a reserves 1."""
    nodes, svcs, tasks = cluster()
    nodes = [dataclasses.replace(nodes[0], cpu_milli=4000, memory_mib=65536), nodes[1]]
    q = _spec(dataclasses.replace(service("q", {}), constraints=()), {
        "TaskTemplate": {"Resources": {"Reservations": {"NanoCPUs": 3500 * 10**6}}}})
    svcs = [*(_spec(s, ONE_CPU) for s in svcs), q]
    assert _targets(nodes, svcs, tasks, {}) == [("a", "gpu-node-1")]
    assert _targets(nodes, svcs, tasks, {"q": ("n1",)}) == []


def test_the_cycle_hands_the_plans_placements_to_the_rebalancer() -> None:
    def sp(name: str, *nids: str) -> ServicePlan:
        return ServicePlan(name, f"id-{name}", None, "", "placed", "placed",  # type: ignore[arg-type]
                           tuple(ReplicaPlacement(n, n, (0,), ("u",), (1000,)) for n in nids))

    plan = PlacementPlan(services=[sp("q", "n1", "n2"), sp("p")])
    assert placed_of(plan) == {"q": ("n1", "n2")}
    assert placed_of(None) == {}
