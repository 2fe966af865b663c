"""Consolidation's plans, recorded: the moves (every field), in order, and the notes of
``plan_moves`` on fixed snapshots, as the planner proposed them before its search was
made cheaper (stop 77: the statement's ledger and allocator no longer copied and
rebuilt for each move weighed). Any change here is a change of decisions.

The snapshots: RTX 4090 nodes (the 8-GPU capture) whose GPUs hold whole GPUs, one or
two shares or nothing, some GPUs busy, drawn from a seeded ``random.Random``; and the
cluster of benchmarks/defrag_scale.py (six whole GPUs and two halves per node, a few
services pending two GPUs) at 12 nodes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Mapping
from typing import Any

import pytest
from support.counted import calls
from support.gpu_nodes import RTX4090
from support.rebalance import CFG, P, node, page, running, service

from swarmgpu.core.model import NodeFacts
from swarmgpu.core.rebalanceconfig import DEFAULT_POLICIES
from swarmgpu.manager.placement import Holding, read_ledger
from swarmgpu.manager.placement.cluster import ClusterAllocator
from swarmgpu.manager.rebalance.attribution import add_holder, holders_by_gpu
from swarmgpu.manager.rebalance.context import Context, Inputs
from swarmgpu.manager.rebalance.moves import Proposal
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.policies import enabled
from swarmgpu.manager.rebalance.scrape import judge
from swarmgpu.manager.rebalance.signals import Signals
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

BASE = RTX4090.facts()
SHARES = (200, 300, 400, 500, 600)
ALL = DEFAULT_POLICIES


def facts_of(k: int) -> NodeFacts:
    """gpu-node-``k``: the capture with its own hostname and GPU UUIDs."""
    return dataclasses.replace(BASE, hostname=f"gpu-node-{k}", gpus=tuple(
        dataclasses.replace(g, uuid=f"{g.uuid[:-6]}{k:03d}{g.index:03d}") for g in BASE.gpus))


def drawn(seed: int, n_nodes: int
          ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask],
                     dict[str, NodeFacts], dict[str, dict[int, float | None]]]:
    """Nodes, services, running tasks, facts and per-node GPU utilisation drawn by
    ``seed``: each GPU whole-held, shared by one or two services, or free; one GPU in
    four busy (60%), the rest idle (5%)."""
    rnd = random.Random(seed)
    nodes, svcs, tasks, facts, util = [], [], [], {}, {}
    for k in range(n_nodes):
        nid, f = f"n{k}", facts_of(k)
        facts[nid] = f
        labels: dict[str, str] = {}
        util[nid] = {i: 60.0 if rnd.random() < 0.25 else 5.0 for i in range(8)}
        for i, g in enumerate(f.gpus):
            kind = rnd.choice(("whole", "one", "one", "two", "free"))
            held = [] if kind == "free" else [None] if kind == "whole" else \
                [rnd.choice(SHARES) for _ in range(1 if kind == "one" else 2)]
            for j, milli in enumerate(held):
                name = f"s{k}-{i}-{j}"
                labels.update({f"{P}assign.{name}": g.uuid if milli is None
                               else f"{g.uuid}@{milli}", f"{P}service.{name}": "true"})
                svcs.append(service(name, {f"{P}gpus": "1"} if milli is None
                                    else {f"{P}gpu-fraction": str(milli / 1000)}))
                tasks.append(running(name, nid))
        nodes.append(node(nid, f.hostname, labels))
    return nodes, svcs, tasks, facts, util


def bench(n_nodes: int, n_pending: int
          ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask],
                     dict[str, NodeFacts], dict[str, dict[int, float | None]]]:
    """benchmarks/defrag_scale.py's cluster (no task history), every GPU idle."""
    svcs = [service(f"p{i}", {f"{P}gpus": "2"}) for i in range(n_pending)]
    nodes, tasks, facts = [], [], {}
    for k in range(n_nodes):
        nid, f = f"n{k}", facts_of(k)
        facts[nid] = f
        labels: dict[str, str] = {}
        for i in range(8):
            name = f"s{k}-{i}"
            whole = i < 6
            labels.update({f"{P}assign.{name}": f.gpus[i].uuid if whole
                           else f"{f.gpus[i].uuid}@500", f"{P}service.{name}": "true"})
            svcs.append(service(name, {f"{P}gpus": "1"} if whole
                                else {f"{P}gpu-fraction": "0.5"}))
            tasks.append(running(name, nid))
        nodes.append(node(nid, f.hostname, labels))
    return nodes, svcs, tasks, facts, {n.id: {} for n in nodes}


