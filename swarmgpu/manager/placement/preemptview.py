"""The cluster as a preemption round reads it (``preempt.choose_preemptions``): the
nodes as this cycle's placement writes left them, the holdings by node, when each
service's task started there, work of no queue as a queue row, what a packed
service lacks on its node (and a spread one where placement packs it), what more victims
only give a preemptor on a node (``victims_fit``), and the round itself (``Round``: what
it read, what it took)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement.keys import MAX_STATE, MEANT_STATES
from swarmgpu.manager.placement.ledger import Holding, read_ledger
from swarmgpu.manager.placement.preemptroom import Room
from swarmgpu.manager.placement.queues import holding_milli
from swarmgpu.manager.placement.records import NodeWrites, PlacementPlan
from swarmgpu.manager.placement.replicas import want_slots
from swarmgpu.manager.placement.specs import host_ports
from swarmgpu.manager.placement.tasks import tasks_by_service
from swarmgpu.manager.placement.victimsearch import Lack
from swarmgpu.manager.services.requests import GpuRequest, RequestError
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.taskstop import rfc3339_ns


def usable_gpus(r: GpuRequest, facts: NodeFacts | None) -> set[str]:
    """The node's GPUs a whole-GPU request could be given (health, MIG, product, memory)."""
    if facts is None:
        return set()
    return {g.uuid for g in facts.gpus if g.healthy and not g.mig_enabled
            and r.matches_product(g.product)
            and (r.min_memory_mib is None or g.memory_mib >= r.min_memory_mib)}


def task_starts(tasks: Sequence[SwarmTask]) -> dict[tuple[str, str], str]:
    """(service id, node) -> the creation time of its newest task meant to run there
    (desired ready too: a restart's, whose work is lost already), by the instant
    (``rfc3339_ns``); "" where none of them has a time that reads (none started)."""
    started: dict[tuple[str, str], tuple[int, str]] = {}
    for t in tasks:
        # (parsed only for the tasks meant to run: a list is mostly shut-down history)
        if not (t.desired_state in MEANT_STATES and t.node_id):
            continue
        if (at := rfc3339_ns(t.created_at)) is not None:
            k = (t.service_id, t.node_id)
            started[k] = max(started.get(k, (at, t.created_at)), (at, t.created_at))
    return {k: text for k, (_, text) in started.items()}


def holdings_by_node(nodes: Sequence[SwarmNode], prefix: str,
                     dropped: AbstractSet[tuple[str, str]] = frozenset(),
                     ) -> dict[str, dict[str, Holding]]:
    """node -> service -> its holding there (the ledger), but ``dropped`` (service name,
    node id: ``PlacementPlan.dropped``, entries placement read as a removed service's)."""
    holdings: dict[str, dict[str, Holding]] = {}
    for svc, per in read_ledger(nodes, prefix).items():
        for nid, h in per.items():
            if (svc, nid) not in dropped:
                holdings.setdefault(nid, {})[svc] = h
    return holdings


def after_writes(nodes: Sequence[SwarmNode], plan: PlacementPlan) -> list[SwarmNode]:
    """``nodes`` (the cycle's snapshot) as this cycle's placement writes left them:
    ``plan.landed`` (what the daemon's writer landed; in dry-run, all of it), or, nothing
    written yet (``plan``, ``status``, the simulator's world, where they are applied
    already), all of the plan's; removals first, as the writer makes them. Read from the
    snapshot, GPUs placement had just given out looked free (a victim stopped for a
    preemptor that still did not fit) and a holding it had just released was a victim."""
    w = plan.landed if plan.landed is not None else NodeWrites(plan.node_set, plan.node_remove)
    return w.applied(nodes)


