"""Priorities in the simulator (``simulate --priorities SHARE``): the departures timeline
through the daemon's planner, with a queue, run twice -- without priorities, and with a
share of the GPU pods given priority 100 (the rest 0) and preemption on.

Unlike the departures replay (a pod that does not fit when first planned is dropped),
here a pod that does not fit waits: its service stays, pending, and every cycle plans it
again, higher priority first (``placement.preempt.serve_order``); its wait is the time
from its arrival to the cycle that places it. Cycles run every ``interval_s`` of trace
time (1 s: the daemon plans on every service event) while something waits or
arrived, and a pod's lifetime starts when it is placed. A CPU-only pod is a
``swarmgpu.gpus: "0"`` service (priority 0) the planner places by its CPU and memory; it
waits as a GPU pod does and is counted apart (``cpu_pods`` in the JSON), not in the
classes, nor in the contended span's start (until stop 68 the planner's allocator put it
on a node at arrival, a stand-in no daemon runs, and one that found none was lost).

With priorities, after each cycle the daemon's own decision runs: ``manager.cycle.
preemption.Preempter.decide`` (``placement.preempt.choose_preemptions``, victims of
priority 0 for pending pods of priority 100, with what the daemon passes it: the
planner's refused nodes and port takers, the victims cooling down and the preemptors
settling, kept by one ``Preempter`` per run as the daemon keeps them, on the trace's
clock, at the config's defaults ``victim_cooldown_s`` 600 s and ``settle_s`` 30 s).
Until stop 68 the replay called ``choose_preemptions`` bare: the cycle right after a
preemption, seeing its preemptor still pending (the GPUs freed taken by older high
pods that do not preempt, sharing ones), preempted again for it on another node. Each
cycle's plan is passed the GPUs the Preempter holds for its preemptors while they settle
(``Preempter.nominated``, ``placement.nominated``), as the daemon's placement step is:
until stop 69 nothing held them, so older high sharing pods took them and the preemptor,
still pending when its settle time had passed, stopped another victim. Each
victim is stopped as ``manager.cycle.preemption`` stops one (its ledger entry and gate
go): it waits again and, when placed anew, runs its whole lifetime again (the work is
lost). A cycle right after the preemptions places the preemptors (the daemon triggers
one a second later). Victims are never moved here (no mover in the simulator).

Reported per class (high, batch): pods, started, mean / median / p95 wait, never started
within the window, and preemptions (times its pods were stopped); and the time-weighted
mean GPU allocation of the window, beside the run without priorities, and of its
contended part: from the first cycle that left a pod waiting in the run without
priorities to the end of that run's window (the same span in every run of the seed; a
run's window ends when its own queue empties, so until stop 68 each run was measured to
its own end, and a run whose last pod started later had its quiet tail averaged in).
How much later (or earlier) each run's own window ended is reported beside it
(``ended_later_s``), and its allocation to its own end kept in ``--json``
(``own_end_contended_alloc_pct``). A run that ended earlier is carried on to the span's
end: nothing waits by then, only its departures happen.

A third run (``tenants``) adds the operator's tenants (``manager.tenants``, the daemon's
own rules): each GPU pod's service belongs to stack ``inference`` or ``research`` (a
seeded coin flip), the config gives ``inference`` a priority ceiling of 100 and
``research`` one of 50, and both label their high pods 100; research's are capped at 50
(they still pass batch pods and may preempt them, and are preemptible by inference's).
Its classes are reported per tenant (``inference:high``, ``research:batch``, ...).
Preemption budgets (``max_per_hour``, per tenant ``preemptions_per_hour``) are not
applied here (``Preempter.over_budget`` is not run): every preemption decided is made.
"""

from __future__ import annotations

import heapq
import json
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from swarmgpu.allocator.values import NodeSpec
from swarmgpu.core.config import Config, PreemptionConfig, parse_priority_classes
from swarmgpu.core.tenants import STACK_LABEL, parse_tenants
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Planner, assign_key, devices_key, gate_key
from swarmgpu.manager.services.tenants import Tenants
from swarmgpu.sim.runs import (
    METER_EVERY,
    Window,
    arrival_times,
    meter,
    speedup_problem,
    timed_pods,
)
from swarmgpu.sim.swarm_replay import P, World, workload_model
from swarmgpu.sim.trace import TraceError, TracePod, load_trace, say_unplaceable
from swarmgpu.swarm.client import SwarmNode, service_from_api