Snap = tuple[list[SwarmNode], list[SwarmService], list[SwarmTask], dict[str, NodeFacts],
             Mapping[str, Mapping[int, float | None]]]


def proposal(snap: Snap, policies: str, frag_pct: float, pending: tuple[str, ...] = ()
             ) -> Proposal:
    """``plan_moves`` on the snapshot after 13 one-second scrapes (``policies`` empty:
    every policy)."""
    return plan_moves(inputs(snap, policies, frag_pct, pending))


def inputs(snap: Snap, policies: str, frag_pct: float, pending: tuple[str, ...] = ()
           ) -> Inputs:
    """``proposal``'s inputs."""
    nodes, svcs, tasks, facts, util = snap
    cfg = dataclasses.replace(CFG, policies=policies or ALL, consolidation=dataclasses.replace(
        CFG.consolidation, frag_pct=frag_pct))
    sig = Signals(cfg)
    ledger = read_ledger(nodes, P)
    pages = {n.id: page(facts[n.id], util[n.id]) for n in nodes}
    hosts = {n.id: n.hostname for n in nodes}
    for t in (float(t) for t in range(13)):
        sig.observe({n.id: judge(n, "http://x/metrics", pages[n.id], t) for n in nodes},
                    facts, hosts, ledger, t)
    return Inputs(nodes, svcs, tasks, facts, ledger, sig.gpus, sig.nodes, cfg, 12.0,
                  list(pending), P)


def digest(p: Proposal) -> str:
    """The moves, every field, and the notes, as one hash (the start of its hex)."""
    text = repr(([dataclasses.astuple(m) for m in p.moves], p.notes))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def summary(p: Proposal) -> list[tuple[str, str, str, tuple[int, ...], tuple[int, ...]]]:
    return [(m.service, m.source_node, m.target_node, m.target_gpus, m.target_milli)
            for m in p.moves]


def test_consolidation_plan_on_drawn_snapshots_is_as_recorded() -> None:
    got = {seed: (len(p.moves), digest(p)) for seed in (1, 2, 3)
           for p in [proposal(drawn(seed, 10), "consolidation", 5.0)]}
    assert got == EXPECTED_DRAWN


def test_consolidation_plan_on_a_drawn_snapshot_moves_as_recorded() -> None:
    p = proposal(drawn(1, 10), "consolidation", 5.0)
    assert summary(p)[:6] == EXPECTED_DRAWN_1_FIRST


def test_every_policy_plan_on_drawn_snapshots_is_as_recorded() -> None:
    got = {seed: (len(p.moves), digest(p)) for seed in (4, 5)
           for p in [proposal(drawn(seed, 10), "", 5.0)]}
    assert got == EXPECTED_DRAWN_ALL


def test_benchmark_cluster_plans_are_as_recorded() -> None:
    snap = bench(12, 2)
    got = {pol: (len(p.moves), digest(p)) for pol in ("consolidation", "")
           for p in [proposal(snap, pol, CFG.consolidation.frag_pct, ("p0", "p1"))]}
    assert got == EXPECTED_BENCH