def no_queue_row(holdings: Mapping[str, Mapping[str, Holding]],
                 req: Mapping[str, GpuRequest | RequestError], facts: Mapping[str, NodeFacts],
                 ) -> dict[str, object]:
    """Work of no queue as the queue row (under "") reclaim reads: what it holds,
    guaranteed nothing (``queues.reclaimable``), so furthest above it with any use
    (``over_guarantee``)."""
    milli = sum(holding_milli(r, h, facts) for per in holdings.values()
                for svc, h in per.items()
                if isinstance(r := req.get(svc), GpuRequest) and not r.queue)
    return {"queue": "", "used_gpus": milli / 1000, "guaranteed_gpus": 0.0,
            "max_gpus": None, "configured": False, "tenant": None, "blocked": []}


def packed_need(holdings: Mapping[str, Mapping[str, Holding]], s: SwarmService,
                prefix: str) -> tuple[str, int] | None:
    """A packed service's node and how many replicas it lacks there that Swarm would run
    (None: it holds no node yet, or lacks none: pending for another reason). Its owner's
    MaxReplicas (not one swarmgpu set: ``packing._packed_max``) caps them: Swarm runs no
    more there, so GPUs freed beyond it would go unused."""
    most = s.max_replicas_per_node or 0
    owners = most not in (0, 1) and s.labels.get(prefix + MAX_STATE) != str(most)
    for nid, here in holdings.items():
        h = here.get(s.name)
        if h is not None:
            lacks = min(s.replicas or 0, most if owners else s.replicas or 0) - h.replicas
            return (nid, lacks) if lacks > 0 else None
    return None


def spread_packs(holdings: Mapping[str, Mapping[str, Holding]], s: SwarmService,
                 r: GpuRequest, prefix: str, tasks: Sequence[SwarmTask] = (),
                 ) -> tuple[str, int] | None:
    """The one node a service of spread replicas holds and how many replicas it lacks,
    where placement would pack them all there once no other node takes one
    (``spread.place_replicas``: whole GPUs that may pack, no host-mode port, no
    MaxReplicas of its owner below its replicas, and of its task slots (``tasks``: its
    own, ``Round.tasks_of``, others passed over; read as placement reads them:
    ``tasks_by_service``) at most one on that node, one of those it keeps). None
    otherwise: its replicas go one per node (swarmgpu writes MaxReplicas 1), so a node
    it holds gets none of them. Without the slots, two of its
    tasks on the node, or its task there of a slot past its replicas, had a victim
    stopped there for replicas placement never packs."""
    replicas = s.replicas or 0
    if replicas < 2 or not r.can_pack:  # (most preemptors: before the walk over every node)
        return None
    mine = [(nid, h) for nid, here in holdings.items() if (h := here.get(s.name)) is not None]
    if len(mine) != 1 or mine[0][1].packed or host_ports(s.spec):
        return None
    most = s.max_replicas_per_node or 0
    if s.labels.get(prefix + MAX_STATE) != str(most) and 1 < most < replicas:
        return None  # (the owner's: Swarm runs no more there)
    nid, h = mine[0]
    if replicas <= h.replicas:
        return None
    live = tasks_by_service([t for t in tasks if t.service_id == s.id]).slots.get(s.id, {})
    on = [k for k, n in live.items() if n == nid]
    if len(on) > 1 or (on and on[0] not in want_slots(live, replicas)):
        return None  # (as ``place_replicas``: it packs there only beside one slot it keeps)
    return nid, replicas - h.replicas


