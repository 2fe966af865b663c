"""A sampled roll-out among near-best nodes: an experiment, off unless switched on
(``SwarmScorer.rollout``, set by benchmarks/rollout_try.py).

When the best few node states for a demand score within ``margin`` of the best (a tie
zone), the demand is placed tentatively on each of the top ``k``, ``m`` tasks drawn from
the scorer's workload mix (what the daemon learned, never a trace's future) are placed
greedily after it by the same scorer, and everything is undone; the candidate whose
roll-out placed the most GPU-milli wins, then the fewest failures, then (``leaf``
"waste") the least growth of the scorer's node cost over the nodes it touched, then the
base order. Two leaves tried against h-bimodalseed's loss (stop 76, "rolloutc"):
"whole" breaks the tie first by the untouched nodes (every GPU and all the CPU free)
the roll-out broke, then as "waste"; "frag" ranks by the growth of FGD's fragmentation
(``node_fragmentation``, which counts a node's free GPU as lost to a task its CPU or
GPUs no longer fit) instead of the scorer's cost. "priced" (stop 77) ranks by one sum
in the scorer's own units: B's growth of the node cost plus, for each untouched node the
roll-out broke, the GPU-milli the scorer's score charges for breaking one of its class
(``untouched.loss`` at the scorer's ``values``); "sequenced" prices each at the untouched
nodes left when it broke, as the scorer would, re-reading the cluster after each
placement. "covered" (stop 77) is "priced" with the values the scorer's formula gives
when every shape of the mix that only an untouched node hosts counts, not only those
confined to some classes (``untouched.whole_groups``); "cpuheld" is "priced" plus, per
touched node, the growth of the scorer's CPU step (``CpuUnfit``: the free GPU-milli times
the share of the mix's GPU tasks that ask one GPU and more CPU than is left) counted only
for the one-GPU tasks above the node's CPU share (its CPU over its GPUs), where the
scorer itself counts none (the CPU suffices cluster-wide). ``mix`` "full" (stop 79)
draws from every shape the scorer learned (its ``shapes``) instead of its typical tasks
(``workload``: the shapes covering 95% of the tasks), which leave out the rare shapes,
every multi-GPU task among them on openb's traces. ``distinct`` "class" (stop 79) rolls
out only the candidates that differ from the base choice in node class or in being
untouched: among nodes of one class and one touched-state the scorer's own order already
tells them apart, and on h-bimodalseed that reshuffling of used nodes of one class was
most of what the roll-out changed and lost; "contested" (stop 81) does so only where
the scorer's mix contests the CPU (``cpu_contested``: more one-GPU tasks above the
cluster's CPU per GPU than the CPU the mix leaves unasked), any near-best node elsewhere,
where those moves carried most of the roll-out's gain; while the mix is mostly the
learner's prior (``mix_told``) it reads "class", or with ``warmup`` "base" rolls nothing
out. ``draws`` (stop 80) rolls each candidate out
on that many draws, common to all of them; ``rule`` "every" lets a candidate replace the
base choice only where it beats it on every draw (a sign test: one draw of 20 tasks is
noise where candidates differ by a cost one placement deeper), "mean" takes the best by
the keys summed over the draws. Measured: docs/simulate.md, "A sampled
roll-out among near-best nodes".
The draw is seeded per decision, and every candidate meets the same tasks, so runs are
reproducible and candidates differ by the node alone.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as Set
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from swarmgpu.allocator.fragmentation import (
    MILLI,
    CpuUnfit,
    FragCache,
    TaskShape,
    TypicalTask,
    product_matches,
)
from swarmgpu.allocator.untouched import (
    Groups,
    NodeClass,
    Values,
    loss,
    untouched_values,
    whole_groups,
)
from swarmgpu.allocator.values import Choice, Demand, NodeState, Unplaceable
from swarmgpu.allocator.workload import PRIOR_TASKS


class Allocator(Protocol):
    """What the roll-out uses of ``core.Allocator`` (which imports this module)."""

    decisions: int
    rolling: bool
    untouched: dict[NodeClass, int]

    @property
    def nodes(self) -> Mapping[str, NodeState]: ...

    @property
    def scorer(self) -> object: ...

    def observed_once(self) -> AbstractContextManager[None]: ...
    def group_node(self, gk: int, exclude: Set[str] = ...) -> NodeState | None: ...
    def place(self, d: Demand, *, explain: bool = ...) -> Choice | Unplaceable: ...
    def place_on(self, name: str, d: Demand) -> Choice | Unplaceable: ...
    def commit(self, choice: Choice) -> None: ...
    def release(self, choice: Choice) -> None: ...


LEAVES = ("milli", "waste", "whole", "frag", "priced", "sequenced", "covered", "cpuheld")
MIXES = ("typical", "full")
DISTINCT = ("", "class", "class-zone", "contested")
RULES = ("mean", "every")
NO_CPU_DATA = 1 << 62  # CPU left of a node without CPU data: never short
# a node cost: (GPU model, CPU left or None, free GPU-milli per GPU) -> GPU-milli
Cost = Callable[[str, int | None, tuple[int, ...]], float]
# the price of the untouched nodes broken, in the order they broke, in their states
# now -> GPU-milli
Price = Callable[[Sequence[NodeState]], float]
# the CPU a node holds beside its free GPUs, in its state now -> GPU-milli
Held = Callable[[NodeState], float]
# what one roll-out says of a candidate (``roll``), compared as a tuple
Key = tuple[int, int, int, float]


def shape_demand(shape: TaskShape) -> Demand:
    """The demand of a workload shape (whole GPUs, a share of one, or CPU only)."""
    if shape.gpu_milli >= MILLI:
        return Demand(num_gpu=shape.num_gpu, cpu_milli=shape.cpu_milli, products=shape.products)
    if shape.gpu_milli:
        return Demand(gpu_milli=shape.gpu_milli, cpu_milli=shape.cpu_milli,
                      products=shape.products)
    return Demand(cpu_milli=shape.cpu_milli, products=shape.products)


@dataclass
class RollOut:
    """The roll-out's settings, and counts of what it did (``stats``: decisions seen,
    tie zones rolled out, choices changed, seconds spent)."""

    k: int = 3  # candidates rolled out, the best first
    m: int = 20  # tasks drawn per roll-out
    margin: float = 0.0  # score below the best still in the tie zone
    # what breaks ties between roll-outs that place as much: "milli" (nothing: the base
    # choice), "waste" (the least growth of the scorer's node cost, ``node_cost``),
    # "whole" (the fewest untouched nodes broken, then as "waste") or "frag" (the least
    # growth of FGD's fragmentation over the scorer's mix) or "priced" (as "waste", plus
    # the scorer's price of each untouched node broken) or "sequenced" (as "priced", each
    # at the untouched nodes left when it broke) or "covered" (as "priced", at the values
    # of ``whole_groups``: every shape that only an untouched node hosts) or "cpuheld" (as
    # "priced", plus the CPU step of the one-GPU tasks above a node's share, ``held_cpu``)
    leaf: str = "milli"
    # what the tasks are drawn from: "typical" (the scorer's ``workload``) or "full"
    # (every shape it learned, ``shapes``, by weight: the rare ones too)
    mix: str = "typical"
    # which near-best nodes are rolled out beside the base choice: "" (any), "class"
    # (those of the top ``k`` of another node class, or untouched where it is used or
    # the reverse) or "class-zone" (the best ``k - 1`` such in the whole tie zone) or
    # "contested" ("class" where the mix contests the CPU, ``cpu_contested``, else any)
    distinct: str = ""
    # "contested" while the mix cannot tell (``mix_told``): "class" (the scorer's order
    # among nodes of a class) or "base" (no roll-out: the base choice, as main)
    warmup: str = "class"
    # independent draws each candidate is rolled out on (the same for every candidate),
    # and how they decide: "mean" (the best by the keys summed over the draws) or
    # "every" (only a candidate better than the base choice on each draw replaces it)
    draws: int = 1
    rule: str = "mean"
    seed: int = 0
    stats: dict[str, float] = field(default_factory=dict)
    _demands: dict[tuple[TypicalTask, ...], tuple[list[Demand], list[float]]] = field(
        default_factory=dict)
    _frag: dict[tuple[TypicalTask, ...], FragCache] = field(default_factory=dict)
    # "covered": the groups, and what they were computed from (the scorer's shapes, its
    # free GPU-milli when pressure was last read, its node classes)
    _covered: tuple[object, int, object, Groups] | None = None
    # "full": the scorer's shapes, as typical tasks (the dict they came from, them)
    _full: tuple[object, tuple[TypicalTask, ...]] | None = None
    # "contested": what ``cpu_contested`` read (the scorer's shapes, its CPU and GPU
    # capacity) and its answers, by GPU model
    _contested: tuple[object, object, dict[str, bool]] | None = None

    def __post_init__(self) -> None:
        # k 4 (stop 81) rolls out one more near-best node; beyond that the cost grows
        # with nothing measured to ask for it
        if not 1 <= self.k <= 4 or self.m < 0 or self.margin < 0 or self.draws < 1:
            raise ValueError(f"roll-out k={self.k} m={self.m} margin={self.margin} "
                             f"draws={self.draws}: use k in 1..4, m >= 0, margin >= 0 "
                             "and draws >= 1")
        if self.rule not in RULES:
            raise ValueError(f"roll-out rule={self.rule!r}: use one of {', '.join(RULES)}")
        if self.leaf not in LEAVES:
            raise ValueError(f"roll-out leaf={self.leaf!r}: use one of {', '.join(LEAVES)}")
        if self.mix not in MIXES:
            raise ValueError(f"roll-out mix={self.mix!r}: use one of {', '.join(MIXES)}")
        if self.warmup not in ("class", "base"):
            raise ValueError(f"roll-out warmup={self.warmup!r}: use \"class\" or \"base\"")
        if self.distinct not in DISTINCT:
            raise ValueError(f"roll-out distinct={self.distinct!r}: use \"\" (any), "
                             "\"class\", \"class-zone\" or \"contested\"")

    def count(self, what: str, n: float = 1) -> None:
        self.stats[what] = self.stats.get(what, 0) + n

    def candidates(self, alloc: Allocator, scores: Mapping[int, float | None],
                   groups: Mapping[int, object], best_score: float,
                   exclude: Set[str], where: Callable[[NodeState], bool] | None,
                   ) -> list[NodeState]:
        """The top ``k`` node states within ``margin`` of the best, best first (ties to
        the lower rank, as ``Allocator.place`` breaks them), one node each; with
        ``distinct`` "class" the base choice and those of them that ``differ`` from it,
        with "class-zone" the base choice and the best ``k - 1`` that differ from it,
        with "contested" as "class" where ``cpu_contested`` at the base's GPU model, else
        all of them."""
        near: list[tuple[float, int, NodeState]] = []
        for gk in groups:
            s = scores.get(gk)
            if s is None or s < best_score - self.margin:
                continue
            rep = alloc.group_node(gk, exclude)
            if rep is None or (where is not None and not where(rep)):
                continue
            near.append((-s, rep.rank, rep))
        near.sort(key=lambda t: (t[0], t[1]))
        if self.distinct == "class-zone" and near:
            near = near[:1] + [t for t in near[1:] if differ(near[0][2], t[2])]
        top = [rep for _, _, rep in near[:self.k]]
        if self.distinct == "contested" and len(top) > 1:
            if self.warmup == "base" and not mix_told(alloc.scorer):
                self.count("warmup", 1)
                return top[:1]
            if not self.contested(alloc.scorer, top[0].product):
                self.count("calm", 1)
                return top
            self.count("contested", 1)
        if self.distinct in ("class", "contested") and top:
            kept = top[:1] + [rep for rep in top[1:] if differ(top[0], rep)]
            if len(kept) < len(top):
                self.count("same_class", len(top) - len(kept))
            top = kept
        return top

    def contested(self, scorer: object, product: str) -> bool:
        """``cpu_contested``, kept while the scorer's shapes (a new dict per mix), its
        CPU and GPU capacity are the same."""
        key = (getattr(scorer, "cluster_cpu", 0), tuple(getattr(scorer, "capacity", {}).items()))
        got = self._contested
        if got is None or got[0] is not getattr(scorer, "shapes", None) or got[1] != key:
            got = self._contested = (getattr(scorer, "shapes", None), key, {})
        if product not in got[2]:
            got[2][product] = cpu_contested(scorer, product)
        return got[2][product]

    def drawn(self, scorer: object) -> Sequence[TypicalTask]:
        """What ``draw`` draws from: the scorer's typical tasks, or with ``mix`` "full"
        every shape it learned (its ``shapes``, by weight; the typical tasks where it has
        none)."""
        workload: Sequence[TypicalTask] = getattr(scorer, "workload", ())
        shapes = getattr(scorer, "shapes", None)
        if self.mix != "full" or not shapes:
            return workload
        got = self._full
        if got is None or got[0] is not shapes:  # the scorer makes a new dict per mix
            got = self._full = (shapes, tuple(TypicalTask(s, w) for s, w in shapes.items()))
        return got[1]

    def draw(self, workload: Sequence[TypicalTask], rng: random.Random) -> list[Demand]:
        """``m`` demands drawn from the mix by weight."""
        key = tuple(workload)
        got = self._demands.get(key)
        if got is None:
            if len(self._demands) > 64:
                self._demands.clear()
            got = self._demands[key] = ([shape_demand(t.shape) for t in workload],
                                        [t.weight for t in workload])
        demands, weights = got
        return rng.choices(demands, weights, k=self.m) if demands else []

    def cost(self, scorer: object, workload: Sequence[TypicalTask]) -> Cost | None:
        """The leaf's node cost (None: the leaf weighs none)."""
        if self.leaf in ("waste", "whole", "priced", "sequenced", "covered", "cpuheld"):
            got: Cost | None = getattr(scorer, "node_cost", None)
            return got
        if self.leaf != "frag" or not workload:
            return None
        key = tuple(workload)
        frag = self._frag.get(key)
        if frag is None:
            if len(self._frag) > 8:
                self._frag.clear()
            frag = self._frag[key] = FragCache(key)

        def fragmented(product: str, cpu_left: int | None, free: tuple[int, ...]) -> float:
            return frag(product, NO_CPU_DATA if cpu_left is None else cpu_left, free)
        return fragmented

    def price(self, alloc: Allocator) -> Price | None:
        """The leaf's price of untouched nodes broken (None: the leaf weighs none), read
        from the scorer as the decision finds it."""
        if self.leaf in ("priced", "cpuheld"):
            return broken_price(getattr(alloc.scorer, "values", {}))
        if self.leaf == "covered":
            return broken_price(self.covered_values(alloc))
        if self.leaf == "sequenced":
            groups: Groups = getattr(alloc.scorer, "groups", {})
            return sequenced_price(groups, alloc.untouched)
        return None

    def held(self, scorer: object) -> Held | None:
        """The leaf's CPU held beside free GPUs (None: the leaf weighs none, or the
        scorer's node cost already counts the step for every one-GPU task)."""
        unfit: CpuUnfit | None = getattr(scorer, "cpu_unfit", None)
        if self.leaf != "cpuheld" or unfit is None or getattr(scorer, "cpu_short", False):
            return None
        return held_cpu(unfit)

    def covered_values(self, alloc: Allocator) -> Values:
        """The scorer's untouched values over ``whole_groups`` at its shapes, node classes
        and free GPU-milli (as it last resolved them: the groups change with it) and the
        untouched nodes as the decision finds them; empty without node classes."""
        scorer = alloc.scorer
        shapes = getattr(scorer, "shapes", None)
        hosts = getattr(scorer, "hosts", None)
        if not shapes or not hosts:
            return {}
        free = sum(getattr(scorer, "free", {}).values())
        got = self._covered
        if got is None or got[0] is not shapes or got[1] != free or got[2] != hosts:
            got = self._covered = (shapes, free, dict(hosts), whole_groups(shapes, hosts, free))
        return untouched_values(got[3], alloc.untouched) if got[3] else {}

    def choose(self, alloc: Allocator, d: Demand, cands: list[NodeState]) -> NodeState:
        """The candidate whose roll-outs place the most, by ``rule`` over ``draws``
        (``consistent``); the state is left as it was."""
        t0 = time.perf_counter()
        self.count("tie_zones", 1)
        workload = getattr(alloc.scorer, "workload", ())
        mix = self.drawn(alloc.scorer)
        rng = random.Random(self.seed * 1_000_003 + alloc.decisions)  # noqa: S311 - reproducible
        # one generator, so the first draw is the one a single-draw roll-out makes
        drawn = [self.draw(mix, rng) for _ in range(self.draws)]
        cost = self.cost(alloc.scorer, workload)
        price = self.price(alloc)
        held = self.held(alloc.scorer)
        keys: list[list[Key] | None] = []
        with alloc.observed_once():  # the scorer reads the cluster as it was, throughout
            for node in cands:
                got = alloc.place_on(node.spec.name, d)
                keys.append(None if not isinstance(got, Choice) else [
                    roll(alloc, got, tasks, cost, whole=self.leaf == "whole",
                         price=price, held=held) for tasks in drawn])
        if len({summed(k) for k in keys if k is not None}) > 1:
            self.count("differ", 1)
        pick = consistent(keys, self.rule)
        if self.rule == "every" and pick == 0 and consistent(keys, "mean") != 0:
            self.count("vetoed", 1)  # the summed keys would have moved it
        if pick != 0:
            self.count("changed", 1)
        self.count("seconds", time.perf_counter() - t0)
        return cands[pick]


