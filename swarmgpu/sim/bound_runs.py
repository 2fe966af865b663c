"""The upper bound beside the replays: per seed, at each arrived-load level they report.

At a level where some replay of the seed placed every GPU pod that had arrived, the
bound is what arrived (a real placement reached it and nothing can exceed it); at the
others ``sim.bound`` solves the relaxation for the pods that had arrived.

The online bound beside it (docs/simulate.md, "The online bound"): the same relaxation
with a prefix of the arrivals forced in. A policy that placed every pod before its
first failure holds them all at every later level (moves restart tasks, never drop
them), so the bound forced with that prefix bounds it; and "all placed by F%" bounds
every policy whose first failure comes after F% arrived.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from statistics import mean
from typing import Any

from swarmgpu.allocator.values import NodeSpec
from swarmgpu.sim.bound import upper_bound
from swarmgpu.sim.runs import RunResult, arrival_order, level_prefixes
from swarmgpu.sim.trace import TracePod, load_nodes, load_pods

BOUND_METHODS = ("lp", "mip", "off")
# The levels the online bounds are solved at (the table's), and the default F of the
# "online bound (all placed by F%)" row.
ONLINE_LEVELS = (50, 100, 130)
ONLINE_AT = 95


@dataclass
class SeedBound:
    seed: int
    method: str
    alloc_pct_at: dict[int, float] = field(default_factory=dict)
    lp_pct_at: dict[int, float] = field(default_factory=dict)  # the certified LP bound
    solved: list[int] = field(default_factory=list)  # levels where the program ran
    solve_s: float = 0.0
    # The online bounds (None: the forced pods do not all fit the relaxation)
    online_at: int = 0  # F of the "all placed by F%" row; 0: none
    online_pct_at: dict[int, float | None] = field(default_factory=dict)
    # per policy: arrived GPU load (%) when its first pod failed (None: none failed) and
    # its own online bound at ONLINE_LEVELS
    first_failed_pct: dict[str, float | None] = field(default_factory=dict)
    policy_online_pct_at: dict[str, dict[int, float | None]] = field(default_factory=dict)
    online_solve_s: float = 0.0


def placed_all(r: RunResult, level: int) -> bool:
    """Whether the replay placed every GPU pod that had arrived by ``level``."""
    return not any(n for k, n in r.failed_at.get(level, {}).items() if k != "cpu")


BoundJob = tuple[str, str, str, int, str, tuple[int, ...], tuple[int, ...], int,
                 tuple[tuple[str, int], ...]]


def bound_seed(args: BoundJob) -> SeedBound:
    """One seed's bound at ``levels``; ``trivial`` are those some replay placed whole.
    With ``online_at`` > 0 the online bound forced with every pod arrived by that level,
    and per policy (``firsts``: its first failure's position, 0 none) its own."""
    nodes_path, pods_path, _name, seed, method, levels, trivial, online_at, firsts = args
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
    t0 = time.perf_counter()
    at = [lv for lv in ONLINE_LEVELS if lv in levels]
    if online_at and online_at in prefix:
        out.online_at = online_at
        # witnessed: some replay placed every pod arrived by F (they fit: no solve)
        fits = any(not f or f > prefix[online_at] for _p, f in firsts)
        out.online_pct_at = {lv: online_bound(nodes, order, prefix[lv], prefix[online_at],
                                              method, out.alloc_pct_at[lv], fits)
                             for lv in at}
    # Policies that fail first at the same pod share one forced solve per level (~1.5 s
    # each on default).
    solved: dict[tuple[int, int], float | None] = {}
    for policy, f in firsts:
        out.first_failed_pct[policy] = (
            100.0 * sum(p.total_gpu_milli for p in order[:f]) / cluster_milli if f else None)
        forced = f - 1 if f else len(order)
        for lv in at:
            if (lv, forced) not in solved:
                solved[lv, forced] = online_bound(nodes, order, prefix[lv], forced, method,
                                                  out.alloc_pct_at[lv], True)
        out.policy_online_pct_at[policy] = {lv: solved[lv, forced] for lv in at}
    out.online_solve_s = time.perf_counter() - t0
    return out


def online_bound(nodes: list[NodeSpec], order: list[TracePod], arrived: int, forced: int,
                 method: str, offline_pct: float, fits: bool) -> float | None:
    """The bound (% of the cluster's GPU) on placements of ``order[:arrived]`` that hold
    ``order[:forced]``, at most ``offline_pct`` (the offline bound holds too). ``fits``:
    some placement holds the forced pods (a replay placed them). None: they do not all
    fit the relaxation: no placement holds them (proven, ``Bound.unfit``)."""
    cluster_milli = sum(len(n.gpus) for n in nodes) * 1000
    if forced >= arrived and fits:  # every arrived pod placed: exactly what arrived
        return 100.0 * sum(p.total_gpu_milli for p in order[:arrived]) / cluster_milli
    b = upper_bound(nodes, order[:arrived], method=method, forced=order[:min(forced, arrived)])
    if b.unfit:
        return None
    return min(offline_pct, 100.0 * b.milli / cluster_milli)


def bound_jobs(nodes_path: str, pods_path: str, results: dict[str, list[RunResult]],
               method: str, online_at: int = ONLINE_AT) -> list[BoundJob]:
    """One job per seed the replays ran, with the levels they report and each policy's
    first failure (``online_at`` 0: no online bound)."""
    by_seed: dict[int, list[RunResult]] = {}
    for runs in results.values():
        for r in runs:
            by_seed.setdefault(r.seed, []).append(r)
    jobs: list[BoundJob] = []
    for seed, runs in sorted(by_seed.items()):
        levels = tuple(sorted(runs[0].alloc_pct_at))
        trivial = tuple(lv for lv in levels if any(placed_all(r, lv) for r in runs))
        firsts = tuple((r.policy, r.first_failed) for r in runs) if online_at else ()
        jobs.append((nodes_path, pods_path, "bound", seed, method, levels, trivial, online_at,
                     firsts))
    return jobs


def _mean_or_none(xs: list[float | None]) -> float | None:
    """The mean, or None where one is missing (a forced prefix that does not fit)."""
    got = [x for x in xs if x is not None]
    return round(mean(got), 3) if got and len(got) == len(xs) else None


def online_summary(bounds: list[SeedBound]) -> dict[str, Any]:
    """The online bound's JSON: the "all placed by F%" row's means over seeds and per
    seed, and per policy its first failure and its own online bound."""
    b0 = bounds[0]
    pol: dict[str, Any] = {}
    for name in b0.first_failed_pct:
        pol[name] = {
            "first_failed_pct": _mean_or_none([b.first_failed_pct[name] for b in bounds]),
            "online_bound_pct_at": {str(lv): _mean_or_none(
                [b.policy_online_pct_at[name][lv] for b in bounds])
                for lv in b0.policy_online_pct_at[name]},
            "by_seed": {str(b.seed): {
                "first_failed_pct": (None if b.first_failed_pct[name] is None
                                     else round(b.first_failed_pct[name] or 0.0, 3)),
                "online_bound_pct_at": {str(lv): None if v is None else round(v, 3)
                                        for lv, v in b.policy_online_pct_at[name].items()}}
                for b in bounds},
        }
    return {
        "forced_to_pct": b0.online_at or None,
        "alloc_pct_at": {str(lv): _mean_or_none([b.online_pct_at[lv] for b in bounds])
                         for lv in b0.online_pct_at},
        "solve_s": round(sum(b.online_solve_s for b in bounds), 2),
        "by_seed": {str(b.seed): {str(lv): None if v is None else round(v, 3)
                                  for lv, v in b.online_pct_at.items()} for b in bounds},
        "policies": pol,
    }


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
