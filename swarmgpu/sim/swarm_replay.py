"""The trace replayed through the daemon's own planner (``swarmgpu.manager.placement.Planner``).

``simulate --policy swarmgpu`` runs this: every trace pod becomes a Swarm service object
with the request labels a user would write (``swarmgpu.gpus`` or ``swarmgpu.gpu-fraction``,
``swarmgpu.gpu-product``, CPU and memory reservations), and the planner the daemon keeps
across cycles plans over in-memory Swarm objects -- nodes with their resources, services,
tasks -- exactly as it does over a snapshot of a real swarm. Its writes (ledger and gate
node labels, device labels, ``ForceUpdate``) are applied to those objects the way
``cycle.placement.apply_plan`` applies them to Swarm (node label changes and the same spec
transformation), and Swarm's part is played by a small stand-in: a task runs on the node
whose gate is open. One difference from the daemon, which does not touch what is placed
where: the daemon opens a gate the planner deferred in the same cycle as the service
write, once one task list after it shows every waiting task carrying the new
``ForceUpdate`` (``cycle.placement.gates_ready_now``); here such a gate stays closed until
the planner's next full cycle opens it (its task then runs). The holding is committed,
and counted, when it is planned, either way.

Each GPU pod is planned when it arrives (``Planner.place_arrivals``: what a full cycle
run then decides for it, as the daemon runs a cycle per service-create event), and a full
cycle runs every ``batch`` arrivals, as the daemon's interval cycle; ``at_arrival=False``
plans in bursts of ``batch`` arrivals instead (and before each 5% load level), which
``--departures`` still does. Services are planned in arrival order (their names sort that
way). A GPU pod that gets no placement when first planned is dropped, as in the FGD
replay. A CPU-only pod (no GPU request) is by default a service that opts in to
swarmgpu's placement (``swarmgpu.gpus: "0"``: its CPU and memory reservations are the
demand, behind a gate), planned at arrival as a GPU pod is, so the figure is of the path
a user runs (until stop 67 the planner's allocator placed it directly, a stand-in no
daemon runs); with ``cpu_pods="swarm"`` it is Swarm's, placed by the model of Swarm's
scheduler (``sim.swarm_sched``), in every policy's replay alike. The departures replay
(``replay_departures_planner``) and ``sim.priorities`` plan CPU-only pods as ``gpus: "0"``
services too (since stop 68); ``cpu_pods="swarm"`` is of this replay alone.

``workload``: ``online`` (what the daemon does: the model learned from the services seen
so far, starting from the prior) or ``oracle`` (the whole trace's typical tasks, as FGD's
paper gives its policy).
"""

from __future__ import annotations

import functools
import gc
import heapq
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from swarmgpu.allocator.defrag import FragmentationMoves, Held
from swarmgpu.allocator.fragmentation import FragCache
from swarmgpu.allocator.values import Choice, Demand, NodeSpec
from swarmgpu.allocator.workload import WorkloadModel
from swarmgpu.core.model import Gpu, NodeFacts
from swarmgpu.manager.placement import (
    ORDER_ENV,
    PlacementPlan,
    Planner,
    ServicePlan,
    assign_key,
    devices_key,
    env_template,
    gate_constraint,
    gate_key,
)
from swarmgpu.manager.placement.specwrite import service_compute
from swarmgpu.manager.services.sharing import env_lines
from swarmgpu.sim.limits import DaemonLimits
from swarmgpu.sim.runs import (
    DEFRAG_EVERY,
    LEVEL_STEP,
    METER_EVERY,
    RunResult,
    TimelineResult,
    Window,
    arrival_order,
    arrival_times,
    meter,
    pod_kind,
    timed_pods,
    workload_of,
)
from swarmgpu.sim.swarm_rescue import PlannerRescuer
from swarmgpu.sim.swarm_sched import SwarmScheduler
from swarmgpu.sim.trace import TracePod
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask, service_from_api

