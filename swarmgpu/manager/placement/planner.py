"""The placement planner (``Planner``): one cycle, snapshot in, plan out."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from operator import attrgetter

from swarmgpu.allocator.fragmentation import TaskShape
from swarmgpu.allocator.scorer import SwarmScorer
from swarmgpu.allocator.workload import WorkloadModel
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement.backoff import Backoff
from swarmgpu.manager.placement.cluster import ClusterAllocator
from swarmgpu.manager.placement.cycle import Cycle
from swarmgpu.manager.placement.existing import KeptHoldings
from swarmgpu.manager.placement.filters import SwarmFilters
from swarmgpu.manager.placement.jobs import (
    JOB_MODES,
    JobProgress,
    job_defaults,
    job_progress,
    learned_count,
    running_jobs,
    without_finished,
)
from swarmgpu.manager.placement.keys import DEVICES, GATE, assign_key, gate_key
from swarmgpu.manager.placement.ledger import Holding, read_ledger
from swarmgpu.manager.placement.memo import NodeContent, key_after_gates_open
from swarmgpu.manager.placement.preempt import serve_key
from swarmgpu.manager.placement.queues import QueueBook, Quotas
from swarmgpu.manager.placement.quiet import Quiet, QuietServices
from swarmgpu.manager.placement.records import (
    PlacementPlan,
    ServicePlan,
    SpecWrites,
    State,
    Status,
    remove_node_labels,
)
from swarmgpu.manager.placement.service import plan_service
from swarmgpu.manager.placement.specs import demand_of
from swarmgpu.manager.placement.tasks import NO_WAITING, TaskBook, Waiting, tasks_by_service
from swarmgpu.manager.services.requests import GpuRequest, RequestError, parse_all, request_labels
from swarmgpu.manager.services.tenants import Tenants
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask, reservations

Parsed = list[tuple[SwarmService, GpuRequest | RequestError]]


@dataclass
class ServiceRead:
    """One cycle's services, read once (``Planner._parse_all``), by name."""

    parsed: Parsed = field(default_factory=list)  # with a GPU request, or a broken one
    cpu_only: list[SwarmService] = field(default_factory=list)  # none, but reserve CPU
    no_request: list[SwarmService] = field(default_factory=list)  # none
    names: set[str] = field(default_factory=set)  # every service's name
    few: set[str] = field(default_factory=set)  # ids: no more replicas than ``most``
    queued: bool = False  # some request names a queue
    serve_keys: list[tuple[int, str]] = field(default_factory=list)  # of ``parsed``
    mixed: bool = False  # not every serve key is the same

    def served(self) -> Parsed:
        """``parsed`` in serve order (``placement.preempt.serve_order``: the same stable
        sort, by keys read once per spec version)."""
        if not self.mixed:
            return self.parsed
        keys, parsed = self.serve_keys, self.parsed
        return [parsed[i] for i in sorted(range(len(parsed)), key=keys.__getitem__)]


_UNPARSED = RequestError("", "", "")  # (a marker: not parsed yet)
# (in C: keys read from every service, every cycle)
_by_name = attrgetter("name")
_by_id = attrgetter("id")


class _Reads:
    """The planner's parsed requests, as its parts read them. Not bound methods of the
    planner: a part holding one would hold the planner, and a planner in a reference
    cycle is freed only by a full collection of all it holds (0.75 s after a
    ``simulate`` seed, in the CLI's wall time), not when its owner lets go of it."""

    def __init__(self, known: Mapping[str, tuple[int, GpuRequest | RequestError | None,
                                                 tuple[int, int], tuple[int, str]]]) -> None:
        self.known = known

    def request(self, sid: str) -> GpuRequest | RequestError | None:
        got = self.known.get(sid)
        return None if got is None else got[1]

    def reservation(self, sid: str) -> tuple[int, int]:
        return self.known[sid][2]


