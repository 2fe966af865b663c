"""Nodes where another service's task already publishes a host-mode port a service
publishes (``HostPorts``): Swarm's HostPortFilter runs no second task with the same
protocol and published port on a node, of whatever service (swarmkit
manager/scheduler/filter.go), so a replica placed there would wait forever on its GPUs.

Swarm's task list shows the tasks that bind a port; a placement decided in this cycle
has no task yet, so each decision takes its ports on its nodes too (``claim``): two
services publishing one port are never placed on one node in one cycle. Where a task
binds the port, the tasks alone say who holds it (the one Swarm runs keeps it). A task of
a removed service (one Swarm is stopping) has no spec to read its ports from: its own
status's are counted (``SwarmTask.host_ports``, ``swarm.taskports``); so are a live
service's stopping task's once it runs (``own_ports``): an update that changed the
published port leaves its old task on the old port, not the new one (none reported: the
service's, as before), and one meant to run that its rolling update has not reached yet
binds its own reported ones beside its spec's (``_bound``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, MutableSequence, Sequence
from typing import TYPE_CHECKING

from swarmgpu.core.andmore import and_more
from swarmgpu.manager.placement.keys import MEANT_STATES
from swarmgpu.manager.placement.specs import host_mode, host_ports
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

if TYPE_CHECKING:
    from swarmgpu.manager.placement.records import ServicePlan

# Observed states in which a task has a node and binds its ports there, whatever its
# desired state (one told to shut down binds them until it stops); the earlier ones
# count while the task is still meant to run.
_BOUND = frozenset(("assigned", "accepted", "preparing", "ready", "starting", "running"))
_COMING = frozenset(("new", "allocated", "pending"))
_NOTHING: Mapping[str, str] = {}
_NOTHING_TAKEN: Mapping[str, frozenset[str]] = {}
_NO_NODES: Mapping[str, Mapping[str, str]] = {}


def published(s: SwarmService) -> tuple[str, ...]:
    """The host-mode ports ("8000/tcp") of its spec and of its endpoint (what its
    tasks were made with)."""
    ports = host_ports(s.spec)
    if s.endpoint_ports:
        ports = tuple(dict.fromkeys((*ports, *host_mode(s.endpoint_ports))))
    return ports


def binds(t: SwarmTask) -> bool:
    """The task holds its host-mode ports on its node: it runs or is on its way."""
    return bool(t.node_id) and (
        t.state in _BOUND or (t.desired_state in MEANT_STATES and t.state in _COMING)
    )


def own_ports(t: SwarmTask) -> tuple[str, ...] | None:
    """The ports a task Swarm is stopping binds, as its own status reports them once it
    runs (an update's old task binds the ports it was made with, not those its service's
    spec publishes now); None: not known (not running yet, or meant to run), the
    service's then."""
    if t.desired_state in MEANT_STATES or t.state != "running":
        return None
    return t.host_ports


def _bound(t: SwarmTask, published: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The ports ``t`` binds: a stopping one's own (``own_ports``); one meant to run, its
    service's ``published`` and those its own status reports (its rolling update not
    there yet: made with the old spec, it binds the old ports)."""
    own = own_ports(t)
    if own is not None:
        return own or published
    return tuple(dict.fromkeys((*published, *t.host_ports))) if t.host_ports else published


def _left_out(t: SwarmTask) -> bool:
    """Task ``t`` of a service no list shows is one the engine's list left out
    (``swarm.unkeyed``), such as a job's: still meant to run, not stopped as a removed
    service's tasks are."""
    return t.desired_state in MEANT_STATES or t.desired_state == "complete"


def _unlisted(t: SwarmTask) -> str:
    """Who binds the ports of task ``t`` of a service no list shows (``_left_out``)."""
    if _left_out(t):
        return "a service the engine's list leaves out (the ports its task reports)"
    return "a removed service (its task stopping)"


