"""The upper bound beside the replays: per seed, at each arrived-load level they report.

At a level where some replay of the seed placed every GPU pod that had arrived, the
bound is what arrived (a real placement reached it and nothing can exceed it); at the
others ``sim.bound`` solves the relaxation for the pods that had arrived.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from statistics import mean
from typing import Any

from swarmgpu.sim.bound import upper_bound
from swarmgpu.sim.runs import RunResult, arrival_order, level_prefixes
from swarmgpu.sim.trace import load_nodes, load_pods

BOUND_METHODS = ("lp", "mip", "off")


@dataclass
class SeedBound:
    seed: int
    method: str
    alloc_pct_at: dict[int, float] = field(default_factory=dict)
    lp_pct_at: dict[int, float] = field(default_factory=dict)  # the certified LP bound
    solved: list[int] = field(default_factory=list)  # levels where the program ran
    solve_s: float = 0.0


def placed_all(r: RunResult, level: int) -> bool:
    """Whether the replay placed every GPU pod that had arrived by ``level``."""
    return not any(n for k, n in r.failed_at.get(level, {}).items() if k != "cpu")


def bound_seed(args: tuple[str, str, str, int, str, tuple[int, ...], tuple[int, ...]]
               ) -> SeedBound:
    """One seed's bound at ``levels``; ``trivial`` are those some replay placed whole."""
    nodes_path, pods_path, _name, seed, method, levels, trivial = args
    nodes, pods = load_nodes(nodes_path), load_pods(pods_path)
    cluster_milli = sum(len(n.gpus) for n in nodes) * 1000
    order, _rng = arrival_order(pods, cluster_milli, seed)
    prefix = level_prefixes(order, cluster_milli)
    out = SeedBound(seed, method)
    t0 = time.perf_counter()
    for lv in levels:
        arrived = order[:prefix[lv]]
        if lv in trivial:
            pct = 100.0 * sum(p.total_gpu_milli for p in arrived) / cluster_milli
            out.alloc_pct_at[lv] = out.lp_pct_at[lv] = pct
            continue
        b = upper_bound(nodes, arrived, method=method)
        out.alloc_pct_at[lv] = 100.0 * b.milli / cluster_milli
        out.lp_pct_at[lv] = 100.0 * b.lp_milli / cluster_milli
        out.solved.append(lv)
    out.solve_s = time.perf_counter() - t0
    return out


def bound_jobs(nodes_path: str, pods_path: str, results: dict[str, list[RunResult]],
               method: str) -> list[tuple[str, str, str, int, str, tuple[int, ...],
                                          tuple[int, ...]]]:
    """One job per seed the replays ran, with the levels they report."""
    by_seed: dict[int, list[RunResult]] = {}
    for runs in results.values():
        for r in runs:
            by_seed.setdefault(r.seed, []).append(r)
    jobs = []
    for seed, runs in sorted(by_seed.items()):
        levels = tuple(sorted(runs[0].alloc_pct_at))
        trivial = tuple(lv for lv in levels if any(placed_all(r, lv) for r in runs))
        jobs.append((nodes_path, pods_path, "bound", seed, method, levels, trivial))
    return jobs


def bound_summary(bounds: list[SeedBound]) -> dict[str, Any]:
    """The bound's JSON: means over seeds per level, per seed, and the solve time."""
    levels = sorted(bounds[0].alloc_pct_at)
    return {
        "method": bounds[0].method,
        "alloc_pct_at": {str(lv): round(mean(b.alloc_pct_at[lv] for b in bounds), 3)
                         for lv in levels},
        "lp_pct_at": {str(lv): round(mean(b.lp_pct_at[lv] for b in bounds), 3)
                      for lv in levels},
        "solve_s": round(sum(b.solve_s for b in bounds), 2),
        "seeds": [b.seed for b in bounds],
        "by_seed": {str(b.seed): {"alloc_pct_at": {str(lv): round(v, 3) for lv, v in
                                                   sorted(b.alloc_pct_at.items())},
                                  "solved_levels": b.solved,
                                  "solve_s": round(b.solve_s, 2)} for b in bounds},
    }