@dataclass(slots=True)
class Round:
    """The cluster as one round of ``choose_preemptions`` reads it, and what the round
    has taken so far (a GPU freed for one preemptor is not counted for another)."""

    by_name: Mapping[str, SwarmService]
    by_node: Mapping[str, SwarmNode]
    facts: Mapping[str, NodeFacts]
    queues: Mapping[str, Mapping[str, object]]  # the plan's queues, by name
    req: Mapping[str, GpuRequest | RequestError]  # service name -> its request
    started: Mapping[tuple[str, str], str]  # (service id, node) -> its newest task's start
    holdings: Mapping[str, Mapping[str, Holding]]  # node -> service -> holding
    refused: Callable[[SwarmService], AbstractSet[str]] | None
    preemptible_below: int
    cooling: AbstractSet[str]  # may not be victims now
    moving: AbstractSet[str]  # neither preemptors nor victims
    failed: AbstractSet[str]  # planning raised this cycle: a victim stopped, never moved
    done: AbstractSet[tuple[str, str]] = frozenset()  # (service id, node): ``done_idle``
    # (node, uuid) freed already, or held by a move in flight (``flying``)
    taken: set[tuple[str, str]] = field(default_factory=set)
    gone: set[str] = field(default_factory=set)  # victims already chosen
    q_gone: dict[str, int] = field(default_factory=dict)  # milli per queue its victims free
    q_given: dict[str, int] = field(default_factory=dict)  # milli per queue its preemptors take
    # of ``refused``, nodes refused for a host-mode port alone -> the services binding it
    ports: Callable[[SwarmService], Mapping[str, AbstractSet[str]]] | None = None
    room: Room | None = None  # CPU and memory per node (None: not counted)
    # (node, uuid) -> the preemptor and priority it is held for (``nominated.held_gpus``):
    # used for any other of that priority or lower (``off``); no victim is moved onto it
    held: Mapping[tuple[str, str], tuple[str, int]] = field(default_factory=dict)
    # of ``held``, those of tasks Swarm is stopping that free within their grace period
    # (``PlacementPlan.stopping_waits``): a request they alone keep off a node waits
    waits: AbstractSet[tuple[str, str]] = frozenset()
    tasks: Sequence[SwarmTask] = ()  # the snapshot's (``spread_packs`` reads its slots)
    # ``tasks`` by service id (``tasks_of``), indexed once a round
    _by_service: dict[str, tuple[SwarmTask, ...]] | None = field(default=None, init=False,
                                                                 repr=False)

    def tasks_of(self, service_id: str) -> Sequence[SwarmTask]:
        """The snapshot's tasks of ``service_id``, in its order. Indexed once a round:
        each spread preemptor's walk over every task made a round over a big cluster
        cost preemptors x tasks (``benchmarks/bench_preempt_scale.py``)."""
        if self._by_service is None:
            by: dict[str, list[SwarmTask]] = {}
            for t in self.tasks:
                by.setdefault(t.service_id, []).append(t)
            self._by_service = {sid: tuple(ts) for sid, ts in by.items()}
        return self._by_service.get(service_id, ())

    def refused_of(self, s: SwarmService) -> AbstractSet[str]:
        return self.refused(s) if self.refused is not None else frozenset()

    def port_takers(self, s: SwarmService) -> Mapping[str, AbstractSet[str]]:
        return self.ports(s) if self.ports is not None else {}

    def off(self, nid: str, name: str, priority: int) -> set[str]:
        """GPUs of ``nid`` taken in the round, or held for another preemptor than ``name``
        of ``priority`` or higher: not for ``name`` (of ``priority``)."""
        return {u for n, u in self.taken if n == nid} | {
            u for (n, u), (who, pr) in self.held.items()
            if n == nid and who != name and priority <= pr}


def victims_fit(rd: Round, s: SwarmService, nid: str, replicas: int,
                port: AbstractSet[str] | None) -> Lack | None:
    """What more victims only give ``replicas`` of ``s`` on ``nid`` (``pick_victims``'
    ``lack``): the CPU and memory it lacks there (``Room.lacks``) and what each victim's
    stop frees of them (``Room.frees``), and the services binding the host port it
    publishes there (``port``; None: none does), all victims then. None where neither
    refuses it there. Where they alone refused, ``victimsearch`` walked all 4,095 sets of
    a crowded node."""
    room = rd.room
    short = room.lacks(s, nid, replicas) if room is not None else (0, 0)
    if not any(short) and port is None:
        return None
    return Lack(short, lambda name: room.frees(name, nid) if room is not None else (0, 0),
                frozenset(port or ()))
