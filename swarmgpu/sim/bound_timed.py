"""The upper bound beside the departures replay (``--departures``).

There the table reports the time-weighted mean allocation over the arrival window and its
peak. At any instant t a replay runs only pods alive then (arrived, not yet departed:
both replays count a placed pod over [arrival, departure)), so its allocation is at most
what is asked then, demand(t), and at most the bound of ``sim.bound`` for those pods.
The window is cut into ``WINDOWS`` equal spans; for a span, every pod alive at some
instant of it forms one set U, whose bound holds at every instant of the span (a
placement of the pods alive at t is one of a subset of U). So

    bound(t) = min(demand(t), B(U of t's span))

bounds every replay at every instant, and its time-weighted mean bounds the table's mean.
A replay's peak is read as it places each pod, so at arrival instants: the last one
included (the window's end), and with a pod that leaves as it arrives still held until the
next arrival. The peak's bound is, over arrival instants t, the least of what is asked
just after t's arrivals (those zero-length pods counted) and B of the span's U with the
pods alive at t added (the last span's holds those arriving at its end). B is solved only
for spans where demand reaches ``SOLVE_FROM`` of the cluster (elsewhere demand alone is
used: still a bound, and what nearly every policy places there). The arrival order does
not depend on the seed, so neither does the bound.
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
    # Every pod at one instant: no window to average over (the replays' mean is 0 too),
    # but a peak all the same, at that instant: one span.
    spans = windows if end > start else 1
    out.spans = spans
    # demand as steps: (time, kind, change)
    events = sorted(
        [(a, 1, p.total_gpu_milli) for p, (a, _) in zip(order, life, strict=True)]
        + [(e, 0, -p.total_gpu_milli) for p, (_, e) in zip(order, life, strict=True)]
    )
    segments: list[list[tuple[int, int]]] = [[] for _ in range(spans)]  # (length, demand)
    # whole seconds, as the replays' own window: the areas below are exact integers
    cuts = [start + k * (end - start) // spans for k in range(spans)] + [end]
    times = sorted({*cuts, *(x for x, _, _ in events if start < x < end)})
    demand, i = 0, 0
    for t, nxt in itertools.pairwise(times):
        while i < len(events) and events[i][0] <= t:  # every change at t, in either order
            demand += events[i][2]
            i += 1
        k = min(bisect.bisect_right(cuts, t) - 1, spans - 1)
        segments[k].append((nxt - t, demand))
    instant = _instant_peaks(order, life, events, cuts, spans)
    area = 0
    for k, segs in enumerate(segments):
        a, b = cuts[k], cuts[k + 1]
        last = k == spans - 1
        top = max((d for _, d in segs), default=0)
        cap = top  # demand alone, unless the span is solved
        alive: list[TracePod] | None = None
        if top >= solve_from * cluster:
            alive = [p for p, (s, e) in zip(order, life, strict=True) if s < b and e > a]
            cap = upper_bound(nodes, alive, method=method).milli
            out.solved.append(k)
        area += sum(length * min(d, cap) for length, d in segs)
        peak = instant[k]
        if peak >= solve_from * cluster:
            # the pods held at an arrival instant of the span: those alive in it, those
            # arriving at its end (the last span) and those leaving as they arrive
            held = [
                p
                for p, (s, e) in zip(order, life, strict=True)
                if (s < b or (last and s == b)) and (e > a or s == a == e)
            ]
            if alive is None or len(held) != len(alive):  # held holds alive: not the same
                cap = upper_bound(nodes, held, method=method).milli
                if k not in out.solved:
                    out.solved.append(k)
            peak = min(peak, cap)
        out.peak_alloc_pct = max(out.peak_alloc_pct, 100.0 * peak / cluster)
    if end > start:
        out.mean_alloc_pct = 100.0 * area / (end - start) / cluster
    out.solve_s = time.perf_counter() - t0
    return out


def _instant_peaks(
    order: Sequence[TracePod],
    life: Sequence[tuple[int, int]],
    events: Sequence[tuple[int, int, int]],
    cuts: Sequence[int],
    spans: int,
) -> list[int]:
    """Per span, the most GPU-milli asked just after the arrivals at one of its arrival
    instants: pods alive then, and those that leave as they arrive (a replay holds one
    until the next arrival: its peak counts it)."""
    zero: dict[int, int] = {}
    for p, (s, e) in zip(order, life, strict=True):
        if e == s:
            zero[s] = zero.get(s, 0) + p.total_gpu_milli
    out = [0] * spans
    demand, i = 0, 0
    for t in sorted({s for s, _ in life}):
        while i < len(events) and events[i][0] <= t:
            demand += events[i][2]
            i += 1
        k = min(bisect.bisect_right(cuts, t) - 1, spans - 1)
        out[k] = max(out[k], demand + zero.get(t, 0))
    return out
