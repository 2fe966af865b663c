"""Defragmenting moves for the replay: when a task finds no node, move one running task
off a node so that the failed task fits there. The replay counts every moved task against
a budget (moves per 100 arrived pods).

A rebalancer is any callable ``(allocator, running, demand) -> Rescue | None``: it is
called when ``demand`` found no node, may commit moves on the allocator (each one a
release on the old node and a commit on the new one) and returns them with the choice for
``demand``; None when it cannot help (the allocator is then unchanged).

The search is arithmetic over the running tasks, not trial placements: per node, the
fewest movable tasks (ones the allocator can place elsewhere now) whose GPU share, CPU and
memory, given back, let the failed task fit. Only the cheapest few plans are executed for
real (release, place the failed task, re-place the moved ones by the policy; all or
nothing), so a failure costs milliseconds instead of hundreds of trial placements.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from swarmgpu.allocator.core import Allocator, Choice, Demand, NodeState
from swarmgpu.allocator.fragmentation import MILLI, product_matches


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
MAX_MOVES = 3  # per rescue: beyond that a rescue costs more restarts than it is worth


@dataclass(frozen=True)
class Plan:
    cost: int  # tasks to move
    moved_milli: int
    rank: int
    node: str
    tasks: tuple[int, ...]


@dataclass
class _Task:
    tid: int
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


def _node_plan(node: NodeState, tasks: dict[int, tuple[Demand, Choice]], d: Demand,
               movable: Callable[[Demand], bool], max_moves: int) -> Plan | None:
    """The cheapest set of movable tasks on ``node`` whose departure lets ``d`` fit."""
    per_gpu: list[list[_Task]] = [[] for _ in node.free]
    pinned = [False] * len(node.free)  # holds a task that cannot move (multi-GPU, stuck)
    loose: list[_Task] = []  # every movable task of the node
    for tid, (td, tc) in tasks.items():
        ok = len(tc.gpus) <= 1 and movable(td)
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
        for i, f in enumerate(node.free):
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


def plans(alloc: Allocator, running: Running, d: Demand, max_moves: int) -> list[Plan]:
    """Every node's cheapest rescue for ``d``, cheapest first (fewest moves, least GPU moved).

    Only plain nodes (one GPU model, no link or NUMA data) and plain demands are searched;
    a task counts as movable when the allocator can place it somewhere now.
    """
    if d.mig_profile or d.topology != "any" or d.node_labels or d.min_memory_mib:
        return []
    can: dict[Demand, bool] = {}

    def movable(td: Demand) -> bool:
        ok = can.get(td)
        if ok is None:
            ok = can[td] = isinstance(alloc.place(td, explain=False), Choice)
        return ok

    out: list[Plan] = []
    for name, tasks in running.items():
        node = alloc.nodes[name]
        if not tasks or not node.simple:
            continue
        spec = node.spec
        if spec.cpu_milli is not None and spec.cpu_milli < d.cpu_milli:
            continue
        if spec.memory_mib is not None and spec.memory_mib < d.memory_mib:
            continue
        if d.gpus_wanted and (len(spec.gpus) < d.gpus_wanted
                              or not product_matches(node.product, d.products)):
            continue
        p = _node_plan(node, tasks, d, movable, max_moves)
        if p is not None:
            out.append(p)
    out.sort(key=lambda p: (p.cost, p.moved_milli, p.rank))
    return out


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
    tasks = [(tid, *running[plan.node][tid]) for tid in plan.tasks]
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
    for plan in plans(alloc, running, d, limit)[:max_tries]:
        got = execute(alloc, running, d, plan)
        if got is not None:
            return got
    return None


class MoveRescuer:
    """``move_rescue`` with memory: a demand that found no plan is not searched again until
    a rescue succeeds or ``forget_after`` more failures pass (a full cluster only fills
    further, so the same search would mostly fail again; this keeps a replay fast).
    """

    def __init__(self, forget_after: int = 50, consolidate: bool = True) -> None:
        self.forget_after = forget_after
        self.consolidate = consolidate
        self._hopeless: dict[Demand, int] = {}
        self._calls = 0

    def __call__(self, alloc: Allocator, running: Running, d: Demand,
                 budget: int) -> Rescue | None:
        self._calls += 1
        since = self._hopeless.get(d)
        if since is not None and self._calls - since < self.forget_after:
            return None
        got = move_rescue(alloc, running, d, budget)
        if got is None and self.consolidate:
            got = consolidate(alloc, running, d, budget)
        if got is None:
            self._hopeless[d] = self._calls
        else:
            self._hopeless.clear()
        return got


def one_move_rescue(alloc: Allocator, running: Running, d: Demand,
                    budget: int = 1) -> Rescue | None:
    """``move_rescue`` limited to a single moved task."""
    return move_rescue(alloc, running, d, min(budget, 1))


# --- consolidation: empty one GPU by moving its shares into other GPUs' leftovers -------
CONSOLIDATE_SOURCES = 40  # source GPUs planned per failure (least share to move first)


@dataclass
class _Scratch:
    """Free capacity as a plan would leave it, over the allocator's live state."""

    alloc: Allocator
    free: dict[tuple[str, int], int]
    cpu: dict[str, int]
    mem: dict[str, int]

    def gfree(self, node: str, g: int) -> int:
        got = self.free.get((node, g))
        return self.alloc.nodes[node].free[g] if got is None else got

    def fits_host(self, node: str, cpu: int, mem: int) -> bool:
        n = self.alloc.nodes[node]
        c = self.cpu.get(node, n.cpu_left)
        m = self.mem.get(node, n.mem_left)
        return (c is None or c >= cpu) and (m is None or m >= mem)

    def shift(self, node: str, g: int, milli: int, cpu: int, mem: int) -> None:
        """Take (positive) or give back (negative) one share and its CPU/memory."""
        n = self.alloc.nodes[node]
        self.free[(node, g)] = self.gfree(node, g) - milli
        if n.cpu_left is not None:
            self.cpu[node] = self.cpu.get(node, n.cpu_left) - cpu
        if n.mem_left is not None:
            self.mem[node] = self.mem.get(node, n.mem_left) - mem


