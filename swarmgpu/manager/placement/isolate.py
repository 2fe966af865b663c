"""One service's planning kept apart from the others': planning that raises (a bug, or
input no one foresaw) costs that service alone. Its plan says so and writes nothing, the
allocator is as it was before the service was visited (``restore``), and the traceback
is logged once while it keeps raising (``Faults``). A ``restore`` that raises too costs
that service alone as well (``unsure``): its nodes are rebuilt from the ledger at the
next sync, and kept from the other services till then where its holdings may be free.
So is a node where a commit raised before its holding was recorded (``unrecorded``),
not in the same cycle: see ``unrecorded`` for why its GPUs stay counted used till then.
The planner's passes over every service before the visits name a service whose part
raised (``ServiceRead.failed``); its visit is this module's too."""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableSequence, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace

from loguru import logger

from swarmgpu.core.peertext import peer_text
from swarmgpu.core.saidonce import SaidOnce
from swarmgpu.manager.placement.cluster import ClusterAllocator
from swarmgpu.manager.placement.globalmode import GLOBAL_MODES
from swarmgpu.manager.placement.ledger import Holding, parse_holding
from swarmgpu.manager.placement.reads import ServiceRead
from swarmgpu.manager.placement.records import ServicePlan, State, Status
from swarmgpu.manager.placement.tasks import meant_to_run
from swarmgpu.manager.services.requests import GpuRequest, RequestError
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.specread import UnreadSpec


class UnreadNode(UnreadSpec):
    """A service's task runs on a node whose engine answer cannot be read
    (``SwarmNode.unread``), or on one the node list left out (``swarm.unkeyed``), and no
    holding of it there can be read."""


def on_unread_nodes(by_id: Mapping[str, SwarmNode], tasks: Sequence[SwarmTask],
                    services: Sequence[SwarmService],
                    ledger: Mapping[str, Mapping[str, Holding]],
                    unkeyed: Sequence[str] = ()) -> dict[str, Exception]:
    """Service id -> ``UnreadNode``: each service with a task meant to run on an unread
    node where its labels as read show no holding of it (Spec.Labels unread: what it
    holds there is unknown), or, while a node is listed without an ID (``unkeyed``: the
    nodes' messages, ``swarm.unkeyed``), on a node not listed. Planned as failed,
    nothing is written for it: it is not given GPUs elsewhere and its task is not
    replaced for a node that could not be read. Not a global service on an unread node:
    each node is its own holding, so only that node is skipped (``globalmode``: it
    waits, naming why). On a node not listed it is: skipped there, its device map of
    that node went from its spec as a gone node's (a task it starts there reads none)."""
    # (one whose own spec is unread is failed by its read, naming its own field)
    names = {s.id: s.name for s in services if not s.unread}
    each = {s.id for s in services if s.mode in GLOBAL_MODES}
    # (said of every task on a node not listed while one is left out: worded once)
    unlisted = f"a node the engine's list leaves out ({unkeyed[0]})" if unkeyed else ""
    out: dict[str, Exception] = {}
    for t in tasks:
        n = by_id.get(t.node_id)
        if n is not None:
            why = "" if t.service_id in each else n.unread
        else:
            why = unlisted if t.node_id else ""
        if (why and t.service_id in names and meant_to_run(t)
                and t.node_id not in ledger.get(names[t.service_id], {})):
            out[t.service_id] = UnreadNode(f"a task of it runs on {why}")
    return out


def named(s: SwarmService) -> str:
    """``s``'s name, or its ID where its name cannot be read (``ServiceRead.unnamed``)."""
    return s.name or f"service {s.id}"


