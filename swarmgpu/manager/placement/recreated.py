"""Ledger entries a removed service left that a service recreated under its name would
read as its own (``recreated_entries``).

The ledger keys holdings by service name alone. A service removed and created again
under the same name (``docker stack rm`` then ``docker stack deploy``, or ``docker
service create`` again) within one cycle found the removed one's entries under its name:
it kept them, and its task started on GPUs the removed one's container still ran on for
its stop grace period (GPU memory OOM). The stopping task's hold (``StoppingGpus``) did
not bite: the GPUs were the new service's own holding.

An entry is the removed one's while a task of a service id Swarm no longer lists, of
that name, still stops on its node (``keys.stopping``, or rejected and running: Swarm
lists a removed service's tasks, their ServiceID kept, until they stop). Its name is the
one the daemon saw last cycle for that id, else the one in the task's gate constraint (a
restarted daemon's, a one-shot's: it knows no last cycle; and every cycle after the
removal's first: the removed id is no longer listed). A gate constraint is the removed
service's owner's text, no proof it was a service of that name (a tenant may write
another's gate): read so, an entry the live service's own device map names is its own
(``_mapped``). So is a map copied with the removed one's spec (``docker service
inspect`` into ``create``, a stack from ``swarmgpu render``): after a restart it keeps
the entry, as no daemon can tell it from the map it wrote when it placed the service
afresh, before the restart (placed twice else); a daemon that saw the removed id reads
no map. A service updated keeps its id: its old tasks are never a removed one's. Such
an entry is not kept: the service is placed afresh (on those GPUs again only once the
task has stopped), and the entry is read as the stopping task's GPUs
(``StoppingGpus.holds``).

An entry the recreated service was placed on since is its own: the daemon's own
(``Recreated``: disowned for it an earlier cycle; moved on its node since, the GPUs its
device map names while the daemon's record of that move lasts: its owner may write the
map too, and a copied spec carries the removed one's); else where the stopping
task's GPUs are known (learned while it ran, or its own device line) the entry is the
removed one's only if it names one of them; else only while no task of the live
service is assigned to that node.

Preemption and the rebalancer read the ledger without the entries so disowned that the
cycle did not place their service on again (``PlacementPlan.dropped``), as placement
read it: by name, the live service's holding there (its reservation counted on a node
it would never run on, a holding to move)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet

from swarmgpu.manager.placement.keys import (
    ASSIGNED_STATES,
    GATE,
    devices_key,
    kept_unlisted,
)
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.records import ServicePlan
from swarmgpu.swarm.client import SwarmService, SwarmTask
from swarmgpu.swarm.taskstop import rfc3339_ns

# (service name, node id) of a ledger entry a removed service left
Entries = frozenset[tuple[str, str]]


def gate_name(t: SwarmTask, prefix: str) -> str:
    """The service name in ``t``'s swarmgpu gate constraint ("" without one)."""
    head, tail = f"node.labels.{prefix}{GATE}", "==true"
    for c in t.constraints or ():
        text = c.replace(" ", "")
        if text.startswith(head) and text.endswith(tail) and len(text) > len(head + tail):
            return text[len(head):-len(tail)]
    return ""


def removed_name(t: SwarmTask, last: Mapping[str, str], prefix: str) -> str:
    """The name of the service ``t`` was a task of: the last cycle's for its id
    (``last``: service id -> name), else its gate constraint's."""
    return last.get(t.service_id) or gate_name(t, prefix)