def summed(keys: Sequence[Key]) -> Key:
    """A candidate's keys summed over the draws, element by element."""
    milli, failed, broken, grown = (sum(col) for col in zip(*keys, strict=True))
    return int(milli), int(failed), int(broken), float(grown)


def consistent(keys: Sequence[Sequence[Key] | None], rule: str) -> int:
    """The index of the chosen candidate, 0 the base choice (None: it did not fit).
    "mean": the best summed key, the earlier on equal sums; "every": of the candidates
    whose key beats the base's on each draw (any that fits, where the base did not),
    the best summed, else the base."""
    base = keys[0] if keys else None
    rivals = [i for i, k in enumerate(keys) if k is not None]
    if rule == "every" and base is not None:
        rivals = [0] + [i for i in rivals[1:] if all(
            mine > theirs for mine, theirs in zip(keys[i] or (), base, strict=True))]
        if len(rivals) > 1:
            rivals = rivals[1:]  # the base only where nothing beats it on every draw
    best, best_key = 0, None
    for i in rivals:
        s = summed(keys[i] or ())
        if best_key is None or s > best_key:
            best, best_key = i, s
    return best


def mix_told(scorer: object) -> bool:
    """Whether the scorer's mix weighs at least twice the learner's prior
    (``PRIOR_TASKS``): before that, what it says is mostly the prior's."""
    shapes: Mapping[TaskShape, float] | None = getattr(scorer, "shapes", None)
    return sum((shapes or {}).values()) >= 2 * PRIOR_TASKS


