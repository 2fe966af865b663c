"""The allocator: which node and which GPUs a task gets. The daemon and ``simulate`` both
call this code.

State is incremental: nodes are added once, ``place`` is a pure decision, ``commit`` and
``release`` change the free capacity. Nodes in the same state (same spec, same free CPU,
memory and per-GPU share) form one group, and node scores are memoised per (group state,
demand), so a decision over a thousand nodes costs a few hundred microseconds.

Node choice is pluggable (``Scorer``); the production policy is ``SwarmScorer``
(``allocator.scorer``). The value types are in ``allocator.values``, the per-demand score
memo in ``allocator.scores``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as Set
from contextlib import contextmanager
from typing import cast

from swarmgpu.allocator import rollout, topology
from swarmgpu.allocator.fragmentation import MILLI, TaskShape, TypicalTask, product_matches
from swarmgpu.allocator.rollout import RollOut
from swarmgpu.allocator.scorer import Scorer, SwarmScorer
from swarmgpu.allocator.scores import GroupScores
from swarmgpu.allocator.shortfall import gpu_shortfall
from swarmgpu.allocator.values import (
    Choice,
    Demand,
    MigPicker,
    NodeSpec,
    NodeState,
    Unplaceable,
)

NVLINK_PAIR_MIN = 100  # one NVLink in go-gpuallocator's pair score
FIT_MEMO_MAX = 500_000  # (demand, group state) answers kept before they are dropped
GID_MAX = 1_000_000  # group states numbered before the numbering table is dropped
BORN_MAX = 200_000  # new group states logged before the log is dropped
SHARED_MAX = 500_000  # scores shared between demands kept before they are dropped
# A memo miss (None is "cannot host it"); only ever compared by identity, typed as a
# score so the decision loop needs no narrowing.
_UNSCORED = cast(float, object())


class Allocator:
    """Incremental placement state over a set of nodes."""

    def __init__(
        self,
        scorer: Scorer | None = None,
        *,
        mig_picker: MigPicker | None = None,
    ) -> None:
        self.scorer: Scorer = scorer or SwarmScorer()
        self.mig_picker = mig_picker
        self.nodes: dict[str, NodeState] = {}
        # Groups are keyed by a number per group state (``_gid``): the decision loop
        # looks each group up in a memo, and hashing the state tuple every time cost
        # most of a decision.
        self._gids: dict[tuple[object, ...], int] = {}
        self._next_gid = 0
        self._groups: dict[int, dict[str, NodeState]] = {}
        self._gpu_groups: dict[int, dict[str, NodeState]] = {}
        self._group_best: dict[int, NodeState] = {}
        self._best_rank: dict[int, int] = {}  # of ``_group_best``'s node, per group state
        # Group states in the order they (re)appeared, so a decision scores only those
        # new since the last one for its demand; dropped when long (``_born_era``).
        self._born: list[int] = []
        # Per group state, its nodes by (rank, entry number, name), with entries of
        # nodes that left (skipped); and each node's last entry number.
        self._ranked: dict[int, list[tuple[int, int, str]]] = {}
        self._entered: dict[str, int] = {}
        self._seq = 0
        self._born_era = 0
        self._usage: dict[str, tuple[int, int]] = {}
        self._sets: dict[object, tuple[int, ...] | None] = {}  # gpu_set per (shape, state)
        self._memo: dict[Demand, GroupScores] = {}
        # (group state, the scorer's key of a demand) -> score, for scorers whose score
        # reads only part of a demand (``score_key``): demands that differ elsewhere
        # (memory, products) share it. Dropped with ``_memo``.
        self._score_key: Callable[[Demand], object] | None = getattr(
            self.scorer, "score_key", None)
        self._shared: dict[tuple[int, object], float] = {}
        # Whether a group state fits a demand: unlike scores, the workload does not
        # change it, so it outlives ``_memo`` (the daemon's planner refreshes its model
        # every few hundred arrivals, and re-checking every state then cost more than
        # the scoring).
        self._fit_memo: dict[Demand, dict[int, bool]] = {}
        # Of ``_fit_memo``, the states that cannot host each demand (a decision leaves
        # them out at once, also after the scores were dropped).
        self._unfit: dict[Demand, set[int]] = {}
        self._fit_memo_n = 0
        # GPU-milli per model, and how much of it is free, for scorers that weigh models
        self.gpu_capacity: dict[str, int] = {}
        self.gpu_free: dict[str, int] = {}
        # GPU-milli per node class (model, GPUs of it on the node, node CPU milli): which
        # models can host a task at all (``restricted_demand``)
        self.gpu_hosts: dict[tuple[str, int, int | None], int] = {}
        # Untouched nodes (every GPU free, all CPU left, not blocked) per node class of
        # one GPU model: tasks that ask all of a node can only go there
        # (``allocator.untouched``). Kept by ``_enter``/``_leave``.
        self.untouched: dict[tuple[str, int, int | None], int] = {}
        self._untouched_moved = False  # a count changed since the scorer last saw them
        self.cpu_capacity = 0  # CPU milli of the cluster; 0 while a node reports none
        self._cpu_known = 0
        self._cpu_unknown = 0  # nodes without CPU data
        self.decisions = 0
        # Bumped whenever capacity may have grown (a release, a node added or unblocked,
        # less CPU reserved): an answer "nothing fits" stays true while it is unchanged.
        self.capacity_gen = 0
        self._batching = 0  # ``observed_once`` depth
        self._unobserved = False  # a change made inside it, not yet shown to the scorer
        # The scorer's sampled roll-out among near-best nodes (``allocator.rollout``, an
        # experiment; None: off), and whether one is running (its placements are greedy).
        self.rollout: RollOut | None = getattr(self.scorer, "rollout", None)
        self.rolling = False

    def set_workload(self, workload: tuple[TypicalTask, ...],
                     shapes: Mapping[TaskShape, float] | None = None) -> None:
        """Give the scorer a new workload model (the typical tasks, and every shape seen
        by weight where the caller has it); cached scores are dropped."""
        setter = getattr(self.scorer, "set_workload", None)
        if setter is not None:
            if shapes is None:
                setter(workload)
            else:
                setter(workload, shapes)
        self._memo.clear()
        self._shared.clear()

    # --- state ---------------------------------------------------------
    def add_node(self, spec: NodeSpec, rank: int | None = None) -> None:
        """Add a node; ``rank`` orders equal scores (lower wins; default: insertion)."""
        if spec.name in self.nodes:
            raise ValueError(f"node {spec.name!r} added twice; node names must be unique")
        node = NodeState(spec, len(self.nodes) if rank is None else rank)
        self.nodes[spec.name] = node
        self._enter(node)
        self.capacity_gen += 1
        self._count_gpus(node, +1)

    def remove_node(self, name: str) -> None:
        """Forget a node and everything committed on it."""
        node = self.nodes.pop(name)
        self._leave(node)
        self._usage.pop(name, None)
        self._count_gpus(node, -1)

    def _count_gpus(self, node: NodeState, sign: int) -> None:
        if node.spec.cpu_milli is None:
            self._cpu_unknown += sign
        else:
            self._cpu_known += sign * node.spec.cpu_milli
        self.cpu_capacity = 0 if self._cpu_unknown else self._cpu_known
        per_model: dict[str, tuple[int, int]] = {}  # model -> (GPUs, milli) on this node
        for g, free in zip(node.spec.gpus, node.free, strict=True):
            cap = self.gpu_capacity.get(g.product, 0) + sign * g.capacity_milli
            if cap > 0:
                self.gpu_capacity[g.product] = cap
                self.gpu_free[g.product] = self.gpu_free.get(g.product, 0) + sign * free
            else:
                self.gpu_capacity.pop(g.product, None)
                self.gpu_free.pop(g.product, None)
            n, milli = per_model.get(g.product, (0, 0))
            per_model[g.product] = (n + 1, milli + g.capacity_milli)
        for product, (n, milli) in per_model.items():
            key = (product, n, node.spec.cpu_milli)
            cap = self.gpu_hosts.get(key, 0) + sign * milli
            if cap > 0:
                self.gpu_hosts[key] = cap
            else:
                self.gpu_hosts.pop(key, None)
        self._observe()

    @contextmanager
    def observed_once(self) -> Iterator[None]:
        """Commits and releases inside are shown to the scorer once, at the end: a cycle
        re-committing holdings passes through states no decision is made in, and a
        scorer that re-reads the cluster at a threshold (``SwarmScorer``'s pressure)
        must read the same states whichever path the cycles took (a full cycle per
        arrival, as the daemon runs, or one per 50, as ``simulate`` does)."""
        self._batching += 1
        try:
            yield
        finally:
            self._batching -= 1
            if not self._batching and self._unobserved:
                self._unobserved = False
                self._observe()

    def _observe(self) -> None:
        if self._batching:
            self._unobserved = True
            return
        self._untouched_moved = False
        observe = getattr(self.scorer, "observe_cluster", None)
        if observe is not None and observe(self.gpu_capacity, self.gpu_free, self.cpu_capacity,
                                           self.gpu_hosts, self.untouched):
            self._memo.clear()  # the scorer weighs models by what is free: re-score
            self._shared.clear()

    def set_usage(self, name: str, cpu_milli: int, memory_mib: int) -> None:
        """What the node's resources hold besides committed choices (other tasks'
        reservations): ``cpu_left``/``mem_left`` move by the change."""
        node = self.nodes[name]
        old_cpu, old_mem = self._usage.get(name, (0, 0))
        if (old_cpu, old_mem) == (cpu_milli, memory_mib):
            return
        self._usage[name] = (cpu_milli, memory_mib)
        self._leave(node)
        if node.cpu_left is not None:
            node.cpu_left -= cpu_milli - old_cpu
        if node.mem_left is not None:
            node.mem_left -= memory_mib - old_mem
        self._enter(node)
        if cpu_milli < old_cpu or memory_mib < old_mem:
            self.capacity_gen += 1
        if self._untouched_moved:
            self._observe()

    def usage(self, name: str) -> tuple[int, int]:
        return self._usage.get(name, (0, 0))

    def set_blocked(self, name: str, blocked: bool) -> None:
        node = self.nodes[name]
        if node.blocked == blocked:
            return
        self._leave(node)
        node.blocked = blocked
        self._enter(node)
        if not blocked:
            self.capacity_gen += 1
        if self._untouched_moved:
            self._observe()

    @staticmethod
    def _untouched_class(node: NodeState) -> tuple[str, int, int | None] | None:
        if (node.blocked or not node.product or node.cpu_left != node.spec.cpu_milli
                or sum(node.free) != node.capacity):
            return None
        return (node.product, len(node.free), node.spec.cpu_milli)

    def _count_untouched(self, node: NodeState, sign: int) -> None:
        key = self._untouched_class(node)
        if key is None:
            return
        n = self.untouched.get(key, 0) + sign
        if n > 0:
            self.untouched[key] = n
        else:
            self.untouched.pop(key, None)
        self._untouched_moved = True

    def _enter(self, node: NodeState) -> None:
        self._count_untouched(node, +1)
        node.gkey = node.group_key()
        gid = node.gid = self._gid(node.gkey)
        name = node.spec.name
        members = self._groups.get(gid)
        if members is None:
            members = self._groups[gid] = {}
            self._born.append(gid)
            self._ranked[gid] = []
        members[name] = node
        self._seq += 1
        self._entered[name] = self._seq
        heap = self._ranked[gid]
        heapq.heappush(heap, (node.rank, self._seq, name))
        if len(heap) > 2 * len(members) + 16:  # entries of nodes that left: rebuilt
            heap[:] = [(m.rank, self._entered[n], n) for n, m in members.items()]
            heapq.heapify(heap)
        if any(node.free):
            self._gpu_groups[gid] = self._groups[gid]
        best = self._group_best.get(gid)
        if best is None or node.rank < best.rank:
            self._group_best[gid] = node
            self._best_rank[gid] = node.rank

    def _gid(self, gkey: tuple[object, ...]) -> int:
        """The number of a group state. Numbers are never reused, so a memo keyed by
        them stays right when the table is dropped (a state seen again then gets a new
        number, and is scored again)."""
        gid = self._gids.get(gkey)
        if gid is None:
            if len(self._gids) >= GID_MAX:
                self._gids.clear()
            gid = self._gids[gkey] = self._next_gid
            self._next_gid += 1
        return gid

    def _leave(self, node: NodeState) -> None:
        self._count_untouched(node, -1)
        gid = node.gid
        members = self._groups[gid]
        del members[node.spec.name]
        if not members:
            del self._groups[gid]
            self._gpu_groups.pop(gid, None)
            del self._group_best[gid]
            del self._best_rank[gid]
            del self._ranked[gid]
        elif self._group_best[gid] is node:
            # The next lowest rank (the first to enter among equal ranks, as a scan of
            # the members in order would find): a heap, not a scan of a group that may
            # hold thousands of nodes in one state.
            heap, entered = self._ranked[gid], self._entered
            while True:
                rank, seq, name = heap[0]
                m = members.get(name)
                if m is not None and entered[name] == seq and m.rank == rank:
                    break
                heapq.heappop(heap)
            self._group_best[gid] = m
            self._best_rank[gid] = rank

    def representatives(self, d: Demand) -> list[NodeState]:
        """One node per group of nodes in the same state (the lowest rank), for searches
        that score every distinct state once; GPU demands see only groups with GPU left."""
        groups = self._gpu_groups if d.gpus_wanted else self._groups
        return [self._group_best[gk] for gk in groups]

    def snapshot(self) -> dict[str, tuple[int, ...]]:
        """Free milli per GPU, per node."""
        return {name: tuple(n.free) for name, n in self.nodes.items()}

    def commit(self, choice: Choice) -> None:
        self._apply(choice, -1)

    def release(self, choice: Choice) -> None:
        self._apply(choice, +1)

    def _apply(self, choice: Choice, sign: int) -> None:
        node = self.nodes.get(choice.node)
        if node is None:
            raise KeyError(f"node {choice.node!r} is not known to the allocator")
        new_free = list(node.free)
        for g, m in zip(choice.gpus, choice.milli, strict=True):
            new_free[g] += sign * m
            cap = node.spec.gpus[g].capacity_milli
            if not 0 <= new_free[g] <= cap:
                verb = "commit" if sign < 0 else "release"
                raise ValueError(
                    f"{verb} of {m} milli on {choice.node} GPU {g} would leave "
                    f"{new_free[g]} of {cap}; the choice is stale or released twice"
                )
        self._leave(node)
        node.free = new_free
        gpus = node.spec.gpus
        for g, m in zip(choice.gpus, choice.milli, strict=True):
            product = gpus[g].product
            self.gpu_free[product] = self.gpu_free.get(product, 0) + sign * m
        if node.cpu_left is not None:
            node.cpu_left += sign * choice.cpu_milli
        if node.mem_left is not None:
            node.mem_left += sign * choice.memory_mib
        self._enter(node)
        if choice.gpus or self._untouched_moved:
            self._observe()
        if sign > 0:
            self.capacity_gen += 1

    # --- decisions -----------------------------------------------------
    def eligible_gpus(self, node: NodeState, d: Demand) -> list[int]:
        """GPU indices of the node that pass the demand's product and memory filters."""
        return [
            i for i, g in enumerate(node.spec.gpus)
            if g.healthy and not g.mig_enabled
            and g.memory_mib >= d.min_memory_mib and product_matches(g.product, d.products)
        ]

    def gpu_set(self, node: NodeState, d: Demand) -> tuple[int, ...] | None:
        """The GPUs this node would hand out for ``d``, or None when it cannot. Nodes of
        one shape in the same state answer alike (the topology search is memoised)."""
        if d.mig_profile:
            return None
        shape = node.spec.shape
        if shape is None or node.spec.pair_score is None or d.gpu_milli:
            return self._gpu_set(node, d)
        key = (shape, tuple(node.free), d)
        got = self._sets.get(key, key)
        if got is key:
            if len(self._sets) > 200_000:
                self._sets.clear()
            got = self._sets[key] = self._gpu_set(node, d)
        return got  # type: ignore[return-value]

    def _gpu_set(self, node: NodeState, d: Demand) -> tuple[int, ...] | None:
        want = d.gpus_wanted
        if want == 0:
            return ()
        elig = self.eligible_gpus(node, d)
        if d.gpu_milli:
            cands = [i for i in elig if node.free[i] >= d.gpu_milli]
            if not cands:
                return None
            picked = self.scorer.pick(node, d, cands)
            if picked is None:  # best fit: the fullest GPU that still has room
                picked = (min(cands, key=lambda i: (node.free[i], i)),)
            return picked
        whole = [i for i in elig if node.free[i] == node.spec.gpus[i].capacity_milli]
        if len(whole) < want:
            return None
        ps = node.spec.pair_score
        if d.topology == "nvlink" and ps is None:
            return None
        if d.topology == "numa" and any(node.spec.gpus[i].numa_node is None for i in whole):
            return None
        allowed = self._allowed_pair(node, d)
        if ps is not None:
            return topology.best_gpu_set(
                whole, want, ps, all_gpus=list(range(len(node.spec.gpus))), allowed_pair=allowed
            )
        if allowed is not None:  # NUMA without link info: the fullest single NUMA node
            by_numa: dict[int | None, list[int]] = {}
            for i in whole:
                by_numa.setdefault(node.spec.gpus[i].numa_node, []).append(i)
            fits = [v for v in by_numa.values() if len(v) >= want]
            return tuple(min(fits, key=len)[:want]) if fits else None
        picked = self.scorer.pick(node, d, whole)
        return picked if picked is not None else tuple(whole[:want])

    @staticmethod
    def _allowed_pair(node: NodeState, d: Demand) -> Callable[[int, int], bool] | None:
        ps = node.spec.pair_score
        gpus = node.spec.gpus
        if d.topology == "nvlink" and ps is not None:
            return lambda a, b: ps(a, b) >= NVLINK_PAIR_MIN
        if d.topology == "numa":
            return lambda a, b: gpus[a].numa_node == gpus[b].numa_node
        return None

    def fits(self, node: NodeState, d: Demand) -> bool:
        if node.blocked:
            return False
        if node.cpu_left is not None and node.cpu_left < d.cpu_milli:
            return False
        if node.mem_left is not None and node.mem_left < d.memory_mib:
            return False
        if d.node_labels:
            labels = node.spec.labels
            if any(labels.get(k) != v for k, v in d.node_labels):
                return False
        want = 1 if d.gpu_milli else d.num_gpu  # d.gpus_wanted
        if want == 0:
            return True
        if node.simple:  # quick count before the full set choice
            if not node.spec.gpus or d.min_memory_mib > node.spec.gpus[0].memory_mib:
                return False
            if d.products and not product_matches(node.product, d.products):
                return False
            need = d.gpu_milli or MILLI  # d.milli_per_gpu
            if len([f for f in node.free if f >= need]) < want:
                return False
            if d.topology == "any":
                return True
        return self.gpu_set(node, d) is not None

    def place(self, d: Demand, *, explain: bool = True, exclude: Set[str] = frozenset(),
              where: Callable[[NodeState], bool] | None = None,
              note: str | None = None) -> Choice | Unplaceable:
        """The best node and GPUs for ``d`` now; changes nothing (see ``commit``).

        ``exclude`` names nodes that may not take it (Swarm constraints, one replica per
        node); ``where`` filters on what every node of a group shares (spec labels, e.g.
        zones). ``explain=False`` skips naming the closest node when nothing fits (a scan
        of every node state; replays that expect many failures turn it off). ``note``:
        the choice's explanation is ``<note> on <node>`` instead of the full one.
        """
        self.decisions += 1
        if d.mig_profile:
            return self._place_mig(d)
        fit_memo = self._fit_memo.get(d)
        if fit_memo is None:
            if self._fit_memo_n > FIT_MEMO_MAX:
                self._fit_memo.clear()
                self._unfit.clear()
                self._fit_memo_n = 0
            fit_memo = self._fit_memo[d] = {}
        if len(self._born) > BORN_MAX:
            self._born.clear()
            self._born_era += 1
        scores = self._memo.get(d)
        if scores is None:
            scores = self._memo[d] = GroupScores()
        memo = scores.of
        groups = self._gpu_groups if d.gpus_wanted else self._groups
        best_score = -math.inf
        best: NodeState | None = None
        group_best = self._group_best
        if where is None and not exclude:  # the common case: no per-group filter
            # Only states not scored for ``d`` yet are scored (a set difference finds
            # them); the best is then the highest score's lowest-rank state, as a scan of
            # every state would choose, without the scan.
            unfit = self._unfit.get(d)
            if unfit is None:
                unfit = self._unfit[d] = set()
            born, seen = self._born, scores.seen
            if scores.era != self._born_era:  # new scores (or log): every live state
                fresh: Iterable[int] = set(groups).difference(seen).difference(unfit)
                scores.era = self._born_era
            else:  # the states that appeared since (each decision changes a few)
                fresh = born[scores.read:]
            scores.read = len(born)
            for gk in fresh:
                if gk in seen or gk in unfit or gk not in groups:
                    continue
                s = memo.get(gk, _UNSCORED)
                if s is _UNSCORED:
                    self._score_group(gk, d, scores, fit_memo)
                else:
                    scores.put(gk, s)
            got = scores.best(groups, self._best_rank)
            if got is not None:
                best_score, best = got[0], group_best[got[1]]
        for gk in groups if where is not None or exclude else ():
            s = memo.get(gk, _UNSCORED)
            if s is _UNSCORED:
                s = self._score_group(gk, d, scores, fit_memo)
            if s is None:
                continue
            rep = group_best[gk]
            if where is not None and not where(rep):
                continue
            if exclude and rep.spec.name in exclude:
                others = [m for m in self._groups[gk].values() if m.spec.name not in exclude]
                if not others:
                    continue
                rep = min(others, key=lambda m: m.rank)
            if s > best_score:
                best_score, best = s, rep
            elif s == best_score and best is not None and rep.rank < best.rank:
                best = rep
        if self.rollout is not None and best is not None and not self.rolling:
            best, best_score = rollout.decide(self, self.rollout, d, best, best_score, memo,
                                              groups, exclude, where)
        if best is None:
            return Unplaceable(self.explain_unplaceable(d, exclude=exclude, where=where)
                               if explain else f"needs {d.describe()}; no node fits")
        gpus = self.gpu_set(best, d)
        assert gpus is not None  # fits() said so
        milli = tuple(d.gpu_milli if d.gpu_milli else best.spec.gpus[i].capacity_milli
                      for i in gpus)
        return Choice(
            node=best.spec.name, gpus=gpus, milli=milli, score=best_score,
            explanation=(self._explain(best, d, gpus) if note is None
                         else f"{note} on {best.spec.name}"),
            cpu_milli=d.cpu_milli, memory_mib=d.memory_mib,
        )

    def group_node(self, gk: int, exclude: Set[str] = frozenset()) -> NodeState | None:
        """A group state's lowest-rank node not in ``exclude`` (None: all are)."""
        rep = self._group_best[gk]
        if not exclude or rep.spec.name not in exclude:
            return rep
        return min((m for m in self._groups[gk].values() if m.spec.name not in exclude),
                   key=lambda m: m.rank, default=None)

    def _score_group(self, gk: int, d: Demand, scores: GroupScores,
                     fit_memo: dict[int, bool]) -> float | None:
        """Score one group's state for ``d`` (None: it cannot host it), into the memos."""
        rep = self._group_best[gk]
        ok = fit_memo.get(gk)
        if ok is None:
            ok = fit_memo[gk] = self.fits(rep, d)
            self._fit_memo_n += 1
            if not ok:
                self._unfit.setdefault(d, set()).add(gk)
        if not ok:
            s = None
        elif self._score_key is None:
            s = self.scorer.score(rep, d)
        else:  # demands the scorer tells apart only by this key share the state's score
            k = (gk, self._score_key(d))
            s = self._shared.get(k)
            if s is None:
                s = self.scorer.score(rep, d)
                if len(self._shared) >= SHARED_MAX:
                    self._shared.clear()
                self._shared[k] = s
        scores.put(gk, s)
        return s

    def place_on(self, name: str, d: Demand) -> Choice | Unplaceable:
        """Place ``d`` on one named node (used by rebalancing moves)."""
        node = self.nodes[name]
        gpus = self.gpu_set(node, d) if self.fits(node, d) else None
        if gpus is None:
            return Unplaceable(f"needs {d.describe()}; {name} cannot host it now")
        milli = tuple(d.gpu_milli or node.spec.gpus[i].capacity_milli for i in gpus)
        return Choice(node=name, gpus=gpus, milli=milli, score=0.0,
                      explanation=self._explain(node, d, gpus),
                      cpu_milli=d.cpu_milli, memory_mib=d.memory_mib)

    def _place_mig(self, d: Demand) -> Choice | Unplaceable:
        if self.mig_picker is None:
            return Unplaceable(f"needs {d.describe()} but no MIG picker is configured")
        for node in sorted(self.nodes.values(), key=lambda n: n.rank):
            if not self.fits(node, Demand(cpu_milli=d.cpu_milli, memory_mib=d.memory_mib,
                                          node_labels=d.node_labels)):
                continue
            got = self.mig_picker(node.spec, tuple(node.free), d)
            if got is not None:
                return Choice(node=node.spec.name, gpus=(), milli=(), score=0.0,
                              explanation=f"{d.describe()} on {node.spec.name}",
                              cpu_milli=d.cpu_milli, memory_mib=d.memory_mib, mig=got)
        return Unplaceable(f"needs {d.describe()}; no node has one free")

    def _explain(self, node: NodeState, d: Demand, gpus: tuple[int, ...]) -> str:
        left = node.free_total() - d.total_gpu_milli
        where = ",".join(str(g) for g in gpus) or "-"
        return (f"{d.describe()} on {node.spec.name} GPU {where} ({self.scorer.name}); "
                f"node keeps {left / MILLI:.2f} GPU free")

    def explain_unplaceable(self, d: Demand, *, exclude: Set[str] = frozenset(),
                            where: Callable[[NodeState], bool] | None = None) -> str:
        """Why no node fits, naming the node that came closest (one node per state)."""
        if not self.nodes:
            return f"needs {d.describe()}; no nodes are known"
        need = d.milli_per_gpu
        wanted_labels = d.node_labels
        matches: dict[str, bool] = {}
        best_key: tuple[int, int] = (-1, 0)
        best: NodeState | None = None
        # The winner's reason is written once at the end (most states never win).
        best_why = ""
        allowed = False
        group_best = self._group_best
        for gk, members in self._groups.items():
            node = group_best[gk]
            if exclude and node.spec.name in exclude:
                other = min((m for m in members.values() if m.spec.name not in exclude),
                            key=lambda m: m.rank, default=None)
                if other is None:
                    continue
                node = other
            if where is not None and not where(node):
                continue
            allowed = True
            # the most GPUs free wins, then the lowest rank
            if node.blocked:
                have, why = 0, "blocked"
            elif wanted_labels and any(node.spec.labels.get(k) != v
                                       for k, v in wanted_labels):
                have, why = 0, "labels"
            elif node.cpu_left is not None and node.cpu_left < d.cpu_milli:
                have, why = 0, "cpu"
            elif node.mem_left is not None and node.mem_left < d.memory_mib:
                have, why = 0, "mem"
            else:
                if node.simple:  # alike GPUs: count without building the eligible list
                    ok = matches.get(node.product)
                    if ok is None:
                        ok = matches[node.product] = product_matches(node.product, d.products)
                    g0 = node.spec.gpus[0] if node.spec.gpus else None
                    have = (sum(1 for f in node.free if f >= need)
                            if ok and g0 is not None and g0.memory_mib >= d.min_memory_mib
                            else 0)
                else:
                    elig = self.eligible_gpus(node, d)
                    have = sum(1 for i in elig if node.free[i] >= need)
                why = "free"
            key = (have, -node.rank)
            if key > best_key:
                best_key, best, best_why = key, node, why
        if not allowed:
            return f"needs {d.describe()}; no node is allowed for it"
        assert best is not None  # any allowed node beats the start key
        return f"needs {d.describe()}; best node {self._why(best, d, best_key[0], best_why)}"

    @staticmethod
    def _why(node: NodeState, d: Demand, have: int, why: str) -> str:
        """``explain_unplaceable``'s words for the closest node."""
        name = node.spec.name
        if why == "blocked":
            return f"{name} is not schedulable (down, paused or drained)"
        if why == "labels":
            return f"{name} does not carry the node labels asked for"
        if why == "cpu":
            return f"{name} has only {node.cpu_left} CPU milli free"
        if why == "mem":
            return f"{name} has only {node.mem_left} MiB memory free"
        if have >= d.gpus_wanted:
            return f"{name} has {have} free but not as one {d.topology} set"
        return gpu_shortfall(node, d, have)
