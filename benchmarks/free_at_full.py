"""Where the free GPU goes when the cluster is full: what ``swarmgpu simulate`` leaves
free at an arrived-load level, by size, beside the shares that
arrived by then (docs/simulate.md, "What is free at 100% arrived").

    .venv/bin/python benchmarks/free_at_full.py                     # default, seed 42
    .venv/bin/python benchmarks/free_at_full.py --trace gpushare40 --seeds 42-44
    .venv/bin/python benchmarks/free_at_full.py --pods derived.csv --level 130
    .venv/bin/python benchmarks/free_at_full.py --trace default --rebalance-moves 2
    .venv/bin/python benchmarks/free_at_full.py --cpu-pods swarm

The replays are the ones ``simulate --policy swarmgpu,fgd`` runs (swarmgpu's through
``sim.swarm_replay.Replay``, the daemon's planner), read at the level's record; with
``--rebalance-moves N`` both replays move as ``simulate --rebalance-moves N`` has them
(``moved``), and with ``--cpu-pods swarm`` both place the CPU-only pods by the model of
Swarm's scheduler, as ``simulate --cpu-pods swarm`` has them. Per seed and policy: the
allocation and the pods failed by then; the free GPU-milli of partly used GPUs by how
much is free on the GPU (exact values, count of GPUs and their milli); the whole free
GPUs, by node model and the node's CPU left (a whole GPU on a node with no CPU left
serves no one); then the shares (one GPU, less than 1000 milli) arrived by the level, by
size. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from swarmgpu.allocator.core import Allocator  # noqa: E402
from swarmgpu.allocator.fragmentation import FragCache  # noqa: E402
from swarmgpu.allocator.values import NodeSpec  # noqa: E402
from swarmgpu.sim import replay as sim_replay  # noqa: E402
from swarmgpu.sim.cli_entry import parse_seeds  # noqa: E402
from swarmgpu.sim.rebalance import Defragmenter, MoveRescuer  # noqa: E402
from swarmgpu.sim.report import RESCUE_RESERVE  # noqa: E402
from swarmgpu.sim.runs import (  # noqa: E402
    LEVEL_STEP,
    RunResult,
    arrival_order,
    pod_kind,
    workload_of,
)
from swarmgpu.sim.swarm_replay import FragmentationMover, Replay  # noqa: E402
from swarmgpu.sim.swarm_rescue import PlannerRescuer  # noqa: E402
from swarmgpu.sim.swarm_sched import CPU_PODS  # noqa: E402
from swarmgpu.sim.trace import TracePod, load_nodes, load_pods  # noqa: E402
from swarmgpu.sim.traces import NAMES, NODES, OPENB  # noqa: E402

Tally = tuple[Counter[int], Counter[tuple[str, int]]]


def tally(alloc: Allocator) -> Tally:
    """Free milli of partly used GPUs -> GPUs; (model, cores left) -> whole free GPUs."""
    partial: Counter[int] = Counter()
    whole: Counter[tuple[str, int]] = Counter()
    for n in alloc.nodes.values():
        for free in n.free:
            if free == 1000:
                whole[(n.product, (n.cpu_left or 0) // 1000)] += 1
            elif free > 0:
                partial[free] += 1
    return partial, whole


class _Reading(Replay):
    """swarmgpu's replay, read once at one level."""

    def __init__(self, nodes: list[NodeSpec], pods: list[TracePod], seed: int, *,
                 level: int, cpu_pods: str = "policy") -> None:
        super().__init__(nodes, pods, seed, cpu_pods=cpu_pods)
        self.level = level
        self.read: Tally = (Counter(), Counter())

    def record(self, level: int) -> None:
        super().record(level)
        if level == self.level:
            self.read = tally(self.planner.cluster.alloc)


def moved(rp: Replay, pods: list[TracePod], moves: float,
          mover: type[FragmentationMover] = FragmentationMover,
          rescuer: PlannerRescuer | None = None) -> RunResult:
    """swarmgpu's replay run with ``moves`` per 100 pods as ``simulate --rebalance-moves``
    runs it (``sim.report``: the daemon's fragmentation mover, ``RESCUE_RESERVE`` of the
    allowed moves kept for its ``defrag`` rescuer, ``rescuer`` if given); 0: placing
    only."""
    if not moves:
        return rp.run()
    rp.rescuer = rescuer or PlannerRescuer()
    return rp.run(moves, mover(reserve=RESCUE_RESERVE))


