"""Defragmenting moves for the replay: when a task finds no node, move one running task
off a node so that the failed task fits there. The replay counts every moved task against
a budget (moves per 100 arrived pods).

A rebalancer is any callable ``(allocator, running, demand) -> Rescue | None``: it is
called when ``demand`` found no node, may commit moves on the allocator (each one a
release on the old node and a commit on the new one) and returns them with the choice for
``demand``; None when it cannot help (the allocator is then unchanged).

The search is arithmetic over the running tasks, not trial placements: a node qualifies
when giving back one task's CPU, memory and GPU share makes the failed task fit there
exactly as ``Allocator.fits`` would judge it. Only qualifying (node, task) pairs are tried
for real (release, place, re-place the moved task elsewhere), smallest task first, so a
failure costs a few milliseconds instead of hundreds of trial placements.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from swarmgpu.allocator.core import Allocator, Choice, Demand, NodeState
from swarmgpu.allocator.fragmentation import product_matches


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


def _fits_without(node: NodeState, d: Demand, tc: Choice) -> bool:
    """Would ``d`` fit on ``node`` once task choice ``tc`` is given back? (simple nodes)"""
    if node.cpu_left is not None and node.cpu_left + tc.cpu_milli < d.cpu_milli:
        return False
    if node.mem_left is not None and node.mem_left + tc.memory_mib < d.memory_mib:
        return False
    if not tc.gpus:  # a CPU-only task frees no GPU: it helps only when CPU/memory was short
        free = node.free
    else:
        free = list(node.free)
        for g, m in zip(tc.gpus, tc.milli, strict=True):
            free[g] += m
    need = d.milli_per_gpu
    return sum(1 for f in free if f >= need) >= d.gpus_wanted


def candidates(alloc: Allocator, running: Running, d: Demand) -> list[tuple[int, int, str, int]]:
    """(moved GPU-milli, node rank, node, task id) for every single move that lets ``d`` fit.

    Only plain nodes (one GPU model, no link or NUMA constraints) and plain demands are
    searched; everything else is left to the scheduler.
    """
    out: list[tuple[int, int, str, int]] = []
    if d.mig_profile or d.topology != "any" or d.node_labels or d.min_memory_mib:
        return out
    for name, tasks in running.items():
        node = alloc.nodes[name]
        if not tasks or not node.simple:
            continue
        if d.gpus_wanted and not (node.spec.gpus and product_matches(node.product, d.products)):
            continue
        for tid, (_td, tc) in tasks.items():
            if _fits_without(node, d, tc):
                out.append((sum(tc.milli), node.rank, name, tid))
    out.sort()
    return out


def one_move_rescue(alloc: Allocator, running: Running, d: Demand,
                    max_tries: int = 16) -> Rescue | None:
    """Move one running task so that ``d`` fits; commit both and return them, or None.

    Tries the qualifying moves smallest first: the moved task is released, ``d`` placed on
    the freed node, and the task placed by the allocator's own policy; the first move whose
    task lands somewhere wins, the others are undone.
    """
    for _milli, _rank, name, tid in candidates(alloc, running, d)[:max_tries]:
        td, tc = running[name][tid]
        alloc.release(tc)
        here = alloc.place_on(name, d)
        if not isinstance(here, Choice):
            alloc.commit(tc)
            continue
        alloc.commit(here)
        there = alloc.place(td)
        if isinstance(there, Choice):
            alloc.commit(there)
            return Rescue((Move(tid, tc, there),), here)
        alloc.release(here)
        alloc.commit(tc)
    return None
