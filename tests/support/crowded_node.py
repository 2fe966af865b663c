"""One GPU node crowded with small holders and a pending request of priority 100 that
may preempt them: the victims ``choose_preemptions`` picks there, over a forged snapshot
and the real planner's plan (``tests/test_preempt_topology_bound.py``,
``benchmarks/bench_preempt_topology.py``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import replace

from support.forged import reserving, sw_node, sw_svc
from swarmgpu.core.config import Config, PreemptionConfig
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.cycle.placement import make_plan, new_planner
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, assign_key, devices_key, gate_key
from swarmgpu.manager.placement.preempt import Preemption, choose_preemptions
from swarmgpu.swarm.client import SwarmService, SwarmTask

P = "swarmgpu."
CFG = Config(preemption=PreemptionConfig(dry_run=False))
# holder -> (its GPUs' indexes, milli of each, priority; below 0: not preemptible)
Held = Mapping[str, tuple[tuple[int, ...], int, int]]


def twelve_small() -> dict[str, tuple[tuple[int, ...], int, int]]:
    """12 holders of priority 0 (the most ``pick_victims`` weighs): GPUs 0-3 whole, one
    each; GPUs 4-7 in halves, two each."""
    held: dict[str, tuple[tuple[int, ...], int, int]] = {
        f"w{i}": ((i,), 1000, 0) for i in range(4)}
    for i in range(4, 8):
        held |= {f"a{i}": ((i,), 500, 0), f"b{i}": ((i,), 500, 0)}
    return held


def halves() -> dict[str, tuple[tuple[int, ...], int, int]]:
    """16 holders of priority 0, two halves on each of 8 GPUs."""
    held: dict[str, tuple[tuple[int, ...], int, int]] = {}
    for i in range(8):
        held |= {f"a{i}": ((i,), 500, 0), f"b{i}": ((i,), 500, 0)}
    return held


def publishing(s: SwarmService, port: int = 8000) -> SwarmService:
    """``s`` publishing ``port`` in host mode (Swarm runs one such task per node)."""
    ports = [{"Protocol": "tcp", "TargetPort": 80, "PublishedPort": port, "PublishMode": "host"}]
    return replace(s, spec={**s.spec, "EndpointSpec": {"Ports": ports}})


def chooser(facts: NodeFacts, held: Held, gpus: int, topology: str,
            cpu: Mapping[str, int] | None = None,
            port: AbstractSet[str] = frozenset()) -> Callable[[], list[Preemption]]:
    """``choose_preemptions`` for "high" (``gpus`` GPUs, ``topology`` or none) on node
    "n" (64,000 CPU milli) whose GPUs ``held`` holds, ready to call (the plan made once).
    ``cpu``: service -> the CPU milli its task reserves ("high" too; none: 0). ``port``:
    the holders whose tasks bind host port 8000 on "n", which "high" then publishes: the
    planner's refused nodes and port takers are handed on, as the daemon does."""
    cpu = cpu or {}
    uuids = [g.uuid for g in facts.gpus]
    labels: dict[str, str] = {}
    svcs = []
    for name, (idx, milli, prio) in held.items():
        mine = tuple(uuids[i] for i in idx)
        h = Holding(name, "n", mine, (milli,) * len(mine))
        labels |= {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}
        ask = {P + "gpus": str(len(mine))} if milli == 1000 else \
            {P + "gpu-fraction": str(milli / 1000)}
        svcs.append(sw_svc(name, {**ask, P + "priority": str(max(prio, 0)),
                                  devices_key(P, "n"): ",".join(mine),
                                  **({P + "preemptible": "false"} if prio < 0 else {})}))
    svcs.append(sw_svc("high", {P + "gpus": str(gpus), P + "priority": "100",
                                **({P + "topology": topology} if topology else {})}))
    svcs = [reserving(s, cpu[s.name]) if s.name in cpu else s for s in svcs]
    if port:
        svcs = [publishing(s) if s.name in port or s.name == "high" else s for s in svcs]
    tasks = [SwarmTask(f"t-{s.name}", s.id, "" if s.name == "high" else "n", 1,
                       "pending" if s.name == "high" else "running", "running", (),
                       cpu_milli=0 if s.name == "high" else cpu.get(s.name, 0))
             for s in svcs]
    snap = Snapshot([sw_node("n", "gpu-node-1", labels)], svcs, tasks, {})
    on = {"n": facts}
    planner = new_planner(CFG, None, snap.services)
    plan = make_plan(snap, CFG, on, planner=planner)
    # (handed on only where a port is published: the other cases' figures as they were)
    refused = planner.refused_nodes if port else None
    ports = planner.port_takers if port else None

    def choose() -> list[Preemption]:
        return choose_preemptions(plan, snap.nodes, snap.services, snap.tasks, on, prefix=P,
                                  preemptible_below=CFG.preemption.preemptible_below,
                                  refused=refused, ports=ports)

    return choose


def victims(facts: NodeFacts, held: Held, gpus: int, topology: str,
            cpu: Mapping[str, int] | None = None,
            port: AbstractSet[str] = frozenset()) -> list[list[str]]:
    """The victims of each preemption chosen for "high", by name."""
    return [sorted(v.service for v in p.victims)
            for p in chooser(facts, held, gpus, topology, cpu, port)()]
