"""Which pods fail as the cluster fills, and when the whole nodes run out: what
``swarmgpu simulate`` fails by an arrived-load level, by shape and by the 5% band they
arrived in, beside the nodes with every GPU free at each level (docs/simulate.md,
"Which pods fail on x-cpubimodal").

    .venv/bin/python benchmarks/failed_at_full.py --pods derived.csv --seeds 44,47
    .venv/bin/python benchmarks/failed_at_full.py --trace default --from 80

The replays are the ones ``simulate --policy swarmgpu,fgd`` runs (swarmgpu's through
``sim.swarm_replay.Replay``, the daemon's planner; FGD's through ``sim.replay.replay``),
read at each level's record. Per seed and policy: the allocation at the level; the pods
failed by then, by (GPUs, GPU-milli of one, cores asked); the multi-GPU ones each with
the band it arrived in; and, from --from to the level, the nodes with every GPU free, by
GPUs per node (what a task asking all of a node needs). Figures, not assertions.
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from free_at_full import fgd_reading, level_inputs, level_parser  # noqa: E402

from swarmgpu.allocator.core import Allocator  # noqa: E402
from swarmgpu.allocator.values import Choice, NodeSpec  # noqa: E402
from swarmgpu.sim import replay as sim_replay  # noqa: E402
from swarmgpu.sim.runs import LEVEL_STEP, RunResult, pod_kind  # noqa: E402
from swarmgpu.sim.swarm_replay import Replay  # noqa: E402
from swarmgpu.sim.trace import TracePod  # noqa: E402

# (GPUs, GPU-milli of one, cores asked): a failed pod's shape
Shape = tuple[int, int, float]
# a failed pod and the level band it arrived in (the first level recorded after it)
Failed = tuple[TracePod, int]


def shape(p: TracePod) -> Shape:
    return (p.num_gpu, p.gpu_milli, round(p.cpu_milli / 1000, 1))


class EmptyFit:
    """Whether a pod fits the cluster with nothing placed (one that does not fails for
    every policy)."""

    def __init__(self, nodes: list[NodeSpec]) -> None:
        self.alloc = sim_replay.build_allocator(nodes, sim_replay.make_scorer("bestfit", ()),
                                                random.Random(0))
        self.seen: dict[TracePod, bool] = {}

    def __call__(self, p: TracePod) -> bool:
        got = self.seen.get(p)
        if got is None:
            got = self.seen[p] = isinstance(self.alloc.place(p.demand(), explain=False), Choice)
        return got


def whole_nodes(alloc: Allocator) -> Counter[int]:
    """GPUs per node -> nodes with every GPU free."""
    out: Counter[int] = Counter()
    for n in alloc.nodes.values():
        if n.free and sum(n.free) == n.capacity:
            out[len(n.free)] += 1
    return out


class _Reading(Replay):
    """swarmgpu's replay, read at every level, its failures with their band."""

    def __init__(self, nodes: list[NodeSpec], pods: list[TracePod], seed: int) -> None:
        super().__init__(nodes, pods, seed)
        self.whole: dict[int, Counter[int]] = {}
        self.failed_pods: list[Failed] = []
        self._band: list[int] = []  # positions failed since the last record
        plain = self.res.failed_one

        def failed_one(position: int) -> None:
            self._band.append(position)
            plain(position)

        self.res.failed_one = failed_one  # type: ignore[method-assign]

    def record(self, level: int) -> None:
        super().record(level)
        self.failed_pods += [(self.order[p - 1], level) for p in self._band]
        self._band.clear()
        self.whole[level] = whole_nodes(self.planner.cluster.alloc)


def fgd_failures(nodes: list[NodeSpec], pods: list[TracePod],
                 seed: int) -> tuple[RunResult, list[Failed], dict[int, Counter[int]]]:
    """FGD's replay (``simulate --policy fgd``), read at every level: its loop keeps the
    allocator to itself, so failures are read where it names their kind
    (``pod_kind``) and whole nodes where it records a level (``fgd_reading``)."""
    band: list[TracePod] = []
    failed: list[Failed] = []
    whole: dict[int, Counter[int]] = {}
    plain_kind = pod_kind  # the replay's own name for it is patched for the run

    def kind(p: TracePod) -> str:
        band.append(p)
        return plain_kind(p)

    def level_read(level: int, alloc: Allocator) -> None:
        failed.extend((p, level) for p in band)
        band.clear()
        whole[level] = whole_nodes(alloc)

    setattr(sim_replay, "pod_kind", kind)  # noqa: B010 (not exported, by mypy's reading)
    try:
        res = fgd_reading(nodes, pods, seed, level_read)
    finally:
        setattr(sim_replay, "pod_kind", plain_kind)  # noqa: B010
    return res, failed, whole


def report(name: str, seed: int, level: int, start: int, res: RunResult,
           failed: list[Failed], whole: dict[int, Counter[int]], fits: EmptyFit) -> None:
    by = [(p, lv) for p, lv in failed if lv <= level]
    never = Counter(shape(p) for p, _ in by if not fits(p))
    could = [(p, lv) for p, lv in by if fits(p)]
    print(f"seed {seed} {name} @{level}%: alloc {res.alloc_pct_at[level]:.3f}%, "
          f"failed by then {len(by)}, of which {sum(never.values())} fit no node even "
          "with nothing placed")
    print("    those, (GPUs, milli of one, cores): " + ", ".join(
        f"{s}: {v}" for s, v in sorted(never.items())))
    print("  the others, (GPUs, milli of one, cores): pods")
    shapes = Counter(shape(p) for p, _ in could)
    print("    " + ", ".join(f"{s}: {v}" for s, v in sorted(shapes.items())))
    print("  of them multi-GPU, (shape, arrived by %): " + ", ".join(
        f"({shape(p)}, {lv})" for p, lv in could if p.num_gpu >= 2))
    print("  nodes with every GPU free, by % arrived: {GPUs per node: nodes}")
    for lv in range(start, level + 1, LEVEL_STEP):
        w = whole.get(lv, Counter())
        print(f"    {lv:3d}: " + ", ".join(f"{g}: {v}" for g, v in sorted(w.items())))


def main() -> int:
    ap = level_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="start", type=int, default=75,
                    help="first level of the whole-node rows, %% (5 steps)")
    args = ap.parse_args()
    seeds, nodes, pods = level_inputs(ap, args, {"--level": args.level, "--from": args.start})
    fits = EmptyFit(nodes)
    for seed in seeds:
        rp = _Reading(nodes, pods, seed)
        rp.run()
        report("swarmgpu", seed, args.level, args.start, rp.res, rp.failed_pods, rp.whole,
               fits)
        res, failed, whole = fgd_failures(nodes, pods, seed)
        report("fgd", seed, args.level, args.start, res, failed, whole, fits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
