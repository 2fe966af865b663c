"""Swarm's own scheduler for the trace's CPU-only pods (``simulate --cpu-pods swarm``).

In the product swarmgpu places GPU services only; a service without a GPU request is
scheduled by Swarm itself (moby/swarmkit, ``manager/scheduler``). For a service of one
task that is, read from swarmkit's source (scheduler.go ``scheduleTaskGroup``,
nodeset.go ``tree``, filter.go, nodeinfo.go):

- the filters: ``ReadyFilter`` (the node ready and active: a node the allocator has
  ``blocked`` fails it) and ``ResourceFilter``, enabled when the task reserves CPU or
  memory: each reservation at most what the node has available (its
  ``Description.Resources`` less the reservations of the tasks on it; equal fits). The
  other filters (plugins, constraints, platform, host ports, max replicas) have nothing
  to check for a trace pod;
- among the nodes that pass, the least by ``nodeLess``: a node with ``maxFailures``
  recent failures of the service last (no task fails in a replay), then the fewest
  active tasks of the service, then the fewest active tasks in all;
- a tie: ``tree`` walks the node set, a Go map (its order random on every walk), and
  keeps the first least node; taken here as a uniform draw among the tied nodes, from a
  stream of the seed's own (the arrival order and the random policy's draws unchanged).

What the trace does not give, and how it is taken:
- no service identity: each pod is a service of its own with one task, so its count of
  the service's tasks is 0 on every node and the order is the nodes' task counts;
- a node's available CPU and memory are the allocator's (``cpu_left``/``mem_left``):
  every placed pod's reservation counts from when it is placed, and a GPU pod's task
  counts on its node from then too. In the product Swarm sees a GPU task once its gate
  opens and it assigns the task, seconds after the daemon placed it (trace arrivals are
  a median 161 s apart); a node whose CPU or memory the node list leaves out (none in
  openb) has no limit, as the allocator takes it;
- tasks that are not pods (swarmgpu's agent, a global service) add one to every GPU
  node and change no order; they are left out.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.values import Choice, Demand, NodeState

CPU_PODS = ("policy", "swarm")  # --cpu-pods: who places a CPU-only pod


class SwarmScheduler:
    """Which node Swarm gives a one-task service; counts each node's active tasks."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(f"swarm-scheduler/{seed}")  # noqa: S311 - simulation
        self.tasks: Counter[str] = Counter()  # node -> active tasks, every service's
        self.of_service: Counter[tuple[str, str]] = Counter()  # (service, node) -> tasks

    def add(self, node: str, service: str = "") -> None:
        """A task now runs on ``node`` (a pod placed, by anyone)."""
        self.tasks[node] += 1
        if service:
            self.of_service[(service, node)] += 1

    def moved(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Tasks moved, as (old node, new node)."""
        for old, new in pairs:
            self.tasks[old] -= 1
            self.tasks[new] += 1

    def passes(self, node: NodeState, d: Demand) -> bool:
        """``ReadyFilter`` and ``ResourceFilter``: ready, and the reservations fit."""
        if node.blocked:
            return False
        if not (d.cpu_milli or d.memory_mib):  # ResourceFilter.SetTask: not enabled
            return True
        if node.cpu_left is not None and d.cpu_milli > node.cpu_left:
            return False
        return node.mem_left is None or d.memory_mib <= node.mem_left

    def pick(self, alloc: Allocator, d: Demand, service: str = "") -> Choice | None:
        """The node Swarm assigns a task of ``service`` asking ``d`` (no GPU), or None
        (no node passes: the task stays pending, which a replay counts as failed)."""
        best: tuple[int, int] | None = None
        tied: list[str] = []
        for name, node in alloc.nodes.items():
            if not self.passes(node, d):
                continue
            key = (self.of_service[(service, name)] if service else 0, self.tasks[name])
            if best is None or key < best:
                best, tied = key, [name]
            elif key == best:
                tied.append(name)
        if not tied:
            return None
        node_name = tied[self.rng.randrange(len(tied))] if len(tied) > 1 else tied[0]
        return Choice(node_name, (), (), 0.0, "Swarm's scheduler", d.cpu_milli, d.memory_mib)