def cpu_contested(scorer: object, product: str) -> bool:
    """Whether the scorer's mix contests the cluster's CPU, or cannot yet tell: its
    one-GPU tasks that ask more CPU than the cluster has per GPU are a larger share of
    its GPU tasks that may run on ``product`` than the cluster's CPU slack (the share of
    its CPU the whole mix leaves unasked, ``1 - c_all / R`` of
    ``cpu_excess_per_gpu_milli``). Then which used node of a class keeps its CPU decides
    where those tasks still fit, which the leaf's cost does not see (h-bimodalseed's
    loss, stop 76). Read over every shape the scorer learned (``shapes``, by weight; its
    typical ``workload`` where it has none): the typical tasks leave out rare shapes,
    and a spread of heavy CPU asks is many rare ones. Without a mix or CPU data, or while
    the mix weighs less than twice the learner's prior (``PRIOR_TASKS``: what it says is
    still mostly the prior's, which has no heavy tail), True: the scorer's own order
    decides among nodes of a class, as without the roll-out."""
    shapes: Mapping[TaskShape, float] | None = getattr(scorer, "shapes", None)
    if not shapes:
        shapes = {t.shape: t.weight for t in getattr(scorer, "workload", ())}
    cpu: int = getattr(scorer, "cluster_cpu", 0)
    gpu = sum(getattr(scorer, "capacity", {}).values())
    asked = sum(w * s.num_gpu * s.gpu_milli for s, w in shapes.items())
    if cpu <= 0 or gpu <= 0 or asked <= 0 or sum(shapes.values()) < 2 * PRIOR_TASKS:
        return True
    per_milli = cpu / gpu  # R: CPU milli per GPU-milli
    slack = 1 - sum(w * s.cpu_milli for s, w in shapes.items()) / asked / per_milli
    per_gpu = per_milli * MILLI
    here = {s: w for s, w in shapes.items()
            if s.num_gpu and s.gpu_milli > 0 and product_matches(product, s.products)}
    total = sum(here.values())
    heavy = sum(w for s, w in here.items() if s.num_gpu == 1 and s.cpu_milli > per_gpu)
    return total <= 0 or heavy / total > slack


