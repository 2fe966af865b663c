"""Priority and preemption, decided (snapshot in, preemptions out); nothing is written here.
The snapshot's nodes are read as this cycle's placement writes left them
(``preemptview.after_writes``).

Served order: pending requests are planned by priority (``swarmgpu.priority``, higher
first), then by age (the service's creation time, oldest first), then by name; with no
priority labels and no creation times (the simulator) the order is the planner's own.

A request that stays pending for want of GPUs may preempt (``choose_preemptions``):

* candidates: holders of a node the preemptor could use, of a strictly lower priority
  (so two services of equal priority never preempt each other: no ping-pong), that are
  preemptible (``swarmgpu.preemptible``, else a priority below
  ``preemption.preemptible_below``; ``swarmgpu.rebalance: never`` does not protect),
  not cooling down (preempted recently), and not in a rebalancing move (by the daemon's
  record: ``rebalance.record.move_of``, and, in the daemon, any record of its own read
  after the cycle's movers ran: ``record.recorded``); or, whatever
  their priority, work of a queue above its guarantee when the preemptor's queue stays
  within its own, and its tenant's queues within theirs together (``queues.reclaimable``;
  ``swarmgpu.preemptible: false`` still protects); work of no queue, or of one not in
  the config, is guaranteed nothing (``queues.reclaimable``), as KAI-Scheduler's
  default queue; a holder whose request is invalid, as the most its tenant's labels
  could ask (``Tenants.held_as``; without tenants, none);
  the victims of one queue taken by quota are counted together, with those of the
  cycle's earlier preemptions (``queues.group_reclaimable``);
* a guarantee holds against priority too: a lower-priority victim of another queue that
  has a guarantee (``queues.guarded_queue``; a preemptor of no queue included) goes only
  when its queue stays at or above its guarantee without it, counted with the set's
  and the cycle's other victims of that queue, as reclaim's are. KAI-Scheduler
  preempts by priority within a queue only and takes from another by reclaim, which
  never goes below a guarantee. Within one queue, and for a victim of no queue or of a
  queue without a guarantee, priority alone decides, as without queues;
* a round counts what it gave: the victims' GPUs and the free ones a preemptor counts on
  beside them (``_free_used``) are no other preemptor's; nor, for one of its priority or
  lower, are those an earlier preemption holds for its preemptor (``held``,
  ``placement.nominated``: Kubernetes counts a nominated pod of equal or higher priority);
  of the freed and free GPUs, a ``topology`` request (nvlink, numa) is counted on the set
  the allocator would give it there (``Allocator.gpu_set``), held for it; a victim set
  that leaves it no such set is never taken (the next set, or node, is tried);
* victims (``pick_victims``, per node, then across nodes): the fewest victims that free
  enough GPUs, however they are taken (never more stopped than needed: no smaller set
  frees enough), and leave the CPU and memory its tasks reserve (``preemptroom.Room``)
  and free a host-mode port it publishes that a victim binds there (asked of each set:
  checked after the choice, the node was given up where the first set freed the GPU
  alone). Among sets of that size, one taken by priority alone first; one that
  reclaims is ranked by the queue it takes from that is least far above its guarantee
  (``queues.over_guarantee``, counting the cycle's earlier victims), furthest first, as
  KAI-Scheduler and Kueue reclaim. Then the lowest highest priority, the lowest total
  priority, the most recently started. Across nodes the same order, then the hostname;
* a service of spread replicas preempts on no node it holds (placement puts one replica
  per node there, MaxReplicas 1), but on the one node it holds where placement would
  pack all it lacks (``preemptview.spread_packs``), when no other node gives one;
* a preemptor preempts only while its queue's max, and its tenant's queues' together,
  leave room for its replica (a packed one's: all it lacks, as it preempts for them)
  with what the round's earlier preemptors take there
  (``queues.within_max``): the planner holds back one service at a time, so each of a
  queue's waiting services fits alone;
* no preemption for a service whose replicas are all placed (the ledger holds them, as
  placement counts replicas) while Swarm has not put its task on a node yet: its
  scheduler's "no suitable node" (often written before its gate opened) is no want of
  GPUs; one Swarm will not run where its GPUs are, no other node taking it
  (``converge``'s stuck), needs GPUs elsewhere and preempts for them;
* no preemption when a node the preemptor may use already has enough free GPUs (for a
  ``topology`` request a free set the allocator gives it, ``_GpuSets.gives``: enough by
  count but no NVLink pair, it preempts as Kubernetes does) and the CPU and memory its
  tasks reserve left there (``preemptroom.Room``): it is pending for another reason (a
  constraint), and stopping a service would not place it. A node with the GPUs free but
  not the CPU (a ``gpus: "0"`` service there), or a host port another service binds, is
  no room, as Kubernetes asks per node: victims are sought there (whose stop frees them)
  and on the others (before, the first such node by id ended the search: it waited for
  ever). One short of the CPU, of a host port (``Room.fits_once_stopped``,
  ``Room.ports_once_stopped``) or of GPUs (``_gpus_once_stopped``; for a ``topology``
  request, of a set it can use) only for tasks Swarm is stopping there, or of any of them
  together, is waited for until their hold ends (``keys.stop_overdue``: past it, stuck,
  no room again): Swarm starts it there in seconds, a victim stopped elsewhere went for
  nothing; what it waits for is counted taken in the round (``_wait``), and so is
  the CPU and memory a settling preemptor still pending takes on its hold's node, for
  those of its priority or lower (``heldroom``: Kubernetes' nominated pods). Nor does it
  preempt on a node where the CPU and memory its tasks reserve would not be left once the
  victims' tasks go (``preemptroom.Room``: Swarm's ResourceFilter's count, the round's
  earlier preemptors and moves counted; a service of no GPU there, never a victim nor a
  candidate, may hold it).

A victim that can run elsewhere is said moved there (``relocation``): free whole GPUs,
held for no preemptor, and the CPU and memory its task reserves on another node; never
one whose planning failed this cycle (plan status failed, ``placement.isolate``): a move
places it again, and that keeps raising. It is stopped, a victim as any other. Only
whole-GPU requests preempt (a share or a MIG device waits). The actuator
(``swarmgpu.manager.cycle.preemption``) owns dry-run, budgets, cooldowns and the writes: the
victim's ledger entry and gate go (Swarm stops its task with its stop_grace_period), its
device lists go, and ``<p>state.preempted`` records why (``placement.preempted``), so
``plan``, ``status`` and ``audit`` give "preempted by <service> (priority N)" until it is
placed again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.values import NodeSpec, NodeState
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement.heldroom import HeldRoom
from swarmgpu.manager.placement.jobs import done_idle
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.memo import ServeKey
from swarmgpu.manager.placement.preemptroom import Room
from swarmgpu.manager.placement.preemptview import (
    Round,
    after_writes,
    holdings_by_node,
    no_queue_row,
    packed_need,
    spread_packs,
    task_starts,
    usable_gpus,
    victims_fit,
)
from swarmgpu.manager.placement.queues import (
    group_reclaimable,
    guarded_queue,
    holding_milli,
    over_guarantee,
    reclaimable,
    within_max,
)
from swarmgpu.manager.placement.records import PlacementPlan, ServicePlan, Status
from swarmgpu.manager.placement.specs import demand_of, node_spec
from swarmgpu.manager.placement.victimmoves import Relocation, relocation
from swarmgpu.manager.placement.victimsearch import Lack, Rank, best_victims, together_of
from swarmgpu.manager.services.requests import GpuRequest, RequestError, Topology
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.taskstop import rfc3339_ns

MAX_CANDIDATES = 12  # per node, in rule order: subsets of at most 2**12 are tried


def priority_of(r: GpuRequest | RequestError | None) -> int:
    return r.priority if isinstance(r, GpuRequest) else 0


def serve_key(s: SwarmService, r: GpuRequest | RequestError | None) -> ServeKey:
    at = rfc3339_ns(s.created_at)  # (no time that reads: the oldest, as "" sorted)
    return -priority_of(r), at is not None, at or 0


def serve_order(parsed: Sequence[tuple[SwarmService, GpuRequest | RequestError]],
                ) -> list[tuple[SwarmService, GpuRequest | RequestError]]:
    """Priority first, then age (``created_at``'s instant, oldest first); stable, so
    services of one priority and age keep the planner's order (by name)."""
    return sorted(parsed, key=lambda sr: serve_key(*sr))


@dataclass(frozen=True)
class Candidate:
    """A holder that could be preempted on one node."""

    service: str
    service_id: str
    node_id: str
    priority: int
    started: str  # its newest task's creation time on the node ("": none yet, the newest)
    uuids: tuple[str, ...]  # the GPUs of its holding the preemptor could use
    holding: Holding | None = None  # its whole holding on the node
    quota: str | None = None  # its queue ("": none), when only the quotas make it one
    guard: str = ""  # its queue, taken by priority, when its guarantee binds (guarded_queue)


@dataclass(frozen=True)
class Preemption:
    """Stop ``victims`` (all on ``node_id``) so that ``service`` can be placed there."""

    service: str
    service_id: str
    priority: int
    node_id: str
    hostname: str
    victims: tuple[Candidate, ...]
    moves: Mapping[str, Relocation] = field(default_factory=dict)  # victim -> elsewhere
    # the GPUs of ``node_id`` its preemptor is counted on (freed, free beside them):
    # placement holds them for it while it settles (``placement.nominated``)
    held: tuple[str, ...] = ()

    def describe(self) -> str:
        names = ", ".join(f"{v.service} (priority {v.priority})" +
                          (f" -> moved to {self.moves[v.service].hostname}"
                           if v.service in self.moves else "") for v in self.victims)
        return f"preempt {names} on {self.hostname} for {self.service} (priority {self.priority})"


def rule_sorted(cands: Sequence[Candidate]) -> list[Candidate]:
    """Lowest priority first, then the most recently started (the instant, never the
    text), then by name (stable sorts, last key first). A holder with no task on the
    node yet ("": placed this cycle, its task not made) has started nothing: the newest,
    as kube-scheduler reads a pod with no start time as started now."""
    by_name = sorted(cands, key=lambda c: c.service)
    newest = sorted(by_name, key=lambda c: ((at := rfc3339_ns(c.started)) is None, at or 0),
                    reverse=True)
    return sorted(newest, key=lambda c: c.priority)


def newest_first(victims: Sequence[Candidate]) -> tuple[int, ...]:
    """A victim set's start, least for the newest: the earliest start among its victims
    of the highest priority, the latest first (kube-scheduler's
    ``pickOneNodeForPreemption``: the stop that loses the least work), in ns negated.
    Not started ("", or no time that reads): the newest, ()."""
    top = max(v.priority for v in victims)
    first = min((at for v in victims if v.priority == top
                 if (at := rfc3339_ns(v.started)) is not None), default=None)
    return () if first is None else (-first,)


def reclaim_rank(c: Candidate, over: Mapping[str, tuple[float, float]]) -> Rank:
    """(0, 0, 0) for a victim by priority; for one taken by quota, its queue's distance
    above its guarantee (``over``: ``queues.over_guarantee`` by queue) negated, so that
    the furthest sorts first. A set ranks as its greatest (the queue it hurts most)."""
    if c.quota is None:
        return 0, 0.0, 0.0
    ratio, gpus = over.get(c.quota, (0.0, 0.0))
    return 1, -ratio, -gpus


def pick_victims(need: int, free: AbstractSet[str], candidates: Sequence[Candidate],
                 holders: Mapping[str, AbstractSet[str]],
                 allowed: Callable[[tuple[Candidate, ...]], bool] | None = None,
                 over: Mapping[str, tuple[float, float]] | None = None,
                 may: Callable[[frozenset[str]], bool] | None = None,
                 lack: Lack | None = None,
                 ) -> tuple[Candidate, ...] | None:
    """The victims on one node (see the module's rule), or None when even all of them do
    not free ``need`` GPUs. ``free``: GPUs of the node the preemptor may use that nobody
    holds; ``holders``: GPU -> every service holding it (a shared GPU frees only when all
    its holders are victims); ``allowed``: whether a set may go together (the victims of
    one queue that its guarantee bounds, ``queues.group_reclaimable``; a topology
    request's set, ``_GpuSets.gives``; its CPU and memory and host ports left), asked of
    no victims where ``free`` is enough by count (False: the free GPUs give no set it can
    use, or its CPU or a port is held there, victims are chosen); ``over``: how
    far each queue is above its guarantee (``reclaim_rank``); ``may``: given the GPUs a
    set frees, False where ``allowed`` takes no set that frees those alone, and then for
    any fewer too (``_GpuSets.may``); ``lack``: what ``allowed`` asks that more victims
    only give (``preemptview.victims_fit``: its CPU, memory and host ports): the search
    skips the sets that cannot give it (``victimsearch``)."""
    if len(free) >= need and (allowed is None or allowed(())):
        return ()  # (enough by count, and no topology the free GPUs fail: none needed)
    # Rank order decides which candidates a crowded node keeps; a set's size comes first
    # whatever its rank (a reclaim of one before two by priority: never more than needed).
    ranked = sorted(((reclaim_rank(c, over or {}), c) for c in rule_sorted(candidates)),
                    key=lambda rc: rc[0])[:MAX_CANDIDATES]
    return best_victims(need, free, ranked, holders, allowed, may, lack)


def choose_preemptions(
    plan: PlacementPlan, nodes: Sequence[SwarmNode], services: Sequence[SwarmService],
    tasks: Sequence[SwarmTask], facts: Mapping[str, NodeFacts], *, prefix: str,
    preemptible_below: int, cooling: AbstractSet[str] = frozenset(),
    settling: AbstractSet[str] = frozenset(), moving: AbstractSet[str] = frozenset(),
    refused: Callable[[SwarmService], AbstractSet[str]] | None = None,
    ports: Callable[[SwarmService], Mapping[str, AbstractSet[str]]] | None = None,
    raised: dict[str, Exception] | None = None, first: Sequence[Preemption] = (),
    held: Mapping[tuple[str, str], tuple[str, int]] | None = None,
    flying: AbstractSet[tuple[str, str]] = frozenset(), stopping: Sequence[SwarmTask] = (),
) -> list[Preemption]:
    """At most one preemption per pending service (one replica's GPUs on one node; a
    packed service's: all the replicas it lacks, on its node), in served order; a GPU
    freed for one is not counted for another. ``cooling``: services that may not be
    victims now; ``settling``: services that may not preempt now (their last preemption
    is still taking effect); ``refused``: nodes Swarm's own filters (constraints,
    platforms) refuse a service on; ``moving``: services with a move in flight by the
    daemon's records (``rebalance.record.moving``; a move label alone protects nothing)
    or whose record cannot be read (its move may be under way), neither preemptors nor
    victims; ``ports``: of the nodes ``refused``, those refused for a host-mode port
    alone, with the services whose tasks bind it there (``Planner.port_takers``): such a
    node is a target when those are all its victims, whose stop frees the port with the
    GPUs. ``raised``: a preemptor whose choice raises (a bug, or input no one foresaw)
    preempts nothing, the round as before it, its exception kept there by name for the
    caller's log (None: it raises). ``held``: the GPUs nominated for preemptors
    (``Round.held``). ``flying``: (node, uuid) the moves in flight hold, by their
    records read after this cycle's movers ran (``record.move_gpus``): used for all,
    counted as taken from the round's start (a move's target is in no snapshot's ledger
    the cycle it starts). ``stopping``: tasks Swarm is stopping (``keys.stopping``): their
    CPU and memory are used where they are (``Room``), none of them is a victim.
    ``first``: preemptions another round on this snapshot chose (``preempt_notes``):
    taken first as they were, returned again; the others choose from what they leave."""
    nodes = after_writes(nodes, plan)
    by_name = {s.name: s for s in services}
    started, holdings = task_starts(tasks), holdings_by_node(nodes, prefix, plan.dropped)
    req = plan.requests_by_name()  # (a broken one's holder too: stopped, never moved)
    rd = Round(by_name, {n.id: n for n in nodes}, facts,
                {**{q["queue"]: q for q in plan.queues},
                 "": no_queue_row(holdings, req, facts)},
                req, started, holdings, refused, preemptible_below, cooling, moving,
                plan.failed | set(plan.held_as), done_idle(services, tasks), ports=ports,
                room=Room.of(nodes, services, tasks, holdings, stopping, plan.stopping_overdue,
                             prefix),
                held=held or {}, taken=set(flying), waits=plan.stopping_waits, tasks=tasks)
    # A packed service's replicas go only on its node: it preempts there alone, for all
    # the replicas it lacks at once (``packing.repack`` places them so); elsewhere its
    # victims would be stopped for nothing.
    pending = [sp for sp in plan.services if sp.status == Status.PENDING
               and sp.request is not None]
    packed = {sp.name for sp in pending if sp.packed}
    passed = _passed_over(plan, pending, by_name)
    order = serve_order([(by_name[sp.name], sp.request) for sp in pending
                         if sp.name in by_name and isinstance(sp.request, GpuRequest)])
    made = {p.service: p for p in first}
    order = sorted(order, key=lambda sr: sr[0].name not in made)  # (stable: served order)
    out: list[Preemption] = []
    waiting = HeldRoom.of(rd.held, settling, {sp.name for sp in pending}, req, rd.room, rd.holdings)
    for s, r in order:
        if not isinstance(r, GpuRequest) or r.is_fraction or r.mig_profile:
            continue
        if r.cpu_only:  # (gpus: "0") stops no GPU work for CPU: the operator's rule
            continue
        if s.name in settling or s.name in rd.gone or s.name in passed \
                or s.name in moving or s.mode != "replicated" or not s.replicas:
            continue
        waiting.count(rd.room, by_name, r.priority)  # held preemptors' CPU (its priority and up)
        mark = (set(rd.taken), set(rd.gone), dict(rd.q_gone), dict(rd.q_given))
        room = dict(rd.room.left) if rd.room is not None else None  # its CPU counted too
        try:
            p = _choose_one(rd, s, r, prefix, s.name in packed, made.get(s.name))
            if p is not None:
                out.append(p)
        except Exception as exc:  # one preemptor's loss: the others choose as before
            if raised is None:
                raise
            rd.taken, rd.gone, rd.q_gone, rd.q_given = mark
            if rd.room is not None and room is not None:
                rd.room.left = room
            raised[s.name] = exc
    return out


def _passed_over(plan: PlacementPlan, pending: Sequence[ServicePlan],
                 by_name: Mapping[str, SwarmService]) -> set[str]:
    """The pending services that preempt nothing: those held at their queue's max, and
    those with every replica placed (the ledger holds them, as placement counts
    replicas), pending while Swarm has not put their task on a node: they lack no GPU,
    and a victim stopped elsewhere places nothing. One stuck where its GPUs are, no
    other node taking it (``ServicePlan.stuck``), needs some."""
    return {n for q in plan.queues for n in q.get("blocked", ())} | {
        sp.name for sp in pending if not sp.stuck and sp.name in by_name
        and len(sp.placements) >= (by_name[sp.name].replicas or 0)}


def _choose_one(rd: Round, s: SwarmService, r: GpuRequest, prefix: str, packed: bool,
                made: Preemption | None) -> Preemption | None:
    """``s``'s preemption in the round, counted there (``_take``); None: none. ``made``:
    the one another round chose for it, taken as it was (``choose_preemptions``' first)."""
    on = packed_need(rd.holdings, s, prefix) if packed else None
    if packed and on is None:
        return None  # nothing of it held yet, or nothing missing: no node to free
    if made is None and not within_max(r, rd.queues, rd.q_given, on[1] if on else 1):
        return None  # (all it lacks)
    # spread, on the one node it holds: all it lacks, packed there as placement would
    pack = None if packed else spread_packs(rd.holdings, s, r, prefix, rd.tasks_of(s.id))
    if pack is not None and made is None and not within_max(r, rd.queues, rd.q_given, pack[1]):
        pack = None
    p = made if made is not None else _best_preemption(rd, s, r, on, pack)
    if p is not None and pack is not None and p.node_id == pack[0]:
        on = pack
    return None if p is None else _take(rd, p, r, on[1] if on is not None else 1)


def _best_preemption(rd: Round, s: SwarmService, r: GpuRequest,
                     packed: tuple[str, int] | None = None,
                     pack: tuple[str, int] | None = None) -> Preemption | None:
    """The preemption that places one replica of ``s`` (the fewest victims; then by
    priority alone before a reclaim, a reclaim from the queues furthest above their
    guarantees first; then the lowest priorities, the most recently started
    (``newest_first``), the hostname); None when there is none, or when a node it may
    use has room already: the GPUs, a set its topology asks for included, and its CPU
    and memory (it is pending for another reason).
    ``packed``: the node a packed service holds and the replicas it lacks, all placed
    there together: that node only, for all of them. ``pack``: the same for a spread
    service placement packs on its node (``spread_packs``), where no other node gives one."""
    no, takers = rd.refused_of(s), rd.port_takers(s)
    over = {q: over_guarantee(row, rd.q_gone.get(q, 0)) for q, row in rd.queues.items()}
    best: tuple[tuple[int, Rank, int, int, tuple[int, ...], str], Preemption] | None = None
    replicas = packed[1] if packed is not None else 1
    need = r.gpus * replicas
    for nid in sorted(rd.holdings.keys() | rd.facts.keys()):
        node = rd.by_node.get(nid)
        if node is None or (nid in no and nid not in takers) or node.state != "ready" \
                or node.availability != "active" or node.unread:
            continue
        here = rd.holdings.get(nid, {})
        if packed is not None and nid != packed[0]:
            continue  # a packed service's replicas go only on its node
        if packed is None and s.name in here:
            continue  # one replica per node: a held node is not where it goes
        sets = _GpuSets(rd, nid, s.name, r, replicas)  # (asked only for a topology)
        if wait := _gpus_once_stopped(rd, s, r, nid, here, need, replicas, no, takers, sets):
            _wait(rd, s, nid, wait, replicas)  # it waits for them: no service stopped for it
            return None
        usable = usable_gpus(r, rd.facts.get(nid)) - rd.off(nid, s.name, r.priority)
        if len(usable) < need:
            continue
        holders: dict[str, set[str]] = {}
        for svc, h in here.items():
            for u in h.uuids:
                holders.setdefault(u, set()).add(svc)
        free = usable - holders.keys()
        # room already only where the free GPUs give a set it can use (an NVLink job
        # waited behind a single-GPU holder) and its CPU and memory are left (it waited
        # for ever while a lower holder elsewhere kept the GPUs it would fit beside):
        # pending for another reason, or waiting for a task Swarm is stopping here
        if len(free) >= need and (r.topology is Topology.ANY or sets.gives((), holders)) \
                and _room_once_stopped(rd, s, nid, replicas, no, takers):
            if nid in no or (rd.room is not None and not rd.room.fits(s, nid, (), replicas)):
                _wait(rd, s, nid, sorted(free)[:need], replicas)  # (the stopping task's)
            return None
        # (else the port or the CPU holds it back: a victim whose stop frees them is sought
        # here too, ``_allowed``; a holder binding the port beside a free GPU was not)

        others = {k: h for k, h in here.items() if k != s.name}  # (a packed one's own)
        victims = pick_victims(
            need, free, _candidates(rd, r, nid, others, usable), holders,
            _allowed(rd, s, r, nid, replicas, holders, sets, no, takers), over,
            None if r.topology is Topology.ANY else sets.may,
            victims_fit(rd, s, nid, replicas, takers[nid] if nid in no else None))
        if not victims:
            continue
        prios = [v.priority for v in victims]
        key = (len(victims), max(reclaim_rank(v, over) for v in victims), max(prios),
               sum(prios), newest_first(victims), node.hostname)
        if best is None or key < best[0]:
            best = (key, Preemption(s.name, s.id, r.priority, nid, node.hostname, victims))
    if best is None and pack is not None:
        return _best_preemption(rd, s, r, pack)  # (no other node took one: packed there)
    return best[1] if best is not None else None


def _allowed(rd: Round, s: SwarmService, r: GpuRequest, nid: str, replicas: int,
             holders: Mapping[str, AbstractSet[str]], sets: _GpuSets, no: AbstractSet[str],
             takers: Mapping[str, AbstractSet[str]]) -> Callable[[tuple[Candidate, ...]], bool]:
    """``pick_victims``' ``allowed`` for ``replicas`` of ``s`` on ``nid``: the victims'
    queues' guarantees hold, and a topology request has a set the allocator gives
    (``_gpu_pick``) once they go, its CPU and memory are left and a host port it
    publishes is freed (one another service binds stays bound): else stopped for
    nothing (checked after the choice, the node was given up for another set that
    would do). What more victims only free of these, ``victims_fit`` bounds."""
    def milli(c: Candidate) -> int:
        return holding_milli(rd.req.get(c.service), c.holding, rd.facts) if c.holding else 0

    def together(combo: tuple[Candidate, ...]) -> bool:
        return group_reclaimable(  # every replica placed counts against its guarantee
            r, [(c.quota, milli(c)) for c in combo if c.quota is not None], rd.queues,
            rd.q_gone, rd.q_given, [(c.guard, milli(c)) for c in combo if c.guard],
            replicas) and (r.topology is Topology.ANY or sets.gives(combo, holders)) \
            and (rd.room is None or rd.room.fits(s, nid, combo, replicas)) \
            and (nid not in no or takers[nid] <= {c.service for c in combo})
    return together


def _room_once_stopped(rd: Round, s: SwarmService, nid: str, replicas: int,
                       no: AbstractSet[str], takers: Mapping[str, AbstractSet[str]]) -> bool:
    """``replicas`` of ``s`` fit on ``nid`` now, or once the tasks Swarm is stopping
    there stop (``Room``: none past its hold's end), its GPUs aside: its CPU and memory,
    and no filter refuses it there but a host-mode port only those tasks bind."""
    if rd.room is None:
        return nid not in no
    return (nid not in no or (nid in takers and rd.room.ports_once_stopped(s, nid))) and (
        rd.room.fits(s, nid, (), replicas) or rd.room.fits_once_stopped(s, nid, replicas))


def _wait(rd: Round, s: SwarmService, nid: str, uuids: Sequence[str], replicas: int) -> None:
    """``s`` waits on ``nid`` for tasks Swarm is stopping there: ``uuids`` and its CPU
    counted taken in the round (a lower one stopped a victim there for them, in vain)."""
    rd.taken.update((nid, u) for u in uuids)
    if rd.room is not None:
        rd.room.took(s, nid, (), replicas)


def _gpus_once_stopped(rd: Round, s: SwarmService, r: GpuRequest, nid: str,
                       here: Mapping[str, Holding], need: int, replicas: int,
                       no: AbstractSet[str], takers: Mapping[str, AbstractSet[str]],
                       sets: _GpuSets) -> list[str]:
    """The GPUs ``s`` has on ``nid`` once tasks Swarm stops there stop, in their grace period
    (``Round.waits``: held for them alone, none a waiter took in the round; its CPU and
    ports as ``_room_once_stopped`` has them), not before; for a topology request, the
    set the allocator gives it with theirs (``sets``, as a victim's GPUs are counted)."""
    soon = {u for n, u in rd.waits if n == nid} - {u for n, u in rd.taken if n == nid}
    if not soon:
        return []
    usable = usable_gpus(r, rd.facts.get(nid)) - (rd.off(nid, s.name, r.priority) - soon)
    free = usable - {u for h in here.values() for u in h.uuids}
    if len(free) < need or not free & soon or not _room_once_stopped(
            rd, s, nid, replicas, no, takers):
        return []
    if r.topology is Topology.ANY:
        return sorted(free, key=lambda u: (u not in soon, u))[:need]
    # a set of free GPUs alone is room already (``_best_preemption``), not a wait
    got = sets.pick(free & soon)
    return list(got) if got is not None and soon.intersection(got) else []


def _candidates(rd: Round, r: GpuRequest, nid: str, here: Mapping[str, Holding],
                usable: AbstractSet[str]) -> list[Candidate]:
    """The holders on node ``nid`` that ``r`` may preempt (see the module), each with the
    GPUs of ``usable`` it holds."""
    cands = []
    for svc, h in here.items():
        vr = rd.req.get(svc)
        vs = rd.by_name.get(svc)
        if (not isinstance(vr, GpuRequest) or vs is None or svc in rd.cooling
                or svc in rd.gone or svc in rd.moving or (vs.id, nid) in rd.done):
            continue
        # None of the GPUs it could be given (a service of gpus: "0", another product's):
        # stopped, it frees nothing for it, and as a candidate it took one of the node's
        # MAX_CANDIDATES places (a lower priority ranks first) from a holder that does.
        uuids = tuple(u for u in h.uuids if u in usable)
        if not uuids:
            continue
        # another queue's guarantee holds against priority too: alone here, with the
        # set's other victims of that queue in ``pick_victims`` (``together``)
        guard = guarded_queue(r, vr, rd.queues)
        milli = holding_milli(vr, h, rd.facts)
        by_priority = vr.priority < r.priority and vr.is_preemptible(rd.preemptible_below) \
            and (not guard or group_reclaimable(r, [], rd.queues, rd.q_gone, rd.q_given,
                                                [(guard, milli)]))
        by_quota = vr.preemptible is not False and reclaimable(r, vr, milli, rd.queues)
        if not (by_priority or by_quota):
            continue
        cands.append(Candidate(svc, vs.id, nid, vr.priority, rd.started.get((vs.id, nid), ""),
                               uuids, h,
                               None if by_priority else vr.queue,
                               guard if by_priority else ""))
    return cands


def _take(rd: Round, p: Preemption, r: GpuRequest, replicas: int = 1) -> Preemption:
    """``p`` chosen for ``replicas`` of ``r``: its victims, the GPUs it frees and the
    queues' use counted in the round; with where each victim that can move goes
    (``relocation``)."""
    rd.gone.update(v.service for v in p.victims)
    for v in p.victims:
        vq = rd.req.get(v.service)
        if isinstance(vq, GpuRequest) and v.holding is not None:  # "": no queue's
            rd.q_gone[vq.queue] = (rd.q_gone.get(vq.queue, 0)
                                   + holding_milli(vq, v.holding, rd.facts))
    if r.queue:
        rd.q_given[r.queue] = rd.q_given.get(r.queue, 0) + 1000 * r.gpus * replicas
    freed = _freed(rd, p)
    chosen = _gpu_pick(rd, p.node_id, p.service, r, replicas, freed)
    used = sorted(u for _n, u in _free_used(rd, p, r, replicas, freed)) if chosen is None \
        else sorted(set(chosen) - freed)
    rd.taken.update((p.node_id, u) for u in used)
    rd.taken.update((p.node_id, u) for v in p.victims for u in v.uuids)
    s = rd.by_name.get(p.service)
    if rd.room is not None and s is not None:  # its CPU in place of its victims'
        rd.room.took(s, p.node_id, p.victims, replicas)
    moves: dict[str, Relocation] = {}
    for v in p.victims:
        vr, vs = rd.req.get(v.service), rd.by_name.get(v.service)
        # a move places it again, and its planning keeps raising (``placement.isolate``)
        if isinstance(vr, GpuRequest) and vs is not None and v.service not in rd.failed:
            where = relocation(vr, vs, v, rd.by_node, rd.facts, rd.holdings,
                               rd.taken | rd.held.keys(), rd.refused_of(vs), rd.room)
            if where is not None:
                moves[v.service] = where
                rd.taken.update((where.node_id, u) for u in where.uuids)
    held = chosen or (*used, *sorted(freed)[:max(0, r.gpus * replicas - len(used))])
    return replace(p, moves=moves, held=held)


def _gpu_pick(rd: Round, nid: str, name: str, r: GpuRequest, replicas: int,
              freed: AbstractSet[str]) -> tuple[str, ...] | None:
    """The GPUs the allocator would give ``replicas`` of ``name``'s ``r`` on node ``nid``
    once ``freed`` is freed there (``Allocator.gpu_set`` over the freed and the free GPUs
    it may use: its own placement's choice), or None where it gives none: held for it
    (``_take``), and the victim choice's test (``_best_preemption``, through ``_GpuSets``).
    Taken by UUID order instead, a ``topology`` request was held GPUs it cannot use
    together, the set it could use left to the others placed before it: it stayed
    pending, and preempted again. None for a request of any topology: any of those GPUs
    go together (``usable_gpus`` filtered them), so they are taken as before (the
    simulator's figures stay as they were)."""
    return _GpuSets(rd, nid, name, r, replicas).pick(freed)


@dataclass(slots=True)
class _GpuSets:
    """``_gpu_pick`` on one node for one request, what does not change with ``freed``
    read once (the node's spec, the GPUs free for it): the round does not change while
    a node's victims are chosen. ``gives`` answers once per freed set: a node's victim
    sets (up to 4,095 of ``MAX_CANDIDATES``) free at most one set per subset of its GPUs,
    most of them alike (a shared GPU frees only with all its holders). Asked for each
    set anew, 12 small victims on an 8-GPU node took 0.8 s for one topology preemptor;
    once per freed set, 72 ms where no set served it; ``may`` bounds the walk
    (``victimsearch``), which then asks nothing (``benchmarks/bench_preempt_topology.py``)."""

    rd: Round
    nid: str
    name: str
    r: GpuRequest
    replicas: int
    base: tuple[NodeSpec, frozenset[str]] | None = None  # (spec, GPUs free for it)
    given: dict[frozenset[str], bool] = field(default_factory=dict)  # freed -> a set
    ok: Callable[[int, int], bool] | None = None  # two GPUs (indexes) may go together

    def _read(self) -> tuple[NodeFacts, NodeSpec, frozenset[str]] | None:
        """The node's facts, its spec and the GPUs free for it (read once; None: a request
        of any topology, or a node not known, where ``pick`` gives none)."""
        rd, nid, r = self.rd, self.nid, self.r
        f, node = rd.facts.get(nid), rd.by_node.get(nid)
        if f is None or node is None or r.topology is Topology.ANY:
            return None
        if self.base is None:
            here = {u for h in rd.holdings.get(nid, {}).values() for u in h.uuids}
            self.base = (node_spec(node, f),
                         frozenset(usable_gpus(r, f) - here - rd.off(nid, self.name, r.priority)))
            self.ok = Allocator._allowed_pair(NodeState(self.base[0], 0), demand_of(r))
        return f, *self.base

    def pick(self, freed: AbstractSet[str]) -> tuple[str, ...] | None:
        if (read := self._read()) is None:
            return None
        f, spec, free = read
        can = freed | free
        state = NodeState(spec, 0)
        state.free = [m if g.uuid in can else 0 for m, g in zip(state.free, f.gpus, strict=True)]
        pick, alloc, d = [], Allocator(), demand_of(self.r)
        for _ in range(self.replicas):  # a packed one's replicas, one set each
            gpus = alloc.gpu_set(state, d)
            if not gpus:
                return None
            for i in gpus:
                state.free[i] = 0
            pick += [f.gpus[i].uuid for i in gpus]
        return tuple(pick)

    def may(self, freed: frozenset[str]) -> bool:
        """False where ``pick`` surely gives no set once ``freed`` is freed, nor once any
        of them is: among them and the free GPUs, fewer than its replicas' GPUs, or no
        ``gpus`` of them that the topology lets go together (``Allocator._allowed_pair``,
        which the allocator's sets keep to). ``pick_victims`` skips such sets unasked."""
        if (read := self._read()) is None:
            return False  # (it gives none)
        can = [i for i, g in enumerate(read[0].gpus) if g.uuid in freed or g.uuid in read[2]]
        return len(can) >= self.r.gpus * self.replicas and together_of(
            can, self.r.gpus, self.ok)

    def gives(self, victims: Sequence[Candidate],
              holders: Mapping[str, AbstractSet[str]]) -> bool:
        """Whether ``pick`` gives a set once ``victims`` go (``holders``: GPU -> every
        service holding it on the node: what they free, as ``_freed_of`` says)."""
        names = {v.service for v in victims}
        key = frozenset(u for v in victims for u in v.uuids if holders[u] <= names)
        got = self.given.get(key)
        if got is None:
            got = self.given[key] = self.pick(key) is not None
        return got


def _freed(rd: Round, p: Preemption) -> set[str]:
    """The GPUs of ``p``'s node its victims free (a GPU shared with others stays)."""
    return _freed_of(rd.holdings.get(p.node_id, {}), p.victims)


def _freed_of(here: Mapping[str, Holding], victims: Sequence[Candidate]) -> set[str]:
    """The GPUs ``victims`` free on a node whose holdings are ``here`` (a GPU shared with
    others stays)."""
    names = {v.service for v in victims}
    return {u for v in victims for u in v.uuids
            if all(svc in names for svc, h in here.items() if u in h.uuids)}


def _free_used(rd: Round, p: Preemption, r: GpuRequest, replicas: int,
               freed: AbstractSet[str]) -> set[tuple[str, str]]:
    """The free GPUs of ``p``'s node its preemptor counts on beside those its victims
    free (``freed``): taken in the round too. Counted again, a second preemptor on the
    node stopped a victim for a GPU the first one gets (``pick_victims``' ``free``)."""
    nid, here = p.node_id, rd.holdings.get(p.node_id, {})
    held = {u for h in here.values() for u in h.uuids}
    free = sorted(usable_gpus(r, rd.facts.get(nid)) - held - rd.off(nid, p.service, r.priority))
    return {(nid, u) for u in free[:max(0, r.gpus * replicas - len(freed))]}
