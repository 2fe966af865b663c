"""Generated clusters for the rebalancer's plans (``plan_moves``), by seed: GPU nodes
of the RTX 4090 capture with whole and shared holdings, some reserving CPU and memory,
some whose task does not exist yet, a few on GPUs already full, pending requests of
whole GPUs, GPUs held for a preemptor or for tasks Swarm is stopping, this cycle's
placements, and GPUs read busy or hot. What ``test_rebalance_trial.py`` plans twice:
on the pass's kept allocator and on one built for each check (``Context.
fresh_trials``)."""

from __future__ import annotations

import random
from dataclasses import replace

from support.forged import reserving, sw_svc
from support.gpu_nodes import RTX4090
from support.rebalance import CFG, P, page
from support.rebalance import node as rebalance_node
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement import read_ledger
from swarmgpu.manager.rebalance.context import Inputs
from swarmgpu.manager.rebalance.scrape import judge
from swarmgpu.manager.rebalance.signals import Signals
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

SHARES = (1000, 1000, 500, 500, 250)  # a holding's milli of its GPU, drawn


def _facts(k: int, base: NodeFacts) -> NodeFacts:
    return replace(base, hostname=f"gpu-node-{k}", gpus=tuple(
        replace(g, uuid=f"{g.uuid[:-6]}{k:03d}{g.index:03d}") for g in base.gpus))


def _service(rng: random.Random, name: str, milli: int) -> SwarmService:
    want = {f"{P}gpus": "1"} if milli == 1000 else {f"{P}gpu-fraction": str(milli / 1000)}
    s = sw_svc(name, want)
    return reserving(s, rng.choice((0, 0, 4000, 12000)))


def generated(seed: int, n_nodes: int = 12, n_pending: int = 4) -> Inputs:
    """The cluster of ``seed``, its metrics read for the signals' windows."""
    rng = random.Random(seed)
    base = RTX4090.facts()
    nodes: list[SwarmNode] = []
    svcs: list[SwarmService] = []
    tasks: list[SwarmTask] = []
    stopping: list[SwarmTask] = []
    facts: dict[str, NodeFacts] = {}
    held: dict[tuple[str, str], tuple[str, int]] = {}
    held_shares: dict[tuple[str, str], int] = {}
    placed: dict[str, tuple[str, ...]] = {}
    util: dict[str, dict[int, float]] = {}
    for k in range(n_nodes):
        nid, f = f"n{k}", _facts(k, base)
        facts[nid] = f
        labels: dict[str, str] = {}
        util[nid] = {i: rng.choice((5.0, 5.0, 5.0, 40.0, 95.0)) for i in range(8)}
        for i, g in enumerate(f.gpus):
            left = 1000
            while left > 0 and rng.random() < 0.8:
                # (now and then more than is left: a ledger a new allocator commits
                # in part, the later holding refused)
                milli = rng.choice(SHARES) if rng.random() < 0.05 else min(
                    left, rng.choice(SHARES))
                name = f"s{k}-{i}-{left}"
                left = max(0, left - milli)
                labels.update({f"{P}assign.{name}": g.uuid if milli == 1000
                               else f"{g.uuid}@{milli}", f"{P}service.{name}": "true"})
                s = _service(rng, name, milli)
                svcs.append(s)
                cpu = (s.spec["TaskTemplate"].get("Resources", {}).get("Reservations", {})
                       .get("NanoCPUs", 0) // 1_000_000)
                draw = rng.random()
                if draw < 0.1:
                    placed[name] = (nid,)  # placed this cycle: no task yet
                elif draw < 0.15:
                    pass  # its task not made yet
                else:
                    tasks.append(SwarmTask(f"t-{name}", s.id, nid, 1, "running", "running",
                                           (), cpu_milli=cpu))
            if left == 1000 and rng.random() < 0.2:
                held[(nid, g.uuid)] = (f"p{rng.randrange(n_pending)}", 100)
            elif left > 0 and rng.random() < 0.1:
                held_shares[(nid, g.uuid)] = left // 2
        if rng.random() < 0.3:
            stopping.append(SwarmTask(f"t-gone-{k}", "id-gone", nid, 1, "running",
                                      "shutdown", (), cpu_milli=8000))
        nodes.append(replace(rebalance_node(nid, f"gpu-node-{k}", labels),
                             cpu_milli=64000, memory_mib=256000))
    pend = [reserving(sw_svc(f"p{i}", {f"{P}gpus": str(rng.choice((1, 2, 2)))}),
                      rng.choice((0, 8000))) for i in range(n_pending)]
    svcs = pend + svcs
    sig = Signals(CFG)
    ledger = read_ledger(nodes, P)
    hosts = {n.id: n.hostname for n in nodes}
    for t in (float(t) for t in range(13)):
        sig.observe({n.id: judge(n, "http://x/metrics", page(facts[n.id], util[n.id]), t)
                     for n in nodes}, facts, hosts, ledger, t)
    return Inputs(nodes, svcs, tasks, facts, ledger, sig.gpus, sig.nodes, CFG, 12.0,
                  [s.name for s in pend], P, placed=placed, held=held,
                  held_shares=held_shares, stopping=stopping)
