"""Defragmenting moves: the one running task whose move lowers the cluster's unusable GPU
capacity most. One policy object (:class:`FragmentationMoves`) serves the daemon's
``fragmentation`` rebalance policy and ``simulate --rebalance-moves``.

Placement is online: each share goes where the policy's cost grows least *now*, and later
arrivals make some of those choices poor (two GPUs each half used by one share, a small
share sitting in the hole a large one needs). A move re-places one running task. Its gain
is the drop of ``cost`` summed over the two nodes it touches, where ``cost`` is FGD's
fragmentation of a node against the workload's typical tasks (``fragmentation.FragCache``):
free GPU-milli those tasks cannot use now.

The search is exact for single moves and cheap: a task's gain on leaving depends only on
its node's state, its GPU's free share and its demand (memoised by those), and its best
destination depends only on its demand (one scan of the distinct node states). Pure: the
allocator is read, never changed, except by :meth:`FragmentationMoves.plan`, which makes
the moves it returns on the allocator it is given (a scratch copy in the daemon).

The daemon adds :class:`Targets`: which nodes and GPUs may receive a task (ready, metrics
known, the service's own constraints); the replay has no such limits.

Measured on the openb default trace (``swarmgpu simulate --rebalance-moves 2``): greedy
single moves from the start of the replay, about one per 50 arrivals, do better than
rescuing failed pods alone or emptying lightly used GPUs (95.95 vs 95.81 / 95.92 under the
previous placement rule); with a few moves kept for rescues, 96.03. See docs/simulate.md.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.fragmentation import FragCache, TypicalTask, restricted_pressure
from swarmgpu.allocator.values import Choice, Demand, NodeState

# (GPU product, CPU milli left or None, free milli per GPU) -> unusable GPU-milli
NodeCost = Callable[[str, int | None, tuple[int, ...]], float]
_NO_CPU_LIMIT = 1 << 40  # a node whose CPU is not known: CPU never stops a typical task
# A target the caller's last check refused for one task: (task key, node, GPUs), or
# (task key, node, ()) for every GPU of the node (``FragmentationMoves.plan``'s ``check``)
Ban = tuple[Hashable, str, tuple[int, ...]]
MAX_REFUSED = 8  # refused moves searched again per plan, at most (each is one more search)


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


@dataclass(frozen=True)
class Targets:
    """Where a moved task may go, beyond fitting (the daemon's limits; the replay has none).

    ``node_ok`` and ``gpu_ok`` hold for every task of a demand (schedulable, metrics known
    and cool); ``task_ok`` is asked per task for the best few of those (the service's own
    constraints, the nodes its other replicas hold). A task's own node is always compared
    (a move is made only when the best place is elsewhere), never chosen.
    """

    node_ok: Callable[[NodeState], bool]
    gpu_ok: Callable[[NodeState, int], bool]
    task_ok: Callable[[Held, NodeState], bool]


def movable(held: Held) -> bool:
    """Single-GPU shares with no placement rules beyond a GPU model: they fit in many
    places, and moving one restarts one small task. Whole GPUs, CPU-only tasks, MIG and
    topology requests stay (measured: moving whole GPUs and CPU-only tasks too spends the
    move budget on smaller gains)."""
    d = held.demand
    return (bool(d.gpu_milli) and len(held.choice.gpus) == 1 and d.mig_profile is None
            and d.topology == "any" and not d.node_labels and not d.min_memory_mib)


def searchable(node: NodeState) -> bool:
    """Nodes the cost can judge: one GPU model. (Replay nodes are all simple; a real node
    with link or NUMA data, or a MIG GPU, is judged on its whole GPUs.)"""
    return node.simple or node.product != ""


def _state(node: NodeState) -> tuple[int | None, tuple[int, ...]]:
    if node.simple:
        return node.cpu_left, tuple(node.free)
    # A MIG GPU counts as full: its slices are handed out by profile, not by share.
    return node.cpu_left, tuple(0 if g.mig_enabled else f
                                for f, g in zip(node.free, node.spec.gpus, strict=True))


def node_cost(node: NodeState, cost: NodeCost) -> float:
    cpu, free = _state(node)
    return cost(node.product, cpu, free)


def cluster_cost(alloc: Allocator, cost: NodeCost) -> float:
    """The cluster's unusable GPU-milli: ``cost`` summed over the nodes it can judge."""
    return sum(node_cost(n, cost) for n in alloc.nodes.values() if searchable(n))


_Cand = tuple[tuple[float, int, int, int], NodeState, tuple[int, ...], float]


def _candidates(alloc: Allocator, d: Demand, cost: NodeCost, nodes: Iterable[NodeState],
                gpu_ok: Callable[[NodeState, int], bool] | None) -> Iterable[_Cand]:
    for node in nodes:
        if not searchable(node) or not alloc.fits(node, d):
            continue
        cpu, free = _state(node)
        before = cost(node.product, cpu, free)
        cpu_after = None if cpu is None else cpu - d.cpu_milli
        options: list[tuple[int, ...]] = []
        if d.gpu_milli:
            options = [(i,) for i in alloc.eligible_gpus(node, d) if free[i] >= d.gpu_milli
                       and (gpu_ok is None or gpu_ok(node, i))]
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
            yield key, node, gpus, rise


def _choice(d: Demand, c: _Cand) -> tuple[float, Choice]:
    _key, node, gpus, rise = c
    milli = tuple(d.gpu_milli or node.spec.gpus[g].capacity_milli for g in gpus)
    return rise, Choice(node.spec.name, gpus, milli, 0.0, "defragmenting move",
                        d.cpu_milli, d.memory_mib)


def cheapest_target(alloc: Allocator, d: Demand, cost: NodeCost
                    ) -> tuple[float, Choice] | None:
    """Where ``d`` would raise ``cost`` least now: (rise, choice), or None if nowhere fits.

    Ties go to nodes already in use, then to the lower rank (as placement breaks them),
    then to the fullest GPU.
    """
    best = min(_candidates(alloc, d, cost, alloc.representatives(d), None),
               key=lambda c: c[0], default=None)
    return None if best is None else _choice(d, best)


def _ranked_targets(alloc: Allocator, d: Demand, cost: NodeCost, targets: Targets
                    ) -> list[_Cand]:
    """Every allowed place for ``d`` (each GPU of each node), cheapest first; equal
    ones in node order, then GPU order (so each node's cheapest GPU comes first)."""
    return sorted(_candidates(alloc, d, cost, alloc.nodes.values(), targets.gpu_ok),
                  key=lambda c: c[0])


def _target_for(alloc: Allocator, held: Held, cost: NodeCost, targets: Targets,
                ranked: dict[Demand, list[_Cand]], banned: AbstractSet[Ban] = frozenset()
                ) -> tuple[float, Choice] | None:
    """The cheapest place for ``held`` that the daemon allows and ``banned`` does not
    name (its own node compared)."""
    d = held.demand
    if d not in ranked:
        ranked[d] = _ranked_targets(alloc, d, cost, targets)
    own = held.choice.node
    for c in ranked[d]:
        node = c[1]
        name = node.spec.name
        if name == own:
            return _choice(d, c)
        if banned and ((held.key, name, ()) in banned or (held.key, name, c[2]) in banned):
            continue
        if targets.node_ok(node) and targets.task_ok(held, node):
            return _choice(d, c)
    return None


def best_move(alloc: Allocator, running: Iterable[Held], cost: NodeCost,
              min_gain: float = 0.0, targets: Targets | None = None,
              banned: AbstractSet[Ban] = frozenset()) -> DefragMove | None:
    """The single move of a running task that lowers ``cost`` most (by more than
    ``min_gain``), or None. Moves stay between nodes (moves between GPUs of one node
    were measured to add nothing). ``banned``: targets refused for a task (with
    ``targets`` only)."""
    leave: dict[tuple[object, ...], float] = {}
    target: dict[Demand, tuple[float, Choice] | None] = {}
    ranked: dict[Demand, list[_Cand]] = {}
    best: DefragMove | None = None
    best_gain = min_gain
    for held in running:
        if not movable(held):
            continue
        d, old = held.demand, held.choice
        node = alloc.nodes.get(old.node)
        if node is None or not searchable(node):
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
        if targets is not None:
            got = _target_for(alloc, held, cost, targets, ranked, banned)
        else:
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


class FragmentationMoves:
    """The defragmenting policy: greedy best single moves by FGD's fragmentation against
    ``workload`` (FGD's usable-now measure, not placement's expected residual waste: a
    move restarts a task and must buy capacity usable right away; measured on default,
    10 seeds, 2 moves/100 pods: FGD fragmentation 96.01, plus the stranding term 95.99,
    plus residual waste 95.97; residual waste alone 95.71, seeds 42-45)."""

    def __init__(self, workload: tuple[TypicalTask, ...]) -> None:
        self.workload = workload
        frag = FragCache(workload)
        self.cost: NodeCost = lambda product, cpu, free: frag(
            product, _NO_CPU_LIMIT if cpu is None else cpu, free)

    def cluster_cost(self, alloc: Allocator) -> float:
        return cluster_cost(alloc, self.cost)

    def search_cost(self, alloc: Allocator) -> NodeCost:
        """``cost`` minus the free milli that model-pinned tasks are expected to claim
        (placement's own term, ``restricted_pressure`` over the allocator's GPU-milli per
        model and what is free now): a move then gains by freeing a contested model and
        pays for taking one, as a placement does. Without pinned tasks in the workload it
        is ``cost``.

        Why: FGD's fragmentation rates a milli of every model alike for a task that may
        run anywhere, so moves packed unpinned shares onto the models pinned tasks need
        (gpuspec33, seed 42: 95.25 placing only, 94.71 with 2 moves per 100, an 8-GPU G3
        pod failing at 61% arrived instead of none)."""
        press = restricted_pressure(self.workload, alloc.gpu_capacity, alloc.gpu_free)
        if not any(press.values()):
            return self.cost
        base = self.cost
        return lambda product, cpu, free_: (base(product, cpu, free_)
                                            - press.get(product, 0.0) * sum(free_))

    def plan(self, alloc: Allocator, running: Sequence[Held], budget: int, *,
             again: bool, targets: Targets | None = None,
             check: Callable[[DefragMove], Ban | None] | None = None) -> list[DefragMove]:
        """Up to ``budget`` moves, each the best single move after the ones before, while
        a move still lowers the cost; each is made on ``alloc`` (released from its old
        place, committed to its new one). ``again``: a task moved here may move again
        (the baselines' replay); False for the daemon, which moves a service at most once
        per pass, and for swarmgpu's replay, which does as the daemon does. No default:
        each caller says which, so a new one cannot take the baselines' way unseen.

        ``check`` (the daemon's, with ``targets``): asked of each move found, before it
        is made; None takes it, a ``Ban`` refuses it and the search runs again without
        that target for that task (at most ``MAX_REFUSED`` times a plan)."""
        moves: list[DefragMove] = []
        # Tasks moved in this call, where they run now.
        moved: dict[Hashable, Held] = {}
        banned: set[Ban] = set()
        refused = 0
        cost = self.search_cost(alloc) if budget > 0 else self.cost
        while len(moves) < budget:
            held = [h for h in running if h.key not in moved]
            if again:
                held += list(moved.values())
            mv = best_move(alloc, held, cost, targets=targets, banned=banned)
            if mv is None:
                break
            ban = check(mv) if check is not None else None
            if ban is not None:
                banned.add(ban)
                refused += 1
                if refused > MAX_REFUSED:
                    break
                continue
            alloc.release(mv.old)
            alloc.commit(mv.new)
            moves.append(mv)
            moved[mv.key] = Held(mv.key, mv.demand, mv.new)
        return moves