@dataclass(frozen=True)
class _Share:
    tid: int
    node: str
    gpu: int
    demand: Demand
    choice: Choice


def _share_index(alloc: Allocator, running: Running
                 ) -> tuple[dict[tuple[str, int], list[_Share]], set[tuple[str, int]]]:
    """Movable single-GPU shares per GPU, and the GPUs pinned by multi-GPU tasks."""
    per_gpu: dict[tuple[str, int], list[_Share]] = {}
    pinned: set[tuple[str, int]] = set()
    for name, tasks in running.items():
        if not alloc.nodes[name].simple:
            continue
        for tid, (td, tc) in tasks.items():
            if len(tc.gpus) == 1 and td.gpu_milli and not td.mig_profile \
                    and not td.node_labels and not td.min_memory_mib:
                per_gpu.setdefault((name, tc.gpus[0]), []).append(
                    _Share(tid, name, tc.gpus[0], td, tc))
            else:
                pinned.update((name, g) for g in tc.gpus)
    return per_gpu, pinned


def _target(s: _Scratch, holes: list[tuple[int, str, int]], sh: _Share,
            avoid: set[tuple[str, int]]) -> tuple[str, int] | None:
    """Best fit: the GPU with the least room that still takes ``sh`` (CPU/memory too)."""
    d = sh.demand
    best: tuple[int, str, int] | None = None
    for _f0, name, g in holes:
        if (name, g) in avoid:
            continue
        f = s.gfree(name, g)
        if f < d.gpu_milli or (best is not None and f >= best[0]):
            continue
        node = s.alloc.nodes[name]
        if not product_matches(node.product, d.products):
            continue
        extra_cpu = d.cpu_milli if name != sh.node else 0  # same node: CPU stays
        extra_mem = d.memory_mib if name != sh.node else 0
        if not s.fits_host(name, extra_cpu, extra_mem):
            continue
        best = (f, name, g)
        if f == d.gpu_milli:
            break
    return None if best is None else (best[1], best[2])


def _do(s: _Scratch, sh: _Share, to: tuple[str, int], out: list[Move]) -> _Share:
    d = sh.demand
    s.shift(sh.node, sh.gpu, -d.gpu_milli, -d.cpu_milli, -d.memory_mib)
    s.shift(to[0], to[1], d.gpu_milli, d.cpu_milli, d.memory_mib)
    new = Choice(to[0], (to[1],), (d.gpu_milli,), 0.0, "consolidation move",
                 d.cpu_milli, d.memory_mib)
    out.append(Move(sh.tid, sh.choice, new))
    return _Share(sh.tid, to[0], to[1], d, new)