def untouched(n: NodeState) -> bool:
    """Every GPU and all the CPU free (what a task asking all of a node needs)."""
    return (bool(n.free) and sum(n.free) == n.capacity
            and n.cpu_left == n.spec.cpu_milli)


def node_class(node: NodeState) -> NodeClass:
    """The class an untouched node counts in (``Allocator.untouched``)."""
    return (node.product, len(node.free), node.spec.cpu_milli)


def differ(base: NodeState, other: NodeState) -> bool:
    """Whether ``other`` is of another node class than ``base`` or untouched where
    ``base`` is used (or the reverse): what ``distinct`` "class" rolls out."""
    return (node_class(base) != node_class(other)
            or untouched(base) != untouched(other))


def broken_loss(values: Values, node: NodeState) -> float:
    """What the scorer's score charges for an untouched node left in ``node``'s state:
    ``untouched.loss`` at ``values`` (0 where its class has none)."""
    n = len(node.free)
    entries = values.get(node_class(node))
    if not entries:
        return 0.0
    return loss(entries, n, sum(1 for f in node.free if f >= MILLI), node.cpu_left)


def broken_price(values: Values) -> Price:
    """Each node broken at ``values`` as the decision found them: inside
    ``observed_once`` the scorer charges its own placements in the roll-out so too."""

    def price(gone: Sequence[NodeState]) -> float:
        return sum(broken_loss(values, n) for n in gone)
    return price