def test_consolidation_builds_one_allocator_per_pass_not_one_per_move_weighed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each move weighed counts the statement's moves on the pass's one allocator and
    takes them back (before: a new allocator over every holding each time, 40 of 42 s
    of a 200-node plan)."""
    built = calls(monkeypatch, Context, "allocator")
    p = proposal(drawn(1, 10), "consolidation", 5.0)
    assert (len(p.moves), digest(p)) == EXPECTED_DRAWN[1]
    assert len(built) == 1



def reserving(snap: Snap) -> Snap:
    """``snap`` with every third service reserving a CPU and 1 GiB, and each node's CPU
    and memory known (so the moves' new tasks are counted on their targets)."""
    nodes, svcs, tasks, facts, util = snap
    spec = {"TaskTemplate": {"Resources": {"Reservations": {
        "NanoCPUs": 10**9, "MemoryBytes": 1 << 30}}}}
    return ([dataclasses.replace(n, cpu_milli=64_000, memory_mib=262_144) for n in nodes],
            [dataclasses.replace(s, spec=spec) if i % 3 == 0 else s
             for i, s in enumerate(svcs)], tasks, facts, util)


def counted(a: ClusterAllocator) -> dict[str, tuple[object, ...]]:
    """Each GPU node's free share per GPU, CPU and memory left, and usage."""
    return {nid: (tuple(n.free), n.cpu_left, n.mem_left, a.alloc.usage(nid))
            for nid, n in a.alloc.nodes.items()}


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_kept_allocator_counts_after_every_policy_what_a_new_one_counts(seed: int
                                                                           ) -> None:
    """What consolidation's searches blocked and counted is taken back, and each move
    accepted after (defragmentation, fragmentation, spread) is counted on it: nothing
    left blocked for a later search."""
    ctx = Context.build(inputs(reserving(drawn(seed, 10)), "", 5.0))
    for policy in enabled(ctx.cfg):
        policy.propose(ctx)
    assert ctx.moves
    kept = ctx._shared
    assert kept is not None
    assert counted(kept) == counted(ctx.allocator(None, ()))


def test_a_consolidation_search_that_raises_leaves_the_later_policies_plans(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A search on the kept allocator that raises (its GPUs blocked, a statement's move
    counted) fails consolidation alone: the policies after it plan as without it."""
    inp = inputs(reserving(drawn(4, 10)), "", 5.0)
    others = ",".join(p for p in ALL.split(",") if p != "consolidation")
    without = plan_moves(dataclasses.replace(
        inp, cfg=dataclasses.replace(inp.cfg, policies=others)))
    kept: list[ClusterAllocator] = []
    real_kept, real_target = Context.shared_allocator, Context._target

    def keeping(self: Context, *a: Any) -> ClusterAllocator:
        kept.append(real_kept(self, *a))
        return kept[-1]

    def failing(self: Context, alloc: ClusterAllocator, *a: Any) -> Any:
        if len(kept) == 3 and alloc is kept[-1]:
            raise RuntimeError("search failed")
        return real_target(self, alloc, *a)

    monkeypatch.setattr(Context, "shared_allocator", keeping)
    monkeypatch.setattr(Context, "_target", failing)
    got = plan_moves(inp)
    assert "consolidation" in got.policy_errors
    assert got.moves == without.moves


def test_add_holder_orders_ties_as_reading_the_ledger_again() -> None:
    """Two nodes reporting one UUID: a service's equal shares of it listed in ledger
    order, the one just added last, as ``holders_by_gpu`` lists them."""
    ledger = {"a": {"n1": Holding("a", "n1", ("U",), (300,)),
                    "n2": Holding("a", "n2", ("U",), (300,))},
              "b": {"n1": Holding("b", "n1", ("U",), (300,))}}
    by_gpu = holders_by_gpu(ledger)
    ledger["a"]["n3"] = h = Holding("a", "n3", ("U",), (300,))
    add_holder(by_gpu, h)
    assert [(s.service, s.node_id) for s in by_gpu["U"]] == \
        [(s.service, s.node_id) for s in holders_by_gpu(ledger)["U"]] == \
        [("a", "n1"), ("a", "n2"), ("a", "n3"), ("b", "n1")]


EXPECTED_DRAWN = {1: (38, "cfe77b4d0757e0e5"), 2: (30, "72aac5aff21c2cb0"),
                  3: (33, "b976714c41be6df3")}
EXPECTED_DRAWN_1_FIRST = [
    ("s1-2-0", "n1", "n9", (3,), (300,)), ("s1-1-0", "n1", "n9", (5,), (400,)),
    ("s1-5-0", "n1", "n4", (1,), (400,)), ("s1-3-0", "n1", "n4", (7,), (400,)),
    ("s1-3-1", "n1", "n9", (7,), (200,)), ("s6-0-0", "n6", "n4", (3,), (300,))]
EXPECTED_DRAWN_ALL = {4: (33, "876476042d6e9e35"), 5: (43, "ba1b76c938c11d47")}
EXPECTED_BENCH = {"consolidation": (18, "1eff6481ceaf03cd"), "": (20, "bbba18c26a71d4b0")}
