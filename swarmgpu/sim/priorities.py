"""Priorities in the simulator (``simulate --priorities SHARE``): the departures timeline
through the daemon's planner, with a queue, run twice -- without priorities, and with a
share of the GPU pods given priority 100 (the rest 0) and preemption on.

Unlike the departures replay (a pod that does not fit when first planned is dropped),
here a pod that does not fit waits: its service stays, pending, and every cycle plans it
again, higher priority first (``placement.preempt.serve_order``); its wait is the time
from its arrival to the cycle that places it. Cycles run every ``interval_s`` of trace
time (1 s: the daemon plans on every service event) while something waits or
arrived, and a pod's lifetime starts when it is placed.

With priorities, after each cycle ``placement.preempt.choose_preemptions`` (the daemon's
own decision, victims of priority 0 for pending pods of priority 100) runs, and each
victim is stopped as ``manager.cycle.preemption`` stops one (its ledger entry and gate go): it
waits again and, when placed anew, runs its whole lifetime again (the work is lost). A
cycle right after the preemptions places the preemptors (the daemon triggers one a second
later). Victims are never moved here (no mover in the simulator).

Reported per class (high, batch): pods, started, mean / median / p95 wait, never started
within the window, and preemptions (times its pods were stopped); and the time-weighted
mean GPU allocation of the window, beside the run without priorities.
"""

from __future__ import annotations

import heapq
import json
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from swarmgpu.allocator.values import Choice, Demand, NodeSpec
from swarmgpu.manager.placement import Planner, assign_key, devices_key, gate_key
from swarmgpu.manager.placement.preempt import choose_preemptions
from swarmgpu.sim.runs import METER_EVERY, Window, arrival_times, meter, timed_pods
from swarmgpu.sim.swarm_replay import P, World, workload_model
from swarmgpu.sim.trace import TraceError, TracePod, load_nodes, load_pods
from swarmgpu.swarm.client import SwarmNode, service_from_api

HIGH = 100
INTERVAL_S = 1


@dataclass
class ClassResult:
    pods: int = 0
    started: int = 0
    waits: list[int] = field(default_factory=list)  # seconds, per started pod
    preempted: int = 0  # times a pod of this class was stopped

    def to_dict(self) -> dict[str, Any]:
        w = sorted(self.waits)
        return {"pods": self.pods, "started": self.started,
                "never_started": self.pods - self.started,
                "mean_wait_s": round(statistics.fmean(w), 1) if w else None,
                "median_wait_s": statistics.median(w) if w else None,
                "p95_wait_s": w[min(len(w) - 1, int(0.95 * len(w)))] if w else None,
                "preempted": self.preempted}


@dataclass
class PriorityResult:
    seed: int
    priorities: bool
    classes: dict[str, ClassResult] = field(default_factory=dict)
    mean_alloc_pct: float = 0.0
    preemptions: int = 0  # decisions (each stops one or more victims)

    def to_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "priorities": self.priorities,
                "mean_alloc_pct": round(self.mean_alloc_pct, 2),
                "preemptions": self.preemptions,
                "classes": {k: v.to_dict() for k, v in sorted(self.classes.items())}}


def high_pods(pods: Sequence[TracePod], share: float, seed: int) -> set[str]:
    """The names of ``share`` of the GPU pods, drawn with ``seed`` (the same in both runs)."""
    gpu = sorted(p.name for p in pods if p.total_gpu_milli > 0)
    rng = random.Random(seed)  # noqa: S311 - a reproducible draw, not a secret
    return set(rng.sample(gpu, round(share * len(gpu))))


