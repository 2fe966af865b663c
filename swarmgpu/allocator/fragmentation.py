"""GPU fragmentation of one node against a workload (FGD, USENIX ATC'23).

A node's free GPU capacity is "fragmented" for a kind of task when that task cannot use
it: the node cannot host the task at all (too few GPUs with enough free share, too little
CPU, wrong GPU model), or it can but some GPUs have less free share than the task asks.
The node's fragmentation is the expectation over the workload's typical tasks, in
GPU-milli. Placing a task where it increases fragmentation least is FGD's rule.

Pure functions over plain tuples, so the allocator can memoise them by node state.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache

MILLI = 1000
# The residual-waste model's weight of "no further task comes", beside the typical tasks'
# weights (which sum to 1): ``residual_waste_table``. The daemon's value is the config key
# ``placement.residual_stop_weight`` (this is its default).
STOP_WEIGHT = 0.01


@dataclass(frozen=True, order=True)
class TaskShape:
    """The resource shape of a task, without identity (FGD's "typical pod")."""

    cpu_milli: int
    gpu_milli: int  # per GPU; 1000 for whole GPUs, 0 for CPU-only tasks
    num_gpu: int
    products: tuple[str, ...] = ()  # acceptable GPU products (globs); empty = any

    def __hash__(self) -> int:
        # Kept on the instance: shapes key the workload model's weights and the scorer's
        # tables (a dataclass hash re-hashes every field on every lookup).
        got: int | None = self.__dict__.get("_hash")
        if got is None:
            got = self.__dict__["_hash"] = hash(
                (self.cpu_milli, self.gpu_milli, self.num_gpu, self.products))
        return got

    def __getstate__(self) -> dict[str, object]:
        # Without the kept hash: another process hashes strings with another seed.
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}


@dataclass(frozen=True)
class TypicalTask:
    shape: TaskShape
    weight: float  # share of the workload, weights sum to 1


def product_matches(product: str, patterns: tuple[str, ...]) -> bool:
    """True when ``product`` matches one pattern (exact or fnmatch glob), case-insensitive
    and with spaces, ``_`` and ``-`` alike (``product_key``); no pattern is any product."""
    if not patterns:
        return True
    p = product_key(product)
    return any(p == (q := product_key(pat)) or fnmatchcase(p, q) for pat in patterns)


@lru_cache(maxsize=4096)
def product_key(name: str) -> str:
    """A GPU product name or pattern as matched: GPU feature discovery writes
    ``NVIDIA-A100-SXM4-80GB`` for nvidia-smi's ``NVIDIA A100-SXM4-80GB``."""
    return re.sub(r"[\s_-]+", "-", name.strip()).lower()


def typical_tasks(shapes: Iterable[TaskShape], coverage: float = 0.95) -> tuple[TypicalTask, ...]:
    """The most frequent shapes covering ``coverage`` of the tasks, weights renormalised.

    Ties in frequency are ordered by shape so the result is deterministic.
    """
    counts = Counter(shapes)
    total = sum(counts.values())
    if total == 0:
        return ()
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], _desc_key(kv[0])))
    chosen: list[tuple[TaskShape, int]] = []
    covered = 0
    for shape, n in ranked:
        if covered >= coverage * total:
            break
        chosen.append((shape, n))
        covered += n
    return tuple(TypicalTask(s, n / covered) for s, n in chosen)


def _desc_key(s: TaskShape) -> tuple[int, int, int, tuple[str, ...]]:
    # Equal counts: larger shapes first (as a descending sort of the original does).
    return (-s.cpu_milli, -s.gpu_milli, -s.num_gpu, tuple(sorted(s.products)))


def task_fragment(
    product: str, cpu_left: int, free: tuple[int, ...], task: TaskShape
) -> int:
    """GPU-milli of this node that ``task`` cannot use."""
    total = sum(free)
    if task.num_gpu == 0 or not product_matches(product, task.products):
        return total
    fitting = 0
    unusable = 0
    for f in free:
        if f >= task.gpu_milli:
            fitting += 1
        else:
            unusable += f
    if fitting >= task.num_gpu and cpu_left >= task.cpu_milli:
        return unusable
    return total


