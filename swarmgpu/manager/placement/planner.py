"""The placement planner (``Planner``): one cycle, snapshot in, plan out."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

from swarmgpu.allocator.fragmentation import STOP_WEIGHT
from swarmgpu.allocator.scorer import SwarmScorer
from swarmgpu.allocator.workload import WorkloadModel
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement.backoff import Backoff
from swarmgpu.manager.placement.cluster import ClusterAllocator
from swarmgpu.manager.placement.commitpass import commit_kept, quiet_services
from swarmgpu.manager.placement.cpunodes import agent_nodes
from swarmgpu.manager.placement.cycle import Cycle
from swarmgpu.manager.placement.devicemap import note_clean
from swarmgpu.manager.placement.existing import KeptHoldings
from swarmgpu.manager.placement.filters import SwarmFilters
from swarmgpu.manager.placement.globalmode import GLOBAL_MODES
from swarmgpu.manager.placement.hostports import HostPorts
from swarmgpu.manager.placement.isolate import (
    Faults,
    committed,
    failed_unvisited,
    isolated,
    on_unread_nodes,
    plugins_noted,
    unrecorded,
)
from swarmgpu.manager.placement.jobs import (
    JobProgress,
    job_progress,
    job_replicas,
    running_jobs,
)
from swarmgpu.manager.placement.keys import rejected_running
from swarmgpu.manager.placement.learning import learn
from swarmgpu.manager.placement.ledger import Holding, read_ledger
from swarmgpu.manager.placement.memo import (
    PlannerMemo,
    settles,
)
from swarmgpu.manager.placement.nominated import (
    HoldFaults,
    Holds,
    Nomination,
    StoppingGpus,
    held_gpus,
    held_shares,
    live_nominations,
)
from swarmgpu.manager.placement.preempt import priority_of
from swarmgpu.manager.placement.queues import (
    Moving,
    QueueBook,
    QueueLimit,
    Quotas,
    held_in_ledger,
    together,
)
from swarmgpu.manager.placement.quiet import Quiet
from swarmgpu.manager.placement.reads import Parsed, RequestReader, ServiceRead
from swarmgpu.manager.placement.records import (
    PlacementPlan,
    ServicePlan,
    Status,
    leave_unread,
)
from swarmgpu.manager.placement.recreated import Recreated
from swarmgpu.manager.placement.release import release
from swarmgpu.manager.placement.service import plan_service
from swarmgpu.manager.placement.specs import demand_of
from swarmgpu.manager.placement.tasks import NO_WAITING, TaskView, Waiting, tasks_by_service
from swarmgpu.manager.services.requests import GpuRequest, RequestError
from swarmgpu.manager.services.tenants import Tenants, specs_of
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.unkeyed import NONE_UNKEYED, Unkeyed


@dataclass(frozen=True, slots=True)
class _Seen:
    """The nodes as one cycle reads them (``Planner._see``)."""

    ledger: dict[str, dict[str, Holding]]  # service name -> node id -> holding
    by_id: dict[str, SwarmNode]
    touched: AbstractSet[str]  # services some changed node label names
    rebuilt: bool  # a new node set: every holding is committed anew
    most: int  # the largest node's GPUs


@dataclass(frozen=True, slots=True)
class _Visit:
    """What the visit phase of one cycle reads (``Planner._visit``)."""

    read: ServiceRead
    quiet: Mapping[str, str]  # id -> name: services not visited (placement.quiet)
    kept: dict[str, dict[str, Holding]]  # the others' holdings kept, by name
    ledger: Mapping[str, Mapping[str, Holding]]
    by_id: Mapping[str, SwarmNode]
    tasks: TaskView
    jobs: Mapping[str, JobProgress]
    records: dict[str, Quiet]  # the quiet records, kept in place (``_visit`` updates)
    cyc: Cycle
    moving: AbstractSet[str]
    holds: Holds  # GPUs a preemption freed, held for its preemptor


@dataclass(frozen=True, slots=True)
class _Visited:
    """``Planner._visit_one``: the plan, its node writes to add, settled, quiet next cycle."""

    plan: ServicePlan
    writes: bool
    settled: bool = False
    quiet: bool = False
    capped: bool = False  # its queue's max holds some of it back (``queues.limit``)


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
                 tenants: Tenants | None = None, grants: str = "env",
                 stop_weight: float = STOP_WEIGHT, agent_service: str = "") -> None:
        self.prefix = prefix
        # agents.service: the nodes its tasks are on are GPU nodes (cpunodes.agent_nodes)
        self.agent_service = agent_service
        self.tenants = tenants  # the operator's limits on each request (manager.services.tenants)
        self.grants = grants  # placement.grants: env, or mounts (also the device mount)
        # Visit only the services whose inputs changed (placement.quiet); False: every
        # service, every cycle (tests compare the two).
        self.change_driven = change_driven
        self.classes = priority_classes  # swarmgpu.priority's names (None: the defaults)
        # swarmgpu.queue's quotas, and each tenant's queues' together (placement.queues)
        owned = {t.name: t.queues for t in tenants.specs} if tenants is not None else {}
        self.queues = QueueBook(queues or {}, together=together(owned, queues or {}),
                                owner={q: t for t, qs in owned.items() for q in qs})
        self.zone_label = zone_label
        self.adopt_ungated = adopt_ungated
        self.generic_kind = generic_kind
        self.model = workload if workload is not None else WorkloadModel.prior()
        # placement.residual_stop_weight (residual_waste_table): the daemon passes its
        # config's; simulate keeps the default, which is the config key's default
        self.scorer = SwarmScorer(self.model.typical(), stop=stop_weight,
                                  shapes=self.model.current())
        self.cluster = ClusterAllocator(scorer=self.scorer, prefix=prefix,
                                        generic_kind=generic_kind)
        self._model_mark = self.model.seen
        # what it remembers across cycles, by name (``placement.memo``)
        self._memo = memo = PlannerMemo(prefix)
        self._reads = RequestReader(memo, prefix, zone_label, priority_classes, tenants,
                                    frozenset(queues or {}))
        # (the memo's bound methods: a part holding one of the planner's would hold the
        # planner, and a planner in a reference cycle is freed only by a full
        # collection of all it holds -- 0.75 s after a ``simulate`` seed, in the CLI's
        # wall time -- not when its owner lets go of it)
        self._filters = SwarmFilters(prefix, generic_kind, memo.request)
        self._ports = HostPorts()  # other services' tasks binding a host-mode port
        # (strict: a spec whose filter cannot be read fails its service alone, named)
        self._refused = self._ports.excluding(self._filters.refused_strict)
        self._kept = KeptHoldings(self.cluster, prefix, memo.reservation)
        memo.by_service = (self._kept.declared, self._filters.keys)
        memo.fits = self._kept.fits
        self._last_cycle: Cycle | None = None  # what place_arrivals plans against
        self._arrival_cycle: Cycle | None = None  # its copy, which arrivals write through
        self.model_changed = False  # since the owner last stored the model
        self.release: set[str] = set()  # services whose held changes are written now
        self._backoff: dict[str, Backoff] = {}  # service id -> its re-placements
        self._open_since: dict[tuple[str, str], float] = {}  # (service id, node): gate seen open
        self._run_waited: dict[str, float] = {}  # global job id -> its run first waited
        self._clean_made: dict[str, dict[str, frozenset[int]]] = {}  # ``Cycle.clean_made``
        self._faults = Faults()  # services whose planning raised (placement.isolate)
        self._hold_faults = HoldFaults()  # holds whose work raised (placement.nominated)
        self._stopping = StoppingGpus(prefix)  # GPUs of tasks Swarm is stopping, held meanwhile
        self._recreated = Recreated()  # entries disowned, by cycle (placement.recreated)

    def keep_failed_holdings(self, keep: Callable[[str, str], bool] | None) -> None:
        """(service name, node id) -> keep its holding on a failed GPU (the health
        rebalance policy moves it: docs/health.md); None: re-place such holdings."""
        self._kept.keep_failed = keep

    # --- the workload model ------------------------------------------------------
    def _learn(self, parsed: Sequence[tuple[SwarmService, GpuRequest | RequestError]],
               cpu_only: Sequence[SwarmService], failed: dict[str, Exception], *,
               forget: bool = True) -> None:
        """Count each service's shape once (``placement.learning``); a service whose count
        raises is named in ``failed``."""
        if learn(self._memo, self.model, parsed, cpu_only, failed, forget=forget):
            self.model_changed = True
        # Refresh the policy when the model grew by a tenth since (a new model drops the
        # allocator's score cache, so not on every arrival), and on each of the first ten
        # tasks: their CPU replaces the prior's (``WorkloadModel.current``), and the first
        # placements weigh it. Refreshed at 20 tasks first, the prior's CPU placed the
        # first 20 and cost 0.2 points where it was ten times the tasks' (docs/simulate.md,
        # "The prior's CPU").
        if self.model.seen - self._model_mark >= max(1.0, 0.1 * self._model_mark):
            self.set_workload(self.model)

    def _learn_on_gpu_nodes(
            self, parsed: Sequence[tuple[SwarmService, GpuRequest | RequestError]],
            cpu_only: Sequence[SwarmService], on_nodes: Mapping[str, AbstractSet[str]],
            failed: dict[str, Exception], *, forget: bool = True) -> None:
        """``_learn``, unless the model is pinned. A CPU-only service competes for the GPU
        nodes' CPU only where its tasks run there; one on CPU-only nodes is none of
        placement's business."""
        if self.model.pinned:
            return
        gpu_nodes = self.cluster.alloc.nodes
        self._learn(parsed, [s for s in cpu_only
                             if any(n in gpu_nodes for n in on_nodes.get(s.id, ()))],
                    failed, forget=forget)

    def set_workload(self, model: WorkloadModel) -> None:
        self.model = model
        self._model_mark = model.seen
        # every shape seen too: tasks rare enough to be left out of the typical ones may
        # be the only ones some untouched nodes can host (``allocator.untouched``)
        self.cluster.alloc.set_workload(model.typical(), model.current())
        self.cluster.unplaceable.clear()

    # --- one cycle -----------------------------------------------------------------
    def refused_nodes(self, s: SwarmService) -> AbstractSet[str]:
        """Nodes Swarm's own filters refuse ``s`` on (as of the last cycle)."""
        return self._refused(s)

    def port_takers(self, s: SwarmService) -> Mapping[str, AbstractSet[str]]:
        """Of ``refused_nodes``, those refused for a host-mode port alone: node id -> the
        services whose tasks bind it there (preemption may free such a node)."""
        takers = self._ports.takers(s)
        if not takers:
            return takers
        base = self._filters.refused(s)
        return {nid: by for nid, by in takers.items() if nid not in base}

    def plan(self, nodes: Sequence[SwarmNode], services: Sequence[SwarmService],
             tasks: Sequence[SwarmTask], facts: Mapping[str, NodeFacts], *,
             now: float | None = None, moving: AbstractSet[str] = frozenset(),
             nominated: Sequence[Nomination] = (), agents: AbstractSet[str] | None = None,
             stopping: Sequence[SwarmTask] = (),
             rejected: Sequence[SwarmTask] = (), unkeyed: Unkeyed = NONE_UNKEYED) -> PlacementPlan:
        """Decide placements for every annotated service; say what to write, in order.
        ``now`` (epoch seconds; the back-off of ``converge`` is kept in Swarm as such).
        ``moving``: the services with a move in flight by the daemon's own records
        (``rebalance.record.moving``); placement leaves them to the move.
        ``nominated``: GPUs preemptions freed, held for their preemptors while they
        settle (``placement.nominated``: no service of their priority or lower but the
        preemptor is placed on them). ``agents``: the nodes running the agents' service,
        the snapshot's ``agent_nodes`` (None: walked here, from ``services`` and ``tasks``).
        ``stopping``: tasks Swarm is stopping that still use their node (``keys.stopping``):
        their CPU, memory, host ports and GPUs count as used, none of them as a meant task.
        ``rejected``: tasks Swarm stops that its constraint enforcer rejected: their GPUs
        alone held while ``keys.rejected_running`` at ``now`` (``StoppingGpus.holds``).
        ``unkeyed``: what the lists left out (``swarm.unkeyed``; ``reads``, ``isolate``).

        The phases, in order: see what changed; read the services and their tasks;
        release what is no longer held; learn the workload and the back-offs; commit
        the holdings kept; visit each service that may have changed; forget what is
        gone; say the allocator's problems on the plans they name."""
        now = time.time() if now is None else now
        plan, nodes = PlacementPlan(), self._memo.unmatched(nodes)  # (unread: none kept)
        # Taken, not read: a cycle that raises leaves none, so the next one is a full pass
        # (its node and task diffs are against the snapshot of the cycle that failed).
        records, self._memo.quiet.records = self._memo.quiet.records, {}
        unrecorded(self.cluster)  # a cycle that raised outside a visit left them: rebuilt
        if agents is None:  # (no snapshot: the simulator's, render_stack called alone)
            agents = agent_nodes(services, tasks, self.agent_service, specs_of(self.tenants))
        seen = self._see(nodes, facts, moving, agents)
        self._ports.new_cycle(services, [*tasks, *stopping] if stopping else tasks)
        self._filters.set_tasks(tasks)
        self._faults.begin()  # (a service's fault said once while it lasts: isolate)
        read = self._reads.read(services, seen.most, unkeyed.services)
        read.failed.update(on_unread_nodes(seen.by_id, tasks, services, seen.ledger, unkeyed.nodes))
        tv, tasks_changed = self._read_tasks(tasks, read.few)
        release(plan, nodes, seen.ledger, read, self.prefix, self._memo.node_gates)
        # {} when no service is a job (none parsed as one: no pass over the services)
        # Each pass over the services below names in ``read.failed`` a service whose part
        # of it raised: that service is planned as failed, the others as ever (isolate).
        failed = read.failed
        jobs = job_progress(services, tasks, failed) if self._memo.job_ids else {}
        self._learn_on_gpu_nodes(running_jobs(read.parsed, jobs, failed), read.cpu_only,
                                 tv.on_nodes, failed)
        self._back_off(read.parsed, tv.failed, now)
        live = live_nominations(nominated, {s.name: s.id for s in services}, bool(unkeyed.services))
        leaving = self._leaving(plan, stopping, services, seen.ledger, tasks, facts,
                                rejected, live, now, bool(unkeyed.services), moving)
        # First commit every valid existing holding, so new placements never reuse GPUs.
        self.cluster.set_usage_of(_with_stopping(tv.use, stopping), tv.on_nodes,
                                  self._memo.tasks.tasks_on if self.change_driven else None)
        skip = (self._quiet_services(read, records, tasks_changed, seen.touched, facts)
                if self.change_driven and not seen.rebuilt and seen.most == self._memo.most
                else None)
        quiet, kept = commit_kept(self._kept, read, seen.ledger, jobs, seen.by_id, facts,
                                  tv.running, skip)
        self._memo.most = seen.most
        cyc = self._cycle(plan, nodes, facts, seen, now, moving)
        cyc.task_rules, cyc.task_made = tv.rules, tv.made
        # Both kept in place: a quiet service's entries stay as they are; every other
        # visited service's are dropped first, then set again if it settles.
        # Stopping tasks' first: a GPU of theirs not spared (no victim's) is not a hold's
        holds = Holds(self.cluster, [*leaving, *live], self._hold_faults)
        try:  # a hold is counted for this visit only, whatever it raises
            self._visit(plan, _Visit(read, quiet, kept, seen.ledger, seen.by_id, tv, jobs,
                                     records, cyc, moving, holds))
        finally:
            holds.end()
        self._memo.evict(services, seen.by_id)
        failed_unvisited(plan.services, read.no_request, read.failed, self.cluster,
                         self._faults, set(plan.released))
        self._note_problems(plan, {s.name: s for s, _ in read.parsed})
        self._faults.end()
        leave_unread(plan, nodes)
        self._recreated.placed_elsewhere(plan.finish(), plan.services)  # (placed afresh there)
        plan.workload, plan.queues = self.model.summary(), self.queues.summary()
        return plan

    def _see(self, nodes: Sequence[SwarmNode], facts: Mapping[str, NodeFacts],
             moving: AbstractSet[str], agents: AbstractSet[str]) -> _Seen:
        """The nodes read: the ledger, the allocator's nodes (``agents``: those running the
        agents' service), Swarm's filters, and what changed since the last cycle."""
        memo, cluster = self._memo, self.cluster
        ledger = read_ledger(nodes, self.prefix, memo.ledger)
        cluster.problems = []
        alloc_was = cluster.alloc
        cluster.sync_nodes(nodes, facts, agents)
        rebuilt = cluster.alloc is not alloc_was  # a new node set: every holding anew
        self._filters.new_cycle(nodes)
        memo.node_content.new_cycle(nodes)
        touched = memo.quiet.changed(nodes, memo.node_content.of, cluster.node_gen,
                                     cluster.alloc.nodes)
        # A move began or ended, or its record turned unreadable or was mended: its
        # service is visited (its plan says which).
        unread = frozenset(moving.unread) if isinstance(moving, Moving) else frozenset()
        if moving != memo.moving or unread != memo.unread:
            touched = touched | (moving ^ memo.moving) | (unread ^ memo.unread)
            memo.moving, memo.unread = frozenset(moving), unread
        most = max((len(ns.spec.gpus) for ns in cluster.alloc.nodes.values()), default=0)
        return _Seen(ledger, {n.id: n for n in nodes}, touched, rebuilt, most)

    def _read_tasks(self, tasks: Sequence[SwarmTask], few: AbstractSet[str],
                    ) -> tuple[TaskView, AbstractSet[str]]:
        """The tasks by service, and which services' tasks changed since (change-driven:
        ``TaskBook``)."""
        if self.change_driven:
            return self._memo.tasks.update(tasks, few)
        return tasks_by_service(tasks, few.__contains__), set()

    def _back_off(self, parsed: Parsed, failed: Mapping[str, Sequence[str]],
                  now: float) -> None:
        """Each live service's re-placements (``placement.backoff``): its tasks that
        failed since are counted; a gone service's record goes, as do when a gone global
        job's run first waited (``Cycle.run_waited``) and its clean lists (``clean_made``)."""
        live_ids = {s.id for s, _ in parsed}
        for sid in self._run_waited.keys() - live_ids:  # (kept in place: ``Cycle``'s)
            del self._run_waited[sid]
        for sid in self._clean_made.keys() - live_ids:
            del self._clean_made[sid]
        if self._backoff or failed:
            self._backoff = {k: v for k, v in self._backoff.items() if k in live_ids}
            for sid, ids in failed.items():
                if sid in live_ids:
                    self._backoff.setdefault(sid, Backoff()).saw_failures(ids, now)

    def _leaving(self, plan: PlacementPlan, stopping: Sequence[SwarmTask],
                 services: Sequence[SwarmService],
                 ledger: Mapping[str, Mapping[str, Holding]], tasks: Sequence[SwarmTask],
                 facts: Mapping[str, NodeFacts], rejected: Sequence[SwarmTask],
                 live: Sequence[Nomination], now: float, left_out: bool = False,
                 moving: AbstractSet[str] = frozenset()) -> list[Nomination]:
        """This cycle's holds for the tasks Swarm is stopping (``StoppingGpus.holds``;
        ``rejected``: those whose container may run at ``now``), with what they hold,
        spare and wait for set on ``plan`` (and the cycle's: ``_cycle``). Read before the
        holdings are committed: the ledger entries a removed service left to one
        recreated under its name are not kept (``placement.recreated``), by the names
        the last cycle's holds learned (``left_out``, ``moving``: ``Recreated.entries``)."""
        st = self._stopping
        rejected = [t for t in rejected if rejected_running(t, now)]
        recreated = self._kept.disowned = self._recreated.entries(
            services, [*stopping, *rejected], ledger, st.names, tasks, self.prefix,
            lambda t: st.learned(t, facts), left_out, moving)
        plan.disowned = recreated  # (preemption and the rebalancer read without them)
        leaving = st.holds(stopping, services, ledger, tasks, facts, rejected, live, now,
                           recreated)
        plan.stopping_held, plan.stopping_spared = held_gpus(leaving), st.spared
        plan.stopping_milli = held_shares(leaving)
        plan.stopping_overdue, plan.stopping_waits = st.overdue, st.waits
        return leaving

    def _cycle(self, plan: PlacementPlan, nodes: Sequence[SwarmNode],
               facts: Mapping[str, NodeFacts], seen: _Seen, now: float,
               moving: AbstractSet[str]) -> Cycle:
        """The context the service steps of this cycle share (and arrivals, after)."""
        cyc = Cycle(self.cluster, seen.by_id, facts, self.prefix,
                    self.zone_label, {n.labels.get(self.zone_label, "") for n in nodes},
                    self.adopt_ungated, plan, self._refused, most_gpus=seen.most,
                    now=now, backoff=self._backoff, open_since=self._open_since,
                    run_waited=self._run_waited, clean_made=self._clean_made,
                    moving=moving, grants=self.grants, generic_kind=self.generic_kind,
                    release=self.release, ports=self._ports, filters=self._filters)
        cyc.stopping_until = self._stopping.until  # (``_leaving``: this cycle's holds)
        self._last_cycle = cyc
        self._arrival_cycle = None
        return cyc

    def _visit(self, plan: PlacementPlan, v: _Visit) -> None:
        """Plan each service that is not quiet, in serve order (its settled plan when
        nothing it reads changed); the quiet ones' plans take their places. A service
        whose planning raises costs itself alone (``placement.isolate``)."""
        settled, records, queues = self._memo.settled, v.records, self.queues
        plan.held_as = v.read.held_as  # (invalid requests' holders, as preemption reads them)
        queues.start(v.read.parsed if v.read.queued else (), v.kept, v.ledger,  # no queue: none
                     v.read.broken_queues, v.moving, v.cyc.facts, v.read.failed,
                     v.read.unknown_queues)
        quotas = bool(queues.quotas)  # without any, nothing is refused or capped
        served = v.read.served()  # priority, then age (placement.preempt)
        quiet = v.quiet
        # A quiet service's plan is its last one, as it is (placement.quiet): only the
        # others are visited, and the quiet ones take their places in serve order below.
        visit = [p for p in served if p[0].id not in quiet] if quiet else served
        n_settled = n_records = len(quiet)
        planned: list[ServicePlan] = []
        ledger = v.ledger
        ports = v.cyc.ports  # each decision takes its host-mode ports (hostports.claim)
        for s, _r in served if quiet else ():  # not visited: what they hold stays theirs
            if s.id in quiet and ports.ports_of(s):
                ports.claim(s, ledger.get(s.name, {}))
        faults = self._faults
        failed = v.read.failed  # a pass over every service raised for these (``plan``)
        for s, r in visit:
            v.holds.visit(s.name, priority_of(r), planned)  # its faults its own (nominated)
            before = committed(self.cluster, s.name, v.kept.get(s.name, {}))  # (isolate)
            try:
                if s.id in failed:
                    raise failed[s.id]
                got = self._visit_one(s, r, v, quotas)
            except Exception as exc:  # one service's fault is its own: the rest go on
                settled.pop(s.id, None)
                records.pop(s.id, None)
                planned.append(isolated(self.cluster, faults, s, r, exc, before))
                if ports.ports_of(s):  # its tasks still run where it holds
                    ports.claim(s, before)
                continue
            sp = got.plan
            if held := self._held_note(s, r, sp, v, got.capped):  # (not memo'd)
                sp = replace(sp, reason=f"{sp.reason}; {held}" if sp.reason else held)
            if got.writes:
                plan.add_node_writes(sp)
            n_settled += got.settled
            n_records += got.quiet
            planned.append(sp)
            claim(ports, s, sp)
        if quiet:
            visited_plans = iter(planned)
            plan.services.extend([settled[s.id].plan if s.id in quiet
                                  else next(visited_plans) for s, _ in served])
        else:
            plan.services.extend(planned)
        if len(settled) != n_settled or len(records) != n_records:  # services gone
            visited = {s.id for s, _ in v.read.parsed}
            for book in (settled, records):
                for sid in [k for k in book if k not in visited]:
                    del book[sid]
        self._memo.quiet.records = records
        self._open_since = v.cyc.open_seen

    def _visit_one(self, s: SwarmService, r: GpuRequest | RequestError, v: _Visit,
                   quotas: bool) -> _Visited:
        """One service's visit (``_visit``): its plan, and what the cycle keeps of it.
        Its node writes are the caller's to add: none of a plan that raised is."""
        settled, records, queues = self._memo.settled, v.records, self.queues
        memo = settled.pop(s.id, None)
        records.pop(s.id, None)
        mine = v.kept.get(s.name, {})
        old, running_on = v.ledger.get(s.name, {}), v.tasks.running.get(s.id, {})
        # Its queue's max. What it holds is what the ledger says: a device list adopted
        # from its own labels this cycle is a new placement (placement.queues).
        held = held_in_ledger(mine, old) if quotas else mine
        capped = (queues.limit(s, r, held, _wanted(s, v.jobs.get(s.id))) if quotas
                  else None)
        waits = v.tasks.waiting.get(s.id, NO_WAITING)
        if capped is not None and capped.whole:  # all of it waits: nothing to keep
            for nid in mine.keys() - held.keys():  # adopted lists: free for the others
                self.cluster.release_holding(s.name, nid)
            return _Visited(plan_service(s, r, dict(held), old, running_on, waits,
                                         self._memo.requests[s.id].reservation,
                                         v.cyc, cap=capped), False, capped=True)
        bo = self._backoff.get(s.id)
        key = self._settled_key(s, mine, old, v.by_id, running_on, waits,
                                self._more(s, mine, v, bo, capped))
        fresh = memo is None or memo.key != key
        if memo is not None and not fresh:
            sp = memo.plan  # last cycle's plan, no writes: it still holds
            note_clean(v.cyc, s.id, running_on)  # (its device lists are the ledger's)
        else:
            sp = plan_service(s, r, mine, old, running_on, waits,
                              self._memo.requests[s.id].reservation, v.cyc,
                              v.tasks.slots.get(s.id, {}), v.jobs.get(s.id), capped)
            memo = settles(key, sp, s, old, self.prefix)
        queues.count(r, held, sp, self.prefix)
        if memo is not None:
            settled[s.id] = memo
        # Quiet from the next cycle on only when this snapshot is what the kept plan
        # answers: a plan settled under the key it has once its gate writes landed
        # is keyed again (a write that did not land leaves no change to see).
        is_quiet = (memo is not None and not sp.node_writes and bo is None
                    and capped is None and bool(mine) and s.mode == "replicated"
                    and mine == v.ledger.get(s.name))
        if is_quiet:
            records[s.id] = Quiet(s.version, len(mine))
        return _Visited(sp, fresh, memo is not None, is_quiet, capped is not None)

    def _held_note(self, s: SwarmService, r: GpuRequest | RequestError, sp: ServicePlan,
                   v: _Visit, capped: bool) -> str:
        """The holds that keep pending ``s`` off a node it could otherwise run on
        (``Holds.note``): said only where placement found no room for some of it, not
        where Swarm refuses its placed task or its queue's max holds it back."""
        if sp.status != Status.PENDING or capped or not isinstance(r, GpuRequest):
            return ""
        want = _wanted(s, v.jobs.get(s.id))
        if want is not None and len(sp.placements) >= want:
            return ""  # every replica placed: not room, something else keeps it waiting
        return v.holds.note(demand_of(r, *self._memo.requests[s.id].reservation),
                            v.cyc.swarm_no(s))

    def _more(self, s: SwarmService, mine: Mapping[str, Holding], v: _Visit,
              bo: Backoff | None, capped: QueueLimit | None) -> tuple[object, ...]:
        """What the cycle adds to a service's settled key (``_settled_key``)."""
        cluster = self.cluster
        mine_slots = v.tasks.slots.get(s.id, {})
        # Slots are read only where the replicas could be packed on one node.
        more: tuple[object, ...] = (
            (tuple(sorted(mine_slots.items())) if len(mine_slots) > 1
             else tuple(mine_slots.items())) if s.id in v.read.few else None,
            bo.key() if bo is not None else None)
        if not mine:  # pending: the same answer while capacity and nodes are as they were
            more += (cluster.version, self._filters.gen)
        if self._ports.ports_of(s):  # another service's task binding its port came or went
            more += (frozenset(self._ports.refused(s).items()),)
        if s.id in self._filters.networks:  # the networks its tasks are attached to
            more += (self._filters.networks[s.id],)
        if s.mode != "replicated":  # a node joining, a job's task ending: planned again
            more += (v.jobs.get(s.id), cluster.version, self._filters.gen,
                     len(cluster.alloc.nodes))
        if capped is not None:
            more += (capped,)
        if s.name in v.moving:
            more += ("moving", isinstance(v.moving, Moving) and s.name in v.moving.unread)
        return more

    def _note_problems(self, plan: PlacementPlan, by_name: Mapping[str, SwarmService]) -> None:
        """The allocator's problems, each said on the plan of the service it names; and
        on a plan whose service needs plugins, the nodes that do not say if they have
        them (Swarm's PluginFilter decides there)."""
        for p in self.cluster.problems:
            for i, sp in enumerate(plan.services):
                if p.startswith(sp.name + ":"):
                    plan.services[i] = sp.noted(p)
        plugins_noted(plan.services, by_name, self._filters.plugins_unknown, self._faults)
        self._ports.noted(plan.services, by_name)  # (ports a left-out service's task binds)

    def _quiet_services(self, read: ServiceRead, records: Mapping[str, Quiet],
                        tasks_changed: AbstractSet[str],
                        touched: AbstractSet[str], facts: Mapping[str, NodeFacts],
                        ) -> tuple[dict[str, str], Parsed, int]:
        """``commitpass.quiet_services`` with this planner's queues and back-offs."""
        return quiet_services(self._kept, read, records, tasks_changed, touched, facts,
                              quotas=bool(self.queues.quotas), backoff=self._backoff)

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
        self._faults.between()  # a fault said once over the arrivals and the next cycle
        read = self._reads.read(services)
        parsed, cpu_only = read.parsed, read.cpu_only
        tv = tasks_by_service(tasks)
        self._learn_on_gpu_nodes(parsed, cpu_only, tv.on_nodes, read.failed, forget=False)
        for s, r in parsed:
            try:  # as in a cycle (``_visit``): a new service holds nothing to restore
                if s.id in read.failed:
                    raise read.failed[s.id]
                sp = plan_service(s, r, {}, {}, {}, tv.waiting.get(s.id, NO_WAITING),
                                  self._memo.requests[s.id].reservation, cyc,
                                  tv.slots.get(s.id, {}))
            except Exception as exc:
                plan.services.append(isolated(self.cluster, self._faults, s, r, exc, {}))
                continue
            plan.add(sp)
            claim(cyc.ports, s, sp)
        # (as a cycle: an arrival of no request whose count raised gets its failed plan)
        failed_unvisited(plan.services, read.no_request, read.failed, self.cluster,
                         self._faults)
        return plan

    def _settled_key(self, s: SwarmService, kept: Mapping[str, Holding],
                     old: Mapping[str, Holding], by_id: Mapping[str, SwarmNode],
                     running_on: Mapping[str, int], waiting: Waiting,
                     more: tuple[object, ...] = ()) -> tuple[object, ...]:
        """Everything a settled service's plan reads: while it is unchanged, last
        cycle's plan (no writes) still holds. ``more``: what the cycle adds to it."""
        gen, content = self.cluster.node_gen, self._memo.node_content.of
        # A node by content, its labels but other services' gates and ledger entries
        # (placement.memo); its gate and ledger entry for this service beside it.
        ak, gk = self._memo.label_keys_of(s.name, self.prefix)
        nodes = []
        for nid, h in kept.items():
            n = by_id.get(nid)
            if n is not None:
                labels = n.labels
                nodes.append((nid, h, content[nid], labels.get(ak), labels.get(gk),
                              gen.get(nid, 0)))
        return (s.version, tuple(nodes), tuple(old.values()), tuple(running_on.items()),
                waiting, *more)


