"""``victimsearch``: the victims its pruned walk chooses are those every set tried one by
one chooses (``support.reference_victims``), on generated crowded nodes (seeded, with
ties of priority, start and queue distance; shared GPUs, holders that are no candidates,
more candidates than are weighed; CPU, memory and a host port that refuse sets too, the
walk bounded by them: ``Lack``), and the topology bound it prunes by (``may``) never
refuses a set the allocator gives; a node whose CPU no victim set frees is not walked.
Pure."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from itertools import combinations

import pytest
from support.counted import calls
from support.crowded_node import Held, chooser, twelve_small, victims
from support.forged import DGX_F, R4090_F, sw_node
from support.reference_victims import every_set

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.values import Demand, NodeState
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement import preempt
from swarmgpu.manager.placement.preempt import Candidate, pick_victims
from swarmgpu.manager.placement.preemptroom import Room
from swarmgpu.manager.placement.specs import node_spec
from swarmgpu.manager.placement.victimsearch import Lack, together_of

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


RoomCase = tuple[int, set[str], list[Candidate], dict[str, set[str]],
                 Callable[[tuple[Candidate, ...]], bool], dict[str, tuple[float, float]],
                 Callable[[frozenset[str]], bool] | None, Lack]


def _room_case(seed: int) -> RoomCase:
    """``_case``'s node where the CPU and memory its preemptor reserves and a host port it
    publishes refuse sets too (``allowed`` asks them besides its own test): each
    candidate's CPU and memory (ties, many of none), what the node lacks of each (often
    nothing, or more than all of them free), the candidates binding the port (often
    none; one a non-candidate at times). ``Lack``: those, what more victims only give."""
    need, free, cands, holders, base, over, may = _case(seed)
    rnd = random.Random(f"room{seed}")
    cpu = {c.service: rnd.choice((0, 0, 1, 2, 4)) for c in cands}
    mem = {c.service: rnd.choice((0, 0, 1, 3)) for c in cands}
    short = (rnd.choice((0, 0, 1, 3, 6, 99)), rnd.choice((0, 0, 2, 5)))
    port = frozenset(rnd.sample(sorted(cpu), min(len(cpu), rnd.randint(1, 2)))) \
        if rnd.random() < 0.3 else frozenset()
    if rnd.random() < 0.05:
        port |= {"other"}

    def fits(combo: tuple[Candidate, ...]) -> bool:
        names = {c.service for c in combo}
        return (sum(cpu[c.service] for c in combo) >= short[0]
                and sum(mem[c.service] for c in combo) >= short[1] and port <= names)

    def allowed(combo: tuple[Candidate, ...]) -> bool:
        return fits(combo) and (base is None or base(combo))

    lack = Lack(short, lambda name: (cpu.get(name, 0), mem.get(name, 0)), port)
    return need, free, cands, holders, allowed, over, may, lack


@pytest.mark.parametrize("block", range(6))
def test_the_walk_bounded_by_cpu_memory_and_ports_chooses_as_every_set_tried_does(
    block: int,
) -> None:
    """600 generated nodes (100 a block) whose CPU, memory or a host port refuse sets
    too, the walk told so (``Lack``): the same victims, or None alike."""
    for seed in range(block * 100, block * 100 + 100):
        need, free, cands, holders, allowed, over, may, lack = _room_case(seed)
        want = every_set(need, free, cands, holders, allowed, over)
        assert pick_victims(need, free, cands, holders, allowed, over, may, lack) == want, seed


def test_a_crowded_node_whose_cpu_no_victim_set_frees_is_not_walked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """12 small holders reserving 5,000 CPU milli each on a 64,000 node (4,000 left), a
    preemptor of 2 GPUs reserving 70,000: no victim set leaves it room. Every set was
    tried, ``Room.fits`` asked for each of the 3,583 that free 2 GPUs; now the walk sees
    at its first step that even all 12 free too little. Nobody is stopped either way."""
    cpu = {**{name: 5000 for name in twelve_small()}, "high": 70_000}
    choose = chooser(R4090_F, twelve_small(), 2, "", cpu)
    asked = calls(monkeypatch, Room, "fits")
    assert choose() == []
    assert len(asked) <= 5, len(asked)


@pytest.mark.parametrize("seed", range(4))
def test_a_preemptor_short_of_cpu_stops_whom_every_set_tried_stops(
    monkeypatch: pytest.MonkeyPatch, seed: int,
) -> None:
    """Crowded nodes whose holders reserve CPU (none to 9,000 milli, ties) and whose
    preemptor reserves more than is left (all of it at most, or more than all victims
    free): plain, nvlink and numa requests stop those the sets tried one by one stop."""
    rnd = random.Random(seed)
    asks = []
    for _ in range(6):
        held = _layout(rnd)
        cpu = {name: rnd.choice((0, 1000, 4000, 9000)) for name in held}
        cpu["high"] = 64_000 - sum(cpu.values()) + rnd.choice((1, 5000, 20_000, 90_000))
        f, topo = rnd.choice(((DGX_F, "nvlink"), (DGX_F, ""), (R4090_F, "numa")))
        asks.append((f, rnd.randint(1, 4), topo, held, cpu))
    got = [victims(f, held, gpus, topo, cpu) for f, gpus, topo, held, cpu in asks]
    monkeypatch.setattr(preempt, "pick_victims", every_set)
    assert got == [victims(f, held, gpus, topo, cpu) for f, gpus, topo, held, cpu in asks]
    assert any(got), "no case stops anyone"


def _wide_room_case(seed: int) -> RoomCase:
    """``_room_case`` with wider values: what a victim frees below 0 (a reservation read
    so; the walk counts it as none), beyond all the others together, three resources
    where ``Room`` has two, the port's holders any of up to 16 candidates (those ranked
    past ``MAX_CANDIDATES`` too), ``allowed`` counting each as given (no bound of 0)."""
    need, free, cands, holders, base, over, may = _case(seed)
    rnd = random.Random(f"wide{seed}")
    k = rnd.choice((1, 2, 3))
    gives = {c.service: tuple(rnd.choice((0, 0, 1, 2, 7, -1, -5, 10**9)) for _ in range(k))
             for c in cands}
    short = tuple(rnd.choice((0, 0, 1, 4, 9, 10**9)) for _ in range(k))
    port = frozenset(rnd.sample(sorted(gives), min(len(gives), rnd.randint(0, 3))))

    def allowed(combo: tuple[Candidate, ...]) -> bool:
        got = [sum(gives[c.service][j] for c in combo) for j in range(k)]
        return all(g >= s for g, s in zip(got, short, strict=True)) \
            and port <= {c.service for c in combo} and (base is None or base(combo))

    lack = Lack(short, lambda name: gives.get(name, (0,) * k), port)
    return need, free, cands, holders, allowed, over, may, lack


def test_the_walk_bounded_by_wider_values_chooses_as_every_set_tried_does() -> None:
    """400 generated nodes whose victims free less than nothing, more than all others,
    or one of three resources, and whose port holders may be ranked out: the bound
    (``Lack``) never refuses a set ``allowed`` takes: the same victims, or None alike."""
    for seed in range(400):
        need, free, cands, holders, allowed, over, may, lack = _wide_room_case(seed)
        want = every_set(need, free, cands, holders, allowed, over)
        assert pick_victims(need, free, cands, holders, allowed, over, may, lack) == want, seed


@pytest.mark.parametrize(("binder", "preemptible", "want"), [
    ("w3", False, []), ("b7", True, [["a7", "b7", "w0"]]), ("w3", True, [["w0", "w3"]]),
])
def test_a_crowded_node_whose_host_port_alone_refuses_stops_its_binder(
    monkeypatch: pytest.MonkeyPatch, binder: str, preemptible: bool, want: list[list[str]],
) -> None:
    """12 small holders, one binding the host port a preemptor of 2 GPUs publishes (the
    planner's port takers handed on): the walk stops the binder with the fewest others,
    as every set tried one by one does; a binder not preemptible frees no set, and the
    walk sees so at once (tried one by one, 1,616 sets were each asked of)."""
    held = twelve_small()
    if not preemptible:
        held[binder] = (held[binder][0], held[binder][1], -1)
    port = frozenset({binder})
    assert victims(R4090_F, held, 2, "", port=port) == want
    monkeypatch.setattr(preempt, "pick_victims", every_set)
    assert victims(R4090_F, held, 2, "", port=port) == want
    monkeypatch.undo()
    choose = chooser(R4090_F, held, 2, "", port=port)
    asked = calls(monkeypatch, Room, "fits")
    choose()
    assert preemptible or len(asked) <= 5, len(asked)