def node_fragmentation(
    product: str, cpu_left: int, free: tuple[int, ...], tasks: tuple[TypicalTask, ...]
) -> float:
    """Expected fragmented GPU-milli of a node (FGD's F_n(M)); ``free`` in any order."""
    if not any(free):
        return 0.0
    return sum(t.weight * task_fragment(product, cpu_left, free, t.shape) for t in tasks)


def cpu_per_gpu_milli(tasks: tuple[TypicalTask, ...]) -> float | None:
    """CPU milli the workload's GPU tasks ask per GPU-milli (weighted mean), or None when
    the workload has no GPU tasks or they ask no CPU."""
    gpu = sum(t.weight * t.shape.num_gpu * t.shape.gpu_milli for t in tasks)
    cpu = sum(t.weight * t.shape.cpu_milli for t in tasks if t.shape.num_gpu)
    if gpu <= 0 or cpu <= 0:
        return None
    return cpu / gpu


def cpu_reserve_per_gpu_milli(tasks: tuple[TypicalTask, ...], cluster_cpu_milli: int,
                              cluster_gpu_milli: int) -> float | None:
    """CPU milli the cluster must keep per free GPU-milli so that its GPUs can still be
    fed: the GPU tasks' own (``cpu_per_gpu_milli``), plus the CPU-only tasks' CPU that
    the cluster's spare CPU cannot absorb.

    Filling every GPU with the workload's mix asks ``c_all`` CPU per GPU-milli (all
    tasks' CPU over their GPU-milli), of which the GPU tasks need ``c_gpu``. The cluster
    has ``R = cluster CPU / cluster GPU-milli``; while ``c_all <= R`` the CPU-only tasks
    fit in the CPU the GPU tasks leave, and ``c_gpu`` is the reserve. Beyond that, each
    GPU-milli's share of the excess (``c_all - R``) must come out of CPU the GPU tasks
    need, so the reserve grows by it (continuous at ``c_all = R``). Measured on openb
    with 25% CPU-only pods (cpu250: c_all 18.5 > R 17.2), seeds 42-51 at 100% arrived:
    92.77% with ``c_gpu``, below FGD's 92.80; 93.11% with this.
    """
    c_gpu = cpu_per_gpu_milli(tasks)
    if c_gpu is None:
        return None
    return c_gpu + cpu_excess_per_gpu_milli(tasks, cluster_cpu_milli, cluster_gpu_milli)


def cpu_excess_per_gpu_milli(tasks: tuple[TypicalTask, ...], cluster_cpu_milli: int,
                             cluster_gpu_milli: int) -> float:
    """``max(0, c_all - R)`` of ``cpu_reserve_per_gpu_milli``: the CPU per GPU-milli the
    workload asks beyond what the cluster has (0: the cluster's CPU suffices, or unknown).
    """
    gpu = sum(t.weight * t.shape.num_gpu * t.shape.gpu_milli for t in tasks)
    if gpu <= 0 or cluster_cpu_milli <= 0 or cluster_gpu_milli <= 0:
        return 0.0
    c_all = sum(t.weight * t.shape.cpu_milli for t in tasks) / gpu
    return max(0.0, c_all - cluster_cpu_milli / cluster_gpu_milli)


def stranded_milli(cpu_left: int, free: tuple[int, ...], cpu_per_milli: float) -> float:
    """Free GPU-milli the node's CPU cannot feed at the workload's CPU-per-GPU ratio.

    FGD only sees CPU when a typical task stops fitting, which happens late: by then a
    CPU-poor node has given its CPU to CPU-heavy tasks and its last GPUs stay idle. This
    measures that risk early, in the same unit as fragmentation. ``SwarmScorer`` prices
    by it where the workload asks more CPU than the cluster has, by ``CpuSpread``
    elsewhere.
    """
    return max(0.0, sum(free) - cpu_left / cpu_per_milli)


