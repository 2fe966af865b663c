"""Which pods fail as the cluster fills, and when the whole nodes run out: what
``swarmgpu simulate`` fails by an arrived-load level, by shape and by the 5% band they
arrived in, beside the nodes with every GPU free at each level (docs/simulate.md,
"Which pods fail on x-cpubimodal").

    .venv/bin/python benchmarks/failed_at_full.py --pods derived.csv --seeds 44,47
    .venv/bin/python benchmarks/failed_at_full.py --trace default --from 80
    .venv/bin/python benchmarks/failed_at_full.py --pods derived.csv --rebalance-moves 2 \
        --breakers G3
    .venv/bin/python benchmarks/failed_at_full.py --pods derived.csv --from 40 --by-class
    .venv/bin/python benchmarks/failed_at_full.py --pods derived.csv --rebalance-moves 2 \
        --rescues
    .venv/bin/python benchmarks/failed_at_full.py --trace cpu050 --cpu-pods swarm

The replays are the ones ``simulate --policy swarmgpu,fgd`` runs (swarmgpu's through
``sim.swarm_replay.Replay``, the daemon's planner; FGD's through ``sim.replay.replay``),
read at each level's record. Per seed and policy: the allocation at the level; the pods
failed by then, by (GPUs, GPU-milli of one, cores asked); the multi-GPU ones each with
the band it arrived in; and, from --from to the level, the nodes with every GPU free, by
GPUs per node (what a task asking all of a node needs). ``--rebalance-moves N``: both
replays move as ``simulate --rebalance-moves N`` has them, and with ``--cpu-pods swarm``
both place the CPU-only pods by the model of Swarm's scheduler. ``--by-class``: from --from to
the level, per node class (GPU model, GPUs, cores) the nodes untouched and the share of
its GPU and CPU in use, each policy beside the other. ``--breakers MODEL``: what took
the untouched nodes of a GPU model (every GPU free, all the CPU left: what a task asking
a whole node of that model needs), by the band it arrived in, and how many were left;
swarmgpu's read after each arrival and each round of moves, FGD's at each commit (its
rescues count as placements of the tasks they move). ``--rescues`` (with moves): every
pod swarmgpu's ``defrag`` rescuer searched and gave no room, by shape, with the fewest
moves any plan would need (``allocator.rescue.plans`` searched to ``DEEP`` moves, as
arithmetic) and the nodes that could host it empty: whether a longer rescue could have
placed it. Figures, not assertions.
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from free_at_full import fgd_reading, level_inputs, level_parser, moved  # noqa: E402

from swarmgpu.allocator.core import Allocator  # noqa: E402
from swarmgpu.allocator.rescue import plans  # noqa: E402
from swarmgpu.allocator.scorer import Scorer  # noqa: E402
from swarmgpu.allocator.values import Choice, Demand, NodeSpec, NodeState  # noqa: E402
from swarmgpu.manager.placement import Planner  # noqa: E402
from swarmgpu.sim import replay as sim_replay  # noqa: E402
from swarmgpu.sim.rebalance import Hopeless  # noqa: E402
from swarmgpu.sim.runs import LEVEL_STEP, RunResult, pod_kind  # noqa: E402
from swarmgpu.sim.swarm_replay import FragmentationMover, Replay  # noqa: E402
from swarmgpu.sim.swarm_rescue import PlannerRescuer, gpu_tasks  # noqa: E402
from swarmgpu.sim.swarm_sched import SwarmScheduler  # noqa: E402
from swarmgpu.sim.trace import TracePod  # noqa: E402

# (GPUs, GPU-milli of one, cores asked): a failed pod's shape
Shape = tuple[int, int, float]
# a failed pod and the level band it arrived in (the first level recorded after it)
Failed = tuple[TracePod, int]
# what took an untouched node (a shape, or "moves"), its band, the untouched nodes left
Break = tuple[str, int, int]
# a node class: (GPU model, GPUs, cores)
NodeClass = tuple[str, int, int]
# per class: nodes, untouched nodes, GPU-milli used, GPU-milli, CPU milli used, CPU milli
Use = dict[NodeClass, list[int]]
# a pod the rescuer gave no room: its shape, the band it arrived in, the fewest moves of
# a plan (None: none within DEEP), the nodes that could host it empty
Unrescued = tuple[Shape, int, int | None, int]
DEEP = 20  # moves searched for a plan, far past any rescue the daemon would make


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


def whole_of(node: NodeState, model: str) -> bool:
    """A node of ``model`` with every GPU free and all its CPU left."""
    return (node.product == model and bool(node.free) and sum(node.free) == node.capacity
            and node.cpu_left == node.spec.cpu_milli)


def untouched(alloc: Allocator, model: str) -> int:
    return sum(1 for n in alloc.nodes.values() if whole_of(n, model))


def class_use(alloc: Allocator) -> Use:
    """Per node class: nodes, untouched ones (``whole_of``), GPU and CPU used and held
    (a node without CPU data has no class here: openb's all have it)."""
    out: Use = {}
    for n in alloc.nodes.values():
        cpu = n.spec.cpu_milli
        if not n.free or cpu is None:
            continue
        r = out.setdefault((n.product, len(n.free), cpu // 1000), [0] * 6)
        for i, v in enumerate((1, int(whole_of(n, n.product)), n.capacity - sum(n.free),
                               n.capacity, cpu - (n.cpu_left or 0), cpu)):
            r[i] += v
    return out


def whole_nodes(alloc: Allocator) -> Counter[int]:
    """GPUs per node -> nodes with every GPU free."""
    out: Counter[int] = Counter()
    for n in alloc.nodes.values():
        if n.free and sum(n.free) == n.capacity:
            out[len(n.free)] += 1
    return out


class _Reading(Replay):
    """swarmgpu's replay, read at every level, its failures with their band; with
    ``model``, what took that model's untouched nodes."""

    def __init__(self, nodes: list[NodeSpec], pods: list[TracePod], seed: int,
                 model: str | None = None, cpu_pods: str = "policy") -> None:
        super().__init__(nodes, pods, seed, cpu_pods=cpu_pods)
        self.model = model
        self.left = untouched(self.planner.cluster.alloc, model) if model else 0
        self.taken: list[str] = []  # since the last record
        self.breaks: list[Break] = []
        self.whole: dict[int, Counter[int]] = {}
        self.use: dict[int, Use] = {}
        self.failed_pods: list[Failed] = []
        self._band: list[int] = []  # positions failed since the last record
        plain = self.res.failed_one

        def failed_one(position: int) -> None:
            self._band.append(position)
            plain(position)

        self.res.failed_one = failed_one  # type: ignore[method-assign]

    def watch(self, what: str) -> None:
        """Count the untouched nodes of ``model`` again; ``what`` took those gone."""
        if self.model is None:
            return
        now = untouched(self.planner.cluster.alloc, self.model)
        self.taken += [what] * (self.left - now)
        self.left = now

    def arrival(self) -> None:
        last = next(reversed(self.new.values()), None)  # the pod that just arrived
        super().arrival()
        self.watch(str(shape(last[1])) if last is not None else "a cycle")

    def place_cpu_pod(self, idx: int, pod: TracePod, sched: SwarmScheduler) -> None:
        super().place_cpu_pod(idx, pod, sched)
        self.watch(str(shape(pod)))

    def cycle(self) -> None:
        super().cycle()
        self.watch("a cycle")

    def record(self, level: int) -> None:
        super().record(level)
        self.failed_pods += [(self.order[p - 1], level) for p in self._band]
        self._band.clear()
        self.whole[level] = whole_nodes(self.planner.cluster.alloc)
        self.use[level] = class_use(self.planner.cluster.alloc)
        self.breaks += [(what, level, self.left) for what in self.taken]
        self.taken.clear()


class _WatchedMover(FragmentationMover):
    """The fragmentation mover, its round of moves then counted by ``_Reading.watch``."""

    def __call__(self, rp: Replay, budget: int) -> int:
        made = super().__call__(rp, budget)
        if isinstance(rp, _Reading):
            rp.watch("moves")
        return made


def _watched(alloc: Allocator, model: str, taken: list[str]) -> Allocator:
    """``alloc`` whose commits that take an untouched node of ``model`` are told in
    ``taken``: the committed task's shape, or "moves" for a defragmenting move."""
    plain = alloc.commit

    def commit(choice: Choice) -> None:
        node = alloc.nodes[choice.node]
        was = whole_of(node, model)
        plain(choice)
        if was and not whole_of(node, model):
            one = choice.milli[0] if choice.milli else 0
            taken.append("moves" if choice.explanation == "defragmenting move" else str(
                (len(choice.gpus), one, round(choice.cpu_milli / 1000, 1))))

    alloc.commit = commit  # type: ignore[method-assign]
    return alloc


class _Noting(Hopeless):
    """The rescuer's memory, noting the last search's outcome (None: skipped)."""

    last: bool | None = None

    def outcome(self, d: Demand, rescued: bool) -> None:
        self.last = rescued
        super().outcome(d, rescued)


class _TellingRescuer(PlannerRescuer):
    """The daemon's rescuer (``simulate``'s), noting each search: the shapes rescued, and
    for each pod given no room, what a longer rescue would have needed."""

    def __init__(self, rp: Replay, empty: EmptyFit) -> None:
        super().__init__()
        self.rp = rp  # whose levels recorded so far give the band a pod arrived in
        self.empty = empty.alloc  # the cluster with nothing placed: who could host a pod
        self.noting = self.hopeless = _Noting(self.hopeless.forget_after)
        self.rescued: list[tuple[Shape, int]] = []
        self.unrescued: list[Unrescued] = []

    def __call__(self, planner: Planner, pods: dict[str, TracePod], pod: TracePod,
                 budget: int) -> list[tuple[str, str, Choice]] | None:
        self.noting.last = None
        got = super().__call__(planner, pods, pod, budget)
        band = LEVEL_STEP * (len(self.rp.res.alloc_pct_at) + 1)
        if got is not None:
            self.rescued.append((shape(pod), band))
        elif self.noting.last is False:
            d = pod.demand()
            alloc = planner.cluster.alloc
            found = plans(alloc, gpu_tasks(planner, pods), d, DEEP)
            hosts = sum(1 for n in self.empty.nodes.values() if self.empty.fits(n, d))
            self.unrescued.append((shape(pod), band, found[0].cost if found else None,
                                   hosts))
        return got


def report_rescues(seed: int, level: int, r: _TellingRescuer) -> None:
    done = Counter(s for s, band in r.rescued if band <= level)
    print(f"seed {seed} swarmgpu, pods arrived by {level}%: the defrag rescuer (at most "
          f"{r.max_moves} moves) placed {sum(done.values())}: " + ", ".join(
              f"{s}: {v}" for s, v in sorted(done.items())))
    print(f"  searched and given no room, (GPUs, milli of one, cores): pods, the fewest moves "
          f"of a plan (-: none within {DEEP}), nodes that could host it empty")
    by: dict[Shape, list[tuple[int | None, int]]] = {}
    for s, band, cost, hosts in r.unrescued:
        if band <= level:
            by.setdefault(s, []).append((cost, hosts))
    for s, got in sorted(by.items()):
        costs = Counter("-" if c is None else str(c) for c, _h in got)
        print(f"    {s}: {len(got)}, moves {dict(sorted(costs.items()))}, hosts "
              f"{min(h for _c, h in got)}-{max(h for _c, h in got)}")


FgdReading = tuple[RunResult, list[Failed], dict[int, Counter[int]], list[Break],
                   dict[int, Use]]


def fgd_failures(nodes: list[NodeSpec], pods: list[TracePod], seed: int,
                 moves: float = 0.0, model: str | None = None,
                 cpu_pods: str = "policy") -> FgdReading:
    """FGD's replay (``simulate --policy fgd``, with ``moves`` per 100 pods, the CPU-only
    pods placed as ``--cpu-pods`` has it), read at
    every level: its loop keeps the allocator to itself, so failures are read where it
    names their kind (``pod_kind``), whole nodes where it records a level
    (``fgd_reading``), and with ``model`` what took that model's untouched nodes where
    it builds the allocator (``build_allocator``, its commits watched)."""
    band: list[TracePod] = []
    failed: list[Failed] = []
    whole: dict[int, Counter[int]] = {}
    use: dict[int, Use] = {}
    taken: list[str] = []
    breaks: list[Break] = []
    plain_kind = pod_kind  # the replay's own names for these are patched for the run
    plain_build = sim_replay.build_allocator

    def kind(p: TracePod) -> str:
        band.append(p)
        return plain_kind(p)

    def build(nodes: Sequence[NodeSpec], scorer: Scorer, rng: random.Random) -> Allocator:
        alloc = plain_build(nodes, scorer, rng)
        return alloc if model is None else _watched(alloc, model, taken)

    def level_read(level: int, alloc: Allocator) -> None:
        failed.extend((p, level) for p in band)
        band.clear()
        whole[level] = whole_nodes(alloc)
        use[level] = class_use(alloc)
        if model is not None:
            left = untouched(alloc, model)
            breaks.extend((what, level, left) for what in taken)
            taken.clear()

    setattr(sim_replay, "pod_kind", kind)  # noqa: B010 (not exported, by mypy's reading)
    sim_replay.build_allocator = build
    try:
        res = fgd_reading(nodes, pods, seed, level_read, moves, cpu_pods)
    finally:
        setattr(sim_replay, "pod_kind", plain_kind)  # noqa: B010
        sim_replay.build_allocator = plain_build
    return res, failed, whole, breaks, use


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
    first = min((lv for _p, lv in could), default=None)
    print(f"  the others: {len(could)} pods, "
          f"{sum(p.num_gpu * p.gpu_milli for p, _ in could)} GPU-milli, "
          f"{sum(p.cpu_milli for p, _ in could) / 1000:.1f} cores; the first arrived by "
          f"{'-' if first is None else f'{first}%'}")
    print("  the others, (GPUs, milli of one, cores): pods")
    shapes = Counter(shape(p) for p, _ in could)
    print("    " + ", ".join(f"{s}: {v}" for s, v in sorted(shapes.items())))
    print("  of them multi-GPU, (shape, arrived by %): " + ", ".join(
        f"({shape(p)}, {lv})" for p, lv in could if p.num_gpu >= 2))
    print("  nodes with every GPU free, by % arrived: {GPUs per node: nodes}")
    for lv in range(start, level + 1, LEVEL_STEP):
        w = whole.get(lv, Counter())
        print(f"    {lv:3d}: " + ", ".join(f"{g}: {v}" for g, v in sorted(w.items())))


def _pct(r: list[int], i: int) -> str:
    """``r[i]`` as a % of ``r[i + 1]`` (a ``class_use`` row)."""
    return f"{100 * r[i] / r[i + 1]:.1f}" if r[i + 1] else "-"


def report_use(seed: int, start: int, level: int, ours: dict[int, Use],
               fgd: dict[int, Use]) -> None:
    print(f"seed {seed}: per node class (GPU model, GPUs, cores), nodes untouched and GPU "
          "and CPU in use, swarmgpu / fgd")
    for lv in range(start, level + 1, LEVEL_STEP):
        a, b = ours.get(lv, {}), fgd.get(lv, {})
        print(f"  {lv}% arrived: class, nodes: untouched, GPU used %, CPU used %")
        for k in sorted(set(a) | set(b)):
            x, y = a.get(k, [0] * 6), b.get(k, [0] * 6)
            print(f"    {k}, {max(x[0], y[0])}: {x[1]} / {y[1]}, {_pct(x, 2)} / {_pct(y, 2)}, "
                  f"{_pct(x, 4)} / {_pct(y, 4)}")


def report_breaks(name: str, seed: int, model: str, level: int, breaks: list[Break]) -> None:
    by = [b for b in breaks if b[1] <= level]
    print(f"seed {seed} {name}: untouched {model} nodes taken by % arrived, by what took "
          "them (a shape: the task placed; moves: a round of moves), and how many were left")
    bands = sorted({lv for _w, lv, _left in by})
    for lv in bands:
        here = [(what, left) for what, b, left in by if b == lv]
        counts = Counter(what for what, _left in here)
        print(f"    {lv:3d}: {len(here)} taken, {here[-1][1]} left: " + ", ".join(
            f"{what}: {v}" for what, v in sorted(counts.items())))


def main() -> int:
    ap = level_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="start", type=int, default=75,
                    help="first level of the whole-node rows, %% (5 steps)")
    ap.add_argument("--by-class", action="store_true",
                    help="per node class, untouched nodes and GPU and CPU in use")
    ap.add_argument("--rescues", action="store_true",
                    help="(with --rebalance-moves) the pods swarmgpu's rescuer gave no "
                         "room, and what a longer rescue would need")
    ap.add_argument("--breakers", metavar="MODEL",
                    help="what took the untouched nodes of this GPU model (e.g. G3)")
    ap.add_argument("--no-fgd", action="store_true",
                    help="swarmgpu's replay only (FGD's columns of --by-class read 0)")
    args = ap.parse_args()
    seeds, nodes, pods = level_inputs(ap, args, {"--level": args.level, "--from": args.start})
    models = sorted({g.product for n in nodes for g in n.gpus})
    if args.breakers is not None and args.breakers not in models:
        ap.error(f"--breakers {args.breakers}: no node has that GPU model; the cluster's "
                 f"are {', '.join(models)}")
    if args.rescues and not args.rebalance_moves:
        ap.error("--rescues: the rescuer runs only with moves; add --rebalance-moves N "
                 "(e.g. 2)")
    fits = EmptyFit(nodes)
    moves = args.rebalance_moves
    for seed in seeds:
        rp = _Reading(nodes, pods, seed, args.breakers, args.cpu_pods)
        telling = _TellingRescuer(rp, fits) if args.rescues else None
        moved(rp, pods, moves, _WatchedMover, telling)
        report("swarmgpu", seed, args.level, args.start, rp.res, rp.failed_pods, rp.whole,
               fits)
        use: dict[int, Use] = {}
        breaks: list[Break] = []
        if not args.no_fgd:
            res, failed, whole, breaks, use = fgd_failures(nodes, pods, seed, moves,
                                                           args.breakers, args.cpu_pods)
            report("fgd", seed, args.level, args.start, res, failed, whole, fits)
        if telling is not None:
            report_rescues(seed, args.level, telling)
        if args.by_class:
            report_use(seed, args.start, args.level, rp.use, use)
        if args.breakers is not None:
            report_breaks("swarmgpu", seed, args.breakers, args.level, rp.breaks)
            if not args.no_fgd:
                report_breaks("fgd", seed, args.breakers, args.level, breaks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
