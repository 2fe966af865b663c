"""How long a ``topology`` preemptor's victim choice takes on one crowded 8-GPU node:
every victim set tried one by one (``support.reference_victims``, the code before stop
74) beside the walk that replaced it (``placement.victimsearch``), on the same run.

The worst case of ``placement.preempt``: a node holds 12 small victims (the most
``pick_victims`` weighs: ``MAX_CANDIDATES``), four on a whole GPU each and eight
sharing the other four GPUs in halves, and a pending request of priority 100 asks for
2 GPUs with ``topology: nvlink`` on the RTX 4090 capture, whose GPUs have no NVLink
between them. 3,583 of the 4,095 victim sets free 2 GPUs and none gives the request an
NVLink pair: tried one by one, each is counted and its freed GPUs tested against the
allocator (``Allocator.gpu_set``, once per set of GPUs freed), and nobody is stopped;
the walk sees at its first step that no two GPUs of the node go together as it asks
(``preempt._GpuSets.may``) and tries none. Beside it: the same node with a plain 2-GPU
request (no topology, the allocator never asked), topology requests no set serves
(``numa`` for 5 GPUs on the 4090, more than its NUMA nodes hold; ``numa`` for 4 GPUs on
the DGX A100 capture, whose NUMA nodes hold 2 GPUs each), and ones served by 2, 5 and 8
victims (``halves``: 16 holders, two halves on each GPU); last, ``pick_victims`` alone
where nothing bounds the walk (12 holders of one GPU each, a test that refuses every
set: all 4,095 sets tried either way).

Timed: ``choose_preemptions`` alone (the plan is made once before), the fastest of
``--repeat`` runs, in ms per node (the choice is made per node: a cluster of N such
nodes takes N times as long for each pending topology preemptor), with how often each
asked the allocator for a GPU set; the two must choose the same victims (else it
stops). Stop 71: asked once per victim set, the worst case took 785 ms a node and 3,583
asks; once per set of GPUs freed, 72 ms and 247 asks. Stop 74, on the 2-core machine
with other runs on it (load 11: the figures swing twofold run to run), every set vs the
walk, one run: the worst case 110 ms vs 0.3 ms (247 asks vs none), numa 5 on the 4090
47 vs 0.3, numa 4 on the DGX 28 vs 0.3, halves nvlink 4 on the DGX 25 vs 1.0, numa 2 on
the 4090 0.9 vs 0.7, the plain request 0.3 both; nothing bounding the walk, 19 vs 16 ms
(all 4,095 sets tried either way). Stop 75, where CPU alone refuses sets (plain 2
GPUs, holders reserving 5,000 CPU milli each, 4,000 left; ``CPU_CASES``), the walk as
before vs bounded by what more victims only free (``preemptview.victims_fit``), one run
at load 5: none frees 70,000, 42 vs 0.4 ms (3,589 ``Room.fits`` asks vs none); 4
victims free 20,000, 1.5 vs 1.5 (83 vs 3 asks); one holder frees it, 0.4 vs 0.5.
Stop 76, where a host-mode port alone refuses sets (plain 2 GPUs, "high" publishing
port 8000 that a holder's task binds on the node; ``PORT_CASES``): every set, the walk
unbounded by the port, bounded (``victims_fit``'s ``must``), one run at load 5, with
the sets ``allowed`` was asked of: the binder not preemptible (no set frees the
port), 8.0, 7.2 vs 0.4 ms (1,616, 1,619 vs no asks); b7 binds it (3 victims), 0.8,
1.4 vs 1.2 (74, 103 vs 6); w3 binds it (2 victims), 0.4 all three (6, 3 vs 1).

    python benchmarks/bench_preempt_topology.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO)]

from loguru import logger  # noqa: E402
from support.crowded_node import Held, chooser, halves, twelve_small  # noqa: E402
from support.forged import DGX_F, R4090_F  # noqa: E402
from support.reference_victims import every_set  # noqa: E402

from swarmgpu.allocator.core import Allocator  # noqa: E402
from swarmgpu.allocator.values import Demand, NodeState  # noqa: E402
from swarmgpu.core.model import NodeFacts  # noqa: E402
from swarmgpu.manager.placement import preempt, preemptview  # noqa: E402
from swarmgpu.manager.placement.preempt import Candidate  # noqa: E402
from swarmgpu.manager.placement.preemptroom import Room  # noqa: E402


def case(facts: NodeFacts, held: Held, gpus: int, topology: str, repeat: int,
         cpu: Mapping[str, int] | None = None,
         port: AbstractSet[str] = frozenset()) -> tuple[float, list[list[str]]]:
    """(the fastest ``choose_preemptions`` in seconds, the victims it chose)."""
    choose = chooser(facts, held, gpus, topology, cpu, port)
    best, got = float("inf"), []
    for _ in range(repeat):
        t = time.perf_counter()
        out = choose()
        best = min(best, time.perf_counter() - t)
        got = [sorted(v.service for v in p.victims) for p in out]
    return best, got


def asks(facts: NodeFacts, held: Held, gpus: int, topology: str) -> int:
    """How often one choice asks the allocator for a GPU set."""
    choose, real, n = chooser(facts, held, gpus, topology), Allocator.gpu_set, [0]

    def counted(self: Allocator, node: NodeState, d: Demand) -> tuple[int, ...] | None:
        n[0] += 1
        return real(self, node, d)

    Allocator.gpu_set = counted  # type: ignore[method-assign]
    try:
        choose()
    finally:
        Allocator.gpu_set = real  # type: ignore[method-assign]
    return n[0]


def unbounded(repeat: int) -> tuple[float, float]:
    """``pick_victims`` where nothing bounds the walk: 12 holders of one GPU each, a test
    that refuses every set. (The fastest of ``repeat`` runs, every set tried and the
    walk, in seconds.)"""
    cands = [Candidate(f"c{i:02d}", f"id{i}", "n", i % 3, "", (f"g{i}",)) for i in range(12)]
    holders = {c.uuids[0]: {c.service} for c in cands}
    times = []
    for pick in (every_set, preempt.pick_victims):
        best = float("inf")
        for _ in range(repeat):
            t = time.perf_counter()
            if pick(1, set(), cands, holders, lambda _c: False) is not None:
                raise SystemExit("a refused set was chosen")
            best = min(best, time.perf_counter() - t)
        times.append(best)
    return times[0], times[1]


CASES = (
    ("plain 2 GPUs, RTX 4090", R4090_F, twelve_small, 2, ""),
    ("worst: nvlink 2 GPUs, RTX 4090 (no NVLink)", R4090_F, twelve_small, 2, "nvlink"),
    ("numa 5 GPUs, RTX 4090 (4 per NUMA node)", R4090_F, twelve_small, 5, "numa"),
    ("numa 4 GPUs, DGX A100 (2 per NUMA node)", DGX_F, twelve_small, 4, "numa"),
    ("numa 2 GPUs, RTX 4090", R4090_F, twelve_small, 2, "numa"),
    ("nvlink 2 GPUs, DGX A100", DGX_F, twelve_small, 2, "nvlink"),
    ("nvlink 4 GPUs, DGX A100 (5 victims)", DGX_F, twelve_small, 4, "nvlink"),
    ("halves: nvlink 4 GPUs, DGX A100 (8 victims)", DGX_F, halves, 4, "nvlink"),
    ("halves: numa 4 GPUs, RTX 4090 (8 victims)", R4090_F, halves, 4, "numa"),
)


def short_of_cpu(want: int, own: Mapping[str, int] | None = None,
                 ) -> Callable[[], dict[str, int]]:
    """twelve_small's holders reserving 5,000 CPU milli each (``own``: some otherwise) on
    the 64,000 node, "high" reserving ``want``."""
    def cpu() -> dict[str, int]:
        return {**{name: 5000 for name in twelve_small()}, **(own or {}), "high": want}
    return cpu


# CPU alone refuses victim sets (no topology): the walk before stop 75 vs the walk
# bounded by what more victims only free (``preemptview.victims_fit``), same run
CPU_CASES = (
    ("cpu: no set frees 70,000 (4,000 left)", short_of_cpu(70_000)),
    ("cpu: 4 victims free 20,000 (4,000 left)", short_of_cpu(20_000)),
    ("cpu: w3 frees 40,000 alone (23,000 left)",
     short_of_cpu(40_000, {**{n: 1000 for n in twelve_small()}, "w3": 30_000})),
)


def every_walk_bounded(name: str, run: Callable[[], tuple[float, Any, int]]) -> None:
    """``run`` (its time, its victims, its asks) under every set, the walk unbounded
    (``victims_fit`` giving None) and bounded: the row printed, once all three chose the
    same victims."""
    real_pick, real_fit = preempt.pick_victims, preemptview.victims_fit
    row, chosen, counts = [], [], []
    for pick, fit in ((every_set, real_fit), (real_pick, lambda *_a: None),
                      (real_pick, real_fit)):
        # preempt calls the name it imported: the one replaced (not exported, by mypy's
        # reading, hence setattr)
        preempt.pick_victims = pick
        setattr(preempt, "victims_fit", fit)  # noqa: B010
        try:
            t, got, k = run()
        finally:
            preempt.pick_victims = real_pick
            setattr(preempt, "victims_fit", real_fit)  # noqa: B010
        row.append(t)
        chosen.append(got)
        counts.append(k)
    if chosen[1:] != chosen[:1] * 2:
        raise SystemExit(f"{name}: every set, walk, bounded chose {chosen}")
    print(f"{name:<44} {row[0] * 1000:9.1f} {row[1] * 1000:7.1f} {row[2] * 1000:7.1f} "
          f"{'/'.join(map(str, counts)):>16}  {chosen[0] or 'none'}")


def bound_off_vs_on(repeat: int) -> None:
    """``CPU_CASES`` on the RTX 4090, plain 2 GPUs: every set, the walk unbounded by CPU
    (``victims_fit`` giving None, as before stop 75) and bounded, with ``Room.fits``
    asks; all three must choose the same victims."""
    print(f"\n{'CPU alone refuses (plain 2 GPUs, RTX 4090)':<44} {'every set':>9} "
          f"{'walk':>7} {'bounded':>7} {'fits asks':>16}  victims")
    real_fits = Room.fits
    n = [0]

    def counted(self: Room, *a: Any, **kw: Any) -> bool:
        n[0] += 1
        return real_fits(self, *a, **kw)

    for name, cpu in CPU_CASES:
        def run(cpu: Callable[[], Any] = cpu) -> tuple[float, Any, int]:
            t, got = case(R4090_F, twelve_small(), 2, "", repeat, cpu())
            Room.fits, n[0] = counted, 0  # type: ignore[method-assign]
            try:
                chooser(R4090_F, twelve_small(), 2, "", cpu())()
            finally:
                Room.fits = real_fits  # type: ignore[method-assign]
            return t, got, n[0]
        every_walk_bounded(name, run)


def not_preemptible(name: str) -> Held:
    """twelve_small with ``name`` not preemptible (no candidate: its port never frees)."""
    held = twelve_small()
    return {**held, name: (held[name][0], held[name][1], -1)}


# A host-mode port alone refuses victim sets (plain 2 GPUs; "high" publishes port 8000,
# which the holders named bind on the node): every set vs the walk unbounded by the
# port and bounded (``victims_fit``'s ``must``: its binders, all victims then)
PORT_CASES: tuple[tuple[str, Callable[[], Held], frozenset[str]], ...] = (
    ("port: w3 binds it, not preemptible (no set)", lambda: not_preemptible("w3"),
     frozenset({"w3"})),
    ("port: b7 binds it (3 victims)", twelve_small, frozenset({"b7"})),
    ("port: w3 binds it (2 victims)", twelve_small, frozenset({"w3"})),
)


@contextmanager
def allowed_asks() -> Iterator[list[int]]:
    """How often ``pick_victims``' ``allowed`` is asked of a victim set, meanwhile."""
    real, n = preempt._allowed, [0]

    def counting(*a: Any, **kw: Any) -> Callable[[tuple[Candidate, ...]], bool]:
        test = real(*a, **kw)

        def counted(combo: tuple[Candidate, ...]) -> bool:
            n[0] += 1
            return test(combo)
        return counted

    preempt._allowed = counting
    try:
        yield n
    finally:
        preempt._allowed = real


