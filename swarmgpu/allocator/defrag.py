"""Defragmenting moves: the one running task whose move lowers the cluster's unusable GPU
capacity most.

Placement is online: each share goes where the policy's cost grows least *now*, and later
arrivals make some of those choices poor (two GPUs each half used by one share, a small
share sitting in the hole a large one needs). A move re-places one running task. Its gain
is the drop of ``cost`` summed over the two nodes it touches, where ``cost`` is a
measure of GPU-milli the workload cannot use (the simulator's moves use FGD's
fragmentation, ``fragmentation.FragCache``).

The search is exact for single moves and cheap: a task's gain on leaving depends only on
its node's state, its GPU's free share and its demand (memoised by those), and its best
destination depends only on its demand (one scan of the distinct node states). Pure: the
allocator is read, never changed.

Measured on the openb default trace (``swarmgpu simulate --rebalance-moves 2``): greedy
single moves from the start of the replay, about one per 50 arrivals, do better than
rescuing failed pods alone or emptying lightly used GPUs (95.95 vs 95.81 / 95.92 under the
previous placement rule); with a few moves kept for rescues, 96.03. See docs/simulate.md.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from swarmgpu.allocator.core import Allocator, Choice, Demand, NodeState

# (GPU product, CPU milli left or None, free milli per GPU) -> unusable GPU-milli
NodeCost = Callable[[str, int | None, tuple[int, ...]], float]


@dataclass(frozen=True)
class Held:
    """A running task: who it is (opaque to this module), what it asked, where it runs."""

    key: Hashable
    demand: Demand
    choice: Choice


@dataclass(frozen=True)
class DefragMove:
    key: Hashable
    demand: Demand
    old: Choice
    new: Choice
    gain: float  # drop of unusable GPU-milli over the two nodes


def movable(held: Held) -> bool:
    """Single-GPU shares with no placement rules beyond a GPU model: they fit in many
    places, and moving one restarts one small task. Whole GPUs, CPU-only tasks, MIG and
    topology requests stay (measured: moving whole GPUs and CPU-only tasks too spends the
    move budget on smaller gains)."""
    d = held.demand
    return (bool(d.gpu_milli) and len(held.choice.gpus) == 1 and d.mig_profile is None
            and d.topology == "any" and not d.node_labels and not d.min_memory_mib)


def _state(node: NodeState) -> tuple[int | None, tuple[int, ...]]:
    return node.cpu_left, tuple(node.free)


def cheapest_target(alloc: Allocator, d: Demand, cost: NodeCost
                    ) -> tuple[float, Choice] | None:
    """Where ``d`` would raise ``cost`` least now: (rise, choice), or None if nowhere fits.

    Ties go to nodes already in use, then to the lower rank (as placement breaks them),
    then to the fullest GPU.
    """
    best: tuple[tuple[float, int, int, int], NodeState, tuple[int, ...], float] | None = None
    for node in alloc.representatives(d):
        if not node.simple or not alloc.fits(node, d):
            continue
        cpu, free = _state(node)
        before = cost(node.product, cpu, free)
        cpu_after = None if cpu is None else cpu - d.cpu_milli
        options: list[tuple[int, ...]] = []
        if d.gpu_milli:
            options = [(i,) for i in alloc.eligible_gpus(node, d) if free[i] >= d.gpu_milli]
        else:
            got = alloc.gpu_set(node, d)
            options = [got] if got is not None else []
        for gpus in options:
            after = list(free)
            for g in gpus:
                after[g] -= d.gpu_milli or node.spec.gpus[g].capacity_milli
            rise = cost(node.product, cpu_after, tuple(after)) - before
            used = 1 if sum(free) < sum(g.capacity_milli for g in node.spec.gpus) else 0
            key = (round(rise, 6), -used, node.rank, sum(free[g] for g in gpus))
            if best is None or key < best[0]:
                best = (key, node, gpus, rise)
    if best is None:
        return None
    _key, node, gpus, rise = best
    milli = tuple(d.gpu_milli or node.spec.gpus[g].capacity_milli for g in gpus)
    choice = Choice(node.spec.name, gpus, milli, 0.0, "defragmenting move",
                    d.cpu_milli, d.memory_mib)
    return rise, choice


def best_move(alloc: Allocator, running: Iterable[Held], cost: NodeCost,
              min_gain: float = 0.0) -> DefragMove | None:
    """The single move of a running task that lowers ``cost`` most (by more than
    ``min_gain``), or None. Moves stay between nodes (moves between GPUs of one node
    were measured to add nothing)."""
    leave: dict[tuple[object, ...], float] = {}
    target: dict[Demand, tuple[float, Choice] | None] = {}
    best: DefragMove | None = None
    best_gain = min_gain
    for held in running:
        if not movable(held):
            continue
        d, old = held.demand, held.choice
        node = alloc.nodes.get(old.node)
        if node is None or not node.simple:
            continue
        g = old.gpus[0]
        k = (node.gkey, node.free[g], d)
        drop = leave.get(k)
        if drop is None:
            cpu, free = _state(node)
            after = list(free)
            after[g] += old.milli[0]
            cpu_after = None if cpu is None else cpu + d.cpu_milli
            drop = leave[k] = (cost(node.product, cpu, free)
                               - cost(node.product, cpu_after, tuple(after)))
        if d not in target:
            target[d] = cheapest_target(alloc, d, cost)
        got = target[d]
        if got is None or got[1].node == old.node:
            continue
        gain = drop - got[0]
        if gain > best_gain + 1e-6:
            best_gain = gain
            best = DefragMove(held.key, d, old, got[1], gain)
    return best