class CpuSpread:
    """Free GPU-milli a node's CPU is expected not to feed, read from the workload's
    spread of CPU per GPU-milli below its mean: with ``f`` the node's free GPU-milli,
    ``rho`` its CPU left per free GPU-milli, ``r_i`` what a typical GPU task asks per
    GPU-milli, ``w_i`` that task's share of the GPU-milli asked and ``c`` their weighted
    mean (``cpu_per_gpu_milli``), the shortfall ``s(rho) = sum_i w_i max(0, 1 - rho / r_i)``
    (a task of ratio ``r`` fed at ``rho`` leaves ``1 - rho / r`` of the node idle) counts
    as ``f * (s(rho) - s(c)) / (s(0) - s(c))`` below ``c`` and not at all above it.

    With one ratio it is ``stranded_milli``'s ``max(0, f - cpu_left / c)``, what the CPU
    cannot feed at the mean, the rule before. Where the tasks' CPU is spread, a node
    below the mean still feeds the lighter tasks: ``s`` falls steeply while ``rho`` is
    below the light tasks' ratio and gently above, so a CPU-heavy task packs onto a used
    node whose CPU the light tasks can still use. By the mean's straight line every
    CPU-heavy pod of x-cpubimodal (half the GPU pods at a tenth of their CPU, half at
    twice) went to a fresh node, and the nodes with every GPU free ran out before FGD's
    (docs/simulate.md, "Which pods fail on x-cpubimodal").
    Above the mean nothing counts, as before: ``s`` itself is positive up to the
    heaviest task's ratio, so a fresh 8-GPU node with 12 CPU per GPU "stranded" for
    8-GPU pods of 15 per GPU it cannot host at all, and any task that raised its ratio,
    light ones most, gained by breaking it (multigpu60s11, seed 43: 94.56 against 97.40).
    """

    def __init__(self, tasks: tuple[TypicalTask, ...]) -> None:
        gpu = [(t.weight * t.shape.num_gpu * t.shape.gpu_milli,
                t.shape.cpu_milli / (t.shape.num_gpu * t.shape.gpu_milli))
               for t in tasks if t.shape.num_gpu and t.shape.gpu_milli > 0]
        total = sum(w for w, _r in gpu)
        # (share of the GPU-milli asked, CPU per GPU-milli); a task asking no CPU is
        # fed anywhere
        self.ratios = tuple((w / total, r) for w, r in gpu if r > 0) if total > 0 else ()
        # the GPU-milli-weighted mean ratio
        self.mean = sum(w * r for w, r in self.ratios)
        self.floor = self._short(self.mean)
        span = self._short(0.0) - self.floor
        self.scale = 1.0 / span if span > 0 else 0.0

    def _short(self, rho: float) -> float:
        return sum(w * (1.0 - rho / r) for w, r in self.ratios if r > rho)

    def __call__(self, cpu_left: int, free: tuple[int, ...]) -> float:
        f = sum(free)
        if f <= 0:
            return 0.0
        rho = max(0, cpu_left) / f
        if rho >= self.mean:
            return 0.0
        return f * (self._short(rho) - self.floor) * self.scale