def failed_reason(name: str, exc: Exception) -> str:
    """What the plan of ``name`` says when planning it raised ``exc`` (no traceback)."""
    if isinstance(exc, UnreadNode):  # its node's answer's fault: not the spec's
        return (f"{name} is left as it is: {peer_text(str(exc), 600)}")
    if isinstance(exc, UnreadSpec):  # its spec's fault, named with its fix: not swarmgpu's
        return (f"{name}'s spec cannot be read: {peer_text(str(exc), 300)}; nothing is "
                "written for it this cycle, what it holds stays held, the other services "
                "are placed")
    return (f"planning {name} failed unexpectedly ({type(exc).__name__}: "
            f"{peer_text(str(exc), 200)}): nothing is written for it this cycle, what it "
            "holds stays held, the other services are placed; fix: this is a swarmgpu "
            "fault, report it with the daemon's log, which has the traceback")


def failed_plan(s: SwarmService, r: GpuRequest | RequestError, exc: Exception) -> ServicePlan:
    """The plan of ``s`` when planning it raised: no placements, no writes."""
    req = r if isinstance(r, GpuRequest) else None
    try:  # (the fault may be in saying the request: the plan is made all the same)
        text = req.describe() if req is not None else ""
    except Exception:
        text = ""
    return ServicePlan(s.name, s.id, req, text, Status.FAILED, State.FAILED,
                       reason=failed_reason(named(s), exc), mode=s.mode,
                       unread=isinstance(exc, UnreadSpec))


# node id -> (ledger value, CPU milli, memory MiB): a holding as the allocator committed it
Committed = Mapping[str, tuple[str, int, int]]


def committed(cluster: ClusterAllocator, name: str, kept: Mapping[str, Holding]) -> Committed:
    """What service ``name`` has committed on the allocator on each node of ``kept`` (its
    holdings kept this cycle), taken before it is visited: what ``restore`` puts back.
    Not ``kept`` itself: a holding on a failed GPU that the health policy keeps is kept
    whole but committed without that GPU (``existing``), and committed whole again the
    allocator refuses it (no room on a failed GPU), leaving its healthy GPUs free under
    its running task."""
    return {nid: held.key for nid in kept if (held := cluster.held_at(name, nid)) is not None}


def restore(cluster: ClusterAllocator, s: SwarmService, before: Committed) -> None:
    """Leave ``s``'s holdings on the allocator as they were before it was visited
    (``before``: ``committed``).

    Why this is exact and cheap: a service's planning changes the allocator only
    through holdings under its own name (``release_holding``, ``commit_holding``,
    ``commit(choice, name)``; a probe's commits are released in a ``finally``:
    ``packing.place_packed``), and no other service was planned since it began. So
    releasing whatever it holds now that it did not hold before, then committing each
    holding as it was committed (its ledger value and reservation; one committed as it
    is stays as it is), gives back the GPUs and CPU it took and takes again those it
    gave up: its running tasks still use them, and a service planned after it must not
    get them. The walk over every holding is paid only when a service failed; a copy
    of the allocator before each service would cost every service, every cycle."""
    name = s.name
    for (svc, nid), _held in cluster.held_items():
        if svc == name and nid not in before:
            cluster.release_holding(name, nid)
    for nid, (value, cpu, mem) in before.items():
        h = parse_holding(name, nid, value)  # (its own label value: it parses)
        if h is not None:  # (-1: kept on a node no allocator has, its reservation none)
            cluster.commit_holding(name, nid, h, (max(cpu, 0), max(mem, 0)))


def isolated(cluster: ClusterAllocator, faults: Faults, s: SwarmService,
             r: GpuRequest | RequestError, exc: Exception, before: Committed) -> ServicePlan:
    """What a cycle does of a service whose planning raised ``exc``: its holdings as they
    were (``restore``), the traceback said once while it lasts, and its plan."""
    try:
        restore(cluster, s, before)
    except Exception as undone:  # (its traceback chains the planning fault's)
        unsure(cluster, s.name, before)
        faults.say(s, exc, undone)
    else:
        faults.say(s, exc)
    unrecorded(cluster)
    return failed_plan(s, r, exc)


