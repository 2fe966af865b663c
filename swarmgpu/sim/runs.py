"""What every replay shares: the arrival order, pod kinds and the result records.

The baselines' replays (``replay``, ``timeline``) and the planner's (``swarm_replay``)
all build on this module and on nothing of each other's, so ``replay`` and ``timeline``
can hand ``policy="swarmgpu"`` to the planner's replay without an import cycle.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from swarmgpu.allocator.fragmentation import TypicalTask, typical_tasks
from swarmgpu.allocator.values import NodeSpec
from swarmgpu.sim.trace import MAX_NUMBER, MAX_ROWS, TraceError, TracePod

LEVEL_STEP = 5
METER_EVERY = 64  # pods between two reports of how far a replay got
# Arrivals between two calls of the defragmenter (--rebalance-moves), in every replay; at 2
# moves per 100 pods about one move per call.
DEFRAG_EVERY = 50

# How far the replay running in this process got: (pods arrived, pods in all). Set by
# the command's progress line (sim.report); None: nobody asks, and nothing is reported.
_meter: Callable[[int, int], None] | None = None


def set_meter(fn: Callable[[int, int], None] | None) -> None:
    global _meter
    _meter = fn


def meter(done: int, total: int) -> None:
    """A replay's progress, every METER_EVERY pods and at its end (results unchanged)."""
    if _meter is not None:
        _meter(done, total)


@dataclass
class RunResult:
    policy: str
    seed: int
    alloc_pct_at: dict[int, float] = field(default_factory=dict)
    frag_pct_at: dict[int, float] = field(default_factory=dict)
    failed_at: dict[int, dict[str, int]] = field(default_factory=dict)
    pods: int = 0
    placed: int = 0
    moves: int = 0
    moves_at: dict[int, int] = field(default_factory=dict)  # moves spent by each level
    decision_s: list[float] = field(default_factory=list)
    # The arrival position (1-based) of the first pod not placed as it arrived, CPU-only
    # ones included; 0: none failed. Every pod before it was placed, and moves never
    # drop one: the online bound (sim.bound_runs) forces them.
    first_failed: int = 0

    def failed_one(self, position: int) -> None:
        if not self.first_failed or position < self.first_failed:
            self.first_failed = position


def pod_kind(p: TracePod) -> str:
    if p.total_gpu_milli == 0:
        return "cpu"
    if p.gpu_milli < 1000:
        return "share"
    return f"{p.num_gpu}gpu" if p.num_gpu in (1, 2, 4, 8) else "other"


def workload_of(pods: Sequence[TracePod]) -> tuple[TypicalTask, ...]:
    return typical_tasks(p.demand().shape() for p in pods)


def check_arrivals(
    nodes: Sequence[NodeSpec], pods: Sequence[TracePod], source: str, inflate: float = 1.3
) -> None:
    """``TraceError`` before a replay whose ``arrival_order`` would draw more than
    ``MAX_ROWS`` pods: pods asking little GPU on a large cluster took millions of
    draws and as many arrivals to replay (hours, and the memory for them)."""
    cluster = sum(len(n.gpus) for n in nodes) * 1000
    asked = sum(p.total_gpu_milli for p in pods)
    need = inflate * cluster - asked
    if need <= 0 or not asked:  # no GPU asked: load_trace refuses it, naming that
        return
    mean = asked / len(pods)
    arrivals = len(pods) + math.ceil(need / mean)
    if arrivals > MAX_ROWS:
        raise TraceError(
            f"{source}: its pods ask {asked:,} GPU-milli in all, {mean:,.3g} a pod: reaching "
            f"{inflate:.0%} of the cluster's {cluster:,} would take about {arrivals:,} "
            f"arrivals, more than the {MAX_ROWS:,} simulate replays; give a pod list asking "
            "more GPU or a node list with fewer GPUs (--departures replays the list as it is)"
        )