def recreated_entries(services: Sequence[SwarmService], leaving: Sequence[SwarmTask],
                      ledger: Mapping[str, Mapping[str, Holding]],
                      last: Mapping[str, str], tasks: Sequence[SwarmTask], prefix: str,
                      learned: Callable[[SwarmTask], AbstractSet[str] | None],
                      afresh: Mapping[tuple[str, str], str] | None = None,
                      placed: Mapping[tuple[str, str], frozenset[str]] | None = None,
                      moving: AbstractSet[str] = frozenset()) -> Entries:
    """The ledger entries of live services that are a removed one's of the same name,
    whose task (among ``leaving``: stopping, or rejected and running) still runs on the
    entry's node. ``last``: service id -> name as the last cycle had them; ``tasks``: the
    meant ones; ``learned``: a stopping task's GPUs (UUIDs) where known, else None;
    ``afresh``: (name, node id) -> the live service id an earlier cycle disowned the
    entry for (``Recreated``): placed afresh since, the entry is its own; ``placed``: of
    those, the GPUs it was placed on there: an entry naming others is not that placement
    (its node's write failed: the removed one's entry still), so not its own for that;
    ``moving``: the services with a move in flight by the daemon's records
    (``rebalance.record.moving``), whose device map there is the move's (``_afresh``)."""
    afresh, placed = afresh or {}, placed or {}
    live = {s.id for s in services}
    gone = [t for t in leaving if t.service_id not in live and t.node_id]
    if not gone:
        return frozenset()
    by_name = {s.name: s for s in services}
    on: set[tuple[str, str]] | None = None  # (service id, node id) of assigned meant tasks
    out: set[tuple[str, str]] = set()
    for t in gone:
        name = removed_name(t, last, prefix)
        s = by_name.get(name)
        h = ledger.get(name, {}).get(t.node_id) if s is not None else None
        if s is None or h is None or not _older(t, s) \
                or _afresh(afresh, placed, (name, t.node_id), s, h, prefix, moving) \
                or (t.service_id not in last and _mapped(s, h, prefix)):
            continue
        uses = learned(t)
        if uses is not None:
            mine = uses.isdisjoint(h.uuids)
        else:
            if on is None:
                on = {(x.service_id, x.node_id) for x in tasks if x.state in ASSIGNED_STATES}
            mine = (s.id, t.node_id) in on
        if not mine:
            out.add((name, t.node_id))
    return frozenset(out)