def sequenced_price(groups: Groups, untouched: Mapping[NodeClass, int]) -> Price:
    """Each node broken at the values of the untouched nodes left when it broke
    (``untouched_values`` over ``groups``, counts from ``untouched`` as the decision
    found them): the second of a group taken costs P(Poisson(E) >= u - 1), as a scorer
    re-reading the cluster after each placement would charge it."""
    start = dict(untouched)

    def price(gone: Sequence[NodeState]) -> float:
        left, total = dict(start), 0.0
        for n in gone:
            total += broken_loss(untouched_values(groups, left) if groups else {}, n)
            key = node_class(n)
            left[key] = left.get(key, 0) - 1
        return total
    return price


def held_cpu(unfit: CpuUnfit) -> Held:
    """A node's free GPU-milli times the share of the mix's GPU tasks that ask one GPU,
    more CPU than the node's share (its CPU over its GPUs) and more than it has left:
    the scorer's ``CpuUnfit`` step from the node's share up (0 without CPU data)."""

    def held(n: NodeState) -> float:
        if n.cpu_left is None or not n.free or not n.spec.cpu_milli:
            return 0.0
        share = n.spec.cpu_milli // len(n.free)
        return unfit(n.product, max(n.cpu_left, share)) * sum(n.free)
    return held