def claim(ports: HostPorts, s: SwarmService, sp: ServicePlan) -> None:
    """``sp``'s nodes take ``s``'s host-mode ports for the services planned after it."""
    if ports.ports_of(s):
        ports.claim(s, [p.node_id for p in sp.placements])


def _wanted(s: SwarmService, job: JobProgress | None) -> int | None:
    """The holdings ``s`` asks for now, as placement counts them: a replicated service's
    replicas, a replicated job's tasks that may run now; None for a global service or
    job (one per GPU node Swarm runs it on)."""
    if s.mode in GLOBAL_MODES:
        return None
    if s.mode == "replicated-job":
        return job_replicas(s, job or JobProgress())
    return s.replicas or 0


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


def _with_stopping(use: dict[str, list[int]], stopping: Sequence[SwarmTask],
                   ) -> dict[str, list[int]]:
    """``use`` (node id -> [CPU milli, memory MiB] its meant tasks reserve; a TaskBook's
    own, never changed here) with what the tasks Swarm is stopping still reserve."""
    if not stopping:
        return use
    out = {nid: list(u) for nid, u in use.items()}
    for t in stopping:
        u = out.setdefault(t.node_id, [0, 0])
        u[0] += t.cpu_milli
        u[1] += t.memory_mib
    return out
