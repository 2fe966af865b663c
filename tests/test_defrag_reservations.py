"""Defragmentation's last check, "does the pending request fit on the node the moves
leave", counts what Swarm's resource filter counts: the CPU and memory the pending task
reserves, beside what the node's other tasks reserve (the moved tasks' given back).
Before, room was made on a node whose CPU the pending task still could not have. Pure.
"""

from __future__ import annotations

import dataclasses

from support.rebalance import CFG, FACTS, U2, P, feed, node, running, service

from swarmgpu.manager.placement import read_ledger
from swarmgpu.manager.rebalance.context import Inputs
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.signals import Signals
from swarmgpu.swarm.client import SwarmService, SwarmTask


def _moves(p_cpu: int, c_cpu: int, a_cpu: int = 0) -> list[str]:
    """p (8 GPUs, ``p_cpu`` milli reserved) pending; gpu-node-2 (8 CPUs) holds a (1 GPU,
    ``a_cpu``) and runs c, a service with no GPU reserving ``c_cpu``."""
    n2 = {f"{P}assign.a": U2[0], f"{P}service.a": "true"}
    nodes = [dataclasses.replace(node("n1", "gpu-node-1", {}), cpu_milli=64000),
             dataclasses.replace(node("n2", "gpu-node-2", n2), cpu_milli=8000)]
    res = {"TaskTemplate": {"Resources": {"Reservations": {"NanoCPUs": p_cpu * 10**6}}}}
    p = dataclasses.replace(service("p", {f"{P}gpus": "8"}), spec={"Name": "p", **res})
    a = service("a", {f"{P}gpus": "1"})
    c = dataclasses.replace(service("c", {}), constraints=())
    tasks = [dataclasses.replace(running("a", "n2"), cpu_milli=a_cpu),
             SwarmTask("t-c", c.id, "n2", 1, "running", "running", (), cpu_milli=c_cpu)]
    cfg = dataclasses.replace(CFG, policies="defrag")
    sig = Signals(cfg)
    times = [float(t) for t in range(13)]
    feed(sig, nodes, times, {})
    inp = Inputs(nodes, [a, p, c], tasks, FACTS, read_ledger(nodes, P), sig.gpus,
                 sig.nodes, cfg, times[-1], ["p"], P)
    return [m.service for m in plan_moves(inp).moves]


def test_room_is_made_where_the_pending_tasks_cpu_fits() -> None:
    assert _moves(p_cpu=2000, c_cpu=6000) == ["a"]


def test_no_room_is_made_where_the_pending_tasks_cpu_does_not_fit() -> None:
    """c's 6 CPUs and p's 4 exceed gpu-node-2's 8: moving a would not let p run there."""
    assert _moves(p_cpu=4000, c_cpu=6000) == []


def test_the_moved_tasks_cpu_is_given_back() -> None:
    """a's 2 CPUs leave with it: c's 2 and p's 4 fit the 8."""
    assert _moves(p_cpu=4000, c_cpu=2000, a_cpu=4000) == ["a"]


def test_the_search_counts_the_cpu_the_pending_task_needs() -> None:
    """gpu-node-2 (8 CPUs): a holds half of GPU 0, e 0.6 of GPU 1 and reserves 4 CPUs,
    f (pinned: six GPUs) the rest; p (one GPU, 6 CPUs, kept to gpu-node-2) is pending.
    By GPUs alone a's move is the cheapest room, and it leaves p 4 CPUs: the search must
    count CPU to move e too (before, it planned a's move alone, the last check refused
    it, and no room was made)."""
    n2 = {f"{P}assign.a": f"{U2[0]}@500", f"{P}service.a": "true",
          f"{P}assign.e": f"{U2[1]}@600", f"{P}service.e": "true",
          f"{P}assign.f": ",".join(U2[2:]), f"{P}service.f": "true"}
    nodes = [dataclasses.replace(node("n1", "gpu-node-1", {}), cpu_milli=64000),
             dataclasses.replace(node("n2", "gpu-node-2", n2), cpu_milli=8000)]

    def cpu(s: SwarmService, milli: int) -> SwarmService:
        res = {"Resources": {"Reservations": {"NanoCPUs": milli * 10**6}}}
        return dataclasses.replace(s, spec={"Name": s.name, "TaskTemplate": res})

    p = dataclasses.replace(cpu(service("p", {f"{P}gpus": "1"}), 6000), constraints=(
        *service("p", {}).constraints, "node.hostname==gpu-node-2"))
    svcs = [service("a", {f"{P}gpu-fraction": "0.5"}),
            cpu(service("e", {f"{P}gpu-fraction": "0.6"}), 4000),
            service("f", {f"{P}gpus": "6"}), p]
    tasks = [running("a", "n2"), running("f", "n2"),
             dataclasses.replace(running("e", "n2"), cpu_milli=4000)]
    cfg = dataclasses.replace(CFG, policies="defrag")
    sig = Signals(cfg)
    times = [float(t) for t in range(13)]
    feed(sig, nodes, times, {})
    inp = Inputs(nodes, svcs, tasks, FACTS, read_ledger(nodes, P), sig.gpus,
                 sig.nodes, cfg, times[-1], ["p"], P)
    assert sorted(m.service for m in plan_moves(inp).moves) == ["a", "e"]