def roll(alloc: Allocator, first: Choice, tasks: Sequence[Demand],
         cost: Cost | None = None, *, whole: bool = False, price: Price | None = None,
         held: Held | None = None) -> Key:
    """Commit ``first``, place ``tasks`` greedily, undo it all; (GPU-milli the tasks
    got, minus the tasks that found no node, minus the untouched nodes they broke where
    ``whole``: 0 without, minus the growth of ``cost`` over the nodes they touched plus
    ``price`` of each untouched node they broke and the growth of ``held`` over the
    nodes they touched where ``cost`` is given, rounded as the scorer's integer scores
    are not: 0 without either)."""
    nodes = alloc.nodes
    before: dict[str, float] = {}
    was_whole: dict[str, None] = {}  # in the order they broke

    def touch(name: str) -> None:
        if cost is not None and name not in before:
            n = nodes[name]
            before[name] = cost(n.product, n.cpu_left, tuple(n.free)) + (
                held(n) if held is not None else 0.0)
        if (whole or price is not None) and untouched(nodes[name]):
            was_whole[name] = None

    touch(first.node)
    alloc.commit(first)
    placed: list[Choice] = []
    milli = failed = 0
    try:
        for td in tasks:
            got = alloc.place(td, explain=False)
            if isinstance(got, Choice):
                touch(got.node)
                alloc.commit(got)
                placed.append(got)
                milli += sum(got.milli)
            else:
                failed += 1
        grown = 0.0
        if cost is not None:
            for name, was in before.items():
                n = nodes[name]
                grown += cost(n.product, n.cpu_left, tuple(n.free)) - was
                if held is not None:
                    grown += held(n)
        gone = [nodes[name] for name in was_whole if not untouched(nodes[name])]
        if price is not None:
            grown += price(gone)
        broken = len(gone) if whole else 0
    finally:
        for c in reversed(placed):
            alloc.release(c)
        alloc.release(first)
    return milli, -failed, -broken, -round(grown, 3)


def decide(alloc: Allocator, ro: RollOut, d: Demand, best: NodeState, best_score: float,
           scores: Mapping[int, float | None], groups: Mapping[int, object],
           exclude: Set[str], where: Callable[[NodeState], bool] | None,
           ) -> tuple[NodeState, float]:
    """``Allocator.place``'s choice after the roll-out (``best`` outside a tie zone);
    the roll-out's own placements are greedy (``Allocator.rolling``)."""
    ro.count("decisions", 1)
    cands = ro.candidates(alloc, scores, groups, best_score, exclude, where)
    if len(cands) < 2:
        return best, best_score
    if cands[0] is not best:  # never expected: the roll-out then keeps out of it
        ro.count("mismatch", 1)
        return best, best_score
    alloc.rolling = True
    try:
        got = ro.choose(alloc, d, cands)
    finally:
        alloc.rolling = False
    s = scores.get(got.gid)
    return got, best_score if s is None else s
