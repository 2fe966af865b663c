"""CPU and memory per node as preemption counts them (``Room``), as Swarm's ResourceFilter
does: a preemptor, or a victim moved, is sent only where its tasks' reservations fit.
What the tasks Swarm is stopping hold there (CPU, memory, host-mode ports) is room once
they stop, their hold's end at most (``keys.stop_overdue``): past it, no more."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Protocol

from swarmgpu.manager.placement.hostports import binds, own_ports, published
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.recreated import gate_name
from swarmgpu.manager.placement.tasks import meant_to_run
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.specread import held_reservations


class Named(Protocol):
    """A victim as ``Room`` reads it: the service it is (``preempt.Candidate``)."""

    @property
    def service(self) -> str: ...


@dataclass(slots=True)
class Room:
    """CPU and memory per node as Swarm's ResourceFilter counts them: what is left
    (None: the node's capacity unknown), and what each service reserves there -- its
    tasks' reservations, or its holding's while no task of it runs there yet (as
    ``ClusterAllocator.holding_reservation`` counts it). A round's decisions are counted
    in it as they are made (``took``, ``moved``): a node's CPU is not given twice."""

    left: dict[str, tuple[int | None, int | None]]
    held: Mapping[tuple[str, str], tuple[int, int]]  # (service name, node id) -> reserved
    # node id -> what the tasks Swarm is stopping there reserve (in ``left`` as used),
    # those past their hold's end aside (used still, but no longer waited for)
    stopping: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # node id -> the host-mode ports those tasks bind there; node id -> port -> the
    # services that bind it there otherwise (a meant task, a holder publishing it, a
    # stopping task past its hold's end): a port freed by their stop alone is room then
    stop_ports: Mapping[str, frozenset[str]] = field(default_factory=dict)
    kept_ports: Mapping[str, Mapping[str, frozenset[str]]] = field(default_factory=dict)
    # node id -> its whole CPU and memory: what a task whose spec's reservations cannot be
    # read reserves there (``want``), never less than Swarm counts
    whole: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    @staticmethod
    def of(nodes: Sequence[SwarmNode], services: Sequence[SwarmService],
           tasks: Sequence[SwarmTask], holdings: Mapping[str, Mapping[str, Holding]],
           stopping: Sequence[SwarmTask] = (),
           overdue: AbstractSet[str] = frozenset(), prefix: str = "swarmgpu.") -> Room:
        """``stopping``: tasks Swarm is stopping (``keys.stopping``), whose reservations
        count on their node until they stop: used there, never freed by a victim's stop.
        ``overdue``: the ids of those past their hold's end (``keys.stop_overdue``: a node
        down or paused, a stop stuck): used still, but never room once stopped.
        ``prefix``: swarmgpu's, its gate constraint's (``unlisted_whole``)."""
        name_of = {s.id: s.name for s in services}
        held: dict[tuple[str, str], tuple[int, int]] = {}
        on: set[tuple[str, str]] = set()
        strays: dict[str, dict[str, str]] = {}  # node id -> service not listed -> its gate's
        for t in tasks:
            if not meant_to_run(t) or not t.node_id:  # (a job's live task: Swarm counts it)
                continue
            on.add((t.service_id, t.node_id))
            if t.service_id not in name_of:
                strays.setdefault(t.node_id, {})[t.service_id] = gate_name(t, prefix)
            k = (name_of.get(t.service_id, "\0" + t.service_id), t.node_id)
            c, m = held.get(k, (0, 0))
            held[k] = (c + t.cpu_milli, m + t.memory_mib)
        by_name = {s.name: s for s in services}
        whole = {n.id: (n.cpu_milli or 0, n.memory_mib or 0) for n in nodes}
        for nid, here in holdings.items():
            for svc, h in here.items():
                s = by_name.get(svc)
                if s is not None and (s.id, nid) not in on:
                    res = held_reservations(s.spec)  # unread: its node's whole, never less
                    held[(svc, nid)] = ((res[0] * h.replicas, res[1] * h.replicas)
                                        if res is not None else whole.get(nid, (0, 0)))
            if unlisted_whole([svc for svc in here if svc not in by_name], strays.get(nid, {})):
                held[(UNLISTED, nid)] = whole.get(nid, (0, 0))
        use: dict[str, tuple[int, int]] = {}
        stops: dict[str, tuple[int, int]] = {}
        for t in stopping:  # used as ever; waited for only until its hold's end
            for got in (use, stops) if t.id not in overdue else (use,):
                uc, um = got.get(t.node_id, (0, 0))
                got[t.node_id] = (uc + t.cpu_milli, um + t.memory_mib)
        for (_svc, nid), (c, m) in held.items():
            uc, um = use.get(nid, (0, 0))
            use[nid] = (uc + c, um + m)
        left = {n.id: (None if n.cpu_milli is None else n.cpu_milli - use.get(n.id, (0, 0))[0],
                       None if n.memory_mib is None else n.memory_mib - use.get(n.id, (0, 0))[1])
                for n in nodes}
        return Room(left, held, stops, *_ports(services, tasks, holdings, stopping, overdue),
                    whole=whole)

    def fits(self, s: SwarmService, nid: str, victims: Sequence[Named], count: int,
             ) -> bool:
        """``count`` tasks of ``s`` fit on ``nid`` once ``victims``' reservations go."""
        want = self.want(s, nid)
        left = self.left.get(nid, (None, None))
        for i in (0, 1):
            have = left[i]
            if have is None or not want[i]:
                continue
            freed = sum(self.held.get((v.service, nid), (0, 0))[i] for v in victims)
            if have + freed < want[i] * count:
                return False
        return True

    def lacks(self, s: SwarmService, nid: str, count: int) -> tuple[int, int]:
        """The CPU and memory ``count`` tasks of ``s`` lack on ``nid`` (0: none, or not
        counted): ``fits`` takes victims whose reservations there come to as much."""
        want, left = self.want(s, nid), self.left.get(nid, (None, None))
        cpu, mem = (0 if have is None or not w else max(0, w * count - have)
                    for w, have in zip(want, left, strict=True))
        return cpu, mem

    def frees(self, name: str, nid: str) -> tuple[int, int]:
        """The CPU and memory service ``name``'s stop frees on ``nid`` (``fits``' count)."""
        return self.held.get((name, nid), (0, 0))

    def fits_once_stopped(self, s: SwarmService, nid: str, count: int) -> bool:
        """``count`` tasks of ``s`` fit on ``nid`` once the tasks Swarm is stopping there
        have stopped (their grace period at most), no victim's going."""
        if not self.stopping.get(nid):
            return False  # (none stops there: ``fits`` says it)
        was = self.left.get(nid, (None, None))
        self._add(nid, *self.stopping[nid])
        try:
            return self.fits(s, nid, (), count)
        finally:
            self.left[nid] = was

    def ports_once_stopped(self, s: SwarmService, nid: str) -> bool:
        """Each host-mode port ``s`` publishes that is bound on ``nid`` is bound there
        only by tasks Swarm is stopping, none past its hold's end: free once they stop."""
        ports = published(s) if nid in self.stop_ports else ()
        if not ports or not self.stop_ports[nid].intersection(ports):
            return False
        kept = self.kept_ports.get(nid, {})
        return not any(kept.get(p, frozenset()) - {s.name} for p in ports)

    def took(self, s: SwarmService, nid: str, victims: Sequence[Named], count: int,
             ) -> None:
        """``count`` tasks of ``s`` go on ``nid`` in place of ``victims``'."""
        want = self.want(s, nid)
        freed = [sum(self.held.get((v.service, nid), (0, 0))[i] for v in victims)
                 for i in (0, 1)]
        self._add(nid, freed[0] - want[0] * count, freed[1] - want[1] * count)

    def moved(self, s: SwarmService, nid: str) -> bool:
        """One task of ``s`` (a victim relocated) fits on ``nid``: counted there, True;
        else False (it would stay pending there)."""
        if not self.fits(s, nid, (), 1):
            return False
        want = self.want(s, nid)
        self._add(nid, -want[0], -want[1])
        return True

    def want(self, s: SwarmService, nid: str) -> tuple[int, int]:
        """What one task of ``s`` reserves on ``nid``: its spec's, or the node's whole
        where that cannot be read (``held_reservations``: None; read as 0 it fit
        anywhere)."""
        got = held_reservations(s.spec)
        return got if got is not None else self.whole.get(nid, (0, 0))

    def _add(self, nid: str, cpu: int, mem: int) -> None:
        c, m = self.left.get(nid, (None, None))
        self.left[nid] = (None if c is None else c + cpu, None if m is None else m + mem)


# ``Room.held``'s key (with the node's id) of the holders not listed there whose
# reservations are unknown: no service's name (a victim's is looked up by its own)
UNLISTED = "\0holders not listed"


def unlisted_whole(holders: Sequence[str], strays: Mapping[str, str]) -> bool:
    """Whether a node's whole CPU and memory are counted for ``holders``, those of its
    ledger whose service is not listed (placement holds them while the list left a
    service out, or a name is unread): what each reserves is unknown, unless a task of
    it runs there (counted by its reservations). ``strays``: the services not listed
    with a task meant to run there -> the name their gate names ("": none). A task
    whose gate names a holder is that holder's; one that names none may be any one's;
    one that names another service is no holder's. The whole is counted once, however
    many holders lack a task: no node holds more (twice, a node's left read below zero
    by its whole)."""
    named = set(strays.values())
    anyone = sum(1 for name in strays.values() if not name)
    return len([h for h in holders if h not in named]) > anyone


def _ports(services: Sequence[SwarmService], tasks: Sequence[SwarmTask],
           holdings: Mapping[str, Mapping[str, Holding]], stopping: Sequence[SwarmTask],
           overdue: AbstractSet[str],
           ) -> tuple[dict[str, frozenset[str]], dict[str, dict[str, frozenset[str]]]]:
    """``Room.stop_ports`` and ``Room.kept_ports``, as ``hostports.HostPorts`` counts a
    task's ports (its own status's while Swarm stops it, else its service's; a removed
    service's, its status's); nothing read where no stopping task binds a port."""
    by_id = {s.id: s for s in services}

    def ports_of(t: SwarmTask) -> tuple[str, ...]:
        svc = by_id.get(t.service_id)
        return own_ports(t) or (published(svc) if svc is not None else t.host_ports)

    stop: dict[str, set[str]] = {}
    for t in stopping:
        if t.id not in overdue:
            stop.setdefault(t.node_id, set()).update(ports_of(t))
    stop = {nid: got for nid, got in stop.items() if got}
    if not stop:
        return {}, {}
    kept: dict[str, dict[str, set[str]]] = {}

    def keep(nid: str, ports: Sequence[str], who: str) -> None:
        for p in ports:
            kept.setdefault(nid, {}).setdefault(p, set()).add(who)

    waited = {t.id for t in stopping if t.id not in overdue}
    for t in [*tasks, *stopping]:
        if t.node_id in stop and t.id not in waited and binds(t):
            svc = by_id.get(t.service_id)
            keep(t.node_id, ports_of(t), svc.name if svc is not None else "\0" + t.service_id)
    by_name = {s.name: s for s in services}
    for nid in stop:
        for name in holdings.get(nid, {}):  # placed there (this cycle too): binds it soon
            if (svc := by_name.get(name)) is not None:
                keep(nid, published(svc), name)
    return ({nid: frozenset(got) for nid, got in stop.items()},
            {nid: {p: frozenset(w) for p, w in by.items()} for nid, by in kept.items()})
