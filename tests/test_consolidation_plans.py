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

import pytest
from support.counted import calls
from support.gpu_nodes import RTX4090
from support.rebalance import CFG, P, node, page, running, service

from swarmgpu.core.model import NodeFacts
from swarmgpu.core.rebalanceconfig import DEFAULT_POLICIES
from swarmgpu.manager.placement import read_ledger
from swarmgpu.manager.rebalance.context import Context, Inputs
from swarmgpu.manager.rebalance.moves import Proposal
from swarmgpu.manager.rebalance.planner import plan_moves
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


def proposal(snap: tuple[list[SwarmNode], list[SwarmService], list[SwarmTask],
                         dict[str, NodeFacts], Mapping[str, Mapping[int, float | None]]],
             policies: str, frag_pct: float, pending: tuple[str, ...] = ()) -> Proposal:
    """``plan_moves`` on the snapshot after 13 one-second scrapes (``policies`` empty:
    every policy)."""
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
    return plan_moves(Inputs(nodes, svcs, tasks, facts, ledger, sig.gpus, sig.nodes, cfg,
                             12.0, list(pending), P))


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


EXPECTED_DRAWN = {1: (38, "cfe77b4d0757e0e5"), 2: (30, "72aac5aff21c2cb0"),
                  3: (33, "b976714c41be6df3")}
EXPECTED_DRAWN_1_FIRST = [
    ("s1-2-0", "n1", "n9", (3,), (300,)), ("s1-1-0", "n1", "n9", (5,), (400,)),
    ("s1-5-0", "n1", "n4", (1,), (400,)), ("s1-3-0", "n1", "n4", (7,), (400,)),
    ("s1-3-1", "n1", "n9", (7,), (200,)), ("s6-0-0", "n6", "n4", (3,), (300,))]
EXPECTED_DRAWN_ALL = {4: (33, "876476042d6e9e35"), 5: (43, "ba1b76c938c11d47")}
EXPECTED_BENCH = {"consolidation": (18, "1eff6481ceaf03cd"), "": (20, "bbba18c26a71d4b0")}
