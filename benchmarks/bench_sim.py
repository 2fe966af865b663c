"""Speed and quality of the replay: one seed of the default openb trace at 130% for
``swarmgpu`` with per-decision latency, then (``--full``) every policy x workload over
seeds 42-51 on both cores.

    python benchmarks/bench_sim.py            # speed, one seed
    python benchmarks/bench_sim.py --full     # the docs/simulate.md table (minutes)
"""

from __future__ import annotations

import statistics
import sys
import time

from swarmgpu.sim.replay import replay
from swarmgpu.sim.report import run_many, summary
from swarmgpu.sim.trace import load_nodes, load_pods
from swarmgpu.sim.traces import NAMES as TRACE_NAMES
from swarmgpu.sim.traces import NODES as TRACE_NODES
from swarmgpu.sim.traces import bundled

# The openb trace bundled in the package (swarmgpu/sim/traces/openb, CC BY 4.0).
NODES = str(TRACE_NODES)
WORKLOADS = TRACE_NAMES


def _pods(workload: str) -> str:
    return str(bundled(workload)[1])


def speed() -> None:
    nodes, pods = load_nodes(NODES), load_pods(_pods("default"))
    t0 = time.perf_counter()
    r = replay(nodes, pods, "swarmgpu", 42, timing=True)
    wall = time.perf_counter() - t0
    lat = sorted(r.decision_s)
    p99 = lat[int(0.99 * (len(lat) - 1))]
    print(f"swarmgpu seed 42, {len(nodes)} nodes / {sum(len(n.gpus) for n in nodes)} GPUs, "
          f"{r.pods} pods to 130%: {wall:.1f} s; per decision median "
          f"{statistics.median(lat) * 1e6:.0f} us, p99 {p99 * 1e6:.0f} us; "
          f"alloc@100% {r.alloc_pct_at[100]:.2f}")


def full() -> None:
    pols = ["random", "bestfit", "dotprod", "packing", "fgd", "swarmgpu"]
    for wl in WORKLOADS:
        s = summary(run_many(NODES, _pods(wl), pols, list(range(42, 52))))
        for name, v in s["policies"].items():
            a = v["alloc_pct_at"]
            print(f"{wl:11s} {name:9s} {a['100']:6.2f} {a['130']:6.2f}", flush=True)


if __name__ == "__main__":
    speed()
    if "--full" in sys.argv:
        full()