class Planner:
    """The placement planner: snapshot in, plan out. One object lives as long as its
    user -- the daemon keeps it across cycles, ``simulate`` across a whole replay -- so
    what did not change since the last cycle is not recomputed: parsed requests, the
    allocator's nodes and holdings, unplaceable answers, the plans of settled services;
    and a settled service none of whose inputs changed is not visited at all
    (``placement.quiet``: the change-driven cycle).

    Node choice is ``SwarmScorer`` with the workload model (``swarmgpu.allocator.workload``):
    learned from the services seen (``learn``), or pinned.
    """

    def __init__(self, *, prefix: str = "swarmgpu.", zone_label: str = "topology.zone",
                 adopt_ungated: bool = True, generic_kind: str = "",
                 workload: WorkloadModel | None = None,
                 priority_classes: Mapping[str, int] | None = None,
                 queues: Quotas | None = None, change_driven: bool = True,
                 tenants: Tenants | None = None, grants: str = "env") -> None:
        self.prefix = prefix
        self.tenants = tenants  # the operator's limits on each request (manager.services.tenants)
        self.grants = grants  # placement.grants: env, or mounts (also the device mount)
        # Visit only the services whose inputs changed (placement.quiet); False: every
        # service, every cycle (tests compare the two).
        self.change_driven = change_driven
        self._quiet = QuietServices(prefix)
        self._task_book = TaskBook()
        self._most = -1  # the largest node's GPUs, last cycle
        self.classes = priority_classes  # swarmgpu.priority's names (None: the defaults)
        self.queues = QueueBook(queues or {})  # swarmgpu.queue's quotas (placement.queues)
        self.zone_label = zone_label
        self.adopt_ungated = adopt_ungated
        self.generic_kind = generic_kind
        self.model = workload if workload is not None else WorkloadModel.prior()
        self.scorer = SwarmScorer(self.model.typical())
        self.cluster = ClusterAllocator(scorer=self.scorer, prefix=prefix)
        self._model_mark = self.model.seen
        # service id -> (spec version, its request, reservation, serve key)
        self._requests: dict[str, tuple[int, GpuRequest | RequestError | None,
                                        tuple[int, int], tuple[int, str]]] = {}
        self._settled: dict[str, tuple[tuple[object, ...], ServicePlan]] = {}
        self._ledger_cache: dict[str, tuple[int, list[Holding]]] = {}
        self._node_content = NodeContent(prefix)  # settled keys read nodes by content
        reads = _Reads(self._requests)  # (no bound method: see _Reads)
        self._filters = SwarmFilters(prefix, generic_kind, reads.request)
        self._shapes: dict[str, TaskShape] = {}  # service id -> shape learned
        self._job_ids: set[str] = set()  # services parsed as jobs (some may be gone)
        self._queued_ids: set[str] = set()  # ... whose request names a queue
        # ids whose shape ``_learned_of`` (the model) has counted: not asked again
        self._learned: set[str] = set()
        self._learned_of: WorkloadModel | None = None
        # service id -> (the labels its request was parsed from, that parse)
        self._raw: dict[str, tuple[tuple[tuple[str, str], ...],
                                   GpuRequest | RequestError | None]] = {}
        # request labels -> their parse, for every service that has them
        self._by_inputs: dict[tuple[tuple[str, str], ...], GpuRequest | None] = {}
        self._kept = KeptHoldings(self.cluster, prefix, reads.reservation)
        self._last_cycle: Cycle | None = None  # what place_arrivals plans against
        self._arrival_cycle: Cycle | None = None  # its copy, which arrivals write through
        self.model_changed = False  # since the owner last stored the model
        self.release: set[str] = set()  # services whose held changes are written now
        self._backoff: dict[str, Backoff] = {}  # service id -> its re-placements
        self._open_since: dict[tuple[str, str], float] = {}  # (service id, node): gate seen open
        self._label_keys: dict[str, tuple[str, str]] = {}  # service name -> its ledger, gate keys
        # node id -> (spec version, its gate labels with the service each names, those)
        self._gates_cache: dict[str, tuple[int, list[tuple[str, str]], frozenset[str]]] = {}
        self._moving: frozenset[str] = frozenset()  # last cycle's services in a move

    def keep_failed_holdings(self, keep: Callable[[str, str], bool] | None) -> None:
        """(service name, node id) -> keep its holding on a failed GPU (the health
        rebalance policy moves it: docs/health.md); None: re-place such holdings."""
        self._kept.keep_failed = keep

    # --- the workload model ------------------------------------------------------
    def _learn(self, parsed: Sequence[tuple[SwarmService, GpuRequest | RequestError]],
               cpu_only: Sequence[SwarmService] = (), *, forget: bool = True) -> None:
        """Count each service's shape once. Services without a GPU request count too,
        by the CPU they reserve: they compete for the CPU that GPU tasks need, and the
        policy's CPU reserve weighs them (``cpu_reserve_per_gpu_milli``). ``forget``:
        ``parsed`` and ``cpu_only`` are every live service (a full cycle), so the marks
        of the others are dropped."""
        model, shapes, learned = self.model, self._shapes, self._learned
        if self._learned_of is not model:
            learned.clear()
            self._learned_of = model
        for s in [s for s in cpu_only if s.id not in learned]:
            if s.id in shapes and model.knows(s.id):
                learned.add(s.id)
                continue
            cpu = self._requests[s.id][2][0]
            shape = TaskShape(cpu, 0, 0)
            self._shapes[s.id] = shape
            count = max(1, s.replicas or 0) if s.mode == "replicated" else 1
            if model.observe(s.id, str(shape), shape, count):
                self.model_changed = True
        for s, r in [p for p in parsed if p[0].id not in learned]:
            if s.id in shapes and model.knows(s.id):
                learned.add(s.id)
                continue  # counted (per request: a changed request has a new version)
            if isinstance(r, RequestError) or not learned_count(s) or r.mig_profile:
                continue  # MIG slices are their own pool; they do not fragment shares
            cpu, _mem = self._requests[s.id][2]
            shape = demand_of(r, cpu).shape()
            self._shapes[s.id] = shape
            if model.observe(s.id, str(shape), shape, learned_count(s)):
                self.model_changed = True
        if forget and model.known_count() > len(parsed) + len(cpu_only):
            model.forget_keys([*(s.id for s, _ in parsed), *(s.id for s in cpu_only)])
            learned.clear()
        # Refresh the policy when the model grew by a tenth (or 20 tasks) since: a new
        # model drops the allocator's score cache, so not on every single arrival.
        if self.model.seen - self._model_mark >= max(20.0, 0.1 * self._model_mark):
            self.set_workload(self.model)

    def _learn_on_gpu_nodes(
            self, parsed: Sequence[tuple[SwarmService, GpuRequest | RequestError]],
            cpu_only: Sequence[SwarmService], on_nodes: Mapping[str, AbstractSet[str]], *,
            forget: bool = True) -> None:
        """``_learn``, unless the model is pinned. A CPU-only service competes for the GPU
        nodes' CPU only where its tasks run there; one on CPU-only nodes is none of
        placement's business."""
        if self.model.pinned:
            return
        gpu_nodes = self.cluster.alloc.nodes
        self._learn(parsed, [s for s in cpu_only
                             if any(n in gpu_nodes for n in on_nodes.get(s.id, ()))],
                    forget=forget)

    def set_workload(self, model: WorkloadModel) -> None:
        self.model = model
        self._model_mark = model.seen
        self.cluster.alloc.set_workload(model.typical())
        self.cluster.unplaceable.clear()

    # --- one cycle -----------------------------------------------------------------
    def _parse_all(self, services: Sequence[SwarmService], most: int = -1) -> ServiceRead:
        """Every service read once, by name (``ServiceRead``); ``most``: the largest
        node's GPUs (``few``: services with no more replicas)."""
        known = self._requests  # (not "requests": bandit reads that as the HTTP library)
        order = sorted(services, key=_by_name)
        # New spec versions parsed first; then each field is one comprehension over
        # the services (a loop doing all of it per service cost 3-4 times as much).
        for s in [s for s in order if (g := known.get(s.id)) is None or g[0] != s.version]:
            self._parse(s)
        pairs = list(zip(order, map(known.__getitem__, map(_by_id, order)), strict=True))
        parsed: Parsed = [(s, g[1]) for s, g in pairs if g[1] is not None]
        keys = [g[3] for _, g in pairs if g[1] is not None]
        return ServiceRead(
            parsed=parsed,
            cpu_only=[s for s, g in pairs if g[1] is None and g[2][0] > 0],
            no_request=[s for s, g in pairs if g[1] is None],
            names=set(map(_by_name, order)),
            few={s.id for s in order if (s.replicas or 0) <= most},
            queued=bool(self._queued_ids) and any(
                isinstance(r, GpuRequest) and r.queue for _, r in parsed),
            serve_keys=keys,
            mixed=bool(keys) and keys.count(keys[0]) != len(keys))

    def _parse(self, s: SwarmService) -> tuple[int, GpuRequest | RequestError | None,
                                               tuple[int, int], tuple[int, str]]:
        """A new spec version's request. A version that changed only what parsing does
        not read (placement's own device map and state labels, constraints, env) keeps
        the request object it had, and the shape learned from it."""
        prev = self._requests.get(s.id)
        inputs = request_labels(s.labels, self.prefix)
        raw = self._raw.get(s.id)
        if raw is None or raw[0] != inputs or isinstance(raw[1], RequestError):
            # The same labels parse the same (a frozen request, shared); an error is
            # said per service, so it is parsed again.
            one = self._by_inputs.get(inputs, _UNPARSED)
            if one is _UNPARSED:
                one = parse_all(s.labels, prefix=self.prefix, zone_label=self.zone_label,
                                classes=self.classes)
                if not isinstance(one, RequestError):
                    if len(self._by_inputs) > 10_000:
                        self._by_inputs.clear()
                    self._by_inputs[inputs] = one
            raw = self._raw[s.id] = (inputs, one)
        r = job_defaults(s, raw[1], self.prefix, self.classes)  # jobs: batch by default
        if self.tenants is not None:  # what its tenant may have (per service, not shared)
            r = self.tenants.apply_to(s, r)
        res = reservations(s.spec)
        if (prev is not None and not isinstance(r, RequestError) and prev[2] == res
                and (r is prev[1] or r == prev[1])):
            r = prev[1]
        else:
            self._shapes.pop(s.id, None)
            self._learned.discard(s.id)
        got = self._requests[s.id] = (s.version, r, res, serve_key(s, r))
        for ids, yes in ((self._job_ids, s.mode in JOB_MODES),
                         (self._queued_ids, isinstance(r, GpuRequest) and bool(r.queue))):
            if yes:
                ids.add(s.id)
            else:
                ids.discard(s.id)
        return got

    def refused_nodes(self, s: SwarmService) -> AbstractSet[str]:
        """Nodes Swarm's own filters refuse ``s`` on (as of the last cycle)."""
        return self._filters.refused(s)

    def plan(self, nodes: Sequence[SwarmNode], services: Sequence[SwarmService],
             tasks: Sequence[SwarmTask], facts: Mapping[str, NodeFacts], *,
             now: float | None = None, moving: AbstractSet[str] = frozenset(),
             ) -> PlacementPlan:
        """Decide placements for every annotated service; say what to write, in order.
        ``now`` (epoch seconds; the back-off of ``converge`` is kept in Swarm as such).
        ``moving``: the services with a move in flight by the daemon's own records
        (``rebalance.record.moving``); placement leaves them to the move."""
        now = time.time() if now is None else now
        prefix = self.prefix
        plan = PlacementPlan()
        # Taken, not read: a cycle that raises leaves none, so the next one is a full pass
        # (its node and task diffs are against the snapshot of the cycle that failed).
        records, self._quiet.records = self._quiet.records, {}
        ledger = read_ledger(nodes, prefix, self._ledger_cache)
        by_id = {n.id: n for n in nodes}
        cluster = self.cluster
        cluster.problems = []
        alloc_was = cluster.alloc
        cluster.sync_nodes(nodes, facts)
        rebuilt = cluster.alloc is not alloc_was  # a new node set: every holding anew
        self._filters.new_cycle(nodes)
        self._node_content.new_cycle(nodes)
        touched = self._quiet.changed(nodes, self._node_content.of, cluster.node_gen,
                                      cluster.alloc.nodes)
        if moving != self._moving:  # a move began or ended: its service is visited
            touched = touched | (moving ^ self._moving)
            self._moving = frozenset(moving)
        most = max((len(ns.spec.gpus) for ns in cluster.alloc.nodes.values()), default=0)
        read = self._parse_all(services, most)
        live_names, few = read.names, read.few
        parsed, cpu_only, no_request = read.parsed, read.cpu_only, read.no_request
        tasks_on: AbstractSet[tuple[str, str]] | None = None
        if self.change_driven:  # and which services' tasks changed since
            tv, tasks_changed = self._task_book.update(tasks, few)
            tasks_on = self._task_book.tasks_on
        else:
            tv, tasks_changed = tasks_by_service(tasks, few.__contains__), set()
        running, waiting, slots = tv.running, tv.waiting, tv.slots

        # Holdings of services that no longer exist are released (gate and ledger).
        gone = ledger.keys() - live_names
        for svc_name, per_node in ledger.items() if gone else ():
            if svc_name in gone:
                plan.released.append(svc_name)
                for node_id in per_node:
                    remove_node_labels(plan, node_id, [assign_key(prefix, svc_name),
                                                       gate_key(prefix, svc_name)])
        gk = prefix + GATE
        gates = self._gates_cache
        for n in nodes:  # stray gates without a holding
            got = gates.get(n.id)
            if got is None or got[0] != n.version:  # a node's gates, per spec version
                pairs = [(k, k[len(gk):]) for k in n.labels if k.startswith(gk)]
                got = gates[n.id] = (n.version, pairs, frozenset(name for _, name in pairs))
            if got[2] and not got[2] <= live_names:
                for k, name in got[1]:
                    if name not in live_names:
                        remove_node_labels(plan, n.id, [k])
        if len(gates) > 2 * len(nodes) + 100:  # nodes that left
            for nid in [k for k in gates if k not in by_id]:
                del gates[nid]

        for s in no_request:
            if s.name in ledger:  # request labels removed: release its GPUs
                plan.released.append(s.name)
                for node_id in ledger[s.name]:
                    remove_node_labels(plan, node_id, [assign_key(prefix, s.name),
                                                       gate_key(prefix, s.name)])
                stale = [k for k in s.labels if k.startswith(prefix + DEVICES)]
                if stale:
                    plan.services.append(ServicePlan(
                        s.name, s.id, None, "", Status.RELEASED, State.RELEASED,
                        writes=SpecWrites(service_labels_remove=tuple(stale))))
        # {} when no service is a job (none parsed as one: no pass over the services)
        jobs = job_progress(services, tasks) if self._job_ids else {}
        self._learn_on_gpu_nodes(running_jobs(parsed, jobs), cpu_only, tv.on_nodes)

        if self._backoff or tv.failed:
            live_ids = {s.id for s, _ in parsed}
            self._backoff = {k: v for k, v in self._backoff.items() if k in live_ids}
            for sid, ids in tv.failed.items():
                if sid in live_ids:
                    self._backoff.setdefault(sid, Backoff()).saw_failures(ids, now)

        # First commit every valid existing holding, so new placements never reuse GPUs.
        cluster.set_usage_of(tv.use, tv.on_nodes, tasks_on)
        quiet, kept = self._commit_kept(
            read, ledger, jobs, by_id, facts, running, records, tasks_changed, touched,
            self.change_driven and not rebuilt and most == self._most)
        self._most = most
        # Both kept in place: a quiet service's entries stay as they are; every other
        # visited service's are dropped first, then set again if it settles.
        new_records = records
        cyc = Cycle(cluster, by_id, facts, prefix, self.zone_label,
                    {n.labels.get(self.zone_label, "") for n in nodes}, self.adopt_ungated,
                    plan, self._filters.refused, most_gpus=most, now=now,
                    backoff=self._backoff, open_since=self._open_since, moving=moving,
                    grants=self.grants, generic_kind=self.generic_kind, release=self.release)
        self._last_cycle = cyc
        self._arrival_cycle = None
        settled = self._settled
        self.queues.start(parsed if read.queued else (), kept)  # no queue: nothing to count
        quotas = bool(self.queues.quotas)  # without any, nothing is refused or capped
        served = read.served()  # priority, then age (placement.preempt)
        # A quiet service's plan is its last one, as it is (placement.quiet): only the
        # others are visited, and the quiet ones take their places in serve order below.
        visit = [p for p in served if p[0].id not in quiet] if quiet else served
        n_settled = n_records = len(quiet)
        planned: list[ServicePlan] = []
        for s, r in visit:
            memo = settled.pop(s.id, None)
            new_records.pop(s.id, None)
            mine = kept.get(s.name, {})
            # above its queue's max: waits
            if quotas and isinstance(r, GpuRequest) and (
                    why := self.queues.refuse(s, r, mine)) is not None:
                planned.append(ServicePlan(s.name, s.id, r, r.describe(), Status.PENDING,
                                           State.PENDING, reason=why))
                continue
            # a scale-up held at its queue's max
            capped = self.queues.cap(s, r, mine) if quotas else None
            mine_slots = slots.get(s.id, {})
            # Slots are read only where the replicas could be packed on one node.
            bo = self._backoff.get(s.id)
            more: tuple[object, ...] = (
                (tuple(sorted(mine_slots.items())) if len(mine_slots) > 1
                 else tuple(mine_slots.items())) if s.id in few else None,
                bo.key() if bo is not None else None)
            if not mine:  # pending: the same answer while capacity and nodes are as they were
                more += (cluster.version, self._filters.gen)
            if s.mode != "replicated":  # a node joining, a job's task ending: planned again
                more += (jobs.get(s.id), cluster.version, self._filters.gen,
                         len(cluster.alloc.nodes))
            if capped is not None:
                more += (capped,)
            if s.name in moving:
                more += ("moving",)
            key = self._settled_key(s, mine, ledger.get(s.name, {}), by_id,
                                    running.get(s.id, {}), waiting.get(s.id, NO_WAITING), more)
            if memo is not None and memo[0] != key:
                memo = None
            if memo is not None:
                sp = memo[1]  # last cycle's plan, no writes: it still holds
            else:
                sp = plan_service(s, r, mine, ledger.get(s.name, {}), running.get(s.id, {}),
                                  waiting.get(s.id, NO_WAITING), self._requests[s.id][2], cyc,
                                  mine_slots, jobs.get(s.id), capped)
                plan.add_node_writes(sp)
            self.queues.count(r, mine, sp)
            if memo is not None:  # settled when kept, and unchanged since
                settled[s.id] = memo
                n_settled += 1
            elif ((sp.status in (Status.PLACED, Status.DONE)
                   or (sp.status == Status.PENDING and not sp.placements))
                    and not sp.needs_service_write and not sp.node_writes and not sp.new):
                settled[s.id] = (key, sp)
                n_settled += 1
            elif (after := key_after_gates_open(key, sp, s, ledger.get(s.name, {}),
                                                prefix)) is not None:  # placement.memo
                settled[s.id] = (after, sp.without_node_writes())
                n_settled += 1
            # Quiet from the next cycle on only when this snapshot is what the kept plan
            # answers: a plan settled under the key it has once its gate writes landed
            # is keyed again (a write that did not land leaves no change to see).
            if (s.id in settled and not sp.node_writes and bo is None and capped is None
                    and mine and s.mode == "replicated" and mine == ledger.get(s.name)):
                new_records[s.id] = Quiet(s.version, len(mine))
                n_records += 1
            planned.append(sp)
        if quiet:
            visited_plans = iter(planned)
            plan.services.extend([settled[s.id][1] if s.id in quiet else next(visited_plans)
                                  for s, _ in served])
        else:
            plan.services.extend(planned)
        if len(settled) != n_settled or len(new_records) != n_records:  # services gone
            visited = {s.id for s, _ in parsed}
            for book in (settled, new_records):
                for sid in [k for k in book if k not in visited]:
                    del book[sid]
        self._quiet.records = new_records
        self._open_since = cyc.open_seen
        if len(self._kept.fits) > 4 * len(settled) + 10_000:  # departed services' entries
            self._kept.fits.clear()
        if len(self._requests) > 2 * len(services) + 1000:
            live = {s.id for s in services}
            for cache in (self._requests, self._shapes, self._raw, self._kept.declared,
                          self._filters.keys):
                for sid in [k for k in cache if k not in live]:
                    del cache[sid]
            self._learned &= live
            self._job_ids &= live
            self._queued_ids &= live
        for p in cluster.problems:  # said on the plan of the service each names
            for i, sp in enumerate(plan.services):
                if p.startswith(sp.name + ":"):
                    plan.services[i] = sp.noted(p)
        plan.workload = self.model.summary()
        plan.queues = self.queues.summary()
        return plan

    def _commit_kept(self, read: ServiceRead, ledger: Mapping[str, Mapping[str, Holding]],
                     jobs: Mapping[str, JobProgress], by_id: Mapping[str, SwarmNode],
                     facts: Mapping[str, NodeFacts], running: Mapping[str, Mapping[str, int]],
                     records: Mapping[str, Quiet], tasks_changed: AbstractSet[str],
                     touched: AbstractSet[str],
                     may_skip: bool) -> tuple[dict[str, str], dict[str, dict[str, Holding]]]:
        """Commit the holdings kept this cycle; returns the quiet services (id -> name:
        placement.quiet), whose holdings stay committed as they are and are not
        returned, and service name -> node id -> holding for the others."""
        quiet, rest, count = (self._quiet_services(read, records, tasks_changed, touched, facts)
                              if may_skip else ({}, read.parsed, 0))
        if quiet:
            got = self._kept.commit(rest, without_finished(ledger, rest, jobs), by_id, facts,
                                    running, keep=set(quiet.values()), kept_count=count)
            if got is not None:
                return quiet, got
        parsed = read.parsed  # the full pass
        got = self._kept.commit(parsed, without_finished(ledger, parsed, jobs), by_id, facts,
                                running)
        return {}, got or {}

    def _quiet_services(self, read: ServiceRead, records: Mapping[str, Quiet],
                        tasks_changed: AbstractSet[str],
                        touched: AbstractSet[str], facts: Mapping[str, NodeFacts],
                        ) -> tuple[dict[str, str], Parsed, int]:
        """The services this cycle need not visit (id -> name; placement.quiet), the
        others, and how many holdings the quiet ones have committed; none when something
        every service reads may have changed."""
        if read.queued or self.queues.quotas or (self._kept.keep_failed is not None and any(
                not g.healthy for f in facts.values() for g in f.gpus)):
            return {}, read.parsed, 0  # a queue's use is counted over every service
        backoff = self._backoff
        quiet: dict[str, str] = {}
        rest: Parsed = []
        count = 0
        for p in read.parsed:
            s = p[0]
            sid = s.id
            q = records.get(sid)
            if (q is not None and q.version == s.version and sid not in tasks_changed
                    and s.name not in touched and sid not in backoff):
                quiet[sid] = s.name
                count += q.held
            else:
                rest.append(p)
        return quiet, rest, count

    def place_arrivals(self, services: Sequence[SwarmService], tasks: Sequence[SwarmTask],
                       ) -> PlacementPlan:
        """Plan services created since the last cycle against the state it left (its
        holdings, CPU usage as changed since through ``cluster.add_usage``, and what
        this method committed since): the decisions a full cycle run right then would
        make for them while nothing else changed, at the cost of the new services only.

        ``simulate`` places each arrival this way. The daemon runs a cycle on every
        service-create event, so a new service is planned before the next one arrives
        whenever arrivals are further apart than a cycle takes (the openb trace: median
        161 s apart, 2% within a second); re-planning the whole cluster per arrival
        would make a replay hours long. tests/test_sim.py checks the decisions
        against a full cycle per arrival. ``services`` are the new ones, CPU-only
        ones included (the model learns them as a cycle would); ``tasks`` their tasks.
        The plan's ``workload`` stays empty (the model's summary cost more than the
        decision; the next full cycle's plan carries it).
        """
        last = self._last_cycle
        if last is None:
            raise RuntimeError("place_arrivals needs a full cycle (plan) first")
        plan = PlacementPlan()
        cyc = self._arrival_cycle
        if cyc is None:  # the last cycle's context (one copy), for this plan
            cyc = self._arrival_cycle = copy.copy(last)
            cyc.release = frozenset()  # (an arrival has nothing held to release)
        cyc.plan = plan
        read = self._parse_all(services)
        parsed, cpu_only = read.parsed, read.cpu_only
        tv = tasks_by_service(tasks)
        self._learn_on_gpu_nodes(parsed, cpu_only, tv.on_nodes, forget=False)
        for s, r in parsed:
            plan.add(plan_service(s, r, {}, {}, {}, tv.waiting.get(s.id, NO_WAITING),
                                  self._requests[s.id][2], cyc, tv.slots.get(s.id, {})))
        return plan

    def _settled_key(self, s: SwarmService, kept: Mapping[str, Holding],
                     old: Mapping[str, Holding], by_id: Mapping[str, SwarmNode],
                     running_on: Mapping[str, int], waiting: Waiting,
                     more: tuple[object, ...] = ()) -> tuple[object, ...]:
        """Everything a settled service's plan reads: while it is unchanged, last
        cycle's plan (no writes) still holds. ``more``: what the cycle adds to it."""
        gen, content = self.cluster.node_gen, self._node_content.of
        # A node by content, its labels but other services' gates and ledger entries
        # (placement.memo); its gate and ledger entry for this service beside it.
        keys = self._label_keys.get(s.name)
        if keys is None:
            if len(self._label_keys) > 100_000:
                self._label_keys.clear()
            keys = self._label_keys[s.name] = (assign_key(self.prefix, s.name),
                                               gate_key(self.prefix, s.name))
        ak, gk = keys
        nodes = []
        for nid, h in kept.items():
            n = by_id.get(nid)
            if n is not None:
                labels = n.labels
                nodes.append((nid, h, content[nid], labels.get(ak), labels.get(gk),
                              gen.get(nid, 0)))
        return (s.version, tuple(nodes), tuple(old.values()), tuple(running_on.items()),
                waiting, *more)


def plan_placement(
    nodes: Sequence[SwarmNode],
    services: Sequence[SwarmService],
    tasks: Sequence[SwarmTask],
    facts: Mapping[str, NodeFacts],
    *,
    prefix: str = "swarmgpu.",
    zone_label: str = "topology.zone",
    adopt_ungated: bool = True,
    generic_kind: str = "",
    workload: WorkloadModel | None = None,
) -> PlacementPlan:
    """One cycle of a fresh ``Planner`` (``render``, ``plan`` and tests)."""
    return Planner(prefix=prefix, zone_label=zone_label, adopt_ungated=adopt_ungated,
                   generic_kind=generic_kind, workload=workload).plan(
        nodes, services, tasks, facts)
