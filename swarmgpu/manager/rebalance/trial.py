"""A check's allocator made on the pass's kept one (``Context.trial``) and taken back
after: built for each check, one cost a pass over every node, holding and task (stop
78: most of a 200-node plan's time, ``benchmarks/defrag_scale.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from swarmgpu.allocator.values import Choice
from swarmgpu.manager.placement import ClusterAllocator, Holding


@dataclass
class Trial:
    """The allocator a check counts on (``alloc``), and what to take back after: the
    choices it committed (``taken``: ``commit``, or a caller's own list), the nodes'
    usage before it set it (``set_usage``), and the holdings it was made without
    (``evicted``: each with what its reservation counted there, ``SwarmTargets.
    leaving``)."""

    alloc: ClusterAllocator
    taken: list[Choice] = field(default_factory=list)
    usage: dict[str, tuple[int, int]] = field(default_factory=dict)
    evicted: list[tuple[Holding, tuple[int, int], bool]] = field(default_factory=list)

    def set_usage(self, node: str, cpu_milli: int, memory_mib: int) -> None:
        a = self.alloc.alloc
        self.usage.setdefault(node, a.usage(node))
        a.set_usage(node, cpu_milli, memory_mib)

    def evict(self, h: Holding, use: tuple[int, int]) -> None:
        """Count ``h`` (its service's holding on its node) gone, and ``use`` of its
        node's CPU and memory with it."""
        held = self.alloc.held_at(h.service, h.node_id) is not None
        self.alloc.release_holding(h.service, h.node_id)
        if use != (0, 0):
            self.alloc.add_usage(h.node_id, -use[0], -use[1])
        self.evicted.append((h, use, held))

    def undo(self) -> None:
        """Take back all the check counted, the holdings it evicted committed again."""
        a = self.alloc.alloc
        for c in reversed(self.taken):
            a.release(c)
        for node, (cpu, mem) in self.usage.items():
            a.set_usage(node, cpu, mem)
        for h, use, held in reversed(self.evicted):
            if use != (0, 0):
                self.alloc.add_usage(h.node_id, *use)
            if held:
                self.alloc.commit_holding(h.service, h.node_id, h)
        self.taken, self.usage, self.evicted = [], {}, []
