"""``victimsearch``: the victims its pruned walk chooses are those every set tried one by
one chooses (``support.reference_victims``), on generated crowded nodes (seeded, with
ties of priority, start and queue distance; shared GPUs, holders that are no candidates,
more candidates than are weighed), and the topology bound it prunes by (``may``) never
refuses a set the allocator gives. Pure."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from itertools import combinations

import pytest
from support.crowded_node import Held, victims
from support.forged import DGX_F, R4090_F, sw_node
from support.reference_victims import every_set

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.values import Demand, NodeState
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement import preempt
from swarmgpu.manager.placement.preempt import Candidate, pick_victims
from swarmgpu.manager.placement.specs import node_spec
from swarmgpu.manager.placement.victimsearch import together_of

Case = tuple[int, set[str], list[Candidate], dict[str, set[str]],
             Callable[[tuple[Candidate, ...]], bool] | None, dict[str, tuple[float, float]],
             Callable[[frozenset[str]], bool] | None]


def _case(seed: int) -> Case:
    """A crowded node: up to 16 candidates on up to 12 GPUs, few distinct priorities,
    starts and queue distances (ties), an ``allowed`` that takes a set by a hash of its
    names where the GPUs it frees hold a target set (``may``: that target test)."""
    rnd = random.Random(seed)
    gpus = [f"g{i}" for i in range(rnd.randint(3, 12))]
    free = {g for g in gpus if rnd.random() < 0.15}
    held = [g for g in gpus if g not in free] or gpus[:1]
    free -= set(held)
    cands = []
    for i in range(rnd.randint(1, 16)):
        mine = tuple(sorted(rnd.sample(held, min(len(held), rnd.choice((1, 1, 1, 2, 3))))))
        quota = rnd.choice((None, None, "qa", "qb"))
        cands.append(Candidate(f"c{i:02d}", f"id{i}", "n", rnd.choice((0, 0, 1, 3)),
                               rnd.choice(("", "t1", "t2")), mine, quota=quota))
    holders: dict[str, set[str]] = {}
    for c in cands:
        for u in c.uuids:
            holders.setdefault(u, set()).add(c.service)
    for g in held:  # one that is no candidate keeps its GPU held
        if rnd.random() < 0.1:
            holders.setdefault(g, set()).add("other")
    over = {q: (rnd.choice((0.0, 0.5)), rnd.choice((0.0, 1.0))) for q in ("qa", "qb")}
    targets = [frozenset(rnd.sample(gpus, rnd.randint(1, min(3, len(gpus)))))
               for _ in range(rnd.randint(0, 6))]
    may = None if rnd.random() < 0.3 else (
        lambda got: any(t <= got | free for t in targets))
    share = rnd.choice((0.3, 0.7, 1.0))

    def allowed(combo: tuple[Candidate, ...]) -> bool:
        names = {c.service for c in combo}
        got = frozenset(u for c in combo for u in c.uuids if holders[u] <= names)
        h = zlib.crc32(f"{seed}:{sorted(names)}".encode()) % 1000
        return (may is None or may(got)) and h < share * 1000

    need = rnd.randint(1, len(gpus))
    if rnd.random() < 0.1:  # any set that frees enough (``may`` speaks for ``allowed``)
        return need, free, cands, holders, None, over, None
    return need, free, cands, holders, allowed, over, may


@pytest.mark.parametrize("block", range(6))
def test_the_walk_chooses_as_every_set_tried_does(block: int) -> None:
    """600 generated nodes (100 a block): the same victims, or None alike."""
    for seed in range(block * 100, block * 100 + 100):
        need, free, cands, holders, allowed, over, may = _case(seed)
        want = every_set(need, free, cands, holders, allowed, over)
        assert pick_victims(need, free, cands, holders, allowed, over, may) == want, seed


@pytest.mark.parametrize("facts", [DGX_F, R4090_F], ids=["dgx", "4090"])
def test_the_topology_bound_never_refuses_a_set_the_allocator_gives(facts: NodeFacts) -> None:
    """Every set of the node's GPUs free, every nvlink and numa request of 1 to 5 GPUs:
    where the allocator gives a set, ``together_of`` (what ``_GpuSets.may`` asks) says
    there is one (a bound that refused it would skip victims that serve)."""
    spec = node_spec(sw_node("n", "gpu-node-1"), facts)
    n, alloc = len(facts.gpus), Allocator()
    for topo in ("nvlink", "numa"):
        for want in range(1, 6):
            d = Demand(num_gpu=want, topology=topo)
            ok = Allocator._allowed_pair(NodeState(spec, 0), d)
            for size in range(n + 1):
                for can in combinations(range(n), size):
                    state = NodeState(spec, 0)
                    state.free = [m if i in can else 0 for i, m in enumerate(state.free)]
                    if alloc.gpu_set(state, d):
                        assert together_of(list(can), want, ok), (topo, want, can)


def _layout(rnd: random.Random) -> Held:
    """An 8-GPU node's holders: per GPU one whole, two halves or one half (none free
    whole: where a set is free, nobody is stopped); priority 0, 1 or 5 (ties), or not
    preemptible."""
    held: dict[str, tuple[tuple[int, ...], int, int]] = {}
    for i in range(8):
        for part in rnd.choice(((1000,), (500, 500), (500,), (1000,))):
            held[f"h{len(held):02d}"] = ((i,), part, rnd.choice((0, 0, 1, 1, 5, -1)))
    return held


@pytest.mark.parametrize("block", range(3))
def test_a_topology_preemptor_stops_whom_every_set_tried_stops(
    monkeypatch: pytest.MonkeyPatch, block: int,
) -> None:
    """Generated crowded nodes, the real planner and ``choose_preemptions``: nvlink and
    numa preemptors of 2 to 4 GPUs (a topology asks 2 or more) on the DGX A100, numa ones
    on the RTX 4090 (no NVLink), stop those the sets tried one by one stop (17 of the 24
    stop someone)."""
    rnd = random.Random(block)
    asks = [(f, rnd.randint(2, 4), topo, _layout(rnd)) for _ in range(8)
            for f, topo in [rnd.choice(((DGX_F, "nvlink"), (DGX_F, "numa"), (R4090_F, "numa")))]]
    got = [victims(f, held, gpus, topo) for f, gpus, topo, held in asks]
    monkeypatch.setattr(preempt, "pick_victims", every_set)
    assert got == [victims(f, held, gpus, topo) for f, gpus, topo, held in asks]