class CpuUnfit:
    """Per GPU model, the share of the workload's GPU tasks (by weight, among those that
    may run on it) that ask one GPU or part of one and more CPU than a node has left: for
    them the node's free GPU is unusable, whatever its shares (FGD's fragmentation counts
    it so, per task).

    ``stranded_milli`` prices CPU by the workload's mean CPU per GPU-milli, linearly and
    early (where the CPU suffices ``CpuSpread``, by its spread); this is the step each
    task shape meets when the CPU left drops below its own ask. ``SwarmScorer`` counts it
    where the workload asks more CPU than the cluster has
    (``cpu_excess_per_gpu_milli`` > 0: CPU runs out cluster-wide, so which tasks a node's
    last CPU still fits decides which GPUs are used): there the mean alone let CPU-only
    pods take the CPU of nodes whose GPUs then idled, 1-4 points below FGD with a third
    to a half of the pods CPU-only. Where the CPU suffices it only pulled GPU work toward
    CPU-poor nodes, against the pairing of shares (0.1-1 point lost; docs/simulate.md,
    "CPU-heavy workloads").
    Multi-GPU tasks are left out: whether one fits a node is whether whole GPUs are free
    there, which using any of them ends anyway; counted here (their CPU asked of a node
    they could no longer take) they sent work to untouched nodes and multi-GPU tasks
    failed (multigpu60: 2 points below FGD).
    """

    def __init__(self, tasks: tuple[TypicalTask, ...]) -> None:
        self.tasks = tasks
        self._steps: dict[str, tuple[list[int], list[float]]] = {}

    def _of(self, product: str) -> tuple[list[int], list[float]]:
        got = self._steps.get(product)
        if got is None:
            gpu = [t for t in self.tasks if t.shape.num_gpu and t.shape.gpu_milli > 0
                   and product_matches(product, t.shape.products)]
            total = sum(t.weight for t in gpu)
            one = sorted((t.shape.cpu_milli, t.weight) for t in gpu if t.shape.num_gpu == 1)
            # above[i]: the weight share of the one-GPU tasks after the first i by CPU
            # (summed from the end, so the last is exactly 0)
            above = [0.0]
            for _c, w in reversed(one):
                above.append(above[-1] + w)
            above = [a / total if total > 0 else 0.0 for a in reversed(above)]
            got = self._steps[product] = ([c for c, _w in one], above)
        return got

    def __call__(self, product: str, cpu_left: int) -> float:
        cpus, above = self._of(product)
        return above[bisect_right(cpus, cpu_left)]


class FragCache:
    """Memoised ``node_fragmentation`` for one workload (keys are sorted free tuples)."""

    def __init__(self, tasks: tuple[TypicalTask, ...], maxsize: int = 1 << 18) -> None:
        self.tasks = tasks

        @lru_cache(maxsize=maxsize)
        def _frag(product: str, cpu_left: int, free_sorted: tuple[int, ...]) -> float:
            return node_fragmentation(product, cpu_left, free_sorted, tasks)

        self._frag = _frag

    def __call__(self, product: str, cpu_left: int, free: tuple[int, ...]) -> float:
        return self._frag(product, cpu_left, tuple(sorted(free)))


def residual_waste_table(tasks: tuple[TypicalTask, ...], product: str,
                         size: int = MILLI, stop: float = STOP_WEIGHT) -> tuple[float, ...]:
    """Expected GPU-milli left unused on one GPU with ``h`` milli free, for h = 0..size.

    The model: tasks of the workload keep landing on the GPU, each drawn by its weight
    among the typical tasks that still fit (shares by their size, whole-GPU tasks as
    1000), until none fits; what is left then is waste. FGD's fragmentation asks whether
    the free share is usable *now*, so it rates a 0.35 hole beside a 0.65 share worse
    than a 0.12 one; this asks what will be left at the end, where the 0.35 hole likely
    takes a 0.32 share (0.03 left) and the 0.12 hole stays empty. Whole-GPU demands of
    several GPUs count per GPU (1000 each); CPU is left to ``CpuSpread``
    (``stranded_milli`` where the CPU is short).

    ``stop`` is the weight, beside the tasks' (which sum to 1), of the draw that ends it:
    no further task is offered to this GPU (the cluster fills first, or the tasks that
    fit go elsewhere). Without it a hole that only a rare task fits counts as filled for
    sure: the 190 milli beside a 0.81 share, which on openb's default only the 0.16
    shares fit (0.7% of the tasks; 108 such shares arrive for about 1,050 slivers), is
    rated as good as a 0.53 hole that the common 0.47 shares fill. With ``stop`` the
    stop's share of the draw is ``stop / (stop + weight of the tasks that fit)``: near 1
    for such a sliver, a few percent for a hole that common tasks fit. Measured
    (docs/simulate.md): 0.01 places more than 0 on every workload tried.
    """
    return _waste_of_sizes(_gpu_sizes(tasks, product), size, stop)


def _gpu_sizes(tasks: tuple[TypicalTask, ...], product: str) -> tuple[tuple[int, float], ...]:
    """(GPU-milli per GPU, summed weight) of the tasks that may run on ``product``, by
    size: all that ``residual_waste_table`` reads of the workload."""
    sizes: dict[int, float] = {}
    for t in tasks:
        s = t.shape
        if s.num_gpu == 0 or s.gpu_milli <= 0 or not product_matches(product, s.products):
            continue
        sizes[s.gpu_milli] = sizes.get(s.gpu_milli, 0.0) + t.weight
    return tuple(sorted(sizes.items()))