def unreleased(no_request: Sequence[SwarmService], ungate_failed: AbstractSet[str],
               ledger: Mapping[str, object]) -> list[tuple[SwarmService, RequestError]]:
    """The services of no request whose ungating raised (``ungate_failed``: ids) that
    hold ledger entries, each with a blank invalid request: committed with the kept
    holdings as an invalid request's are (whole), as their failed plans say (what it
    holds stays held), not released as a service's that no longer asks for GPUs. Only
    those: one released this cycle whose later pass raised (its workload count) had its
    ledger entries removed, and committed again its GPUs went to no one that cycle."""
    return [(s, RequestError("", "", "")) for s in no_request
            if s.id in ungate_failed and s.name in ledger]


def unnamed_holders(read: ServiceRead, ledger: Mapping[str, object],
                    ) -> list[tuple[SwarmService, RequestError]]:
    """While a service's name cannot be read (``ServiceRead.unnamed``), each name in the
    ledger that no service has, as a stand-in of it with a blank invalid request: what it
    holds is committed whole, as an invalid request's, not freed as a gone service's (it
    may be that service's, its tasks running there). Not visited: no plan, no write."""
    s = read.unnamed
    if s is None:
        return []
    return [(replace(s, name=name), RequestError("", "", ""))  # (its id: its read's memo)
            for name in sorted(ledger.keys() - read.names)]


def failed_unvisited(plans: list[ServicePlan], no_request: Sequence[SwarmService],
                     failed: Mapping[str, Exception], cluster: ClusterAllocator,
                     faults: Faults, released: AbstractSet[str] = frozenset()) -> None:
    """A failed plan for each service a pass failed that no visit planned (one of no
    request: its ungating, or its count in the workload model, raised). What it holds
    now is what it held (no visit changed it): kept (``unreleased``). One released this
    cycle (``released``, or planned so), whose later pass raised, keeps its plan: its
    fault is logged once while it lasts (else no log had its traceback)."""
    if not failed:
        return
    have = {sp.name for sp in plans}
    for s in no_request:
        exc = failed.get(s.id)
        if exc is not None and (s.name in have or s.name in released):
            faults.say_once(f"{s.name}\0released", (
                f"reading {s.name} after its release failed unexpectedly "
                f"({type(exc).__name__}: {peer_text(str(exc), 200)}): it is released all "
                "the same, as its plan says; fix: this is a swarmgpu fault, report it "
                "with the daemon's log, which has the traceback"), exc)
        elif exc is not None:
            now = {nid: held.key for (svc, nid), held in cluster.held_items()
                   if svc == s.name}
            plans.append(isolated(cluster, faults, s, RequestError("", "", ""),
                                  failed[s.id], now))


def plugins_noted(plans: MutableSequence[ServicePlan], by_name: Mapping[str, SwarmService],
                  check: Callable[[SwarmService], str], faults: Faults) -> None:
    """On each plan whose service needs plugins, the nodes that do not say if they have
    them (``check``: ``SwarmFilters.plugins_unknown``); a check that raises is said on
    its plan alone, whose placement stands. A failed plan says nothing of where it would
    go."""
    for i, sp in enumerate(plans):
        s = by_name.get(sp.name)
        if s is None or sp.status == Status.FAILED:
            continue
        try:
            why = check(s)
        except Exception as exc:  # its fault is its own: the other plans are noted
            why = (f"checking which nodes say if they have the plugins {s.name} needs "
                   f"failed unexpectedly ({type(exc).__name__}: {peer_text(str(exc), 200)})"
                   ": its plan stands, Swarm's PluginFilter decides on every node; fix: "
                   "this is a swarmgpu fault, report it with the daemon's log, which has "
                   "the traceback")
            faults.say_once(f"{s.name}\0plugins", why, exc)
        if why:
            plans[i] = sp.noted(why)


