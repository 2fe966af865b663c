"""Speed and quality of the replay: one seed of the default openb trace at 130% for
``swarmgpu`` (the daemon's planner) with per-decision latency beside FGD's in the same
run, then (``--full``) every policy x workload over
seeds 42-51 on both cores.

    python benchmarks/bench_sim.py            # speed, one seed
    python benchmarks/bench_sim.py --full     # the docs/simulate.md table (minutes)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from swarmgpu.sim.replay import replay  # noqa: E402
from swarmgpu.sim.report import run_many, summary  # noqa: E402
from swarmgpu.sim.trace import load_nodes, load_pods  # noqa: E402
from swarmgpu.sim.traces import NAMES as TRACE_NAMES  # noqa: E402
from swarmgpu.sim.traces import NODES as TRACE_NODES  # noqa: E402
from swarmgpu.sim.traces import bundled  # noqa: E402

# The openb trace bundled in the package (swarmgpu/sim/traces/openb, CC BY 4.0).
NODES = str(TRACE_NODES)
WORKLOADS = TRACE_NAMES


def _pods(workload: str) -> str:
    return str(bundled(workload)[1])


def speed() -> None:
    """swarmgpu through the daemon's planner (each allocator decision timed), beside the
    allocator-level replay of FGD in the same run: the machine's load slows both."""
    nodes, pods = load_nodes(NODES), load_pods(_pods("default"))
    t0 = time.perf_counter()
    ref = replay(nodes, pods, "fgd", 42, timing=True)
    ref_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    r = replay(nodes, pods, "swarmgpu", 42, timing=True)
    wall = time.perf_counter() - t0

    def med_p99(xs: list[float]) -> tuple[float, float]:
        xs = sorted(xs)
        return statistics.median(xs) * 1e6, xs[int(0.99 * (len(xs) - 1))] * 1e6

    m, p = med_p99(r.decision_s)
    rm, rp = med_p99(ref.decision_s)
    print(f"{len(nodes)} nodes / {sum(len(n.gpus) for n in nodes)} GPUs, seed 42 to 130%; "
          "one process (1 core), fgd then swarmgpu")
    print(f"swarmgpu (daemon planner): {r.pods} pods in {wall:.1f} s; per decision median "
          f"{m:.0f} us, p99 {p:.0f} us; alloc@100% {r.alloc_pct_at[100]:.2f}")
    print(f"reference fgd (allocator replay): {ref.pods} pods in {ref_wall:.1f} s; per "
          f"decision median {rm:.0f} us, p99 {rp:.0f} us")
    print(f"ratio of walls {wall / ref_wall:.1f}, ratio of medians {m / rm:.2f}")


def full() -> None:
    pols = ["random", "bestfit", "dotprod", "packing", "fgd", "swarmgpu"]
    for wl in WORKLOADS:
        s = summary(run_many(NODES, _pods(wl), pols, list(range(42, 52))))
        for name, v in s["policies"].items():
            a = v["alloc_pct_at"]
            print(f"{wl:11s} {name:9s} {a['100']:6.2f} {a['130']:6.2f}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true",
                    help="then every policy x workload over seeds 42-51 (minutes)")
    args = ap.parse_args()
    speed()
    if args.full:
        full()
    return 0


if __name__ == "__main__":
    sys.exit(main())
