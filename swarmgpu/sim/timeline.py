"""Replay with departures: pods arrive at ``creation_time`` and leave at ``deletion_time``.

The FGD paper's replay has no time axis; this one judges placement while work also
leaves. Each original pod (no resampled copies) is tried once when it arrives, in
(creation_time, name) order; a placed pod gives its resources back at its deletion time
(departures at an instant go before arrivals at it). A failed pod is dropped.

Measured over the arrival window (first arrival to last arrival; the drain after the last
arrival, when nothing new can fail, is left out):
- ``mean_alloc_pct``: time-weighted mean of allocated GPU-milli / cluster GPU-milli;
- ``mean_demand_pct``: the same for the GPU-milli of pods that would be running had every
  pod been placed (the ceiling ``mean_alloc_pct`` can reach);
- ``peak_alloc_pct``: the highest allocation at any instant;
- failed pods, by kind, and the GPU-milli they asked for; moves spent by the rebalancer.

``speedup`` K > 1 divides the arrival times by K and keeps each pod's lifetime: the same
pods, arriving K times as fast, so K times as much work runs at once. (At K = 1 the openb
trace never asks for more than about 1% of its cluster at once; every policy places it.)
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from collections.abc import Sequence

from swarmgpu.allocator.values import Choice, NodeSpec
from swarmgpu.sim.rebalance import Rebalancer, Running, apply_moves
from swarmgpu.sim.replay import (
    Defrag,
    build_allocator,
    make_scorer,
    place_random,
)
from swarmgpu.sim.runs import (
    DEFRAG_EVERY,
    METER_EVERY,
    TimelineResult,
    Window,
    arrival_times,
    meter,
    pod_kind,
    timed_pods,
    workload_of,
)
from swarmgpu.sim.trace import TracePod


def replay_departures(nodes: Sequence[NodeSpec], pods: Sequence[TracePod], policy: str,
                      seed: int, *, rebalancer: Rebalancer | None = None,
                      moves_per_100: float = 0.0, source: str = "the pod file",
                      speedup: float = 1.0, defrag: Defrag | None = None) -> TimelineResult:
    """One time-axis replay (see the module text for what is measured). Moves, at most
    ``moves_per_100`` per 100 arrived pods so far: ``rebalancer`` for a pod that finds no
    node, ``defrag`` every ``DEFRAG_EVERY`` arrivals."""
    if speedup <= 0:
        raise ValueError(f"speedup={speedup}: must be > 0 (1 = the trace's own times)")
    if policy == "swarmgpu":
        if rebalancer is not None or defrag is not None:
            raise ValueError("swarmgpu's moves replay through the planner: "
                             "sim.swarm_replay.replay_departures_planner(defrag=...)")
        from swarmgpu.sim.swarm_replay import replay_departures_planner

        return replay_departures_planner(nodes, pods, seed, speedup=speedup, source=source)
    order = timed_pods(pods, source)

    cluster_milli = sum(len(n.gpus) for n in nodes) * 1000
    rng = random.Random(seed)  # noqa: S311 - node order and the random policy only
    workload = workload_of(pods)
    alloc = build_allocator(nodes, make_scorer("bestfit" if policy == "random" else policy,
                                               workload), rng)
    res = TimelineResult(policy, seed, pods=len(order))
    failed: Counter[str] = Counter()
    running: Running = {}
    where: dict[int, str] = {}  # task id -> node, for departures of moved tasks
    leaving: list[tuple[int, int]] = []  # (deletion_time, task id)
    wanted: list[tuple[int, int]] = []  # (deletion_time, GPU-milli) of every arrived pod
    start = arrival_times(order[0], speedup)[0] if order else 0
    w = Window(start)

    def depart_until(t: int) -> None:
        while wanted and wanted[0][0] <= t:
            when, milli = heapq.heappop(wanted)
            w.advance(when)
            w.demanded -= milli
            while leaving and leaving[0][0] <= when:
                _, tid = heapq.heappop(leaving)
                node = where.pop(tid)
                td, tc = running[node].pop(tid)
                alloc.release(tc)
                w.allocated -= td.total_gpu_milli

    for tid, pod in enumerate(order, start=1):
        if tid % METER_EVERY == 0:
            meter(tid, len(order))
        arrive, leave = arrival_times(pod, speedup)
        depart_until(arrive)
        w.advance(arrive)
        if defrag is not None and tid % DEFRAG_EVERY == 0:
            budget = int(tid * moves_per_100 / 100) - res.moves
            if budget >= 1:
                res.moves += apply_moves(running, defrag(alloc, running, budget), where)
        d = pod.demand()
        w.demanded += pod.total_gpu_milli
        res.asked_gpu_milli += pod.total_gpu_milli
        heapq.heappush(wanted, (leave, pod.total_gpu_milli))
        if policy == "random":
            choice: Choice | None = place_random(alloc, d, rng)
        else:
            got = alloc.place(d, explain=False)
            choice = got if isinstance(got, Choice) else None
        if choice is not None:
            alloc.commit(choice)
        elif rebalancer is not None:
            budget = int(tid * moves_per_100 / 100) - res.moves
            rescue = rebalancer(alloc, running, d, budget) if budget >= 1 else None
            if rescue is not None:
                res.moves += apply_moves(running, rescue.moves, where)
                choice = rescue.placed
        if choice is None:
            failed[pod_kind(pod)] += 1
            res.failed_gpu_milli += pod.total_gpu_milli
            continue
        running.setdefault(choice.node, {})[tid] = (d, choice)
        where[tid] = choice.node
        heapq.heappush(leaving, (leave, tid))
        w.allocated += pod.total_gpu_milli
        res.placed += 1
        res.peak_alloc_pct = max(res.peak_alloc_pct, 100.0 * w.allocated / cluster_milli)
    if order:  # close the window at the last arrival
        w.advance(arrival_times(order[-1], speedup)[0])
    res.failed = dict(failed)
    w.close(res, start, cluster_milli)
    return res