def unrecorded(cluster: ClusterAllocator) -> None:
    """Each node where a commit raised once it began counting and before its holding
    was recorded (``ClusterAllocator.unrecorded``) is built anew from the ledger at the
    next sync: ``restore`` gives back only what is recorded, and what the allocator
    counted there is not known. Till then its GPUs are counted used or were never
    counted, both free of any running task: the safe side, no block needed.

    Why not rebuilt in this cycle, before the next service is planned: a node is built
    only by ``sync_nodes`` (its spec and rank), ``set_usage_of`` (its tasks' CPU) and
    ``keep_holdings`` (the ledger's holdings), each a pass at the cycle's start. Built
    mid-visit it would also need this cycle's commits of the services planned before
    (in no ledger yet) and its MIG devices taken, by a second path no healthy cycle
    runs, and its new generation re-keys the settled plans of every service on it
    (``node_gen``): a fault there could then move a healthy service's placement. The
    cost of waiting: a service planned after it this cycle may wait one cycle for those
    GPUs (tests/test_placement_pass_isolation.py).

    The planner calls it at each cycle's start too: a commit that raised outside a visit
    (the pass that commits every kept holding) fails the whole cycle, no service's
    isolation ran, and its node kept its stray count (those GPUs counted twice once the
    next cycle committed the holding again)."""
    for nid in sorted(cluster.unrecorded):
        cluster.rebuild_node(nid)
    cluster.unrecorded.clear()


def unsure(cluster: ClusterAllocator, name: str, before: Committed) -> None:
    """After ``restore`` raised part-way: each node ``name`` held (``before``) or holds
    now is built anew from the ledger at the next sync (``rebuild_node``), the allocator
    kept across cycles having lost count there; for the rest of this cycle, a node where
    a holding of ``before`` is not committed as it was is blocked (no new placement).

    Why that is safe: a holding committed as it was (``held_at``) has its GPUs counted
    used (``commit_holding`` records it after the commit; ``_release`` forgets it before
    the release). Any other state of the node (a release done and its re-commit not, a
    commit done and its record not) may leave the service's GPUs free under its running
    tasks, or more counted used than are: a block gives none of them to another service
    this cycle, and the rebuild counts them right next cycle. A node it took only this
    cycle keeps at worst its new GPUs counted used this cycle: the safe side too."""
    nodes = set(before) | {nid for (svc, nid), _ in cluster.held_items() if svc == name}
    for nid in sorted(nodes):
        cluster.rebuild_node(nid)
        held = cluster.held_at(name, nid)
        alloc = cluster.allocator_of(nid)
        if nid in before and alloc is not None and (held is None or held.key != before[nid]):
            alloc.set_blocked(nid, True)  # (the rebuild sets it from the node next sync)


class Faults:
    """The services whose planning raised, each logged with its traceback once while it
    keeps raising (said again after a cycle without it). Between cycles (``between``:
    ``Planner.place_arrivals``) a fault counts as said by the last cycle: said once over
    the arrivals and the next cycle, which forgets it where it no longer raises."""

    def __init__(self) -> None:
        self._said: SaidOnce[str] = SaidOnce()
        self._open = False  # a cycle's round is open (begin, not yet end)

    def begin(self) -> None:
        self._said.begin()
        self._open = True

    def end(self) -> None:
        self._said.end()
        self._open = False

    def between(self) -> None:
        """Faults said from now to the next ``begin`` are said between cycles (a round
        a raising cycle left open is dropped by that ``begin`` all the same)."""
        self._open = False

    def _fresh(self, key: str) -> bool:
        return self._said.fresh(key) if self._open else self._said.fresh_between(key)

    def say_once(self, key: str, text: str, exc: Exception) -> None:
        """``text`` logged with ``exc``'s traceback once while ``key`` keeps raising."""
        if self._fresh(key):
            logger.opt(exception=exc).error("placement: {}", text)

    def say(self, s: SwarmService, exc: Exception, undone: Exception | None = None) -> None:
        """``undone``: what ``restore`` raised after ``exc`` (its traceback shows both)."""
        if self._fresh(s.name):
            also = "" if undone is None else (
                f"; putting back what it held raised too ({type(undone).__name__}: "
                f"{peer_text(str(undone), 200)}): its nodes are rebuilt from the ledger "
                "next cycle")
            logger.bind(service=s.name).opt(exception=undone or exc).error(
                "placement: {}{}", failed_reason(named(s), exc), also)