def replay_priorities(nodes: Sequence[NodeSpec], pods: Sequence[TracePod], seed: int, *,
                      share: float, priorities: bool, speedup: float = 1.0,
                      workload: str = "online", interval_s: int = INTERVAL_S,
                      source: str = "the pod file") -> PriorityResult:
    if not 0 <= share <= 1:
        raise ValueError(f"share {share:g}: must be between 0 and 1")
    order = timed_pods(pods, source)
    high = high_pods(order, share, seed)
    cluster_milli = sum(len(n.gpus) for n in nodes) * 1000
    rng = random.Random(seed)  # noqa: S311 - node order only
    ranks = list(range(len(nodes)))
    rng.shuffle(ranks)
    world = World.of(nodes, ranks)
    planner = Planner(workload=workload_model(workload, pods))
    planner.cluster.explain = False
    res = PriorityResult(seed, priorities, {"high": ClassResult(), "batch": ClassResult()})
    waiting: dict[str, int] = {}  # service id -> when it (last) started waiting
    arrived_at: dict[str, int] = {}  # service id -> arrival (first wait)
    lifetime: dict[str, int] = {}
    leaving: list[tuple[int, int, str]] = []  # (time, generation, service id or cpu key)
    gen: dict[str, int] = {}  # a preempted pod's old departure is stale
    klass: dict[str, str] = {}
    start = arrival_times(order[0], speedup)[0] if order else 0
    w = Window(start)

    def running_milli(sid: str) -> int:
        s = world.services.get(sid)
        pod = world.pods.get(s.name) if s is not None else None
        return pod.total_gpu_milli if pod is not None else 0

    def cycle() -> None:
        plan = planner.plan(list(world.nodes.values()), list(world.services.values()),
                            world.all_tasks(), world.facts, now=float(w.now))
        world.apply(plan)
        for sp in plan.services:
            if sp.id in waiting and sp.placements:
                del waiting[sp.id]
                c = res.classes[klass[sp.id]]
                if sp.id in arrived_at:  # its first start: the wait the user sees
                    c.started += 1
                    c.waits.append(w.now - arrived_at.pop(sp.id))
                w.allocated += running_milli(sp.id)
                gen[sp.id] = gen.get(sp.id, 0) + 1
                heapq.heappush(leaving, (w.now + lifetime[sp.id], gen[sp.id], sp.id))
        if not priorities or not any(
                sp.status == "pending" and sp.request is not None and sp.request.priority
                for sp in plan.services):
            return  # only a pending high pod preempts: skip the decision's ledger read
        chosen = choose_preemptions(plan, list(world.nodes.values()),
                                    list(world.services.values()), world.all_tasks(),
                                    world.facts, prefix=P, preemptible_below=HIGH)
        for p in chosen:
            res.preemptions += 1
            for v in p.victims:
                stop(v.service_id, v.node_id)
        if chosen:
            cycle()  # the daemon plans again right after (its trigger)

    def stop(sid: str, node_id: str) -> None:
        s = world.services[sid]
        n = world.nodes[node_id]
        drop = {assign_key(P, s.name), gate_key(P, s.name)}
        world.nodes[node_id] = SwarmNode(**{**n.__dict__, "labels": {
            k: v for k, v in n.labels.items() if k not in drop}, "version": n.version + 1})
        dk = devices_key(P, node_id)
        labels = {k: v for k, v in s.labels.items() if not (k == dk or k.startswith(dk + "."))}
        s = service_from_api({"ID": sid, "Spec": {**s.spec, "Labels": labels},
                              "Version": {"Index": s.version + 1}})
        world.services[sid] = s
        world.tasks[sid] = world._task(s, "")
        gen[sid] = gen.get(sid, 0) + 1  # its departure is void: it runs again from 0
        w.allocated -= running_milli(sid)
        waiting[sid] = w.now
        res.classes[klass[sid]].preempted += 1

    def grid(x: int) -> int:  # the first cycle time at or after x
        return start + -(-(x - start) // interval_s) * interval_s

    def until(t: int) -> None:
        """Advance to ``t``: departures, and a cycle every ``interval_s`` while a pod
        waits (the cycles of the daemon's interval; none is needed while nothing waits)."""
        while True:
            due = leaving[0][0] if leaving else None
            nxt = grid(w.now)
            if waiting and nxt <= t and (due is None or nxt <= due):
                w.advance(nxt)
                cycle()
                w.advance(nxt + 1)  # one cycle per grid point
                continue
            if due is None or due > t:
                break
            _, g, key = heapq.heappop(leaving)
            w.advance(due)
            if key in world.cpu_tasks:
                task = world.cpu_tasks.pop(key)
                world.services.pop(key, None)
                planner.cluster.add_usage(task.node_id, -task.cpu_milli, -task.memory_mib)
            elif key in world.services and gen.get(key) == g:
                w.allocated -= running_milli(key)
                world.remove_service(key)
        w.advance(t)

    for tid, pod in enumerate(order, start=1):
        if tid % METER_EVERY == 0:
            meter(tid, len(order))
        arrive, leave = arrival_times(pod, speedup)
        until(arrive)
        if pod.total_gpu_milli == 0:  # CPU-only: placed at once, as the departures replay
            got = planner.cluster.alloc.place(
                Demand(cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib), explain=False)
            if isinstance(got, Choice):
                key = f"cpu{tid}"
                world.add_cpu_task(key, got.node, pod)
                planner.cluster.add_usage(got.node, pod.cpu_milli, pod.memory_mib)
                heapq.heappush(leaving, (leave, 0, key))
            continue
        s = world.add_service(tid, pod)
        is_high = pod.name in high
        klass[s.id] = "high" if is_high else "batch"
        res.classes[klass[s.id]].pods += 1
        if priorities and is_high:
            spec = {**s.spec, "Labels": {**s.labels, f"{P}priority": str(HIGH)}}
            s = service_from_api({"ID": s.id, "Spec": spec, "Version": {"Index": 1}})
            world.services[s.id] = s
        waiting[s.id] = arrived_at[s.id] = arrive
        lifetime[s.id] = leave - arrive
    if waiting:
        cycle()
    span = w.now - start
    res.mean_alloc_pct = 100.0 * w.area_alloc / span / cluster_milli if span > 0 else 0.0
    return res


def run(nodes: Sequence[NodeSpec], pods: Sequence[TracePod], seeds: Sequence[int], *,
        share: float, speedup: float = 1.0, workload: str = "online",
        source: str = "the pod file") -> dict[str, list[PriorityResult]]:
    """Each seed without and with priorities."""
    out: dict[str, list[PriorityResult]] = {"without": [], "with": []}
    for seed in seeds:
        for key, on in (("without", False), ("with", True)):
            out[key].append(replay_priorities(nodes, pods, seed, share=share, priorities=on,
                                              speedup=speedup, workload=workload,
                                              source=source))
    return out


def as_text(results: dict[str, list[PriorityResult]], share: float) -> str:
    lines = [f"priorities: {share:.0%} of the GPU pods at priority {HIGH}, the rest 0; "
             "a pod waits until placed (a cycle per second of trace time while one waits)", ""]
    head = ["run", "class", "pods", "started", "mean wait s", "median s", "p95 s",
            "never started", "preempted", "mean alloc%"]
    rows = [head]
    for key, runs in results.items():
        for r in runs:
            for name, c in sorted(r.classes.items()):
                d = c.to_dict()
                rows.append([f"{key} (seed {r.seed})", name, str(d["pods"]), str(d["started"]),
                             _num(d["mean_wait_s"]), _num(d["median_wait_s"]),
                             _num(d["p95_wait_s"]), str(d["never_started"]),
                             str(d["preempted"]), f"{r.mean_alloc_pct:.2f}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines += ["  ".join(c.ljust(wd) for c, wd in zip(r, widths, strict=True)).rstrip()
              for r in rows]
    return "\n".join(lines) + "\n\n" + COLUMNS


COLUMNS = """\
columns (one row per run, seed and priority class; waits in seconds of trace time):
  run            without: no pod has a priority; with: the drawn share has priority
                 100 and preemption is on
  class          high: the pods given priority 100; batch: the rest (priority 0)
  pods           GPU pods of the class that arrived
  started        of them, placed at least once within the window
  mean wait s    arrival to first placement, mean over the started pods
  median s       the same, median
  p95 s          the same, 95th percentile
  never started  pods still waiting when the window ended
  preempted      times a pod of the class was stopped for a higher-priority one
  mean alloc%    time-weighted mean allocated GPU share of the run (both classes)"""


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:g}"


def run_cli(nodes_path: str, pods_path: str, seeds: Sequence[int], share: float,
            speedup: float, workload: str, as_json: bool) -> tuple[str, int]:
    """``simulate --priorities SHARE``: (text to print, exit code; 2 on a bad option)."""
    if not 0 < share < 1:
        return (f"swarmgpu simulate: --priorities {share:g}: a share of the GPU pods, "
                "strictly between 0 and 1 (e.g. 0.1)", 2)
    if speedup <= 0:
        return (f"swarmgpu simulate: --speedup {speedup:g}: must be > 0", 2)
    try:
        results = run(load_nodes(nodes_path), load_pods(pods_path), seeds, share=share,
                      speedup=speedup, workload=workload, source=pods_path)
    except TraceError as e:
        return (f"swarmgpu simulate: {e}", 2)
    if as_json:
        return (json.dumps({k: [r.to_dict() for r in v] for k, v in results.items()},
                           indent=2), 0)
    return (as_text(results, share), 0)