def _unknown_ports(services: Sequence[SwarmService], tasks: Sequence[SwarmTask]) -> set[str]:
    """The nodes where a task of a service the list left out (``_left_out``) is on its
    way and reports no port yet: the host-mode ports it will bind are not known (its
    service's spec unread; its status reports them once it runs)."""
    live = {s.id for s in services}
    return {t.node_id for t in tasks if binds(t) and t.state != "running" and not t.host_ports
            and t.service_id not in live and _left_out(t)}


class HostPorts:
    """Indexed once per snapshot (``new_cycle``): per host-mode port, the nodes a task
    binding it is on and whose tasks they are. Most services publish nothing: then the
    tasks are not read at all, and every service is refused nothing."""

    def __init__(self) -> None:
        self._ports: dict[str, tuple[int, tuple[str, ...]]] = {}  # id -> (version, ports)
        self._used: dict[str, dict[str, dict[str, str]]] = {}  # port -> node -> id -> name
        # this cycle's decisions, as ``_used``: where each service is placed (``claim``)
        self._claims: dict[str, dict[str, dict[str, str]]] = {}
        self._refused: dict[str, dict[str, str]] = {}  # this cycle's: id -> node -> why
        self._also: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
        self._unknown: set[str] = set()  # this cycle's ``_unknown_ports``

    def ports_of(self, s: SwarmService) -> tuple[str, ...]:
        got = self._ports.get(s.id)
        if got is None or got[0] != s.version:
            got = self._ports[s.id] = (s.version, published(s))
        return got[1]

    def new_cycle(self, services: Sequence[SwarmService], tasks: Sequence[SwarmTask]) -> None:
        ports_of = self.ports_of
        names = {s.id: s.name for s in services if ports_of(s)}
        if len(self._ports) > 2 * len(services) + 64:  # services gone: their entries go
            ids = {s.id for s in services}
            self._ports = {k: v for k, v in self._ports.items() if k in ids}
        used: dict[str, dict[str, dict[str, str]]] = {}
        orphans = [t for t in tasks if t.host_ports and binds(t)]  # few: reported ports
        if orphans:
            live = {s.id: s.name for s in services}
            for t in orphans:
                if t.service_id not in live:
                    who, ports = _unlisted(t), t.host_ports
                elif t.service_id not in names:  # its update dropped the port: bound still
                    who, ports = live[t.service_id], _bound(t)
                else:
                    continue  # its service publishes ports: read below
                for p in ports:
                    used.setdefault(p, {}).setdefault(t.node_id, {})[t.service_id] = who
        if names:
            for t in [t for t in tasks if t.service_id in names]:
                if binds(t):
                    sid = t.service_id
                    for p in _bound(t, self._ports[sid][1]):
                        used.setdefault(p, {}).setdefault(t.node_id, {})[sid] = names[sid]
        self._used = used
        self._unknown = _unknown_ports(services, tasks) if names else set()
        self._claims = {}
        self._refused = {}
        self._also = {}

    def noted(self, plans: MutableSequence[ServicePlan],
              by_name: Mapping[str, SwarmService]) -> None:
        """On each plan of a service publishing host-mode ports placed on a node of
        ``_unknown_ports``: what is not known there, as Swarm may refuse that replica."""
        if not self._unknown:
            return
        for i, sp in enumerate(plans):
            s = by_name.get(sp.name)
            hosts = sorted({p.hostname for p in sp.placements if p.node_id in self._unknown})
            ports = self.ports_of(s) if s is not None and hosts else ()
            if ports:
                plans[i] = sp.noted(
                    f"host-mode ports {', '.join(ports)}: a task of a service the engine's "
                    f"list leaves out is starting on {', '.join(hosts)}, the ports it binds "
                    "not known until it runs (its spec unread): Swarm may refuse a replica "
                    "there; fix: as the list's message on that service says")

    def claim(self, s: SwarmService, nodes: Iterable[str]) -> None:
        """``s`` is placed on ``nodes`` in this cycle (all of its holdings, kept or new;
        its claims before are replaced): its host-mode ports are taken there for every
        other service planned after it, before its tasks exist to bind them."""
        ports = self.ports_of(s)
        if not ports:
            return
        want = set(nodes)
        changed = False
        for p in ports:
            by_node = self._claims.setdefault(p, {})
            for nid in [n for n, by in by_node.items() if s.id in by and n not in want]:
                del by_node[nid][s.id]
                changed = True
            for nid in want:
                by = by_node.setdefault(nid, {})
                if s.id not in by:
                    by[s.id] = s.name
                    changed = True
        if changed:  # every answer may change: asked anew
            self._refused = {}
            self._also = {}

    def _takers(self, p: str) -> Iterator[tuple[str, Mapping[str, str], bool]]:
        """(node, service id -> name, bound by a task) of each node where ``p`` is
        taken: by the tasks binding it there, else by this cycle's claims."""
        used = self._used.get(p, _NO_NODES)
        yield from ((nid, by, True) for nid, by in used.items())
        for nid, by in self._claims.get(p, _NO_NODES).items():
            if nid not in used and by:
                yield nid, by, False

    def refused(self, s: SwarmService) -> Mapping[str, str]:
        """Node id -> why, for each node where a task of another service binds a port
        ``s`` publishes in host mode. Its own tasks do not count: the one a replica
        replaces, or its replica there, is the same service's."""
        if not self._used and not self._claims:
            return _NOTHING
        got = self._refused.get(s.id)
        if got is None:
            got = self._refused[s.id] = {}
            for p in self.ports_of(s):
                for nid, by, bound in self._takers(p):
                    others = sorted(name for sid, name in by.items() if sid != s.id)
                    if others:
                        why = got.get(nid)
                        more = (f"host-mode port {p} is taken by a task of {', '.join(others)}"
                                if bound else f"host-mode port {p} is taken by "
                                f"{', '.join(others)}, placed there (its task not running "
                                "yet)")
                        got[nid] = f"{why}; {more}" if why else more
        return got

    def takers(self, s: SwarmService) -> Mapping[str, frozenset[str]]:
        """Node id -> the names of the other services whose tasks bind a port ``s``
        publishes there (``refused``'s nodes): preemption frees such a node when those
        are its victims."""
        if not self.refused(s):
            return _NOTHING_TAKEN
        by: dict[str, set[str]] = {}
        for p in self.ports_of(s):
            for nid, held, _bound in self._takers(p):
                by.setdefault(nid, set()).update(n for sid, n in held.items() if sid != s.id)
        return {nid: frozenset(names) for nid, names in by.items() if names}

    def also(self, s: SwarmService, base: frozenset[str]) -> frozenset[str]:
        """``base`` (the nodes Swarm's other filters refuse) and those ``refused`` names."""
        refused = self.refused(s)
        if not refused:
            return base
        got = self._also.get(s.id)
        if got is None or got[0] is not base:
            got = self._also[s.id] = (base, base.union(refused))
        return got[1]

    def excluding(
        self,
        base: Callable[[SwarmService], frozenset[str]],
    ) -> Callable[[SwarmService], frozenset[str]]:
        """``base`` (Swarm's other filters, per service) with these refusals added."""

        def refused(s: SwarmService) -> frozenset[str]:
            return self.also(s, base(s))

        return refused

    def why(self, s: SwarmService, by_id: Mapping[str, SwarmNode]) -> str:
        """The refusals in a plan's words, a few nodes named ("" when none)."""
        refused = self.refused(s)
        if not refused:
            return ""

        def host(nid: str) -> str:
            n = by_id.get(nid)
            return n.hostname if n is not None else nid

        nids = sorted(refused, key=host)
        said = [f"{host(n)}: {refused[n]}" for n in nids[:3]]
        return ("; ".join(said) + and_more(len(nids), 3, "nodes")
                + " (Swarm runs one task with a host-mode port per node)")