def _evict(s: _Scratch, holes: list[tuple[int, str, int]],
           per_gpu: dict[tuple[str, int], list[_Share]], sh: _Share,
           avoid: set[tuple[str, int]], out: list[Move]) -> bool:
    """Move ``sh`` into a leftover; else make room once (move a smaller share out first)."""
    to = _target(s, holes, sh, avoid)
    if to is not None:
        moved = _do(s, sh, to, out)
        per_gpu.setdefault(to, []).append(moved)
        return True
    m = sh.demand.gpu_milli
    for _f0, name, g in holes:
        key = (name, g)
        if key in avoid:
            continue
        f = s.gfree(name, g)
        if f >= m or not product_matches(s.alloc.nodes[name].product, sh.demand.products):
            continue
        for small in sorted(per_gpu.get(key, ()), key=lambda x: x.demand.gpu_milli):
            sm = small.demand.gpu_milli
            if sm >= m or f + sm < m:
                continue
            to2 = _target(s, holes, small, avoid | {key})
            if to2 is None:
                continue
            mark = len(out)
            snap = (dict(s.free), dict(s.cpu), dict(s.mem))
            moved2 = _do(s, small, to2, out)
            moved = _do(s, sh, key, out) if _target(s, [(0, name, g)], sh, avoid) else None
            if moved is None:
                s.free, s.cpu, s.mem = snap
                del out[mark:]
                continue
            per_gpu[key].remove(small)
            per_gpu.setdefault(to2, []).append(moved2)
            per_gpu[key].append(moved)
            return True
    return False


def consolidation_plan(alloc: Allocator, running: Running, d: Demand,
                       budget: int) -> tuple[str, list[Move]] | None:
    """Moves (at most ``budget``) that leave one GPU with room for the 1-GPU demand ``d``.

    Source GPUs are tried least share to move first; each of their shares goes, largest
    first, to the best-fitting leftover on another GPU (one level of making room there).
    Returns the node that then hosts ``d`` and the moves, or None.
    """
    if (d.gpus_wanted != 1 or d.mig_profile or d.topology != "any" or d.node_labels
            or d.min_memory_mib or budget < 1):
        return None
    need = d.milli_per_gpu
    per_gpu, pinned = _share_index(alloc, running)
    holes = sorted((n.free[g], name, g) for name, n in alloc.nodes.items() if n.simple
                   for g in range(len(n.free)) if 0 < n.free[g] < need)
    sources: list[tuple[int, int, str, int]] = []
    for (name, g), shares in per_gpu.items():
        if (name, g) in pinned:
            continue
        node = alloc.nodes[name]
        if not product_matches(node.product, d.products):
            continue
        if node.spec.cpu_milli is not None and node.spec.cpu_milli < d.cpu_milli:
            continue
        deficit = need - node.free[g]
        if deficit <= 0:
            continue
        ordered = sorted(shares, key=lambda x: -x.demand.gpu_milli)
        got = _cover(0, deficit, [_Task(x.tid, x.demand.gpu_milli, 0, 0) for x in ordered],
                     "milli")
        if got is None or len(got) > budget:
            continue
        sources.append((len(got), sum(t.milli for t in got), name, g))
    sources.sort(key=lambda x: (x[1], x[0]))
    for _n, _m, name, g in sources[:CONSOLIDATE_SOURCES]:
        s = _Scratch(alloc, {}, {}, {})
        local = {k: list(v) for k, v in per_gpu.items()}
        out: list[Move] = []
        avoid = {(name, g)}
        for sh in sorted(local[(name, g)], key=lambda x: -x.demand.gpu_milli):
            if s.gfree(name, g) >= need:
                break
            if not _evict(s, holes, local, sh, avoid, out) or len(out) > budget:
                break
        if s.gfree(name, g) >= need and len(out) <= budget \
                and s.fits_host(name, d.cpu_milli, d.memory_mib):
            return name, out
    return None


def consolidate(alloc: Allocator, running: Running, d: Demand, budget: int) -> Rescue | None:
    """Execute a ``consolidation_plan`` and place ``d``; all or nothing."""
    got = consolidation_plan(alloc, running, d, budget)
    if got is None:
        return None
    name, moves = got
    done: list[Move] = []
    for mv in moves:
        alloc.release(mv.old)
        alloc.commit(mv.new)  # the plan tracked every capacity it used, so this fits
        done.append(mv)
    here = alloc.place_on(name, d)
    if not isinstance(here, Choice):
        for mv in reversed(done):
            alloc.release(mv.new)
            alloc.commit(mv.old)
        return None
    alloc.commit(here)
    return Rescue(tuple(moves), here)