P = "swarmgpu."
WORKLOADS = ("online", "oracle")
BATCH = 250  # arrivals per full planner cycle
# Moves (``--rebalance-moves``): checked every DEFRAG_EVERY (50) arrivals, as the baselines'
# replay does, and planned once DEFRAG_MIN_BATCH of them are allowed (after a cycle that
# lets the new arrivals run). Measured on default, seeds 42-44 (docs/simulate.md,
# "Moves"): planned every 250 arrivals, 10 moves per 100 pods spent ~500 of the ~830
# allowed by 100% arrived (96.07; every 50: 96.19); planned one at a time at 2 per 100,
# 96.01 against 96.04 in batches of 5.
DEFRAG_MIN_BATCH = 5
GPU_MEMORY_MIB = 16384  # the trace gives none; only share labels read it
MIB = 1024 * 1024


@dataclass
class World:
    """Swarm objects in memory, changed as the daemon's writes and Swarm would."""

    nodes: dict[str, SwarmNode] = field(default_factory=dict)
    facts: dict[str, NodeFacts] = field(default_factory=dict)
    services: dict[str, SwarmService] = field(default_factory=dict)
    tasks: dict[str, SwarmTask] = field(default_factory=dict)  # by service id (1 replica)
    cpu_tasks: dict[str, SwarmTask] = field(default_factory=dict)
    pods: dict[str, TracePod] = field(default_factory=dict)  # service name -> pod
    # Pods as Swarm jobs (a replicated-job of one task): a pod that leaves is a task
    # that completes, released through the daemon's job path (the departures replay).
    jobs: bool = False
    # service id -> the plan last applied for it, which wrote nothing: the planner hands
    # a settled service the same plan object cycle after cycle (nothing to apply again).
    applied: dict[str, ServicePlan] = field(default_factory=dict)
    # --cpu-pods swarm: Swarm's scheduler, which counts the tasks on each node
    sched: SwarmScheduler | None = None

    @classmethod
    def of(cls, nodes: Sequence[NodeSpec], ranks: Sequence[int]) -> World:
        """Hostnames follow ``ranks`` (the planner breaks ties by hostname order, as the
        FGD replay breaks them by a per-seed node permutation)."""
        w = cls()
        for spec, rank in zip(sorted(nodes, key=lambda n: n.name), ranks, strict=True):
            nid = f"id-{spec.name}"
            host = f"n{rank:05d}"
            w.nodes[nid] = SwarmNode(
                id=nid, hostname=host, addr="", role="worker", state="ready",
                availability="active", labels={}, engine_labels={}, version=1,
                generic_resources={}, discrete_resources={}, cpu_milli=spec.cpu_milli,
                memory_mib=spec.memory_mib)
            w.facts[nid] = NodeFacts(hostname=host, gpus=tuple(
                Gpu(index=i, uuid=f"GPU-{spec.name}-{i}", product=g.product,
                    memory_mib=g.memory_mib or GPU_MEMORY_MIB)
                for i, g in enumerate(spec.gpus)))
        return w

    def add_service(self, idx: int, pod: TracePod) -> SwarmService:
        """A pod as the service its user deploys: a GPU pod with its request, a CPU-only
        pod with ``swarmgpu.gpus: "0"`` (placed by the planner by its CPU and memory)."""
        name = f"p{idx:06d}"
        d = pod.demand()
        labels = ({f"{P}gpu-fraction": f"{d.gpu_milli / 1000:g}"} if d.gpu_milli
                  else {f"{P}gpus": str(d.num_gpu)})
        if d.products and d.total_gpu_milli:  # (a CPU-only pod's gpu_spec pins nothing)
            labels[f"{P}gpu-product"] = "|".join(d.products)
        env = [env_template(P), ORDER_ENV, *(env_lines(P) if d.gpu_milli else ())]
        spec: dict[str, Any] = {
            "Name": name, "Labels": labels,
            "TaskTemplate": {
                "ContainerSpec": {"Image": "trace", "Env": env},
                "Placement": {"Constraints": [gate_constraint(P, name)]},
                "Resources": {"Reservations": {"NanoCPUs": pod.cpu_milli * 1_000_000,
                                               "MemoryBytes": pod.memory_mib * MIB}},
            },
            "Mode": ({"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 1}}
                     if self.jobs else {"Replicated": {"Replicas": 1}}),
        }
        s = service_from_api({"ID": f"s{idx}", "Spec": spec, "Version": {"Index": 1}})
        self.services[s.id] = s
        self.pods[name] = pod
        self.tasks[s.id] = self._task(s, "")
        return s

    def _task(self, s: SwarmService, node_id: str) -> SwarmTask:
        pod = self.pods[s.name]
        return SwarmTask(id=f"t{s.id}.{s.force_update}", service_id=s.id, node_id=node_id,
                         slot=1, state="running" if node_id else "pending",
                         desired_state="complete" if self.jobs else "running", env=(),
                         force_update=s.force_update,
                         cpu_milli=pod.cpu_milli if node_id else 0,
                         memory_mib=pod.memory_mib if node_id else 0,
                         job_iteration=s.job_iteration if self.jobs else None)

    def complete(self, sid: str) -> None:
        """A job's task ends: it completes (what it reserved is free)."""
        t = self.tasks[sid]
        self.tasks[sid] = SwarmTask(**{**t.__dict__, "state": "complete", "cpu_milli": 0,
                                       "memory_mib": 0})

    def _updated(self, s: SwarmService, spec: Mapping[str, Any]) -> SwarmService:
        """``s`` after a spec update: a job starts a new run on any update (Swarm)."""
        raw: dict[str, Any] = {"ID": s.id, "Spec": spec, "Version": {"Index": s.version + 1}}
        if self.jobs:
            raw["JobStatus"] = {"JobIteration": {"Index": s.job_iteration + 1}}
        return service_from_api(raw)

    def remove_service(self, sid: str) -> None:
        s = self.services.pop(sid)
        self.pods.pop(s.name, None)
        self.tasks.pop(sid, None)

    def add_cpu_task(self, key: str, node_id: str, pod: TracePod) -> None:
        """A CPU-only pod: a service without a GPU request (the daemon sees it and learns
        the CPU it takes on GPU nodes) and its task, placed by the stand-in scheduler."""
        spec: dict[str, Any] = {
            "Name": key,
            "TaskTemplate": {
                "ContainerSpec": {"Image": "trace"},
                "Resources": {"Reservations": {"NanoCPUs": pod.cpu_milli * 1_000_000,
                                               "MemoryBytes": pod.memory_mib * MIB}},
            },
            "Mode": {"Replicated": {"Replicas": 1}},
        }
        self.services[key] = service_from_api({"ID": key, "Spec": spec,
                                               "Version": {"Index": 1}})
        self.cpu_tasks[key] = SwarmTask(
            id=key, service_id=key, node_id=node_id, slot=1, state="running",
            desired_state="running", env=(), cpu_milli=pod.cpu_milli,
            memory_mib=pod.memory_mib)

    def all_tasks(self) -> list[SwarmTask]:
        return [*self.tasks.values(), *self.cpu_tasks.values()]

    def apply(self, plan: PlacementPlan) -> None:
        """The daemon's writes (``apply_plan``'s order and spec changes), then Swarm's
        part: tasks of changed services are re-created and run where their gate is open."""
        for nid in set(plan.node_remove) | set(plan.node_set):
            n = self.nodes[nid]
            labels = {k: v for k, v in n.labels.items() if k not in plan.node_remove.get(nid, [])}
            labels.update(plan.node_set.get(nid, {}))
            self.nodes[nid] = SwarmNode(**{**n.__dict__, "labels": labels,
                                           "version": n.version + 1})
        applied = self.applied
        if len(applied) > 2 * len(self.services) + 1000:  # services that left
            applied.clear()
        for sp in plan.services:
            if applied.get(sp.id) is sp:
                continue  # a settled service's plan (most of them): nothing changes
            writes = sp.needs_service_write
            if not (writes or sp.node_writes or sp.new):
                applied[sp.id] = sp
                continue
            s = self.services.get(sp.id)
            if s is None:
                continue
            if writes:
                new = service_compute(sp.writes)(s.spec)
                if new is not None:
                    s = self._updated(s, new)
                    self.services[s.id] = s
            self._schedule(s, [p.node_id for p in sp.placements])

    def _schedule(self, s: SwarmService, holders: Sequence[str]) -> None:
        gate = gate_key(P, s.name)
        open_on = [nid for nid in holders if self.nodes[nid].labels.get(gate) == "true"]
        self.tasks[s.id] = self._task(s, open_on[0] if open_on else "")

    def move(self, name: str, old: str, new: str, uuids: Sequence[str], value: str) -> None:
        """A finished rebalancing move: the mover's end state (ledger, gate, devices and
        the task on the new node)."""
        sid = next(s.id for s in self.services.values() if s.name == name)
        s = self.services[sid]
        for nid, drop, add in ((old, [assign_key(P, name), gate_key(P, name)], {}),
                               (new, [], {assign_key(P, name): value,
                                          gate_key(P, name): "true"})):
            n = self.nodes[nid]
            labels = {k: v for k, v in n.labels.items() if k not in drop} | add
            self.nodes[nid] = SwarmNode(**{**n.__dict__, "labels": labels,
                                           "version": n.version + 1})
        labels = {k: v for k, v in s.labels.items() if k != devices_key(P, old)}
        labels[devices_key(P, new)] = ",".join(uuids)
        spec = {**s.spec, "Labels": labels}
        s = self._updated(s, spec)
        self.services[sid] = s
        self.tasks[sid] = self._task(s, new)
        if self.sched is not None:
            self.sched.moved([(old, new)])


def workload_model(mode: str, pods: Sequence[TracePod]) -> WorkloadModel:
    """The planner's workload model in a replay: ``online`` learns from the prior as the
    daemon does, ``oracle`` is pinned to the whole trace's mix."""
    if mode == "online":
        return WorkloadModel.prior()
    if mode == "oracle":
        m = WorkloadModel(pinned=True, source="oracle (whole trace)")
        m.weights = {t.shape: t.weight for t in workload_of(pods)}
        return m
    raise ValueError(f"workload {mode!r}: use one of {', '.join(WORKLOADS)}")


class Replay:
    """One seed of the no-departure replay through the planner."""

    def __init__(self, nodes: Sequence[NodeSpec], pods: Sequence[TracePod], seed: int, *,
                 workload: str = "online", inflate: float = 1.3, batch: int = BATCH,
                 at_arrival: bool = True, cpu_pods: str = "policy") -> None:
        self.cluster_milli = sum(len(n.gpus) for n in nodes) * 1000
        self.order, rng = arrival_order(pods, self.cluster_milli, seed, inflate)
        ranks = list(range(len(nodes)))
        rng.shuffle(ranks)  # the FGD replay's node permutation, from the same stream
        self.world = World.of(nodes, ranks)
        if cpu_pods == "swarm":
            self.world.sched = SwarmScheduler(seed)
        self.planner = Planner(workload=workload_model(workload, pods))
        self.planner.cluster.explain = False  # reasons are not read here
        self.batch = batch
        self.inflate = inflate
        self.frag = FragCache(workload_of(pods))
        self.res = RunResult("swarmgpu", seed, pods=len(self.order))
        self.failed: Counter[str] = Counter()
        self.allocated = 0
        # service id -> (its arrival position, 1-based; its pod), awaiting their first cycle
        self.new: dict[str, tuple[int, TracePod]] = {}
        self.at_arrival = at_arrival
        self.cpu_since: list[str] = []  # CPU-only services the planner has not seen yet
        self.cycles = 0
        self.cycle_s = 0.0
        # --rebalance-moves: the daemon's defrag policy for a pod that finds no node
        self.rescuer: PlannerRescuer | None = None
        self.retrying = False  # placing a rescued pod: it is not rescued twice
        self.allowed = 0  # moves allowed by the arrivals so far

    def cycle(self) -> None:
        w = self.world
        t0 = time.perf_counter()
        plan = self.planner.plan(list(w.nodes.values()), list(w.services.values()),
                                 w.all_tasks(), w.facts)
        self.cycle_s += time.perf_counter() - t0
        self.cycles += 1
        self.cpu_since.clear()
        self._settle(plan)

    def arrival(self) -> None:
        """Place what arrived since the planner last looked (``Planner.place_arrivals``:
        what a full cycle run now would decide for it)."""
        w = self.world
        keys = [*self.new, *self.cpu_since]
        tasks = [t for k in keys if (t := w.tasks.get(k) or w.cpu_tasks.get(k)) is not None]
        t0 = time.perf_counter()
        plan = self.planner.place_arrivals([w.services[k] for k in keys], tasks)
        self.cycle_s += time.perf_counter() - t0
        self.cpu_since.clear()
        self._settle(plan)

    def _settle(self, plan: PlacementPlan) -> None:
        """Count the new services' outcomes, then apply the plan to the objects."""
        w = self.world
        gone: list[str] = []
        rescued: list[tuple[str, int, TracePod]] = []
        for sp in plan.services if self.new else ():  # a cycle's: most are placed already
            got = self.new.get(sp.id)
            if got is None:
                continue
            position, pod = got
            if sp.placements:
                self.allocated += pod.total_gpu_milli
                self.res.placed += 1
                if w.sched is not None:
                    w.sched.add(sp.placements[0].node_id)
            else:
                # (the daemon's defrag makes no room for a CPU-only service)
                if (self.rescuer is not None and not self.retrying and pod.total_gpu_milli
                        and self.allowed - self.res.moves >= 1):
                    moves = self.rescuer(self.planner, w.pods, pod,
                                         self.allowed - self.res.moves)
                    if moves:
                        carry_out(self.planner, w, moves)
                        self.res.moves += len(moves)
                        rescued.append((sp.id, position, pod))
                        continue
                self.failed[pod_kind(pod)] += 1
                self.res.failed_one(position)
                gone.append(sp.id)
        self.new.clear()
        w.apply(plan)
        for sid in gone:  # tried once, then dropped (the user gives up)
            w.remove_service(sid)
        for sid, position, pod in rescued:  # the planner places it again, as its next cycle
            self.new = {sid: (position, pod)}
            self.retrying = True
            try:
                self._settle(self.planner.place_arrivals([w.services[sid]], [w.tasks[sid]]))
            finally:
                self.retrying = False

    def place_cpu_pod(self, idx: int, pod: TracePod, sched: SwarmScheduler) -> None:
        """``--cpu-pods swarm``: a CPU-only pod placed by the model of Swarm's scheduler, a
        service without a request (the planner sees its task, as the daemon would)."""
        got = sched.pick(self.planner.cluster.alloc,
                         Demand(cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib))
        if not isinstance(got, Choice):
            self.failed["cpu"] += 1
            self.res.failed_one(idx)
            return
        sched.add(got.node)
        self.world.add_cpu_task(f"cpu{idx}", got.node, pod)
        self.planner.cluster.add_usage(got.node, pod.cpu_milli, pod.memory_mib)
        self.cpu_since.append(f"cpu{idx}")
        self.res.placed += 1

    def record(self, level: int) -> None:
        alloc = self.planner.cluster.alloc
        self.res.alloc_pct_at[level] = 100.0 * self.allocated / self.cluster_milli
        self.res.frag_pct_at[level] = 100.0 * sum(
            self.frag(n.product, n.cpu_left or 0, tuple(n.free))
            for n in alloc.nodes.values()) / self.cluster_milli
        self.res.failed_at[level] = dict(self.failed)
        self.res.moves_at[level] = self.res.moves

    def run(self, moves_per_100: float = 0.0, defrag: FragmentationMover | None = None,
            defrag_every: int = DEFRAG_EVERY, min_batch: int = DEFRAG_MIN_BATCH,
            limits: DaemonLimits | None = None) -> RunResult:
        arrived = 0
        next_level = LEVEL_STEP
        last_level = int(self.inflate * 100)
        self.cycle()  # the planner's first look at the (empty) cluster
        for n_arrived, pod in enumerate(self.order, start=1):
            if n_arrived % METER_EVERY == 0:
                meter(n_arrived, len(self.order))
            arrived += pod.total_gpu_milli
            self.allowed = int(n_arrived * moves_per_100 / 100)
            if limits is not None:
                limits.now = n_arrived
            if pod.total_gpu_milli == 0 and self.world.sched is not None:
                self.place_cpu_pod(n_arrived, pod, self.world.sched)
            else:  # a GPU pod, or a CPU-only one the planner places (gpus: "0")
                s = self.world.add_service(n_arrived, pod)
                self.new[s.id] = (n_arrived, pod)
                if self.at_arrival:
                    self.arrival()
            level_due = (next_level <= last_level
                         and arrived * 100 >= next_level * self.cluster_milli)
            if self.at_arrival:
                if n_arrived % self.batch == 0:
                    self.cycle()  # the daemon's interval cycle (gates open, tasks run)
            elif self.new and (len(self.new) >= self.batch or level_due):
                self.cycle()
            if defrag is not None and n_arrived % defrag_every == 0:
                budget = int(n_arrived * moves_per_100 / 100) - self.res.moves
                if budget >= min_batch:
                    if self.new:
                        self.cycle()
                    self.res.moves += defrag(self, budget)
            while next_level <= last_level and arrived * 100 >= next_level * self.cluster_milli:
                self.record(next_level)
                next_level += LEVEL_STEP
        if self.new:
            self.cycle()
        while next_level <= last_level:
            self.record(next_level)
            next_level += LEVEL_STEP
        self.res.pods = len(self.order)
        return self.res


class FragmentationMover:
    """``--rebalance-moves`` through the daemon's own policy object
    (``FragmentationMoves``, what the ``fragmentation`` rebalance policy runs) on the
    planner's allocator; each move it makes is then carried out in the world as the
    mover ends it (ledger, gate and devices on the new node, the task there).

    The moves are judged against the mix placement's model expects now
    (``planner.model.typical()``), as the daemon's rebalance cycle hands it to the policy
    (``Inputs.workload``): with ``--workload online`` what the services seen so far
    ask, not the whole trace's mix (which the replay gave it until stop 58; the daemon
    never has it). A task moves at most once per call, as the daemon's pass moves a
    service once (``again=False``; until stop 59 the replay let it move twice).
    ``limits``: each call a daemon cycle under its budgets (``sim.limits``)."""

    def __init__(self, reserve: int = 0, limits: DaemonLimits | None = None) -> None:
        self.policy: FragmentationMoves | None = None
        self.reserve = reserve
        self.limits = limits

    def __call__(self, rp: Replay, budget: int) -> int:
        return self.run(rp.planner, rp.world, budget)

    def run(self, planner: Planner, w: World, budget: int) -> int:
        cluster = planner.cluster
        held = []
        for (svc, nid), h in cluster.held_items():
            pod = w.pods.get(svc)
            if pod is None or h.choice is None or not h.choice.gpus:
                continue
            held.append(Held((svc, nid), pod.demand(), h.choice))
        typical = planner.model.typical()  # the same tuple while the model is unchanged
        if self.policy is None or self.policy.workload is not typical:
            self.policy = FragmentationMoves(typical)
        lim = self.limits
        if lim is not None:
            lim.call()
        moves = self.policy.plan(
            cluster.alloc, held,
            budget - self.reserve if lim is None else lim.cycle_room(budget - self.reserve),
            again=False, check=lim.check() if lim is not None else None)
        carry_out(planner, w, [(str(mv.key[0]), mv.old.node, mv.new)  # type: ignore[index]
                               for mv in moves])
        return len(moves)


def carry_out(planner: Planner, w: World, moves: Sequence[tuple[str, str, Choice]]) -> None:
    """Moves already made on the planner's allocator, as (service, old node, new choice),
    carried out as the daemon's mover ends them: the holding recorded on the new node
    (``ClusterAllocator.moved``), the task's reservation counted there, the ledger, gate
    and devices written, the task running on the new node."""
    cluster = planner.cluster
    for svc, old, new in moves:
        pod = w.pods[svc]
        sid = next(x.id for x in w.services.values() if x.name == svc)
        was_running = w.tasks[sid].node_id == old
        uuids = [w.facts[new.node].gpus[i].uuid for i in new.gpus]
        value = cluster.moved(svc, old, new, uuids)
        if was_running:
            cluster.add_usage(old, -pod.cpu_milli, -pod.memory_mib)
        cluster.add_usage(new.node, pod.cpu_milli, pod.memory_mib)
        w.move(svc, old, new.node, uuids, value)


_Args = ParamSpec("_Args")
_Ret = TypeVar("_Ret")
# The cyclic collector is off during a replay (0: no automatic collection). The planner
# keeps hundreds of thousands of small long-lived objects (memo tables, holdings, Swarm
# objects) and makes many short-lived tuples, which reference counting frees; at
# Python's default (700) the collector re-scanned the long-lived ones often enough to
# take a third of a seed's time (default trace, seed 42: 20.7 s of CPU against 15.3 s),
# and at 100,000 still 4% (59 young collections, 0.28 s). What a replay leaves in cycles
# is small: seed 42's peak memory 177 -> 185 MB, seed 43 with departures 66 -> 69 MB.
# The thresholds are put back when it returns.
GC_YOUNG_THRESHOLD = 0


def _collect_less(fn: Callable[_Args, _Ret]) -> Callable[_Args, _Ret]:
    @functools.wraps(fn)
    def run(*args: _Args.args, **kwargs: _Args.kwargs) -> _Ret:
        old = gc.get_threshold()
        gc.set_threshold(GC_YOUNG_THRESHOLD, 50, 100)
        try:
            return fn(*args, **kwargs)
        finally:
            gc.set_threshold(*old)
    return run


@_collect_less
def replay_planner(nodes: Sequence[NodeSpec], pods: Sequence[TracePod], seed: int, *,
                   workload: str = "online", moves_per_100: float = 0.0,
                   defrag: FragmentationMover | None = None, inflate: float = 1.3,
                   timing: bool = False, defrag_every: int = DEFRAG_EVERY,
                   min_batch: int = DEFRAG_MIN_BATCH,
                   rescuer: PlannerRescuer | None = None, cpu_pods: str = "policy",
                   limits: DaemonLimits | None = None) -> RunResult:
    """One seed; ``timing`` records each placement decision the planner makes (its
    allocator's ``place``) in ``decision_s``; ``rescuer`` makes room for a pod that
    finds no node, within the moves allowed (``moves_per_100``); ``cpu_pods``: who
    places a CPU-only pod (``policy``: the planner's allocator; ``swarm``: Swarm);
    ``limits``: the daemon's budgets that ``defrag`` and ``rescuer`` share (``sim.limits``),
    told the arrivals so far."""
    rp = Replay(nodes, pods, seed, workload=workload, inflate=inflate, cpu_pods=cpu_pods)
    rp.rescuer = rescuer
    if timing:
        rp.planner.cluster.timings = []
    res = rp.run(moves_per_100, defrag, defrag_every, min_batch, limits)
    if timing:
        res.decision_s = list(rp.planner.cluster.timings or [])
    return res


@_collect_less
def replay_departures_planner(nodes: Sequence[NodeSpec], pods: Sequence[TracePod], seed: int,
                              *, workload: str = "online", speedup: float = 1.0,
                              moves_per_100: float = 0.0, defrag: FragmentationMover | None = None,
                              source: str = "the pod file", batch: int = BATCH,
                              rescuer: PlannerRescuer | None = None) -> TimelineResult:
    """The departures replay (``sim.timeline``) through the planner: pods arrive and
    leave at their trace times (``speedup`` as there). Arrivals wait for the next cycle,
    which runs every ``batch`` arrivals and before any departure is processed, so a pod
    never sees capacity freed after it arrived; a departed pod's service is removed and
    the planner releases its holding, as the daemon does when a stack goes. With
    ``rescuer``, a pod that finds no node gets room made by moves (within the moves
    allowed) and stays for the next cycle, as a pending service does. A CPU-only pod is a
    ``swarmgpu.gpus: "0"`` service (a job, as the GPU pods), planned by the same cycles
    (until stop 68 the planner's allocator placed it at arrival, a stand-in no daemon
    runs); the rescuer makes no room for one, as the daemon's defrag makes none."""
    if speedup <= 0:
        raise ValueError(f"speedup={speedup}: must be > 0 (1 = the trace's own times)")
    order = timed_pods(pods, source)
    cluster_milli = sum(len(n.gpus) for n in nodes) * 1000
    rng = random.Random(seed)  # noqa: S311 - node order only
    ranks = list(range(len(nodes)))
    rng.shuffle(ranks)  # as build_allocator does in the allocator-level replay
    world = World.of(nodes, ranks)
    world.jobs = True  # a pod that leaves completes; its job gives its GPUs back
    planner = Planner(workload=workload_model(workload, pods))
    planner.cluster.explain = False  # reasons are not read here
    res = TimelineResult("swarmgpu", seed, pods=len(order))
    failed: Counter[str] = Counter()
    leaving: list[tuple[int, int, str]] = []  # (deletion time, tid, service id)
    wanted: list[tuple[int, int]] = []
    # service id -> (tid, pod, leave, arrival), awaiting their first cycle
    new: dict[str, tuple[int, TracePod, int, int]] = {}

    start = arrival_times(order[0], speedup)[0] if order else 0
    w = Window(start)

    rescued: set[str] = set()  # services given room once (not rescued twice)
    moved = [0, 0]  # moves made, moves allowed by the arrivals so far

    def cycle() -> None:
        plan = planner.plan(list(world.nodes.values()), list(world.services.values()),
                            world.all_tasks(), world.facts)
        gone: list[str] = []
        keep: dict[str, tuple[int, TracePod, int, int]] = {}
        for sp in plan.services:
            got = new.get(sp.id)
            if got is None:
                continue
            tid, pod, leave, arrived = got
            # (the daemon's defrag makes no room for a CPU-only service)
            if (not sp.placements and rescuer is not None and sp.id not in rescued
                    and pod.total_gpu_milli and moved[1] - moved[0] >= 1):
                moves = rescuer(planner, world.pods, pod, moved[1] - moved[0])
                if moves:
                    carry_out(planner, world, moves)
                    moved[0] += len(moves)
                    rescued.add(sp.id)
                    keep[sp.id] = got  # pending: the next cycle places it
                    continue
            if sp.placements:
                w.allocated += pod.total_gpu_milli
                # held since it arrived: the cycle's delay is the daemon's, not the policy's
                w.area_alloc += pod.total_gpu_milli * (w.now - arrived)
                res.placed += 1
                heapq.heappush(leaving, (leave, tid, sp.id))
                res.peak_alloc_pct = max(res.peak_alloc_pct, 100.0 * w.allocated / cluster_milli)
            else:
                failed[pod_kind(pod)] += 1
                res.failed_gpu_milli += pod.total_gpu_milli
                gone.append(sp.id)
        new.clear()
        new.update(keep)
        world.apply(plan)
        for sid in gone:
            world.remove_service(sid)
        for sp in plan.services:  # a finished job is removed (docker service rm)
            if sp.status == "done" and sp.id in world.services:
                world.remove_service(sp.id)

    def depart_until(t: int) -> None:
        while wanted and wanted[0][0] <= t:
            when, milli = heapq.heappop(wanted)
            if new and ((leaving and leaving[0][0] <= when)
                        or min(v[2] for v in new.values()) <= when):
                cycle()  # pods that arrived before this departure are planned without it
            w.advance(when)
            w.demanded -= milli
            while leaving and leaving[0][0] <= when:
                _, _tid, key = heapq.heappop(leaving)
                pod = world.pods.get(world.services[key].name) if key in world.services else None
                if pod is not None:
                    w.allocated -= pod.total_gpu_milli
                    world.complete(key)  # released by the next cycle's job path

    for tid, pod in enumerate(order, start=1):
        if tid % METER_EVERY == 0:
            meter(tid, len(order))
        moved[1] = int(tid * moves_per_100 / 100)
        arrive, leave = arrival_times(pod, speedup)
        depart_until(arrive)
        w.advance(arrive)
        w.demanded += pod.total_gpu_milli
        res.asked_gpu_milli += pod.total_gpu_milli
        heapq.heappush(wanted, (leave, pod.total_gpu_milli))
        # a GPU pod, or a CPU-only one the planner places (gpus: "0"), both at the next cycle
        s = world.add_service(tid, pod)
        new[s.id] = (tid, pod, leave, arrive)
        if len(new) >= batch:
            cycle()
        if defrag is not None and tid % DEFRAG_EVERY == 0:
            budget = moved[1] - moved[0]
            if budget >= DEFRAG_MIN_BATCH:
                if new:
                    cycle()
                moved[0] += defrag.run(planner, world, moved[1] - moved[0])
    while new:
        cycle()
    if order:
        w.advance(arrival_times(order[-1], speedup)[0])
    res.moves = moved[0]
    res.failed = dict(failed)
    w.close(res, start, cluster_milli)
    return res
