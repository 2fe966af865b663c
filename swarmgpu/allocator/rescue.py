"""Making room for a pending task: the fewest running tasks to move off one node so that a
task that finds no node fits there. The daemon's ``defrag`` rebalance policy takes its
candidate plans from :func:`plans`; ``simulate --rebalance-moves`` carries them out
with :func:`make_room`.

The search is arithmetic over the running tasks, not trial placements: per node, the
fewest movable tasks (ones the allocator can place elsewhere now) whose GPU share, CPU and
memory, given back, let the pending task fit; the cheapest plans first (fewest moves,
least GPU moved, node rank). Only the cheapest few are tried for real, so a pending task
costs milliseconds instead of hundreds of trial placements.

Pure: the allocator is read, and changed only by :func:`make_room` (all or nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.fragmentation import MILLI
from swarmgpu.allocator.values import Choice, Demand, NodeState

# node -> task key -> (what it asked, where it runs); keys are the caller's (replay ids,
# service names), so Any: a Mapping is invariant in its key type
Running = Mapping[str, Mapping[Any, tuple[Demand, Choice]]]
MAX_MOVES = 3  # per rescue: beyond that a rescue costs more restarts than it is worth
MAX_TRIES = 4  # plans tried for real per pending task, cheapest first


@dataclass(frozen=True)
class Plan:
    cost: int  # tasks to move
    moved_milli: int
    rank: int
    node: str
    tasks: tuple[Hashable, ...]


@dataclass
class _Task:
    tid: Hashable
    milli: int
    cpu: int
    mem: int


def _cover(have: int, need: int, pool: list[_Task], key: str) -> list[_Task] | None:
    """Fewest tasks from ``pool`` (largest ``key`` first) lifting ``have`` to ``need``."""
    got: list[_Task] = []
    for t in sorted(pool, key=lambda t: -getattr(t, key)):
        if have >= need:
            break
        if getattr(t, key) <= 0:
            break
        got.append(t)
        have += getattr(t, key)
    return got if have >= need else None


def _node_plan(node: NodeState, tasks: Mapping[Hashable, tuple[Demand, Choice]], d: Demand,
               movable: Callable[[Hashable, Demand], bool], max_moves: int,
               eligible: list[int]) -> Plan | None:
    """The cheapest set of movable tasks on ``node`` whose departure lets ``d`` fit on
    its ``eligible`` GPUs."""
    per_gpu: list[list[_Task]] = [[] for _ in node.free]
    pinned = [False] * len(node.free)  # holds a task that cannot move (multi-GPU, stuck)
    loose: list[_Task] = []  # every movable task of the node
    for tid, (td, tc) in tasks.items():
        ok = len(tc.gpus) <= 1 and movable(tid, td)
        t = _Task(tid, sum(tc.milli), tc.cpu_milli, tc.memory_mib)
        for g in tc.gpus:
            if ok:
                per_gpu[g].append(t)
            else:
                pinned[g] = True
        if ok:
            loose.append(t)
    chosen: list[_Task] = []
    if d.gpus_wanted:
        need = d.milli_per_gpu
        options: list[tuple[int, int, list[_Task]]] = []
        for i in eligible:
            f = node.free[i]
            if f >= need:
                options.append((0, 0, []))
            elif d.gpu_milli:
                got = _cover(f, need, per_gpu[i], "milli")
                if got is not None:
                    options.append((len(got), sum(t.milli for t in got), got))
            elif not pinned[i]:  # a whole GPU: everything on it must go
                options.append((len(per_gpu[i]), MILLI - f, per_gpu[i]))
        if len(options) < d.gpus_wanted:
            return None
        options.sort(key=lambda o: (o[0], o[1]))
        for _c, _m, got in options[: d.gpus_wanted]:
            chosen.extend(got)
    if len(chosen) > max_moves:
        return None
    # CPU and memory: the chosen tasks give theirs back; more tasks may have to go.
    for res, have in (("cpu", node.cpu_left), ("mem", node.mem_left)):
        if have is None:
            continue
        want = d.cpu_milli if res == "cpu" else d.memory_mib
        have += sum(getattr(t, res) for t in chosen)
        if have < want:
            ids = {t.tid for t in chosen}
            got = _cover(have, want, [t for t in loose if t.tid not in ids], res)
            if got is None:
                return None
            chosen.extend(got)
    if not chosen or len(chosen) > max_moves:
        return None  # no move needed would mean the scheduler missed it; not ours to fix
    return Plan(len(chosen), sum(t.milli for t in chosen), node.rank, node.spec.name,
                tuple(t.tid for t in chosen))


def plans(alloc: Allocator, running: Running, d: Demand, max_moves: int, *,
          away: bool = True, elsewhere: Allocator | None = None,
          barred: Callable[[Hashable, str], AbstractSet[str]] | None = None) -> list[Plan]:
    """Every node's cheapest plan for ``d``, cheapest first (fewest moves, least GPU
    moved, node rank). Demands without MIG, topology or node-label rules are searched,
    on the GPUs that pass their model and memory filters (``Allocator.eligible_gpus``);
    a task counts as movable when the allocator can place it on another node now
    (``away``; False: anywhere, its own node included, as the baselines' replay once
    counted it). ``elsewhere``: the allocator a task's other place is asked of, where the
    caller holds GPUs from moves that the pending task may have (None: ``alloc``);
    ``barred``: (task key, its node) -> the other nodes it may not go to, by the caller's
    rules (a service's constraints, its other replicas' nodes; None: none).
    ``running`` holds only the nodes and tasks the caller allows. A plan is arithmetic
    over shares, CPU and memory: the caller carries it out to see that it holds.
    """
    if d.mig_profile or d.topology != "any" or d.node_labels:
        return []
    # where placement puts a demand now, the nodes it may not go to left out
    first: dict[tuple[Demand, AbstractSet[str]], str | None] = {}
    other: dict[tuple[Demand, str, AbstractSet[str]], bool] = {}
    there = alloc if elsewhere is None else elsewhere

    def movable_from(name: str) -> Callable[[Hashable, Demand], bool]:
        def movable(tid: Hashable, td: Demand) -> bool:
            no = frozenset(barred(tid, name)) if barred is not None else frozenset()
            if (td, no) not in first:
                got = there.place(td, explain=False, exclude=no)
                first[(td, no)] = got.node if isinstance(got, Choice) else None
            where = first[(td, no)]
            if where is None or not away or where != name:
                return where is not None
            key = (td, name, no)
            ok = other.get(key)
            if ok is None:
                ok = other[key] = isinstance(
                    there.place(td, explain=False, exclude=no | {name}), Choice)
            return ok
        return movable

    out: list[Plan] = []
    for name, tasks in running.items():
        node = alloc.nodes.get(name)
        if not tasks or node is None:
            continue
        spec = node.spec
        if spec.cpu_milli is not None and spec.cpu_milli < d.cpu_milli:
            continue
        if spec.memory_mib is not None and spec.memory_mib < d.memory_mib:
            continue
        eligible = alloc.eligible_gpus(node, d) if d.gpus_wanted else []
        if len(eligible) < d.gpus_wanted:
            continue
        p = _node_plan(node, tasks, d, movable_from(name), max_moves, eligible)
        if p is not None:
            out.append(p)
    out.sort(key=lambda p: (p.cost, p.moved_milli, p.rank))
    return out


@dataclass(frozen=True)
class RoomMove:
    key: Hashable
    old: Choice
    new: Choice


def carry_out(alloc: Allocator, running: Running, d: Demand, plan: Plan
              ) -> tuple[list[RoomMove], Choice] | None:
    """The plan as the daemon's ``defrag`` policy proposes it: each task (largest first)
    to where placement puts it, away from its node; then ``d`` on the node they left.
    Returns the moves (committed) and ``d``'s choice (not committed), or None with the
    allocator as it was."""
    tasks = [(tid, *running[plan.node][tid]) for tid in plan.tasks]
    for _tid, _td, tc in tasks:
        alloc.release(tc)
    done: list[RoomMove] = []

    def undo() -> None:
        for mv in done:
            alloc.release(mv.new)
        for _tid, _td, tc in tasks:
            alloc.commit(tc)

    for tid, td, tc in sorted(tasks, key=lambda t: -t[1].total_gpu_milli):
        there = alloc.place(td, explain=False, exclude={plan.node})
        if not isinstance(there, Choice):
            undo()
            return None
        alloc.commit(there)
        done.append(RoomMove(tid, tc, there))
    here = alloc.place_on(plan.node, d)
    if not isinstance(here, Choice):
        undo()
        return None
    return done, here


def make_room(alloc: Allocator, running: Running, d: Demand, budget: int,
              max_moves: int = MAX_MOVES, max_tries: int = MAX_TRIES,
              ) -> tuple[list[RoomMove], Choice] | None:
    """Move up to ``min(budget, max_moves)`` running tasks so that ``d`` fits: the
    cheapest plans are carried out in turn, the first that works is kept (its moves
    committed on ``alloc``; ``d``'s choice returned, not committed)."""
    limit = min(budget, max_moves)
    if limit < 1:
        return None
    for plan in plans(alloc, running, d, limit)[:max_tries]:
        got = carry_out(alloc, running, d, plan)
        if got is not None:
            return got
    return None
