"""Node choice: the ``Scorer`` protocol and swarmgpu's production policy, ``SwarmScorer``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol

from swarmgpu.allocator.fragmentation import (
    MILLI,
    STOP_WEIGHT,
    CpuSpread,
    CpuUnfit,
    Hosts,
    ResidualWaste,
    TaskShape,
    TypicalTask,
    cpu_excess_per_gpu_milli,
    cpu_reserve_per_gpu_milli,
    restricted_demand,
    restricted_pressure,
    stranded_milli,
)
from swarmgpu.allocator.rollout import RollOut
from swarmgpu.allocator.untouched import (
    Breaks,
    Groups,
    NodeClass,
    Values,
    exclusive_groups,
    forced_breaks,
    loss,
    other_breaks,
    untouched_values,
    whole_groups,
)
from swarmgpu.allocator.values import Demand, NodeState

PRESSURE_STEP = 0.02  # share of cluster capacity placed or freed between pressure updates
COST_MEMO_MAX = 200_000  # node costs kept (SwarmScorer.node_cost)


class Scorer(Protocol):
    """Node-choice policy. Higher score wins; equal scores go to the lower node rank.

    ``score`` is called only for nodes that can host the demand and must depend only on
    the node's state (it is memoised by state). ``pick`` chooses GPUs on the chosen node
    among ``candidates`` (eligible GPUs with room), returning None to fall back to the
    allocator's default choice.
    """

    name: str

    def score(self, node: NodeState, d: Demand) -> float: ...

    def pick(self, node: NodeState, d: Demand, candidates: list[int]) -> tuple[int, ...] | None:
        ...


def sigmoid(x: float) -> float:
    if x < -60:
        return 0.0
    return 1.0 / (1.0 + math.exp(-x))


class SwarmScorer:
    """swarmgpu's policy: least growth of expected residual waste plus CPU-stranded GPU
    capacity first (as a 0..100 integer score), then nodes already in use, then the fixed
    node order.

    Residual waste (``residual_waste_table``) is what a GPU's free share is expected to
    leave unused once the workload's typical tasks have kept filling it: placement pairs
    shares that complete each other (0.65 with 0.32, not with 0.23) instead of only
    keeping the free share usable now, as FGD's fragmentation does. Stranded capacity is
    the free GPU-milli a node's CPU is expected not to feed, from the workload's spread of
    CPU per GPU-milli below its mean (``CpuSpread``): counting its growth sends CPU-heavy
    tasks to CPU-rich nodes before the CPU runs out. Where the workload asks more CPU
    than the cluster has, each typical one-GPU task also meets its own step: once the
    node's CPU left is below what it asks, it cannot use the node's free GPU at all
    (``CpuUnfit``, FGD's per-task view of CPU), so taking CPU where it stops common tasks
    costs what they would have used there (without it CPU-only pods took the CPU of nodes
    whose GPUs then idled: 1-4 points below FGD).

    Model-pinned tasks: residual waste rates every model's free capacity as equally good
    for a task that may run anywhere, so unpinned tasks filled the models most pinned
    tasks need and those failed at 100% arrived though other models had room (1.4-2.8
    points below FGD when 30-40% of GPU pods are pinned). The cost therefore subtracts
    the free milli that restricted tasks are expected to claim (``pressure``, from
    ``restricted_pressure`` over the cluster's GPU-milli per model, total and free, which
    ``Allocator`` passes to ``observe_cluster``): a milli taken on a contested model costs
    the restricted demand it displaces. The claim follows what is free, so the
    preference fades as the uncontested models fill (measured: a fixed claim from
    capacity alone cost 0.3-2 points where pins are not oversubscribed). FGD's
    fragmentation has a capacity-blind form of this (a model a task cannot use is all
    fragment for it); that form sends unpinned work away from the model most tasks are
    pinned to even when it is the largest, and loses 5-7 points where pins follow the
    cluster's model mix. A task is restricted by its CPU too, where its CPU rules out a
    model whose nodes have the GPUs it asks (``restricted_demand`` over the node classes,
    ``Allocator.gpu_hosts``): openb's 8-GPU tasks of 120 cores fit G3's 128-core nodes
    only, and without the claim a 1-GPU or 88-core task broke a G3 node that a G2 one
    could take (multigpu60: 0.1 points below FGD at 100% arrived, one seed 0.4). Without
    restricted tasks the term is 0.
    Measured on the openb traces and derived variants: docs/simulate.md.

    The integer score makes nodes whose waste grows about equally tie; sending those ties
    to used nodes and then always to the same node order packs work onto few nodes and
    keeps whole nodes free for multi-GPU tasks (measured: unrounded scores or best-fit
    tie-breaks place less). For a share, the GPU whose use grows waste least is taken,
    ties to the fullest GPU. Without a workload model (the rebalancer's scratch
    allocators; the daemon's planner always has one) it is best fit: used nodes first,
    then the least GPU left after placement, then node order.
    """

    name = "swarmgpu"
    # A sampled roll-out among near-best nodes (``allocator.rollout``): an experiment,
    # None (off) unless switched on (benchmarks/rollout_try.py); read by ``Allocator``.
    rollout: RollOut | None = None
    # Untouched nodes priced for every shape only such a node hosts (``whole_groups``),
    # not only those whose CPU confines them to some classes (``exclusive_groups``):
    # main's rule since stop 82 (stop 78's U: without it main placed below FGD on
    # h-bimodalseed; docs/simulate.md). The one place it is decided; a benchmark turns it
    # off for a "before" figure (benchmarks/untouched_try.py --rule none).
    whole_untouched = True
    # The untouched price with the nodes other tasks are expected to break counted in:
    # "rate" (``other_breaks``, the scorer's own breaks) or "forced" (``forced_breaks``,
    # a bound from the mix); an experiment, "" (off) unless switched on
    # (benchmarks/untouched_try.py --rule; docs/simulate.md, stop 79).
    untouched_breaks = ""

    def __init__(self, workload: tuple[TypicalTask, ...] = (),
                 stop: float = STOP_WEIGHT,
                 shapes: Mapping[TaskShape, float] | None = None) -> None:
        self.stop = stop  # residual waste's "no further task" weight (residual_waste_table)
        self.capacity: dict[str, int] = {}  # GPU-milli per model in the cluster
        self.free: dict[str, int] = {}  # of which free, when pressure was last computed
        self._free_total = 0
        self._step = 0.0
        self.cluster_cpu = 0  # CPU milli of the cluster's nodes (0: unknown)
        self.hosts: dict[tuple[str, int, int | None], int] | None = None  # node classes
        self.values: Values = {}  # untouched_values, by class
        # untouched nodes and free GPU-milli when groups were last refreshed (other_breaks
        # reads the window since; cluster state, so kept over a new workload)
        self._untouched_then: tuple[dict[NodeClass, int], int] | None = None
        self.set_workload(workload, shapes)

    def set_workload(self, workload: tuple[TypicalTask, ...],
                     shapes: Mapping[TaskShape, float] | None = None) -> None:
        """``shapes``: every shape seen, by weight (the typical ones leave rare shapes
        out, and those are what ``untouched`` values nodes for); None: ``workload``."""
        self.workload = workload
        self.shapes = dict(shapes) if shapes is not None else {
            t.shape: t.weight for t in workload}
        self._groups: Groups | None = None  # exclusive_groups, at _groups_free
        self._groups_free = 0
        self._breaks: Breaks = {}  # other_breaks or forced_breaks, at _groups_free
        self.waste = ResidualWaste(workload, stop=self.stop) if workload else None
        self.cpu_unfit = CpuUnfit(workload) if workload else None
        # node_cost per (product, CPU left, free GPU-milli), while what it reads (waste,
        # CPU reserve, pressure) is unchanged: a node's cost before a placement is the
        # same for every demand scored on it.
        self._cost: dict[tuple[str, int | None, tuple[int, ...]], float] = {}
        self._set_cpu_reserve()
        self._demand: dict[str, float] | None = None
        self._pressure: dict[str, float] | None = None

    def _set_cpu_reserve(self) -> None:
        self._cost.clear()
        gpu = sum(self.capacity.values())
        self.cpu_per_milli = cpu_reserve_per_gpu_milli(
            self.workload, self.cluster_cpu, gpu) if self.workload else None
        # the per-task CPU step counts once the workload asks more CPU than the cluster
        # has (``CpuUnfit``)
        self.cpu_short = bool(self.workload) and cpu_excess_per_gpu_milli(
            self.workload, self.cluster_cpu, gpu) > 0
        # The spread only while the cluster's CPU suffices: once it is short every CPU
        # milli a task takes is some GPU's, the light tasks cannot be counted on to use
        # what a node has left, and the mean's straight line holds (y-cpuonly4, held
        # out: 0.4-1.1 points lost with the spread). None: no GPU task asks CPU.
        self.cpu_spread = (CpuSpread(self.workload)
                           if self.cpu_per_milli is not None and not self.cpu_short else None)

    def observe_cluster(self, capacity: Mapping[str, int], free: Mapping[str, int],
                        cpu_milli: int = 0, hosts: Hosts | None = None,
                        untouched: Mapping[NodeClass, int] | None = None) -> bool:
        """The cluster's GPU-milli per model, how much is free, its CPU milli, its node
        classes (``Allocator.gpu_hosts``) and their untouched nodes
        (``Allocator.untouched``; ``Allocator`` calls this after every change). Returns
        True when scores change, so cached ones go.

        Pressure, and the tasks expected for untouched nodes, are recomputed when
        capacity changes or the cluster's free total has moved by PRESSURE_STEP of its
        capacity since the last time: a resolution, so that scores stay cached between
        (one step is ~120 GPUs on openb's 6,212). The untouched nodes' values follow
        every change of their count.
        """
        total_free = sum(free.values())
        changed = self._observe_untouched(total_free, hosts, untouched)
        if capacity != self.capacity or cpu_milli != self.cluster_cpu or hosts != self.hosts:
            self.capacity = dict(capacity)
            self.cluster_cpu = cpu_milli
            self.hosts = None if hosts is None else dict(hosts)
            self._set_cpu_reserve()
            self.free, self._free_total = dict(free), total_free
            self._step = PRESSURE_STEP * sum(capacity.values())
            self._demand = self._pressure = None
            self._cost.clear()
            return True
        if abs(total_free - self._free_total) < self._step:
            return changed
        self.free, self._free_total = dict(free), total_free
        if self._pressure is None:  # not computed since the last change: nothing cached
            return changed
        restricted = self._demand is not None and any(self._demand.values())
        if restricted:
            self._pressure = None
            self._cost.clear()
        return restricted or changed

    def _observe_untouched(self, total_free: int, hosts: Hosts | None,
                           untouched: Mapping[NodeClass, int] | None) -> bool:
        """Refresh ``values`` (``untouched_values``); True when they changed."""
        if untouched is None or hosts is None or not self.workload:
            changed, self.values = bool(self.values), {}
            return changed
        if (self._groups is None or hosts != self.hosts
                or abs(total_free - self._groups_free) >= self._step):
            grouping = whole_groups if self.whole_untouched else exclusive_groups
            groups = grouping(self.shapes, hosts, total_free)
            if self.untouched_breaks == "forced":
                self._breaks = forced_breaks(self.shapes, hosts, total_free, groups)
            elif self.untouched_breaks:
                if hosts != self.hosts:  # nodes came or went: counts from here on
                    self._untouched_then = None
                self._refresh_breaks(groups, untouched, total_free)
            self._groups, self._groups_free = groups, total_free
        values = untouched_values(self._groups, untouched, self._breaks) if self._groups else {}
        changed = values != self.values
        self.values = values
        return changed

    def _refresh_breaks(self, groups: Groups, untouched: Mapping[NodeClass, int],
                        total_free: int) -> None:
        """``other_breaks`` over the placements since the last refresh, once they span a
        step (a shorter window, as after a new workload, keeps the last reading: too few
        placements to take a rate from)."""
        then = self._untouched_then
        if then is not None and abs(then[1] - total_free) < self._step:
            return
        self._breaks = {} if then is None else other_breaks(
            groups, then[0], untouched, then[1] - total_free, total_free)
        self._untouched_then = (dict(untouched), total_free)

    @property
    def groups(self) -> Groups:
        """The tasks only untouched nodes host, as ``values`` were last priced from
        (``whole_groups``, or ``exclusive_groups`` with ``whole_untouched`` off; empty
        before the first observation)."""
        return self._groups or {}

    def pressure(self, product: str) -> float:
        """Expected milli of model-restricted demand displaced per milli taken on a GPU of
        ``product`` (``restricted_pressure``); 0 without a workload or cluster capacity."""
        if self._pressure is None:
            if self._demand is None:
                self._demand = restricted_demand(self.workload, self.capacity, self.hosts)
            self._pressure = (
                restricted_pressure(self.workload, self.capacity, self.free, self._demand)
                if any(self._demand.values()) else {})
        return self._pressure.get(product, 0.0)

    def _after(self, node: NodeState, d: Demand, gpu: int | None) -> tuple[int, tuple[int, ...]]:
        cpu = (node.cpu_left or 0) - d.cpu_milli
        free = list(node.free)
        if gpu is not None:
            free[gpu] -= d.gpu_milli
        elif d.num_gpu:
            n = d.num_gpu
            for i, f in enumerate(free):
                if n and f == MILLI:
                    free[i] = 0
                    n -= 1
        return cpu, tuple(free)

    def node_cost(self, product: str, cpu_left: int | None, free: tuple[int, ...]) -> float:
        """What placement lowers: expected residual waste of the node's free GPU shares
        plus CPU-stranded GPU-milli, plus, where the workload asks more CPU than the
        cluster has, the free GPU-milli that the one-GPU tasks asking more CPU than the
        node has left cannot use (``CpuUnfit``, by their share), minus the free milli
        that model-restricted tasks are expected to claim (``pressure``; so taking it
        costs what it displaces). ``cpu_left`` None (no CPU data) strands nothing. 0
        without a workload."""
        if self.waste is None:
            return 0.0
        key = (product, cpu_left, free)
        got = self._cost.get(key)
        if got is not None:
            return got
        cost = self.waste(product, free) + self._stranded(cpu_left, free)
        if cpu_left is not None and self.cpu_short and self.cpu_unfit is not None:
            cost += self.cpu_unfit(product, cpu_left) * sum(free)
        claimed = self.pressure(product)
        if claimed:
            cost -= claimed * sum(free)
        if len(self._cost) >= COST_MEMO_MAX:
            self._cost.clear()
        self._cost[key] = cost
        return cost

    def _stranded(self, cpu_left: int | None, free: tuple[int, ...]) -> float:
        c = self.cpu_per_milli
        if c is None or cpu_left is None:
            return 0.0
        if self.cpu_spread is not None:
            return self.cpu_spread(cpu_left, free)
        return stranded_milli(cpu_left, free, c)

    def _delta(self, node: NodeState, d: Demand, gpu: int | None,
               before: float | None = None) -> float:
        if before is None:
            before = self.node_cost(node.product, node.cpu_left, tuple(node.free))
        cpu, free = self._after(node, d, gpu)
        return self.node_cost(node.product, None if node.cpu_left is None else cpu, free) - before

    def _best_share_gpu(self, node: NodeState, d: Demand, cands: list[int]) -> tuple[float, int]:
        best = (math.inf, 0, -1)
        free0, product, cpu_left = node.free, node.product, node.cpu_left
        waste = self.waste is not None
        # the node's cost now is the same for every candidate GPU: computed once
        before = self.node_cost(product, cpu_left, tuple(free0)) if waste and cands else 0.0
        cpu = None if cpu_left is None else cpu_left - d.cpu_milli  # as ``_after``
        seen: set[int] = set()
        for i in cands:
            # GPUs with the same free share leave the node in the same state (costs read
            # the free shares as a multiset): the lowest index of each wins its ties.
            f = free0[i]
            if f in seen:
                continue
            seen.add(f)
            if waste:  # ``_delta`` for the share on GPU i, inline (the scorer's hot loop)
                free = list(free0)
                free[i] = f - d.gpu_milli
                delta = self.node_cost(product, cpu, tuple(free)) - before
            else:
                delta = 0.0
            key = (round(delta, 6), f, i)
            if key < best:
                best = key
        return best[0], best[2]

    @staticmethod
    def score_key(d: Demand) -> tuple[int, int, int]:
        """All of a demand ``score`` reads: the GPU share or count and the CPU."""
        return (d.gpu_milli, d.num_gpu, d.cpu_milli)

    def score(self, node: NodeState, d: Demand) -> float:
        if d.gpu_milli:
            cands = [i for i, f in enumerate(node.free) if f >= d.gpu_milli]
            delta, _ = self._best_share_gpu(node, d, cands)
        else:
            delta = self._delta(node, d, None) if self.waste else 0.0
        if self.values and sum(node.free) == node.capacity:
            # A node with every GPU free and a class's CPU left hosts what an untouched
            # one of that class does (``untouched``); read from the state alone, as
            # scores are memoised by state.
            n = len(node.free)
            entries = self.values.get((node.product, n, node.cpu_left))
            if entries:
                taken = d.num_gpu if not d.gpu_milli else 1
                cpu = None if node.cpu_left is None else node.cpu_left - d.cpu_milli
                delta += loss(entries, n, n - taken, cpu)
        grad = int(sigmoid(-delta / 1000) * 100)
        capacity = node.capacity
        used = 1 if sum(node.free) < capacity else 0
        if self.waste is None:  # no workload model: best fit on GPU left
            left = node.free_total() - d.total_gpu_milli
            return grad * 10.0 + used + 0.5 * (1.0 - left / (capacity + 1))
        # One float: gradient first, then "already in use"; ties go to the lower rank.
        return grad * 10.0 + used

    def pick(self, node: NodeState, d: Demand, candidates: list[int]) -> tuple[int, ...] | None:
        if d.gpu_milli and candidates:
            return (self._best_share_gpu(node, d, candidates)[1],)
        return None


