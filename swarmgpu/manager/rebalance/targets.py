"""Swarm's word on a move's target node, for one planning pass (``SwarmTargets``).

A moved task is a new task: Swarm's scheduler runs it on the target only where its
filters let it, and a move whose task stays pending there is rolled back after
``move_timeout_s`` (and proposed again once its cooldown ends). So a target is judged as
placement judges a node: the service's constraints, platforms, generic resources and
the plugins its volumes, networks and log driver need (``placement.SwarmFilters``); no
host-mode port it publishes bound there by another service's task
(``placement.HostPorts``), nor taken by another move of the pass to that node; and the
CPU and memory it reserves left on the node after the reservations of the node's tasks,
of the holdings whose task does not exist yet (as placement counts them:
``ClusterAllocator.holding_reservation``) and of the pass's moves onto it (their tasks
do not exist yet either). This cycle's placement decisions (``Inputs.placed``:
placement ran first, its writes are not in the snapshot) count as tasks do: their
host-mode ports claimed on their nodes, and their CPU and memory reserved where no task
of theirs runs yet (once: a holding of the ledger they are also in is not counted twice).

``live_refusal`` asks the same rules (``SwarmTargets.why``) once more just before a
move's first write (a repin's too: ``Repin.refusal``), of the service and the target node
as Swarm has them then: a re-deploy since planning may have added a constraint, a volume
plugin or a host port.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet

from swarmgpu.allocator.values import NodeState
from swarmgpu.manager.placement import ClusterAllocator, Holding, HostPorts, SwarmFilters
from swarmgpu.manager.placement.hostports import published
from swarmgpu.manager.placement.keys import MEANT_STATES
from swarmgpu.manager.rebalance.moves import Move
from swarmgpu.swarm.client import (
    SwarmClient,
    SwarmNode,
    SwarmNotFound,
    SwarmService,
    SwarmTask,
)
from swarmgpu.swarm.specread import held_reservations


class SwarmTargets:
    """Built once per pass from its snapshot."""

    def __init__(self, nodes: Sequence[SwarmNode], services: Sequence[SwarmService],
                 tasks: Sequence[SwarmTask], prefix: str,
                 placed: Mapping[str, Sequence[str]] | None = None) -> None:
        """``placed``: service name -> the node of each of its replicas this cycle's
        placement decided (``Inputs.placed``)."""
        # generic_kind "": a whole-GPU service's generic reservation is in its spec once
        # placement wrote it, and is judged from there
        self.filters = SwarmFilters(prefix, "", lambda _sid: None)
        self.filters.new_cycle(nodes)
        self.filters.set_tasks(tasks)
        self.ports = HostPorts()
        self.ports.new_cycle(services, tasks)
        self.by_name = {s.name: s for s in services}
        self.nodes = {n.id: n for n in nodes}
        self._refused: dict[str, AbstractSet[str]] = {}
        # (service id, node id) with a task Swarm counts (desired running or ready)
        self.has = {(t.service_id, t.node_id) for t in tasks if t.desired_state in MEANT_STATES}
        self.placed_use = self._placed(placed or {})

    def _placed(self, placed: Mapping[str, Sequence[str]]
                ) -> dict[tuple[str, str], tuple[int, int]]:
        """Claim the placed services' host-mode ports on their nodes; (service name,
        node id) -> the CPU and memory its replicas reserve there while no task of it
        runs there yet."""
        use: dict[tuple[str, str], tuple[int, int]] = {}
        for name, nids in placed.items():
            s = self.by_name.get(name)
            if s is None or not nids:
                continue
            self.ports.claim(s, nids)
            got = held_reservations(s.spec)  # unread: its node's whole, never less
            for nid in nids:
                n = self.nodes.get(nid)
                cpu, mem = got if got is not None else (
                    (n.cpu_milli or 0, n.memory_mib or 0) if n is not None else (0, 0))
                if (cpu or mem) and (s.id, nid) not in self.has:
                    u = use.get((name, nid), (0, 0))
                    use[(name, nid)] = (u[0] + cpu, u[1] + mem)
        return use

    def refused(self, s: SwarmService, moves: Iterable[Move] = ()) -> AbstractSet[str]:
        """Nodes Swarm would not run a task of ``s`` on, ``moves`` (the pass's, proposed
        before) counted: a node one of them takes a host-mode port of ``s`` on."""
        base = self._refused.get(s.id)
        if base is None:
            base = self._refused[s.id] = self.filters.refused(s) | self.ports.refused(s).keys()
        mine = set(self.ports.ports_of(s))
        if not mine:
            return base
        clash = {m.target_node for m in moves if m.service != s.name
                 and (o := self.by_name.get(m.service)) is not None
                 and mine.intersection(self.ports.ports_of(o))}
        return base | clash if clash else base

    def why(self, s: SwarmService, node_id: str, moves: Iterable[Move] = ()) -> str | None:
        """Why ``refused`` names ``node_id`` for ``s``, in words (None: it does not)."""
        if node_id not in self.refused(s, moves):
            return None
        unread = self.filters.unread_why(s)
        if unread:  # refused on every node until its spec is fixed
            return unread
        n = self.nodes.get(node_id)
        host = n.hostname if n is not None else node_id
        port = self.ports.refused(s).get(node_id)
        if port:
            return f"on {host}: {port} (Swarm runs one task with a host-mode port per node)"
        plugins = self.filters.plugins_why(s, n) if n is not None else ""
        if plugins:
            return plugins
        if node_id in self.filters.refused(s):
            return (f"{host} does not satisfy {s.name}'s constraints, platforms or generic "
                    "resources")
        return f"on {host}: a host-mode port of {s.name} is taken by another move"

    def reservation(self, svc: str) -> tuple[int, int]:
        """(CPU milli, memory MiB) one task of ``svc`` reserves. A spec whose reservations
        cannot be read (``held_reservations``: None) reserves the largest node's whole CPU
        and memory, as its holder counts its node's whole: never less than Swarm counts
        (none read as nothing sent its new task onto a node whose CPU others hold)."""
        s = self.by_name.get(svc)
        if s is None:
            return (0, 0)
        got = held_reservations(s.spec)
        if got is None:
            return (max((n.cpu_milli or 0 for n in self.nodes.values()), default=0),
                    max((n.memory_mib or 0 for n in self.nodes.values()), default=0))
        return got

    def reserve(self, alloc: ClusterAllocator, moves: Iterable[Move],
                ledger: Mapping[str, Mapping[str, Holding]]) -> None:
        """Count on ``alloc`` what reserves CPU and memory beside the nodes' tasks: the
        holdings of ``ledger`` whose task does not exist yet (the service's reservation
        per replica the holding serves, as placement counts it), this cycle's placements
        (``placed``) not among them, and the new tasks of ``moves`` (a move within one
        node replaces its task there: nothing more; its target holding is the move's)."""
        moves = list(moves)
        targets = {(m.service, m.target_node) for m in moves}
        nodes = alloc.alloc.nodes
        counted: set[tuple[str, str]] = set()
        for svc, per_node in ledger.items():
            s = self.by_name.get(svc)
            if s is None:
                continue
            res = held_reservations(s.spec)  # unread: its node's whole, never less
            if res == (0, 0):
                continue
            for nid, h in per_node.items():
                use = self._held_use(s, res, nid, h, targets, nodes)
                if use is not None:
                    alloc.add_usage(nid, *use)
                    counted.add((svc, nid))
        for (svc, nid), (cpu, mem) in self.placed_use.items():
            if nid in nodes and (svc, nid) not in counted:
                alloc.add_usage(nid, cpu, mem)
        for m in moves:
            cpu, mem = self.reservation(m.service)
            if (cpu or mem) and m.target_node != m.source_node \
                    and m.target_node in alloc.alloc.nodes:
                alloc.add_usage(m.target_node, cpu, mem)


    def _held_use(self, s: SwarmService, res: tuple[int, int] | None, nid: str, h: Holding,
                  targets: AbstractSet[tuple[str, str]], nodes: Mapping[str, NodeState],
                  ) -> tuple[int, int] | None:
        """What ``reserve`` counts on ``nid`` for ``s``'s holding ``h`` there (``res``:
        its reservation per replica; ``targets``: (service, node) of the moves counted):
        None where it counts nothing (its task exists, a move's target, no GPU node)."""
        if (s.id, nid) in self.has or (s.name, nid) in targets or nid not in nodes:
            return None
        spec = nodes[nid].spec
        return ((res[0] * h.replicas, res[1] * h.replicas) if res is not None
                else (spec.cpu_milli or 0, spec.memory_mib or 0))

    def leaving(self, alloc: ClusterAllocator, svc: str, nid: str, h: Holding,
                moves: Iterable[Move]) -> tuple[int, int]:
        """What ``reserve`` (with ``moves``) counts on ``nid`` for ``svc``'s holding ``h``
        there beyond what it counts once the holding is out of its ledger (then only
        this cycle's placement of it there, ``placed_use``): taken off where a check
        evicts it from a kept allocator (``Context.trial``)."""
        s = self.by_name.get(svc)
        res = held_reservations(s.spec) if s is not None else (0, 0)
        if s is None or res == (0, 0):
            return (0, 0)
        use = self._held_use(s, res, nid, h, {(m.service, m.target_node) for m in moves},
                             alloc.alloc.nodes)
        if use is None:
            return (0, 0)
        placed = self.placed_use.get((svc, nid), (0, 0))
        return (use[0] - placed[0], use[1] - placed[1])

def live_refusal(swarm: SwarmClient, s: SwarmService, node: SwarmNode,
                 own: Sequence[SwarmTask], prefix: str) -> str | None:
    """Why Swarm would not run a new task of ``s`` (as read now) on ``node`` (as read
    now), by ``SwarmTargets``' rules; None: it would. ``own``: ``s``'s tasks (the
    networks they are attached to). The node's tasks, and the services of those, are read
    only when ``s`` publishes a host-mode port: one list, one inspect per service."""
    tasks = list(own)
    others: dict[str, SwarmService] = {}
    if published(s):
        there = [t for t in swarm.tasks({"node": node.id}) if t.node_id == node.id]
        tasks += [t for t in there if t.service_id != s.id]
        for sid in {t.service_id for t in there} - {s.id}:
            try:
                others[sid] = swarm.service(sid)
            except SwarmNotFound:
                continue  # gone: its tasks go with it
    return SwarmTargets([node], [s, *others.values()], tasks, prefix).why(s, node.id)

