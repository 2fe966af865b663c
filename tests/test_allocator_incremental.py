"""The allocator's incremental decision (scores kept per demand and group state, only new
states scored, the best read from score buckets) chooses what a scan of every node
would: the highest score, then the lowest rank."""

from __future__ import annotations

import math
import random

import pytest

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.fragmentation import TaskShape, typical_tasks
from swarmgpu.allocator.scorer import SwarmScorer
from swarmgpu.allocator.values import Choice, Demand, GpuSpec, NodeSpec, Unplaceable

PRODUCTS = ("NVIDIA A100-SXM4-40GB", "Tesla T4", "NVIDIA V100")
SHAPES = [TaskShape(4000, 500, 1), TaskShape(8000, 1000, 1), TaskShape(2000, 250, 1),
          TaskShape(16000, 1000, 2), TaskShape(1000, 0, 0), TaskShape(6000, 1000, 1, ("T4",))]


def _scan(a: Allocator, d: Demand) -> tuple[str, float] | None:
    """The reference: every node that fits, scored; the highest score, then lowest rank."""
    best: tuple[float, int, str] | None = None
    for node in a.nodes.values():
        if not a.fits(node, d):
            continue
        s = a.scorer.score(node, d)
        if s != s or s == -math.inf:
            continue
        if best is None or s > best[0] or (s == best[0] and node.rank < best[1]):
            best = (s, node.rank, node.spec.name)
    return None if best is None else (best[2], best[0])


def _demand(rng: random.Random) -> Demand:
    cpu = rng.choice((0, 1000, 4000, 8000))
    mem = rng.choice((0, 1024, 4096))
    products = rng.choice(((), (), ("*T4*",), ("*A100*",)))
    if rng.random() < 0.5:
        return Demand(gpu_milli=rng.choice((250, 500, 700)), cpu_milli=cpu, memory_mib=mem,
                      products=products)
    return Demand(num_gpu=rng.choice((0, 1, 1, 2, 4)), cpu_milli=cpu, memory_mib=mem,
                  products=products)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("learned", [True, False])
def test_incremental_decisions_match_a_scan_of_every_node(seed: int, learned: bool) -> None:
    rng = random.Random(seed)
    workload = typical_tasks(SHAPES) if learned else ()
    a = Allocator(SwarmScorer(workload))
    ranks = list(range(40))
    rng.shuffle(ranks)
    for i, rank in enumerate(ranks):  # few shapes: many nodes share a group state
        n = rng.choice((1, 2, 4, 8))
        product = PRODUCTS[i % len(PRODUCTS)]
        a.add_node(NodeSpec(f"n{i:02d}", tuple(GpuSpec(g, product, 16384) for g in range(n)),
                            cpu_milli=rng.choice((32000, 64000)), memory_mib=262144),
                   rank=rank)
    shapes = list(SHAPES)
    held: list[Choice] = []
    for step in range(600):
        d = _demand(rng)
        want = _scan(a, d)
        got = a.place(d, explain=False)
        if want is None:
            assert isinstance(got, Unplaceable), (step, d, got)
        else:
            assert isinstance(got, Choice), (step, d, got)
            assert (got.node, got.score) == want, (step, d)
        roll = rng.random()
        if isinstance(got, Choice) and roll < 0.6:
            a.commit(got)
            held.append(got)
        elif held and roll < 0.85:  # releases bring states back (scored before)
            a.release(held.pop(rng.randrange(len(held))))
        elif roll < 0.92:
            name = rng.choice(sorted(a.nodes))
            a.set_blocked(name, not a.nodes[name].blocked)
        elif roll < 0.97:
            name = rng.choice(sorted(a.nodes))
            a.set_usage(name, rng.choice((0, 2000, 30000)), rng.choice((0, 1024)))
        elif learned:  # a new workload drops the scores, not what cannot fit
            rng.shuffle(shapes)
            a.set_workload(typical_tasks(shapes[:4]))


def test_a_group_keeps_its_lowest_rank_node_as_members_leave() -> None:
    a = Allocator()
    for rank in (5, 3, 9, 1, 7):
        a.add_node(NodeSpec(f"r{rank}", (GpuSpec(0, "T4", 16384),)), rank=rank)
    d = Demand(num_gpu=1)
    for want in ("r1", "r3", "r5", "r7", "r9"):
        got = a.place(d)
        assert isinstance(got, Choice) and got.node == want
        a.commit(got)  # it leaves the group of free nodes
    assert isinstance(a.place(d), Unplaceable)