def ports_off_vs_on(repeat: int) -> None:
    """``PORT_CASES`` on the RTX 4090, plain 2 GPUs: every set, the walk unbounded by the
    port (``victims_fit`` giving None) and bounded, with the victim
    sets ``allowed`` was asked of; all three must choose the same victims."""
    print(f"\n{'A host port alone refuses (plain 2 GPUs)':<44} {'every set':>9} "
          f"{'walk':>7} {'bounded':>7} {'allowed asks':>16}  victims")
    for name, layout, port in PORT_CASES:
        def run(layout: Callable[[], Held] = layout,
                port: frozenset[str] = port) -> tuple[float, Any, int]:
            t, got = case(R4090_F, layout(), 2, "", repeat, port=port)
            with allowed_asks() as n:
                chooser(R4090_F, layout(), 2, "", port=port)()
            return t, got, n[0]
        every_walk_bounded(name, run)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per case; the fastest counts")
    args = ap.parse_args()
    logger.remove()  # the planner's log lines would drown the figures
    print(f"{'case':<44} {'every set':>9} {'walk':>7} {'asks':>10}  victims")
    print(f"{'':<44} {'ms/node':>9} {'ms/node':>7} {'set/walk':>10}")
    real = preempt.pick_victims
    for name, facts, layout, gpus, topo in CASES:
        preempt.pick_victims = every_set
        try:
            ref, ref_victims = case(facts, layout(), gpus, topo, args.repeat)
            ref_asks = asks(facts, layout(), gpus, topo)
        finally:
            preempt.pick_victims = real
        s, victims = case(facts, layout(), gpus, topo, args.repeat)
        if victims != ref_victims:
            raise SystemExit(f"{name}: the walk chose {victims}, every set {ref_victims}")
        print(f"{name:<44} {ref * 1000:9.1f} {s * 1000:7.1f} "
              f"{f'{ref_asks}/{asks(facts, layout(), gpus, topo)}':>10}  {victims or 'none'}")
    ref, walk = unbounded(args.repeat)
    print(f"{'pick_victims alone, every set refused':<44} {ref * 1000:9.1f} {walk * 1000:7.1f}")
    bound_off_vs_on(args.repeat)
    ports_off_vs_on(args.repeat)


if __name__ == "__main__":
    main()