def _waste_of_sizes(ordered: tuple[tuple[int, float], ...], size: int,
                    stop: float) -> tuple[float, ...]:
    waste = [0.0] * (size + 1)
    for h in range(size + 1):
        # the stop draw leaves all h of a broken GPU; an untouched one stays whole
        num, den = (stop * h if h < size else 0.0), stop
        for milli, w in ordered:
            if milli > h:
                break
            num += w * waste[h - milli]
            den += w
        waste[h] = num / den if den else float(h)
    return tuple(waste)


def _table_of(tasks: tuple[TypicalTask, ...], tables: dict[str, tuple[float, ...]],
              by_sizes: dict[tuple[tuple[tuple[int, float], ...], int], tuple[float, ...]],
              product: str, top: int, stop: float) -> tuple[float, ...]:
    """``product``'s waste table, at least ``top`` long (GPUs larger than 1000 milli:
    grown), shared by the models whose tasks are the same."""
    table = tables.get(product)
    if table is None or len(table) <= top:
        key = (_gpu_sizes(tasks, product), max(MILLI, top))
        table = by_sizes.get(key)
        if table is None:
            table = by_sizes[key] = _waste_of_sizes(*key, stop)
        tables[product] = table
    return table


class ResidualWaste:
    """Expected residual waste of a node's free GPU shares (``residual_waste_table``,
    summed over GPUs), memoised per GPU model and sorted free tuple."""

    def __init__(self, tasks: tuple[TypicalTask, ...], maxsize: int = 1 << 18,
                 stop: float = STOP_WEIGHT) -> None:
        self.tasks = tasks
        self.stop = stop
        tables: dict[str, tuple[float, ...]] = {}
        # By content: GPU models that the same tasks may use (most, when few tasks pin a
        # model) share one table; building one costs ~2 ms, and a cluster of 7 models
        # would build 7 on every workload refresh.
        by_sizes: dict[tuple[tuple[tuple[int, float], ...], int], tuple[float, ...]] = {}
        self._tables, self._by_sizes = tables, by_sizes

        # The memo holds what it reads, not ``self``: a cycle through it would leave
        # everything the memo holds for a full collection to free.
        @lru_cache(maxsize=maxsize)
        def _waste(product: str, free_sorted: tuple[int, ...]) -> float:
            table = _table_of(tasks, tables, by_sizes, product,
                              free_sorted[-1] if free_sorted else 0, stop)
            return sum(table[f] for f in free_sorted if f > 0)

        self._waste = _waste

    def _table(self, product: str, top: int) -> tuple[float, ...]:
        return _table_of(self.tasks, self._tables, self._by_sizes, product, top, self.stop)

    def __call__(self, product: str, free: tuple[int, ...]) -> float:
        return self._waste(product, tuple(sorted(free)))



# GPU-milli per (GPU model, GPUs of that model on the node, the node's CPU milli or None
# when it reports none): the node classes a task may fit (``Allocator.gpu_hosts``)
Hosts = Mapping[tuple[str, int, int | None], int]


def restricted_demand(tasks: tuple[TypicalTask, ...], capacity: Mapping[str, int],
                      hosts: Hosts | None = None) -> dict[str, float]:
    """Per GPU model, the share of the workload's GPU demand that must land on it: tasks
    that accept only some of the cluster's models (``capacity``: GPUs or milli per model)
    spread their demand (weight x GPU-milli) over those models by capacity. Tasks that
    accept every model present, or none, restrict nothing.

    With ``hosts`` (the cluster's node classes), a task is also restricted by its CPU:
    where no node of a model with the GPUs it asks has the CPU it asks (openb's 8-GPU
    tasks of 120 cores fit only G3's 128-core nodes, not G2's 96), its demand spreads over
    the models some node of which can host it, by those nodes' capacity. Narrowing by
    GPU count alone restricts nothing: a multi-GPU task needs whole free nodes, which a
    claim on a model's free milli does not express (measured: claiming the 8-GPU models
    for 8-GPU tasks cost default 0.05 points).
    """
    models = {m: c for m, c in capacity.items() if c > 0}
    share: dict[str, float] = dict.fromkeys(models, 0.0)
    demand = 0.0
    for t in tasks:
        s = t.shape
        if s.num_gpu == 0 or s.gpu_milli <= 0:
            continue
        d = t.weight * s.num_gpu * s.gpu_milli
        demand += d
        for m, part in _spread(s, models, hosts).items():
            share[m] += d * part
    if demand <= 0:
        return share
    return {m: v / demand for m, v in share.items()}