HIGH = 100
INTERVAL_S = 1
# The tenants run: the config section it stands for (docs/requests.md, "Tenants").
SIM_TENANTS: dict[str, Any] = {
    "inference": {"stacks": ["inference"], "max_priority": HIGH},
    "research": {"stacks": ["research"], "max_priority": 50},
}
RUNS = ("without", "with", "tenants")
# The daemon's preemption settings (their defaults): its settle time and victim
# cooldown decide here as there; its budgets are not applied (``Preempter.decide`` is
# run, not ``over_budget``).
SIM_CONFIG = Config(preemption=PreemptionConfig(dry_run=False, preemptible_below=HIGH))


def sim_tenants() -> Tenants:
    specs, own, errors = parse_tenants(
        SIM_TENANTS, {}, parse_priority_classes("critical=1000,inference=100,batch=0"), 10
    )
    if errors:  # a constant: a change to the config's rules would show here
        raise ValueError(f"the simulator's tenants no longer parse: {errors}")
    return Tenants(specs, own, P)


def tenant_of(name: str, seed: int) -> str:
    """The stack of pod ``name`` in the tenants run: a coin flip per pod and seed."""
    return "inference" if random.Random(f"{seed}:{name}").random() < 0.5 else "research"  # noqa: S311


@dataclass
class ClassResult:
    pods: int = 0
    started: int = 0
    waits: list[int] = field(default_factory=list)  # seconds, per started pod
    preempted: int = 0  # times a pod of this class was stopped

    def to_dict(self) -> dict[str, Any]:
        w = sorted(self.waits)
        return {
            "pods": self.pods,
            "started": self.started,
            "never_started": self.pods - self.started,
            "mean_wait_s": round(statistics.fmean(w), 1) if w else None,
            "median_wait_s": statistics.median(w) if w else None,
            "p95_wait_s": w[min(len(w) - 1, int(0.95 * len(w)))] if w else None,
            "preempted": self.preempted,
        }


@dataclass
class PriorityResult:
    seed: int
    priorities: bool
    classes: dict[str, ClassResult] = field(default_factory=dict)
    mean_alloc_pct: float = 0.0
    preemptions: int = 0  # decisions (each stops one or more victims)
    tenants: bool = False
    # The contended span: from the first cycle that left a GPU pod waiting (in the run
    # without priorities; None: none did) to the end of that run's window; the mean
    # allocation over it. ``ended_later_s``: this run's own window end minus the span's.
    contended_from: int | None = None
    contended_s: int = 0
    contended_alloc_pct: float | None = None
    ended_later_s: int = 0
    # The same from the span's start to this run's own end (the figure until stop 68)
    own_end_contended_s: int = 0
    own_end_contended_alloc_pct: float | None = None
    # The CPU-only pods (``gpus: "0"`` services, priority 0), apart from the GPU classes
    cpu: ClassResult = field(default_factory=ClassResult)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "priorities": self.priorities,
            "tenants": self.tenants,
            "mean_alloc_pct": round(self.mean_alloc_pct, 2),
            "contended_s": self.contended_s,
            "contended_alloc_pct": _r2(self.contended_alloc_pct),
            "ended_later_s": self.ended_later_s,
            "own_end_contended_s": self.own_end_contended_s,
            "own_end_contended_alloc_pct": _r2(self.own_end_contended_alloc_pct),
            "preemptions": self.preemptions,
            "classes": {k: v.to_dict() for k, v in sorted(self.classes.items())},
            "cpu_pods": self.cpu.to_dict(),
        }