def fgd_reading(nodes: list[NodeSpec], pods: list[TracePod], seed: int,
                read: Callable[[int, Allocator], None], moves: float = 0.0,
                cpu_pods: str = "policy") -> RunResult:
    """FGD's replay (``simulate --policy fgd``, with ``moves`` per 100 pods as
    ``--rebalance-moves`` has it, the CPU-only pods placed as ``--cpu-pods`` has it), with
    ``read(level, allocator)`` at each level's record: its loop keeps the allocator to
    itself, and reads it once per level through ``cluster_frag_milli``."""
    calls = 0
    plain = sim_replay.cluster_frag_milli

    def reading(alloc: Allocator, frag: FragCache) -> float:
        nonlocal calls
        calls += 1
        read(calls * LEVEL_STEP, alloc)
        return plain(alloc, frag)

    sim_replay.cluster_frag_milli = reading
    try:
        if not moves:
            return sim_replay.replay(nodes, pods, "fgd", seed, cpu_pods=cpu_pods)
        return sim_replay.replay(nodes, pods, "fgd", seed, moves_per_100=moves,
                                 defrag=Defragmenter(workload_of(pods), reserve=RESCUE_RESERVE),
                                 rebalancer=MoveRescuer(), cpu_pods=cpu_pods)
    finally:
        sim_replay.cluster_frag_milli = plain


def shares_arrived(pods: list[TracePod], cluster_milli: int, seed: int,
                   level: int) -> Counter[int]:
    """Shares among the pods arrived by ``level`` % of the cluster's GPU, by size."""
    order, _ = arrival_order(pods, cluster_milli, seed)
    out: Counter[int] = Counter()
    arrived = 0
    for p in order:  # the pod that reaches the level counts, as in the replay's record
        if pod_kind(p) == "share":
            out[p.gpu_milli] += 1
        arrived += p.total_gpu_milli
        if arrived * 100 >= level * cluster_milli:
            break
    return out


def level_parser(description: str) -> argparse.ArgumentParser:
    """The options every reading of a replay takes: the workload, the seeds, the level,
    the moves and who places the CPU-only pods."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--trace", choices=NAMES, default="default")
    ap.add_argument("--pods", type=Path, help="pod CSV (default: the bundled trace's)")
    ap.add_argument("--seeds", default="42", help="e.g. 42 or 42-44")
    ap.add_argument("--level", type=int, default=100, help="arrived load, %% (5 steps)")
    ap.add_argument("--rebalance-moves", type=float, default=0.0, metavar="N",
                    help="moves per 100 arrived pods, as simulate's (default 0: placing only)")
    ap.add_argument("--cpu-pods", choices=CPU_PODS, default="policy",
                    help="who places the CPU-only pods, as simulate's (swarm: the model of "
                         "Swarm's scheduler)")
    return ap


def level_inputs(ap: argparse.ArgumentParser, args: argparse.Namespace,
                 levels: dict[str, int]) -> tuple[list[int], list[NodeSpec], list[TracePod]]:
    """The seeds, nodes and pods of ``level_parser``'s options; a level in ``levels``
    (flag -> value) that the replay does not record, or a bad seed, is a usage error."""
    if args.rebalance_moves < 0:
        ap.error("--rebalance-moves: must be >= 0 (moves per 100 arrived pods)")
    for flag, v in levels.items():
        if v % LEVEL_STEP or not LEVEL_STEP <= v <= 130:
            ap.error(f"{flag}: a multiple of {LEVEL_STEP} from {LEVEL_STEP} to 130 "
                     "(the replay's records)")
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as e:
        ap.error(str(e))
    return (seeds, load_nodes(NODES),
            load_pods(args.pods or OPENB / f"openb_pod_list_{args.trace}.csv"))


def main() -> int:
    ap = level_parser(__doc__.split("\n\n")[0])
    args = ap.parse_args()
    seeds, nodes, pods = level_inputs(ap, args, {"--level": args.level})
    cluster_milli = sum(len(n.gpus) for n in nodes) * 1000
    for seed in seeds:
        rp = _Reading(nodes, pods, seed, level=args.level, cpu_pods=args.cpu_pods)
        moved(rp, pods, args.rebalance_moves)
        fgd_read: Tally = (Counter(), Counter())

        def at_level(level: int, alloc: Allocator) -> None:
            nonlocal fgd_read
            if level == args.level:
                fgd_read = tally(alloc)

        fgd = fgd_reading(nodes, pods, seed, at_level, args.rebalance_moves, args.cpu_pods)
        for name, res, (partial, whole) in (("swarmgpu", rp.res, rp.read),
                                            ("fgd", fgd, fgd_read)):
            free = sum(k * v for k, v in partial.items()) + 1000 * sum(whole.values())
            print(f"seed {seed} {name} @{args.level}%: alloc "
                  f"{res.alloc_pct_at[args.level]:.3f}%, free "
                  f"{100 * free / cluster_milli:.3f}% of the cluster's GPU ({free} milli); "
                  f"failed by then {res.failed_at[args.level]}")
            print("  partly used GPUs, free milli: GPUs (milli)")
            for k, v in sorted(partial.items()):
                print(f"    {k:4d}: {v:5d} ({k * v})")
            print("  whole free GPUs, (model, cores left): GPUs")
            for (model, cores), v in sorted(whole.items()):
                print(f"    ({model}, {cores}): {v}")
        arrived = shares_arrived(pods, cluster_milli, seed, args.level)
        print(f"seed {seed}: shares arrived by the level, milli: pods")
        print("    " + ", ".join(f"{k}: {v}" for k, v in sorted(arrived.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