class Recreated:
    """``recreated_entries`` across cycles (the planner's): an entry disowned for a live
    service is the one it was placed on afresh from the next cycle on. Its GPUs may be
    the stopping task's still (a fraction placed on the rest of that task's GPU): read
    again as the removed one's, it was disowned every other cycle, the service's gate
    closed in turn (Swarm's constraint enforcer stopped its running task)."""

    def __init__(self) -> None:
        self.afresh: dict[tuple[str, str], str] = {}  # (name, node id) -> live service id
        # of those, (name, node id) -> cycles no removed one's task was listed there
        self.unlisted: dict[tuple[str, str], int] = {}
        # of those, (name, node id) -> the GPUs the plan placed it on there (``placed_elsewhere``)
        self.placed: dict[tuple[str, str], frozenset[str]] = {}

    def entries(self, services: Sequence[SwarmService], leaving: Sequence[SwarmTask],
                ledger: Mapping[str, Mapping[str, Holding]], last: Mapping[str, str],
                tasks: Sequence[SwarmTask], prefix: str,
                learned: Callable[[SwarmTask], AbstractSet[str] | None],
                left_out: bool = False, moving: AbstractSet[str] = frozenset()) -> Entries:
        """This cycle's ``recreated_entries``, those of earlier cycles' kept while they
        may matter: their service lives, and the ledger had their entry or a removed
        one's task stopped on their node within ``UNLISTED_CYCLES`` cycles (the memory
        stays no larger than the ledger and those tasks). A task listed again after any
        gap (an engine hiccup) so finds its entry still the live service's: forgotten by
        the gap alone, it was disowned again and the service placed afresh once more.
        An entry briefly gone (its rewrite between its removal and its set) is kept
        while the task stops there. ``left_out``: the service list left one out
        (``swarm.unkeyed``): a service not listed may be that one, its memory kept (forgotten,
        its entry was disowned again once it was listed: placed afresh once more).
        ``moving``: as ``recreated_entries``."""
        got = recreated_entries(services, leaving, ledger, last, tasks, prefix, learned,
                                self.afresh, self.placed, moving)
        ids = {s.name: s.id for s in services}
        live = set(ids.values())  # (a memory per live service only: a removed one's goes)
        there = {(removed_name(t, last, prefix), t.node_id) for t in leaving
                 if t.service_id not in live and t.node_id}
        # (an entry the ledger still has counts as listed: its memory goes with it)
        held = {k for k in self.afresh if k[1] in ledger.get(k[0], {})}
        kept, missed = kept_unlisted(self.afresh, self.unlisted, there | held)
        self.afresh = {k: sid for k, sid in kept.items() if left_out or sid in live} | {
            k: ids[k[0]] for k in got}
        self.unlisted = {k: n for k, n in missed.items() if k in self.afresh}
        self.placed = {k: u for k, u in self.placed.items() if k in self.afresh and k not in got}
        return got

    def placed_elsewhere(self, dropped: AbstractSet[tuple[str, str]],
                         services: Sequence[ServicePlan] = ()) -> None:
        """Of this cycle's entries, forget those whose service the plan did not place on
        their node again (``PlacementPlan.dropped``): such an entry is still the removed
        one's while its release has not landed. Remembered as placed afresh, it was the
        live service's own from the next cycle on (a holding to move, its reservation
        counted there). Of the others, the GPUs the plan (``services``) placed them on
        there: the entry is that placement only once its node's write landed."""
        for k in dropped:
            self.afresh.pop(k, None)
            self.unlisted.pop(k, None)
            self.placed.pop(k, None)
        for sp in services:
            for p in sp.placements:
                if (sp.name, p.node_id) in self.afresh:
                    self.placed[(sp.name, p.node_id)] = frozenset(
                        u for q in sp.placements if q.node_id == p.node_id for u in q.uuids)


def _afresh(afresh: Mapping[tuple[str, str], str],
            placed: Mapping[tuple[str, str], frozenset[str]], key: tuple[str, str],
            s: SwarmService, h: Holding, prefix: str, moving: AbstractSet[str]) -> bool:
    """Entry ``h`` (``key``) is the one live service ``s`` was placed on afresh: an
    earlier cycle disowned it for ``s``, and its GPUs are those it was placed on there
    (where known), or, while the daemon's record of a move of ``s`` lasts (``moving``),
    those its device map names: other GPUs in both are that move's (a repin writes the
    map, then the ledger), not the removed one's entry (a node write that failed leaves
    the ledger on GPUs the map does not name)."""
    if afresh.get(key) != s.id:
        return False
    got = placed.get(key)
    # Without a move the map is no word of the daemon's: a service label its owner may
    # write, or a copied spec's, naming the removed one's GPUs (its task still on them).
    return got is None or got == frozenset(h.uuids) or (
        s.name in moving and _mapped(s, h, prefix))


def _mapped(s: SwarmService, h: Holding, prefix: str) -> bool:
    """``s``'s own device map on ``h``'s node names one of ``h``'s GPUs: the daemon
    wrote it for this service (the GPUs it was placed on afresh), or its owner did (a
    copied spec: its own claim, which no reader can tell from the daemon's)."""
    key = devices_key(prefix, h.node_id)
    return any(u in h.uuids for k, v in s.labels.items()
               if k == key or k.startswith(key + ".") for u in v.split(","))


def _older(t: SwarmTask, s: SwarmService) -> bool:
    """``t`` was created before ``s`` (true where either time is unknown): a task of a
    service removed before ``s`` was created under its name."""
    # (exact: a float's epoch seconds would tie times a tenth of a microsecond apart)
    made, born = rfc3339_ns(t.created_at), rfc3339_ns(s.created_at)
    return made is None or born is None or made < born