def _r2(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


class _Steps(Window):
    """The window, keeping the allocation's steps so any span's mean can be read."""

    def __init__(self, now: int) -> None:
        super().__init__(now)
        self.steps: list[tuple[int, int, int]] = []  # (from, to, allocated)

    def advance(self, t: int) -> None:
        if t > self.now:
            self.steps.append((self.now, t, self.allocated))
        super().advance(t)

    def mean_between(self, t0: int, t1: int) -> float:
        """Mean allocated GPU-milli from ``t0`` to ``t1`` (at most now; 0 over an empty
        span)."""
        t1 = min(t1, self.now)
        if t1 <= t0:
            return 0.0
        area = sum(a * (min(b, t1) - max(f, t0)) for f, b, a in self.steps if b > t0 and f < t1)
        return area / (t1 - t0)


def high_pods(pods: Sequence[TracePod], share: float, seed: int) -> set[str]:
    """The names of ``share`` of the GPU pods, drawn with ``seed`` (the same in both runs)."""
    gpu = sorted(p.name for p in pods if p.total_gpu_milli > 0)
    rng = random.Random(seed)  # noqa: S311 - a reproducible draw, not a secret
    return set(rng.sample(gpu, round(share * len(gpu))))


def _idle_steps_end(now: int, limit: int, start: int, interval_s: int) -> int:
    """Where the drain's steps (``until(now + interval_s)`` each) reach from ``now`` while
    nothing changes, stopping before the first whose end is ``limit`` or later (the next
    departure, or the drain's end, which the ordinary steps take). Each such step only
    moves the clock, alike: two grid points at an interval of 1 s (every second is one),
    else one interval from off the grid; taken one by one, a drain of 10**12 s with a pod
    that never starts stepped for weeks, a window step kept for each."""
    if interval_s > 1 and (now - start) % interval_s == 0:
        return now  # on a grid point: one ordinary step first, which leaves it
    step = 2 if interval_s == 1 else interval_s
    return now + max(0, (limit - 1 - interval_s - now) // step + 1) * step


def replay_priorities(
    nodes: Sequence[NodeSpec],
    pods: Sequence[TracePod],
    seed: int,
    *,
    share: float,
    priorities: bool,
    speedup: float = 1.0,
    workload: str = "online",
    interval_s: int = INTERVAL_S,
    source: str = "the pod file",
    tenants: bool = False,
    contended_from: int | None = None,
    contended_to: int | None = None,
    find_contention: bool = True,
    drain_s: int = 0,
) -> PriorityResult:
    """One run; ``tenants`` (priorities on) adds ``SIM_TENANTS``. ``contended_from``: the
    contended span's start to measure over; without it the run finds its own (unless
    ``find_contention`` is False: another run of the seed found none). ``contended_to``:
    the span's end (the run that found the start: its own end). ``drain_s``:
    after the last arrival the window goes on up to this long while pods wait (they
    start as others leave); in it a cycle runs only when something changed since the
    last one (a departure, a preemption, a cycle that placed or wrote)."""
    if not 0 <= share <= 1:
        raise ValueError(f"share {share:g}: must be between 0 and 1")
    order = timed_pods(pods, source, "--priorities")
    high = high_pods(order, share, seed)
    cluster_milli = sum(len(n.gpus) for n in nodes) * 1000
    rng = random.Random(seed)  # noqa: S311 - node order only
    ranks = list(range(len(nodes)))
    rng.shuffle(ranks)
    world = World.of(nodes, ranks)
    tenancy = sim_tenants() if tenants else None
    planner = Planner(workload=workload_model(workload, pods), tenants=tenancy)
    planner.cluster.explain = False
    preempter = Preempter(SIM_CONFIG)
    priorities = priorities or tenants
    res = PriorityResult(
        seed,
        priorities,
        {} if tenants else {"high": ClassResult(), "batch": ClassResult()},
        tenants=tenants,
        contended_from=contended_from,
    )
    waiting: dict[str, int] = {}  # service id -> when it (last) started waiting
    arrived_at: dict[str, int] = {}  # service id -> arrival (first wait)
    lifetime: dict[str, int] = {}
    leaving: list[tuple[int, int, str]] = []  # (time, generation, service id)
    gen: dict[str, int] = {}  # a preempted pod's old departure is stale
    klass: dict[str, str] = {}  # GPU pods' services only
    start = arrival_times(order[0], speedup)[0] if order else 0
    w = _Steps(start)

    def running_milli(sid: str) -> int:
        s = world.services.get(sid)
        pod = world.pods.get(s.name) if s is not None else None
        return pod.total_gpu_milli if pod is not None else 0

    def class_of(sid: str) -> ClassResult:
        return res.classes[klass[sid]] if sid in klass else res.cpu

    dirty = [True]  # something changed since the last cycle (read in the drain)

    def cycle() -> None:
        dirty[0] = False
        plan = planner.plan(
            list(world.nodes.values()),
            list(world.services.values()),
            world.all_tasks(),
            world.facts,
            now=float(w.now),
            nominated=preempter.nominated.current(float(w.now)),  # as the daemon holds them
        )
        world.apply(plan)
        if (
            plan.node_set
            or plan.node_remove
            or any(
                (sp.placements and sp.id in waiting) or sp.needs_service_write or sp.node_writes
                for sp in plan.services
            )
        ):
            dirty[0] = True  # writes to land, gates to open: the next cycle goes on
        if (
            find_contention
            and res.contended_from is None
            and any(
                sp.id in waiting
                and sp.id in klass  # a GPU pod (a CPU-only one waiting is not counted)
                and not sp.placements
                and sp.status == "pending"
                for sp in plan.services
            )
        ):
            res.contended_from = w.now  # a pod is left waiting: contention from here
        for sp in plan.services:
            if sp.id in waiting and sp.placements:
                del waiting[sp.id]
                c = class_of(sp.id)
                if sp.id in arrived_at:  # its first start: the wait the user sees
                    c.started += 1
                    c.waits.append(w.now - arrived_at.pop(sp.id))
                w.allocated += running_milli(sp.id)
                gen[sp.id] = gen.get(sp.id, 0) + 1
                heapq.heappush(leaving, (w.now + lifetime[sp.id], gen[sp.id], sp.id))
        if not priorities or not any(
            sp.status == "pending" and sp.request is not None and sp.request.priority
            for sp in plan.services
        ):
            return  # only a pending high pod preempts: skip the decision's ledger read
        # The daemon's Preempter decides (its settle times and cooldowns, and the
        # planner's refused nodes and port takers, as the daemon's cycle passes them).
        snap = Snapshot(
            list(world.nodes.values()), list(world.services.values()), world.all_tasks(), {}
        )
        chosen = preempter.decide(
            snap, plan, world.facts, planner.refused_nodes, float(w.now), planner.port_takers,
            mono=float(w.now),  # the sim's one clock serves both of the daemon's
        )
        for p in chosen:
            res.preemptions += 1
            preempter.took(p, list(p.victims), float(w.now))
            for v in p.victims:
                stop(v.service_id, v.node_id)
        if chosen:
            cycle()  # the daemon plans again right after (its trigger)

    def stop(sid: str, node_id: str) -> None:
        s = world.services[sid]
        n = world.nodes[node_id]
        drop = {assign_key(P, s.name), gate_key(P, s.name)}
        world.nodes[node_id] = SwarmNode(
            **{
                **n.__dict__,
                "labels": {k: v for k, v in n.labels.items() if k not in drop},
                "version": n.version + 1,
            }
        )
        dk = devices_key(P, node_id)
        labels = {k: v for k, v in s.labels.items() if not (k == dk or k.startswith(dk + "."))}
        s = service_from_api(
            {"ID": sid, "Spec": {**s.spec, "Labels": labels}, "Version": {"Index": s.version + 1}}
        )
        world.services[sid] = s
        world.tasks[sid] = world._task(s, "")
        gen[sid] = gen.get(sid, 0) + 1  # its departure is void: it runs again from 0
        dirty[0] = True
        w.allocated -= running_milli(sid)
        waiting[sid] = w.now
        class_of(sid).preempted += 1

    def grid(x: int) -> int:  # the first cycle time at or after x
        return start + -(-(x - start) // interval_s) * interval_s

    def until(t: int, idle_skips: bool = False) -> None:
        """Advance to ``t``: departures, and a cycle every ``interval_s`` while a pod
        waits (the cycles of the daemon's interval; none is needed while nothing waits).
        ``idle_skips``: no cycle when nothing changed since the last (it would plan the
        same)."""
        while True:
            due = leaving[0][0] if leaving else None
            nxt = grid(w.now)
            if waiting and nxt <= t and (due is None or nxt <= due):
                w.advance(nxt)
                if dirty[0] or not idle_skips:
                    cycle()
                w.advance(nxt + 1)  # one cycle per grid point
                continue
            if due is None or due > t:
                break
            _, g, key = heapq.heappop(leaving)
            w.advance(due)
            if key in world.services and gen.get(key) == g:
                w.allocated -= running_milli(key)
                world.remove_service(key)
                dirty[0] = True
        w.advance(t)

    for tid, pod in enumerate(order, start=1):
        if tid % METER_EVERY == 0:
            meter(tid, len(order))
        arrive, leave = arrival_times(pod, speedup)
        until(arrive)
        s = world.add_service(tid, pod)
        if pod.total_gpu_milli == 0:  # CPU-only (gpus: "0"): it waits as a GPU pod does
            res.cpu.pods += 1
            waiting[s.id] = arrived_at[s.id] = arrive
            lifetime[s.id] = leave - arrive
            continue
        is_high = pod.name in high
        klass[s.id] = "high" if is_high else "batch"
        labels = dict(s.labels)
        if tenants:
            stack = tenant_of(pod.name, seed)
            klass[s.id] = f"{stack}:{klass[s.id]}"
            labels[STACK_LABEL] = stack
        res.classes.setdefault(klass[s.id], ClassResult()).pods += 1
        if priorities and is_high:
            labels[f"{P}priority"] = str(HIGH)
        if labels != s.labels:
            spec = {**s.spec, "Labels": labels}
            s = service_from_api({"ID": s.id, "Spec": spec, "Version": {"Index": 1}})
            world.services[s.id] = s
        waiting[s.id] = arrived_at[s.id] = arrive
        lifetime[s.id] = leave - arrive
    if waiting:
        cycle()
    if drain_s > 0 and order:
        end = w.now + drain_s
        while waiting and w.now < end:
            if not dirty[0]:  # idle: the steps up to the next departure, taken at once
                due = leaving[0][0] if leaving else None
                limit = end if due is None else min(end, due)
                if (to := _idle_steps_end(w.now, limit, start, interval_s)) > w.now:
                    w.advance(to)
                    continue  # (the drain may end there, as after those steps)
            until(min(end, w.now + interval_s), idle_skips=True)
    end = w.now
    span = end - start
    res.mean_alloc_pct = 100.0 * w.area_alloc / span / cluster_milli if span > 0 else 0.0
    c0 = res.contended_from
    if c0 is not None:
        res.own_end_contended_s = end - c0
        res.own_end_contended_alloc_pct = 100.0 * w.mean_between(c0, end) / cluster_milli
        to = end if contended_to is None else contended_to
        if to > end:  # ended earlier: on to the span's end (nothing waits: departures)
            until(to)
        res.ended_later_s = end - to
        res.contended_s = to - c0
        res.contended_alloc_pct = 100.0 * w.mean_between(c0, to) / cluster_milli
    return res


def run(
    nodes: Sequence[NodeSpec],
    pods: Sequence[TracePod],
    seeds: Sequence[int],
    *,
    share: float,
    speedup: float = 1.0,
    workload: str = "online",
    source: str = "the pod file",
    drain_s: int = 0,
) -> dict[str, list[PriorityResult]]:
    """Each seed without priorities, with them, and with them and ``SIM_TENANTS``; the
    later runs measure the contended span the first found."""
    out: dict[str, list[PriorityResult]] = {k: [] for k in RUNS}
    for seed in seeds:
        off = replay_priorities(
            nodes,
            pods,
            seed,
            share=share,
            priorities=False,
            speedup=speedup,
            workload=workload,
            source=source,
            drain_s=drain_s,
        )
        out["without"].append(off)
        for key in RUNS[1:]:
            out[key].append(
                replay_priorities(
                    nodes,
                    pods,
                    seed,
                    share=share,
                    priorities=True,
                    speedup=speedup,
                    workload=workload,
                    source=source,
                    tenants=key == "tenants",
                    contended_from=off.contended_from,
                    contended_to=off.contended_from + off.contended_s
                    if off.contended_from is not None
                    else None,
                    find_contention=False,
                    drain_s=drain_s,
                )
            )
    return out


def as_text(results: dict[str, list[PriorityResult]], share: float) -> str:
    lines = [
        f"priorities: {share:.0%} of the GPU pods at priority {HIGH}, the rest 0; "
        "a pod waits until placed (a cycle per second of trace time while one waits); "
        "tenants: inference (ceiling 100) and research (ceiling 50)",
        "",
    ]
    head = [
        "run",
        "class",
        "pods",
        "started",
        "mean wait s",
        "median s",
        "p95 s",
        "never started",
        "preempted",
        "mean alloc%",
        "contended alloc%",
        "ended later s",
    ]
    rows = [head]
    for key, runs in results.items():
        for r in runs:
            for name, c in sorted(r.classes.items()):
                d = c.to_dict()
                rows.append(
                    [
                        f"{key} (seed {r.seed})",
                        name,
                        str(d["pods"]),
                        str(d["started"]),
                        _num(d["mean_wait_s"]),
                        _num(d["median_wait_s"]),
                        _num(d["p95_wait_s"]),
                        str(d["never_started"]),
                        str(d["preempted"]),
                        f"{r.mean_alloc_pct:.2f}",
                        "-"
                        if r.contended_alloc_pct is None
                        else f"{r.contended_alloc_pct:.2f} ({r.contended_s} s)",
                        "-" if r.contended_alloc_pct is None else f"{r.ended_later_s:+d}",
                    ]
                )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines += [
        "  ".join(c.ljust(wd) for c, wd in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    return "\n".join(lines) + "\n\n" + COLUMNS


COLUMNS = """\
columns (one row per run, seed and priority class; waits in seconds of trace time):
  run            without: no pod has a priority; with: the drawn share has priority
                 100 and preemption is on; tenants: as with, and each pod's stack is
                 inference (priority ceiling 100) or research (ceiling 50)
  class          high: the pods given priority 100; batch: the rest (priority 0);
                 in the tenants run prefixed by the tenant (inference:high, ...)
  pods           GPU pods of the class that arrived
  started        of them, placed at least once within the window
  mean wait s    arrival to first placement, mean over the started pods
  median s       the same, median
  p95 s          the same, 95th percentile
  never started  pods still waiting when the window ended
  preempted      times a pod of the class was stopped for a higher-priority one
  mean alloc%    time-weighted mean allocated GPU share of the run (all classes)
  contended alloc%  the same over the contended span, the same span in every run of
                 the seed: from the first cycle that left a pod waiting in the run
                 without priorities to the end of that run's window (its length in
                 brackets; - when no pod waited)
  ended later s  how much later this run's own window ended (its queue emptied)
                 than the span's end; --json also has its allocation to its own end
                 (own_end_contended_alloc_pct)"""


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:g}"


def run_cli(
    nodes_path: str,
    pods_path: str,
    seeds: Sequence[int],
    share: float,
    speedup: float,
    workload: str,
    as_json: bool,
    drain_s: int = 0,
) -> tuple[str, int]:
    """``simulate --priorities SHARE``: (text to print, exit code; 2 on a bad option)."""
    if not 0 < share < 1:
        return (
            f"swarmgpu simulate: --priorities {share:g}: a share of the GPU pods, "
            "strictly between 0 and 1 (e.g. 0.1)",
            2,
        )
    if (why := speedup_problem(speedup)) is not None:
        return (f"swarmgpu simulate: {why}", 2)
    if drain_s < 0:
        return (f"swarmgpu simulate: --drain {drain_s}: seconds of trace time, >= 0", 2)
    try:
        nodes, pods = load_trace(nodes_path, pods_path)
        say_unplaceable(nodes, pods, nodes_path, pods_path)
        results = run(
            nodes,
            pods,
            seeds,
            share=share,
            speedup=speedup,
            workload=workload,
            source=pods_path,
            drain_s=drain_s,
        )
    except TraceError as e:
        return (f"swarmgpu simulate: {e}", 2)
    if as_json:
        return (json.dumps({k: [r.to_dict() for r in v] for k, v in results.items()}, indent=2), 0)
    return (as_text(results, share), 0)
