"""Defragmenting moves for the replay: when a task fails, move one running task to make
room for it. The replay counts every move against a budget (moves per 100 arrived pods).

A rebalancer is any callable ``(allocator, running, demand) -> list[Move] | None``: it is
called when ``demand`` found no node, may commit moves on the allocator (each one a
release on the old node and a commit on the new one) and returns them with the choice for
``demand`` as the last element's ``then``; None when it cannot help.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from swarmgpu.allocator.core import Allocator, Choice, Demand


@dataclass(frozen=True)
class Move:
    task: int  # the replay's id of the moved task
    old: Choice
    new: Choice


@dataclass(frozen=True)
class Rescue:
    moves: tuple[Move, ...]
    placed: Choice  # where the failed task went


Running = dict[str, dict[int, tuple[Demand, Choice]]]  # node -> task id -> (demand, choice)
Rebalancer = Callable[[Allocator, Running, Demand], Rescue | None]


def one_move_rescue(alloc: Allocator, running: Running, d: Demand,
                    max_nodes: int = 24) -> Rescue | None:
    """Find a node where moving one small task elsewhere lets ``d`` fit; do it.

    Looks at the ``max_nodes`` nodes with the most free GPU that still cannot host ``d``
    (the ones one small move is most likely to open up).
    """
    need = d.total_gpu_milli
    near = Demand(cpu_milli=0, products=d.products)
    cands = [n for n in alloc.nodes.values()
             if running.get(n.spec.name) and n.free_total() > 0 and alloc.fits(n, near)]
    cands.sort(key=lambda n: (-n.free_total(), n.rank))
    for node in cands[:max_nodes]:
        tasks = running[node.spec.name]
        for tid, (td, tc) in sorted(tasks.items(), key=lambda kv: kv[1][0].total_gpu_milli):
            if node.free_total() + td.total_gpu_milli < need:
                continue
            alloc.release(tc)
            here = alloc.place_on(node.spec.name, d)
            if not isinstance(here, Choice):
                alloc.commit(tc)
                continue
            alloc.commit(here)
            there = alloc.place(td)
            if isinstance(there, Choice) and there.node != node.spec.name:
                alloc.commit(there)
                return Rescue((Move(tid, tc, there),), here)
            alloc.release(here)
            alloc.commit(tc)
    return None