def arrival_order(
    pods: Sequence[TracePod], cluster_milli: int, seed: int, inflate: float = 1.3
) -> tuple[list[TracePod], random.Random]:
    """Shuffled originals plus resampled copies up to ``inflate`` x cluster GPU-milli."""
    rng = random.Random(seed)  # noqa: S311 - simulation, not security
    order = sorted(pods, key=lambda p: p.name)
    rng.shuffle(order)
    total = sum(p.total_gpu_milli for p in order)
    limit = inflate * cluster_milli
    originals = sorted(pods, key=lambda p: p.name)
    extra: list[TracePod] = []
    while True:
        p = rng.choice(originals)
        if total + p.total_gpu_milli > limit:
            break
        total += p.total_gpu_milli
        extra.append(p)
    return order + extra, rng


@dataclass
class TimelineResult:
    policy: str
    seed: int
    pods: int = 0
    placed: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    failed_gpu_milli: int = 0
    asked_gpu_milli: int = 0
    mean_alloc_pct: float = 0.0
    mean_demand_pct: float = 0.0
    peak_alloc_pct: float = 0.0
    moves: int = 0
    span_s: int = 0


def timed_pods(
    pods: Sequence[TracePod], source: str = "the pod file", option: str = "--departures"
) -> list[TracePod]:
    """The pods in arrival order; every pod must carry both times (``option``: the one
    that replays them so, named in the error)."""
    missing = [p.name for p in pods if p.creation_time is None or p.deletion_time is None]
    if missing:
        why = "" if option == "--departures" else " (it replays the pods' arrivals and departures)"
        raise TraceError(
            f"{source}: {len(missing)} pod(s) (first {missing[0]}) have no creation_time/"
            f"deletion_time, which {option} needs{why}; use an 11-column openb pod file "
            f"(e.g. openb_pod_list_default.csv) or run without {option}"
        )
    return sorted(pods, key=lambda p: (p.creation_time or 0, p.name))


# The least --speedup: a trace's times (up to MAX_NUMBER s) compressed by less are
# stretched past what a float holds (an OverflowError in arrival_times).
MIN_SPEEDUP = 1 / MAX_NUMBER


def speedup_problem(speedup: float) -> str | None:
    """Why ``--speedup`` cannot replay a trace, or None."""
    if not (math.isfinite(speedup) and speedup > 0):  # NaN fails every comparison
        return f"--speedup {speedup:g}: must be > 0 (1 = the trace's own times)"
    if speedup < MIN_SPEEDUP:
        return (f"--speedup {speedup:g}: must be at least {MIN_SPEEDUP:g} (1 = the trace's "
                "own times; slower, its times are past what the replay counts)")
    return None


def arrival_times(p: TracePod, speedup: float) -> tuple[int, int]:
    """(arrival, departure) of a pod with arrivals compressed ``speedup`` times."""
    c, e = p.creation_time or 0, p.deletion_time or 0
    a = int(c / speedup)
    return a, a + max(e - c, 0)


@dataclass
class Window:
    """Time-weighted allocated and demanded GPU-milli over the arrival window."""

    now: int
    allocated: int = 0
    demanded: int = 0
    area_alloc: float = 0.0
    area_demand: float = 0.0

    def advance(self, t: int) -> None:
        if t > self.now:
            self.area_alloc += self.allocated * (t - self.now)
            self.area_demand += self.demanded * (t - self.now)
            self.now = t

    def close(self, res: TimelineResult, start: int, cluster_milli: int) -> None:
        """The window's span and time-weighted means, into ``res``."""
        res.span_s = self.now - start
        if res.span_s > 0:
            res.mean_alloc_pct = 100.0 * self.area_alloc / res.span_s / cluster_milli
            res.mean_demand_pct = 100.0 * self.area_demand / res.span_s / cluster_milli


def level_prefixes(
    order: Sequence[TracePod], cluster_milli: int, inflate: float = 1.3, step: int = LEVEL_STEP
) -> dict[int, int]:
    """Arrived-load level -> how many pods of ``order`` had arrived when the replays
    recorded it (the pod whose arrival reached the level included; levels the last copy
    stops short of: every pod), by the replays' own rule."""
    out: dict[int, int] = {}
    arrived = 0
    next_level, last_level = step, int(inflate * 100)
    for n, pod in enumerate(order, start=1):
        arrived += pod.total_gpu_milli
        while next_level <= last_level and arrived * 100 >= next_level * cluster_milli:
            out[next_level] = n
            next_level += step
    while next_level <= last_level:
        out[next_level] = len(order)
        next_level += step
    return out
