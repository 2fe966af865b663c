"""Swarm's word on a move's target node, for one planning pass (``SwarmTargets``).

A moved task is a new task: Swarm's scheduler runs it on the target only where its
filters let it, and a move whose task stays pending there is rolled back after
``move_timeout_s`` (and proposed again once its cooldown ends). So a target is judged as
placement judges a node: the service's constraints, platforms, generic resources and
the plugins its volumes, networks and log driver need (``placement.SwarmFilters``); no
host-mode port it publishes bound there by another service's task
(``placement.HostPorts``), nor taken by another move of the pass to that node; and the
CPU and memory it reserves left on the node after the reservations of the node's tasks
and of the pass's moves onto it (their tasks do not exist yet).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet

from swarmgpu.manager.placement import ClusterAllocator, HostPorts, SwarmFilters
from swarmgpu.manager.rebalance.moves import Move
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask, reservations


class SwarmTargets:
    """Built once per pass from its snapshot."""

    def __init__(self, nodes: Sequence[SwarmNode], services: Sequence[SwarmService],
                 tasks: Sequence[SwarmTask], prefix: str) -> None:
        # generic_kind "": a whole-GPU service's generic reservation is in its spec once
        # placement wrote it, and is judged from there
        self.filters = SwarmFilters(prefix, "", lambda _sid: None)
        self.filters.new_cycle(nodes)
        self.filters.set_tasks(tasks)
        self.ports = HostPorts()
        self.ports.new_cycle(services, tasks)
        self.by_name = {s.name: s for s in services}
        self._refused: dict[str, AbstractSet[str]] = {}

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

    def reservation(self, svc: str) -> tuple[int, int]:
        """(CPU milli, memory MiB) one task of ``svc`` reserves."""
        s = self.by_name.get(svc)
        return reservations(s.spec) if s is not None else (0, 0)

    def reserve(self, alloc: ClusterAllocator, moves: Iterable[Move]) -> None:
        """Count on ``alloc`` what the new tasks of ``moves`` reserve on their targets (a
        move within one node replaces its task there: nothing more)."""
        for m in moves:
            cpu, mem = self.reservation(m.service)
            if (cpu or mem) and m.target_node != m.source_node \
                    and m.target_node in alloc.alloc.nodes:
                alloc.add_usage(m.target_node, cpu, mem)
