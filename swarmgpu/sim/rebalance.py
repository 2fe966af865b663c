"""Moves for the replay, counted against a budget (moves per 100 arrived pods).

Two kinds. ``Defragmenter`` (what ``simulate --rebalance-moves`` runs) moves running
tasks between arrivals, each time the one move that lowers the cluster's unusable GPU
capacity most (``swarmgpu.allocator.defrag``). The rescuers below act only when a task
finds no node: they move running tasks off one node so that the failed task fits there.

A rebalancer is any callable ``(allocator, running, demand) -> Rescue | None``: it is
called when ``demand`` found no node, may commit moves on the allocator (each one a
release on the old node and a commit on the new one) and returns them with the choice for
``demand``; None when it cannot help (the allocator is then unchanged).

The search is the daemon's (``swarmgpu.allocator.rescue.plans``: per node, the fewest
movable tasks whose GPU share, CPU and memory, given back, let the failed task fit). Only
the cheapest few plans are executed for real (release, place the failed task, re-place
the moved ones by the policy; all or nothing). The swarmgpu replay carries plans out as
the daemon does instead (``sim.swarm_rescue``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.defrag import FragmentationMoves, Held, NodeCost
from swarmgpu.allocator.fragmentation import TypicalTask
from swarmgpu.allocator.rescue import MAX_MOVES, Plan, plans
from swarmgpu.allocator.values import Choice, Demand
from swarmgpu.sim.limits import DaemonLimits


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
# (allocator, running tasks, failed demand, moves allowed now) -> rescue or None
Rebalancer = Callable[[Allocator, Running, Demand, int], Rescue | None]


def apply_moves(running: Running, moves: Iterable[Move],
                where: dict[int, str] | None = None) -> int:
    """Record moves (already made on the allocator) in ``running`` and, when given,
    ``where`` (task -> node); returns how many there were."""
    n = 0
    for mv in moves:
        demand, _old = running[mv.old.node].pop(mv.task)
        running.setdefault(mv.new.node, {})[mv.task] = (demand, mv.new)
        if where is not None:
            where[mv.task] = mv.new.node
        n += 1
    return n


def _undo(alloc: Allocator, done: list[Choice], here: Choice | None,
          originals: list[Choice]) -> None:
    for c in done:
        alloc.release(c)
    if here is not None:
        alloc.release(here)
    for c in originals:
        alloc.commit(c)


def execute(alloc: Allocator, running: Running, d: Demand, plan: Plan) -> Rescue | None:
    """Release the plan's tasks, place ``d`` on its node, re-place the tasks by the policy.

    All or nothing: when any step fails the allocator is put back as it was.
    """
    tasks = [(cast(int, tid), *running[plan.node][cast(int, tid)]) for tid in plan.tasks]
    originals = [tc for _tid, _td, tc in tasks]
    for tc in originals:
        alloc.release(tc)
    here = alloc.place_on(plan.node, d)
    if not isinstance(here, Choice):
        _undo(alloc, [], None, originals)
        return None
    alloc.commit(here)
    done: list[Choice] = []
    moves: list[Move] = []
    for tid, td, tc in sorted(tasks, key=lambda t: -t[1].total_gpu_milli):
        there = alloc.place(td, explain=False)
        if not isinstance(there, Choice):
            _undo(alloc, done, here, originals)
            return None
        alloc.commit(there)
        done.append(there)
        moves.append(Move(tid, tc, there))
    return Rescue(tuple(moves), here)


def move_rescue(alloc: Allocator, running: Running, d: Demand, budget: int,
                max_tries: int = 4) -> Rescue | None:
    """Move up to ``min(budget, MAX_MOVES)`` running tasks so that ``d`` fits; commit all.

    The cheapest plans are tried in turn; the first that executes wins.
    """
    limit = min(budget, MAX_MOVES)
    if limit < 1:
        return None
    for plan in plans(alloc, running, d, limit, away=False)[:max_tries]:
        got = execute(alloc, running, d, plan)
        if got is not None:
            return got
    return None


class Hopeless:
    """Demands that found no rescue plan: not searched again until a rescue succeeds or
    ``forget_after`` more failures pass (a full cluster only fills further, so the same
    search would mostly fail again; this keeps a replay fast). Both replays' rescuers
    keep one."""

    def __init__(self, forget_after: int = 50) -> None:
        self.forget_after = forget_after
        self._since: dict[Demand, int] = {}
        self._calls = 0

    def skip(self, d: Demand) -> bool:
        """Count a failure of ``d``; True when its search is to be skipped."""
        self._calls += 1
        since = self._since.get(d)
        return since is not None and self._calls - since < self.forget_after

    def outcome(self, d: Demand, rescued: bool) -> None:
        if rescued:
            self._since.clear()
        else:
            self._since[d] = self._calls


class MoveRescuer:
    """``move_rescue`` with memory (``Hopeless``). ``limits``: each call a daemon cycle
    under its budgets (``sim.limits``): a rescue they refuse is not made."""

    def __init__(self, forget_after: int = 50, limits: DaemonLimits | None = None) -> None:
        self.hopeless = Hopeless(forget_after)
        self.limits = limits

    def __call__(self, alloc: Allocator, running: Running, d: Demand,
                 budget: int) -> Rescue | None:
        if self.limits is not None:
            self.limits.call()
            budget = self.limits.rescue_room(budget)
            if budget < 1:
                return None
        if self.hopeless.skip(d):
            return None
        got = move_rescue(alloc, running, d, budget)
        self.hopeless.outcome(d, got is not None)
        if got is not None and self.limits is not None and not self.limits.admit_all(
                [(mv.old.node, mv.new.node) for mv in got.moves]):
            # a node a move in flight holds: the rescue is not made
            _undo(alloc, [mv.new for mv in got.moves], got.placed,
                  [mv.old for mv in got.moves])
            return None
        return got


def one_move_rescue(alloc: Allocator, running: Running, d: Demand,
                    budget: int = 1) -> Rescue | None:
    """``move_rescue`` limited to a single moved task."""
    return move_rescue(alloc, running, d, min(budget, 1))


class Defragmenter:
    """Between arrivals: spend the moves allowed now but ``reserve`` on the daemon's own
    defragmenting policy (``swarmgpu.allocator.defrag.FragmentationMoves``, what the
    ``fragmentation`` rebalance policy runs): one best move at a time, while a move still
    lowers FGD's fragmentation of the cluster (free GPU capacity the workload's typical
    tasks cannot use *now*). This class only adapts the replay's running-task map.

    The reserve is left to a rescuer (``MoveRescuer``) for pods that find no node: a
    rescue places a pod at once, a defragmenting move only makes later placements
    likelier. ``limits``: each call a daemon cycle under its budgets (``sim.limits``).
    """

    def __init__(self, workload: tuple[TypicalTask, ...], reserve: int = 0,
                 limits: DaemonLimits | None = None) -> None:
        self.policy = FragmentationMoves(workload)
        self.cost: NodeCost = self.policy.cost
        self.reserve = reserve
        self.limits = limits

    def __call__(self, alloc: Allocator, running: Running, budget: int) -> list[Move]:
        held = [Held(tid, td, tc) for tasks in running.values()
                for tid, (td, tc) in tasks.items()]
        lim = self.limits
        if lim is not None:
            lim.call()
        # FGD's replay lets a task move again within a call (as before stop 59)
        got = self.policy.plan(
            alloc, held,
            budget - self.reserve if lim is None else lim.cycle_room(budget - self.reserve),
            again=True, check=lim.check() if lim is not None else None)
        # The Held keys above are task ids.
        return [Move(cast(int, mv.key), mv.old, mv.new) for mv in got]