def _spread(s: TaskShape, models: Mapping[str, int], hosts: Hosts | None) -> dict[str, float]:
    """The part of ``s``'s demand that must land on each model (by the capacity of the
    models, or of the nodes, that can host it); empty when it restricts nothing."""
    accepted = [m for m in models if product_matches(m, s.products)]
    if hosts is None:
        if not accepted or len(accepted) == len(models):
            return {}
        cap = sum(models[m] for m in accepted)
        return {m: models[m] / cap for m in accepted}
    ok = set(accepted)
    sized: set[str] = set()  # models with a node of enough GPUs
    fit: dict[str, int] = {}  # of those, the capacity of the nodes with the CPU too
    for (m, n, cpu), milli in hosts.items():
        if m not in ok or n < s.num_gpu:
            continue
        sized.add(m)
        if cpu is None or cpu >= s.cpu_milli:
            fit[m] = fit.get(m, 0) + milli
    # a pin narrows the models on its own; the CPU only where it rules a whole one out
    # (``fit`` is within ``sized``: equal lengths, the same models)
    pinned = len(accepted) < len(models)
    if not fit or (len(fit) == len(sized) and not pinned):
        return {}
    total = sum(fit.values())
    return {m: c / total for m, c in fit.items()}


def restricted_pressure(tasks: tuple[TypicalTask, ...], capacity: Mapping[str, int],
                        free: Mapping[str, int] | None = None,
                        demand: Mapping[str, float] | None = None) -> dict[str, float]:
    """Per GPU model with free capacity, the share of that free capacity which restricted
    tasks are expected to claim, in 0..1, minus the least model's share.

    If arrivals keep coming in the workload's mix until the cluster's free capacity is
    used (as residual waste assumes per GPU), restricted tasks need ``demand[m] x total
    free`` of model m (``restricted_demand``), so they claim that over ``free[m]`` of it,
    capped at 1 (a milli cannot be claimed twice). ``free`` defaults to ``capacity`` (an
    empty cluster); both in the same unit.

    Why: residual waste (and the FGD fragmentation of each model) rates every model's
    free capacity as equally good for a task that may run anywhere, so unrestricted tasks
    fill the models that pinned tasks need, and those fail later although other models
    had room. A milli taken on m by an unrestricted task is expected to displace
    ``pressure[m]`` milli of restricted demand. As unrestricted work fills the
    uncontested models, their free share shrinks and the contested ones' claim falls, so
    the preference fades once the free capacity matches what is claimed (water filling),
    instead of steering work off a model whose pins it could also hold. FGD's own term
    (free capacity counts as fragment for tasks that cannot use the model) is the same
    idea without capacity: it avoids the model most tasks are pinned to even when that
    model is the largest and least contested (measured in docs/simulate.md).
    Subtracting the least share keeps values near 0 when the claims are even, so the
    score's resolution (a sigmoid of the cost's growth) stays as it is.
    """
    if free is None:
        free = capacity
    if demand is None:
        demand = restricted_demand(tasks, capacity)
    total_free = sum(max(0, free.get(m, 0)) for m in demand)
    claim: dict[str, float] = {}
    for m, share in demand.items():
        left = free.get(m, 0)
        if left > 0:
            claim[m] = min(1.0, share * total_free / left)
    if not claim:
        return {}
    least = min(claim.values())
    return {m: v - least for m, v in claim.items()}
