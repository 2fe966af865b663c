"""The upper bound beside the departures replay (``--departures``).

There the table reports the time-weighted mean allocation over the arrival window and its
peak. At any instant t a replay runs only pods alive then (arrived, not yet departed:
both replays count a placed pod over [arrival, departure)), so its allocation is at most
what is asked then, demand(t), and at most the bound of ``sim.bound`` for those pods.
The window is cut into ``WINDOWS`` equal spans; for a span, every pod alive at some
instant of it forms one set U, whose bound holds at every instant of the span (a
placement of the pods alive at t is one of a subset of U). So

    bound(t) = min(demand(t), B(U of t's span))

bounds every replay at every instant, and its time-weighted mean and its peak bound the
table's mean and peak. B is solved only for spans where demand reaches ``SOLVE_FROM`` of
the cluster (elsewhere demand alone is used: still a bound, and what nearly every policy
places there). The arrival order does not depend on the seed, so neither does the bound.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from swarmgpu.allocator.values import NodeSpec
from swarmgpu.sim.bound import upper_bound
from swarmgpu.sim.runs import arrival_times, timed_pods
from swarmgpu.sim.trace import TracePod

WINDOWS = 100
SOLVE_FROM = 0.85  # of the cluster's GPU-milli asked at once


@dataclass
class TimedBound:
    mean_alloc_pct: float = 0.0
    peak_alloc_pct: float = 0.0
    spans: int = 0
    solved: list[int] = field(default_factory=list)  # spans whose B was solved
    solve_s: float = 0.0
    method: str = "lp"


def timed_bound(
    nodes: Sequence[NodeSpec],
    pods: Sequence[TracePod],
    speedup: float = 1.0,
    *,
    method: str = "lp",
    windows: int = WINDOWS,
    solve_from: float = SOLVE_FROM,
) -> TimedBound:
    """The bound on the departures replay's mean and peak allocation (module docstring)."""
    t0 = time.perf_counter()
    order = timed_pods(pods)
    cluster = sum(len(n.gpus) for n in nodes) * 1000
    out = TimedBound(method=method)
    if not order or cluster == 0:
        return out
    life = [arrival_times(p, speedup) for p in order]
    start, end = life[0][0], life[-1][0]
    if end <= start:
        return out
    out.spans = windows
    # demand as steps: (time, kind, change)
    events = sorted(
        [(a, 1, p.total_gpu_milli) for p, (a, _) in zip(order, life, strict=True)]
        + [(e, 0, -p.total_gpu_milli) for p, (_, e) in zip(order, life, strict=True)]
    )
    segments: list[list[tuple[int, int]]] = [[] for _ in range(windows)]  # (length, demand)
    # whole seconds, as the replays' own window: the areas below are exact integers
    cuts = [start + k * (end - start) // windows for k in range(windows)] + [end]
    times = sorted({*cuts, *(x for x, _, _ in events if start < x < end)})
    demand, i = 0, 0
    for t, nxt in itertools.pairwise(times):
        while i < len(events) and events[i][0] <= t:  # every change at t, in either order
            demand += events[i][2]
            i += 1
        k = min(bisect.bisect_right(cuts, t) - 1, windows - 1)
        segments[k].append((nxt - t, demand))
    area = 0
    for k, segs in enumerate(segments):
        top = max((d for _, d in segs), default=0)
        cap = top  # demand alone, unless the span is solved
        if top >= solve_from * cluster:
            a, b = cuts[k], cuts[k + 1]
            alive = [p for p, (s, e) in zip(order, life, strict=True) if s < b and e > a]
            cap = upper_bound(nodes, alive, method=method).milli
            out.solved.append(k)
        area += sum(length * min(d, cap) for length, d in segs)
        out.peak_alloc_pct = max(out.peak_alloc_pct, 100.0 * min(top, cap) / cluster)
    out.mean_alloc_pct = 100.0 * area / (end - start) / cluster
    out.solve_s = time.perf_counter() - t0
    return out
