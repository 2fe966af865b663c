"""The sampled roll-out among near-best nodes (allocator.rollout): off by default; when
on, a tie between node states goes to the one whose roll-out places the most."""

from __future__ import annotations

import random

import pytest

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.fragmentation import CpuUnfit, TaskShape, TypicalTask
from swarmgpu.allocator.rollout import (
    RollOut,
    broken_price,
    consistent,
    cpu_contested,
    held_cpu,
    roll,
    sequenced_price,
    shape_demand,
    untouched,
)
from swarmgpu.allocator.scorer import SwarmScorer
from swarmgpu.allocator.untouched import Confined, poisson_at_least
from swarmgpu.allocator.values import Choice, Demand, GpuSpec, NodeSpec, NodeState

PAIR = TaskShape(cpu_milli=0, gpu_milli=1000, num_gpu=2)


class FlatScorer:
    """Every node that fits scores the same: each choice is a tie zone."""

    name = "flat"

    def __init__(self, workload: tuple[TypicalTask, ...], rollout: RollOut | None) -> None:
        self.workload = workload
        self.rollout = rollout

    def score(self, node: NodeState, d: Demand) -> float:
        return 1.0

    def pick(self, node: NodeState, d: Demand, candidates: list[int]) -> tuple[int, ...] | None:
        return None


class CpuCostScorer(FlatScorer):
    """A node cost that falls most where a whole GPU leaves a CPU-rich node."""

    def node_cost(self, product: str, cpu_left: int | None, free: tuple[int, ...]) -> float:
        return sum(1 for f in free if f == 1000) * (cpu_left or 0) / 1000


def node(name: str, n_gpus: int, cpu: int = 64_000) -> NodeSpec:
    return NodeSpec(name, tuple(GpuSpec(i, "T4", 16384) for i in range(n_gpus)), cpu_milli=cpu)


def two_and_one(scorer: FlatScorer) -> Allocator:
    """Node ``two`` (two GPUs, chosen on equal scores) and node ``one`` (one GPU)."""
    a = Allocator(scorer)
    a.add_node(node("two", 2), rank=0)
    a.add_node(node("one", 1), rank=1)
    return a


def test_the_roll_out_is_off_by_default() -> None:
    assert SwarmScorer.rollout is None
    assert Allocator(SwarmScorer()).rollout is None
    a = two_and_one(FlatScorer((TypicalTask(PAIR, 1.0),), None))
    got = a.place(Demand(num_gpu=1))
    assert isinstance(got, Choice) and got.node == "two"  # the lower rank


def test_a_tie_goes_to_the_node_whose_roll_out_places_the_most() -> None:
    # One GPU on ``two`` leaves no node for the mix's two-GPU task; on ``one`` it does.
    ro = RollOut(k=2, m=1)
    a = two_and_one(FlatScorer((TypicalTask(PAIR, 1.0),), ro))
    before = (a.snapshot(), dict(a.gpu_free), dict(a.untouched))
    got = a.place(Demand(num_gpu=1))
    assert isinstance(got, Choice) and got.node == "one"
    assert (a.snapshot(), dict(a.gpu_free), dict(a.untouched)) == before  # undone
    assert not a.rolling
    # the roll-out's own placement was greedy: one decision rolled out, not two
    assert ro.stats["decisions"] == 1 and ro.stats["tie_zones"] == 1
    assert ro.stats["changed"] == 1


def test_equal_roll_outs_keep_the_base_choice_unless_the_leaf_weighs_waste() -> None:
    d = Demand(num_gpu=1)
    for leaf, want in (("milli", "lean"), ("waste", "rich")):
        a = Allocator(CpuCostScorer((TypicalTask(PAIR, 1.0),), RollOut(k=2, m=0, leaf=leaf)))
        a.add_node(node("lean", 2, cpu=8_000), rank=0)
        a.add_node(node("rich", 2, cpu=96_000), rank=1)
        got = a.place(d)
        assert isinstance(got, Choice) and got.node == want, leaf


def test_the_whole_leaf_keeps_an_untouched_node_over_the_base_choice() -> None:
    # Placing on ``fresh`` (the lower rank) or on ``used`` grows the cost alike; only
    # ``fresh`` stops being a node a task asking all of one could take.
    d = Demand(num_gpu=1)
    for leaf, want in (("waste", "fresh"), ("whole", "used")):
        a = Allocator(CpuCostScorer((TypicalTask(PAIR, 1.0),), RollOut(k=2, m=0, leaf=leaf)))
        a.add_node(node("fresh", 2), rank=0)
        a.add_node(node("used", 2), rank=1)
        taken = a.place_on("used", Demand(gpu_milli=300))
        assert isinstance(taken, Choice)
        a.commit(taken)
        got = a.place(d)
        assert isinstance(got, Choice) and got.node == want, leaf


class PricedScorer(CpuCostScorer):
    """``CpuCostScorer`` with the scorer's ``values``: an untouched two-GPU T4 node of 64
    cores is needed by a two-GPU task with chance 0.5 (``untouched_values``'s form)."""

    values = {("T4", 2, 64_000): ((2, 0, 0.5),)}


def fresh_and_used(scorer: FlatScorer) -> Allocator:
    """Node ``fresh`` (untouched, the lower rank) and ``used`` (a share taken)."""
    a = Allocator(scorer)
    a.add_node(node("fresh", 2), rank=0)
    a.add_node(node("used", 2), rank=1)
    taken = a.place_on("used", Demand(gpu_milli=300))
    assert isinstance(taken, Choice)
    a.commit(taken)
    return a


def test_the_priced_leaf_keeps_an_untouched_node_the_scorer_prices() -> None:
    # Either node's cost falls alike for a whole GPU; breaking ``fresh`` costs what the
    # scorer charges for its class, so "priced" goes to ``used`` where "waste" keeps rank.
    d = Demand(num_gpu=1)
    for leaf, want in (("waste", "fresh"), ("priced", "used")):
        a = fresh_and_used(PricedScorer((TypicalTask(PAIR, 1.0),), RollOut(k=2, m=0, leaf=leaf)))
        got = a.place(d)
        assert isinstance(got, Choice) and got.node == want, leaf


def test_the_priced_leaf_charges_nothing_for_a_class_without_a_value() -> None:
    # No value for 64-core two-GPU T4 nodes: breaking ``fresh`` is free, as in "waste"
    # (the count of "whole" would still send it to ``used``).
    scorer = PricedScorer((TypicalTask(PAIR, 1.0),), RollOut(k=2, m=0, leaf="priced"))
    scorer.values = {("T4", 2, 96_000): ((2, 0, 0.5),)}
    got = fresh_and_used(scorer).place(Demand(num_gpu=1))
    assert isinstance(got, Choice) and got.node == "fresh"


def test_a_broken_node_is_priced_as_the_scorer_charges_it() -> None:
    # ``untouched.loss``: the chances of the groups the node no longer hosts, times its
    # GPU-milli (two GPUs: 2,000); a group asking 56 cores is lost once 16 of 64 are used.
    values = {("T4", 2, 64_000): ((2, 0, 0.25), (1, 56_000, 0.5))}
    price = broken_price(values)
    a = two_and_one(FlatScorer((), None))
    two = a.nodes["two"]
    assert price([two]) == 0.0  # whole still: hosts both groups
    share = a.place_on("two", Demand(gpu_milli=300, cpu_milli=16_000))
    assert isinstance(share, Choice)
    a.commit(share)
    assert price([two]) == 0.75 * 2000  # one whole GPU left, 48 cores left
    assert broken_price({})([two]) == 0.0
    first = a.place_on("one", Demand(num_gpu=1))
    assert isinstance(first, Choice)
    a.release(share)
    tasks = [Demand(gpu_milli=300, cpu_milli=16_000)]  # on ``two``: broken once
    assert roll(a, first, tasks, price=price) == (300, 0, 0, -1500.0)
    assert roll(a, first, tasks, whole=True, price=price) == (300, 0, -2, -1500.0)
    assert all(untouched(n) for n in a.nodes.values())  # undone


class CoveredScorer(CpuCostScorer):
    """``CpuCostScorer`` with what the "covered" leaf reads of ``SwarmScorer``: its mix's
    shapes (a two-GPU task, which every two-GPU class hosts, so ``values`` is empty),
    node classes and free GPU-milli (4,000: two such tasks expected)."""

    values: dict[object, object] = {}
    shapes = {PAIR: 1.0}
    hosts = {("T4", 2, 64_000): 4000}
    free = {"T4": 4000}


def test_the_covered_leaf_prices_a_node_every_class_of_its_gpus_would_serve() -> None:
    # "priced" charges nothing for ``fresh`` (no exclusive group); "covered" charges
    # P(Poisson(2) >= 1) of its 2,000 GPU-milli, the one untouched node left, and keeps it.
    d = Demand(num_gpu=1)
    for leaf, want in (("priced", "fresh"), ("covered", "used")):
        ro = RollOut(k=2, m=0, leaf=leaf)
        a = fresh_and_used(CoveredScorer((TypicalTask(PAIR, 1.0),), ro))
        got = a.place(d)
        assert isinstance(got, Choice) and got.node == want, leaf
    cls = ("T4", 2, 64_000)
    a = fresh_and_used(CoveredScorer((TypicalTask(PAIR, 1.0),), None))
    ro = RollOut(leaf="covered")
    assert ro.covered_values(a) == {cls: ((2, 0, pytest.approx(poisson_at_least(2.0, 1))),)}
    a.add_node(node("more", 2), rank=2)  # two untouched: P(N >= 2)
    assert ro.covered_values(a) == {cls: ((2, 0, pytest.approx(poisson_at_least(2.0, 2))),)}
    assert RollOut(leaf="covered").covered_values(two_and_one(FlatScorer((), None))) == {}


class HeldScorer(FlatScorer):
    """No node cost; the scorer's ``CpuUnfit`` over its mix, the CPU sufficing."""

    values: dict[object, object] = {}
    cpu_short = False

    def __init__(self, workload: tuple[TypicalTask, ...], rollout: RollOut | None) -> None:
        super().__init__(workload, rollout)
        self.cpu_unfit = CpuUnfit(workload)

    def node_cost(self, product: str, cpu_left: int | None, free: tuple[int, ...]) -> float:
        return 0.0


def lean_or_rich(scorer: type[FlatScorer], mix: tuple[TypicalTask, ...], leaf: str,
                 d: Demand, *, lean_cpu: int) -> str:
    """Where ``leaf``'s roll-out places ``d`` between two two-GPU nodes, ``lean`` (of
    ``lean_cpu``, ranked first) and ``rich`` (96 cores)."""
    a = Allocator(scorer(mix, RollOut(k=2, m=0, leaf=leaf)))
    a.add_node(node("lean", 2, cpu=lean_cpu), rank=0)
    a.add_node(node("rich", 2, cpu=96_000), rank=1)
    got = a.place(d)
    assert isinstance(got, Choice)
    return got.node


def test_the_cpuheld_leaf_keeps_the_cpu_a_heavy_one_gpu_task_needs() -> None:
    # The mix's one-GPU task asks 40 cores, above ``lean``'s share (48 over 2 GPUs):
    # 16 cores there leave 32 beside its last GPU, lost to it (1,000 GPU-milli);
    # ``rich`` keeps 80. "priced" sees no difference and keeps rank.
    mix = (TypicalTask(TaskShape(40_000, 1000, 1), 1.0),)
    d = Demand(num_gpu=1, cpu_milli=16_000)
    for leaf, want in (("priced", "lean"), ("cpuheld", "rich")):
        assert lean_or_rich(HeldScorer, mix, leaf, d, lean_cpu=48_000) == want, leaf
    held = held_cpu(CpuUnfit(mix))
    a = Allocator(FlatScorer((), None))
    a.add_node(node("small", 2, cpu=100_000), rank=0)  # share 50 cores: 40 is not above
    share = a.place_on("small", Demand(gpu_milli=500, cpu_milli=70_000))
    assert isinstance(share, Choice)
    a.commit(share)
    assert held(a.nodes["small"]) == 0.0  # 30 cores left, but the task is below the share
    short = HeldScorer(mix, None)
    short.cpu_short = True  # the scorer's node cost counts the step itself
    assert RollOut(leaf="cpuheld").held(short) is None
    assert RollOut(leaf="priced").held(HeldScorer(mix, None)) is None


def test_the_sequenced_price_charges_each_node_at_the_untouched_nodes_left() -> None:
    # Two untouched two-GPU nodes, a group of two-GPU tasks expected 1.5 times: the
    # first broken costs P(N >= 2), the second P(N >= 1), each times 2,000 GPU-milli;
    # "priced" charges both at P(N >= 2), as the decision found the cluster.
    cls = ("T4", 2, 64_000)
    groups = {(cls,): Confined(1.5, 2, 0)}
    a = Allocator(FlatScorer((), None))
    a.add_node(node("a", 2), rank=0)
    a.add_node(node("b", 2), rank=1)
    a.add_node(node("c", 1), rank=2)
    assert a.untouched == {cls: 2, ("T4", 1, 64_000): 1}
    first = a.place_on("c", Demand(num_gpu=1))
    assert isinstance(first, Choice)
    tasks = [Demand(num_gpu=1), Demand(num_gpu=1), Demand(num_gpu=1)]  # on a, a, b
    at2, at1 = poisson_at_least(1.5, 2), poisson_at_least(1.5, 1)
    got = roll(a, first, tasks, price=sequenced_price(groups, a.untouched))
    assert got[:3] == (3000, 0, 0) and got[3] == -round((at2 + at1) * 2000, 3)
    values = {cls: ((2, 0, at2),)}
    assert roll(a, first, tasks, price=broken_price(values))[3] == -round(2 * at2 * 2000, 3)
    assert a.untouched == {cls: 2, ("T4", 1, 64_000): 1}  # undone


def test_the_swarm_scorer_shows_the_groups_its_values_come_from() -> None:
    s = SwarmScorer()
    assert s.groups == {}
    s.set_workload((TypicalTask(TaskShape(120_000, 1000, 8), 1.0),
                    TypicalTask(TaskShape(4_000, 1000, 1), 1.0)))
    g3, g2 = ("G3", 8, 128_000), ("G2", 8, 96_000)
    s.observe_cluster({"G3": 8000, "G2": 8000}, {"G3": 8000, "G2": 8000}, 224_000,
                      {g3: 8000, g2: 8000}, {g3: 1, g2: 1})
    assert list(s.groups) == [(g3,)] and g3 in s.values


def test_the_frag_leaf_sees_a_gpu_the_cpu_left_cannot_feed() -> None:
    # The mix's task asks a GPU and 32 cores: after 16 cores on ``lean`` (40) its last
    # GPU is lost to it; ``rich`` (96) still feeds it. No node cost: "waste" keeps rank.
    mix = (TypicalTask(TaskShape(32_000, 1000, 1), 1.0),)
    d = Demand(num_gpu=1, cpu_milli=16_000)
    for leaf, want in (("waste", "lean"), ("frag", "rich")):
        assert lean_or_rich(FlatScorer, mix, leaf, d, lean_cpu=40_000) == want, leaf


def test_no_tie_zone_no_roll_out() -> None:
    ro = RollOut(k=3, m=5)
    a = Allocator(FlatScorer((TypicalTask(PAIR, 1.0),), ro))
    a.add_node(node("only", 2), rank=0)
    got = a.place(Demand(num_gpu=1))
    assert isinstance(got, Choice) and got.node == "only"
    assert ro.stats["decisions"] == 1 and "tie_zones" not in ro.stats


def test_a_roll_out_undoes_what_it_placed_and_counts_it() -> None:
    a = two_and_one(FlatScorer((), None))
    first = a.place_on("one", Demand(num_gpu=1))
    assert isinstance(first, Choice)
    before = a.snapshot()
    tasks = [Demand(num_gpu=2), Demand(num_gpu=2), Demand(gpu_milli=300)]
    # the first pair fits on ``two``; the second finds no node; the share none either
    assert roll(a, first, tasks) == (2000, -2, 0, 0.0)
    assert a.snapshot() == before


def test_a_roll_out_counts_the_untouched_nodes_it_broke_where_asked() -> None:
    a = two_and_one(FlatScorer((), None))
    first = a.place_on("one", Demand(num_gpu=1))
    assert isinstance(first, Choice)
    tasks = [Demand(num_gpu=1), Demand(num_gpu=1)]  # both on ``two``: broken once
    assert roll(a, first, tasks) == (2000, 0, 0, 0.0)
    assert roll(a, first, tasks, whole=True) == (2000, 0, -2, 0.0)
    assert all(untouched(n) for n in a.nodes.values())  # undone


class RareShapeScorer(FlatScorer):
    """Typical tasks of CPU only; every shape it learned also has a two-GPU task that
    the typical ones left out (``shapes``, as ``SwarmScorer.set_workload`` keeps them)."""

    def __init__(self, rollout: RollOut | None) -> None:
        cpu = TaskShape(1000, 0, 0)
        super().__init__((TypicalTask(cpu, 1.0),), rollout)
        self.shapes = {cpu: 0.5, PAIR: 0.5}


def test_the_full_mix_draws_the_rare_shapes_the_typical_tasks_leave_out() -> None:
    # One GPU on ``two`` leaves no node for the rare pair: only a roll-out that can
    # draw it sees that, so "typical" keeps the base choice and "full" goes to ``one``.
    for mix, want in (("typical", "two"), ("full", "one")):
        ro = RollOut(k=2, m=10, mix=mix)
        got = two_and_one(RareShapeScorer(ro)).place(Demand(num_gpu=1))
        assert isinstance(got, Choice) and got.node == want, mix
    drawn = RollOut(m=10, mix="full").draw(
        RollOut(mix="full").drawn(RareShapeScorer(None)), random.Random(1))
    assert Demand(num_gpu=2) in drawn


def used_pair(kinds: tuple[str, str], ro: RollOut, scorer: FlatScorer | None = None,
              ) -> Allocator:
    """Two-GPU nodes ``whole`` (the lower rank; a core taken, both GPUs whole) and
    ``split`` (a share taken), of GPU models ``kinds``; ``scorer``: a flat one with the
    mix's pair, by default."""
    a = Allocator(scorer or FlatScorer((TypicalTask(PAIR, 1.0),), ro))
    for rank, (name, kind) in enumerate(zip(("whole", "split"), kinds, strict=True)):
        a.add_node(NodeSpec(name, tuple(GpuSpec(i, kind, 16384) for i in range(2)),
                            cpu_milli=64_000), rank=rank)
    for name, d in (("whole", Demand(cpu_milli=1000)), ("split", Demand(gpu_milli=300))):
        taken = a.place_on(name, d)
        assert isinstance(taken, Choice)
        a.commit(taken)
    return a


def test_the_class_distinct_roll_out_leaves_used_nodes_of_one_class_to_the_base() -> None:
    # A GPU on ``whole`` (the base) leaves no two whole GPUs for the mix's pair; on
    # ``split`` it does. Any roll-out goes to ``split``; "class" rolls out only nodes of
    # another class (or touched-state) than the base, so of one class it keeps ``whole``.
    for kinds, distinct, want in ((("T4", "T4"), "", "split"),
                                  (("T4", "T4"), "class", "whole"),
                                  (("T4", "P100"), "class", "split")):
        ro = RollOut(k=2, m=1, distinct=distinct)
        got = used_pair(kinds, ro).place(Demand(num_gpu=1))
        assert isinstance(got, Choice) and got.node == want, (kinds, distinct)
        left_out = ro.stats.get("same_class", 0)
        assert left_out == (1 if want == "whole" else 0), (kinds, distinct)


def test_the_class_zone_roll_out_reaches_past_the_top_k_for_another_class() -> None:
    # With k 2 the top two are ``whole`` and ``split``, of one class: "class" rolls out
    # nothing; "class-zone" rolls out ``whole`` against ``other`` (a P100 node, a share
    # taken), where a GPU leaves ``whole``'s pair for the mix.
    for distinct, want in (("class", "whole"), ("class-zone", "other")):
        a = used_pair(("T4", "T4"), RollOut(k=2, m=1, distinct=distinct))
        a.add_node(NodeSpec("other", tuple(GpuSpec(i, "P100", 16384) for i in range(2)),
                            cpu_milli=64_000), rank=2)
        taken = a.place_on("other", Demand(gpu_milli=300))
        assert isinstance(taken, Choice)
        a.commit(taken)
        got = a.place(Demand(num_gpu=1))
        assert isinstance(got, Choice) and got.node == want, distinct


def test_the_class_distinct_roll_out_weighs_an_untouched_node_against_a_used_one() -> None:
    # ``fresh`` (the base, untouched) and ``used`` are of one class: a GPU on ``fresh``
    # leaves no pair of whole GPUs, on ``used`` it does; "class" still rolls them out.
    for distinct in ("", "class", "class-zone"):
        ro = RollOut(k=2, m=1, distinct=distinct)
        got = fresh_and_used(FlatScorer((TypicalTask(PAIR, 1.0),), ro)).place(
            Demand(num_gpu=1))
        assert isinstance(got, Choice) and got.node == "used", distinct


def test_a_fourth_candidate_is_rolled_out_with_k_4() -> None:
    # Three two-GPU nodes (distinct by CPU, so distinct node states) and ``one``, fourth
    # by rank: a GPU on any of the three leaves two pair hosts for the mix's three
    # pairs, on ``one`` all three. K 3 never sees ``one``; K 4 (stop 81) does.
    for k, want in ((3, "a"), (4, "one")):
        a = Allocator(FlatScorer((TypicalTask(PAIR, 1.0),), RollOut(k=k, m=3)))
        for rank, (name, cpu) in enumerate((("a", 64_000), ("b", 63_000), ("c", 62_000))):
            a.add_node(node(name, 2, cpu=cpu), rank=rank)
        a.add_node(node("one", 1), rank=3)
        got = a.place(Demand(num_gpu=1))
        assert isinstance(got, Choice) and got.node == want, k


HEAVY = TaskShape(cpu_milli=40_000, gpu_milli=1000, num_gpu=1)  # above 32 cores a GPU


class CpuScorer(FlatScorer):
    """``FlatScorer`` with what ``cpu_contested`` reads: two T4 nodes of 64 cores and two
    GPUs each, so 32 cores a GPU."""

    cluster_cpu = 128_000
    capacity = {"T4": 4000}
    shapes: dict[TaskShape, float] | None = None  # every shape seen: none, by default

    def __init__(self, workload: tuple[TypicalTask, ...], rollout: RollOut | None) -> None:
        super().__init__(workload, rollout)
        self.cpu_unfit = CpuUnfit(workload)


def test_the_mix_contests_the_cpu_where_heavy_one_gpu_tasks_outgrow_its_slack() -> None:
    # 0.7 of the GPU tasks ask 40 cores of one GPU (above the cluster's 32 a GPU): the
    # mix asks 28,000 / 1,300 = 21.5 CPU milli a GPU-milli of 32, a slack of 0.33 < 0.7.
    contested = CpuScorer((TypicalTask(PAIR, 30.0), TypicalTask(HEAVY, 70.0)), None)
    assert cpu_contested(contested, "T4")
    # half of them: 20,000 / 1,500 = 13.3 of 32, a slack of 0.58 > 0.5
    assert not cpu_contested(
        CpuScorer((TypicalTask(PAIR, 50.0), TypicalTask(HEAVY, 50.0)), None), "T4")
    assert not cpu_contested(CpuScorer((TypicalTask(PAIR, 100.0),), None), "T4")
    # the heavy tasks pinned to another model do not contest a T4's CPU
    pinned = TaskShape(40_000, 1000, 1, ("V100*",))
    assert not cpu_contested(
        CpuScorer((TypicalTask(PAIR, 30.0), TypicalTask(pinned, 70.0)), None), "T4")


def test_the_contested_reading_leaves_one_class_to_the_scorer_while_it_cannot_tell() -> None:
    calm = (TypicalTask(PAIR, 100.0),)
    assert cpu_contested(CpuScorer((TypicalTask(PAIR, 99.0),), None), "T4")  # mostly prior
    assert cpu_contested(FlatScorer(calm, None), "T4")  # no CPU data
    scorer = CpuScorer(calm, None)
    scorer.cluster_cpu = 0
    assert cpu_contested(scorer, "T4")
    assert cpu_contested(CpuScorer((), None), "T4")  # no mix


def test_the_contested_reading_counts_the_rare_shapes_the_typical_tasks_leave_out() -> None:
    # The typical tasks hold the pair alone; every shape seen holds the heavy ones too.
    scorer = CpuScorer((TypicalTask(PAIR, 100.0),), None)
    assert not cpu_contested(scorer, "T4")
    scorer.shapes = {PAIR: 30.0, HEAVY: 70.0}
    assert cpu_contested(scorer, "T4")
    ro = RollOut(distinct="contested")
    assert ro.contested(scorer, "T4")
    scorer.shapes = {PAIR: 100.0}  # a new mix: read again
    assert not ro.contested(scorer, "T4")


def test_the_contested_roll_out_leaves_one_class_to_the_base_only_where_cpu_is_contested(
) -> None:
    # As the class-distinct test: any roll-out moves the GPU to ``split``. Where the mix
    # contests the CPU "contested" is "class" (keeps ``whole``), elsewhere it is "".
    for mix, want in (((TypicalTask(PAIR, 100.0),), "split"),
                      ((TypicalTask(PAIR, 30.0), TypicalTask(HEAVY, 70.0)), "whole")):
        ro = RollOut(k=2, m=1, distinct="contested")
        got = used_pair(("T4", "T4"), ro, CpuScorer(mix, ro)).place(Demand(num_gpu=1))
        assert isinstance(got, Choice) and got.node == want, mix
        assert ro.stats.get("contested", 0) == ro.stats.get("same_class", 0) == (
            1 if want == "whole" else 0), mix


def test_the_contested_roll_out_waits_for_the_mix_where_asked() -> None:
    # The pair alone, as the learner's prior would weigh it (under 2 x 50 tasks): the
    # mix cannot tell yet; with warm-up "base" nothing is rolled out (``whole`` kept),
    # with "class" the other node, of one class, is left to the scorer's order too.
    for warmup in ("base", "class"):
        ro = RollOut(k=2, m=1, distinct="contested", warmup=warmup)
        scorer = CpuScorer((TypicalTask(PAIR, 51.0),), ro)
        scorer.shapes = {PAIR: 51.0}
        got = used_pair(("T4", "T4"), ro, scorer).place(Demand(num_gpu=1))
        assert isinstance(got, Choice) and got.node == "whole", warmup
        assert ro.stats.get("warmup", 0) == (1 if warmup == "base" else 0)
        assert ro.stats.get("same_class", 0) == (0 if warmup == "base" else 1)


def test_the_draw_is_the_same_for_the_same_decision() -> None:
    ro = RollOut(m=8)
    mix = (TypicalTask(PAIR, 0.5), TypicalTask(TaskShape(4000, 300, 1), 0.5))
    one = ro.draw(mix, random.Random(7))
    assert one == ro.draw(mix, random.Random(7))
    assert len(one) == 8 and set(one) <= {Demand(num_gpu=2),
                                          Demand(gpu_milli=300, cpu_milli=4000)}
    assert ro.draw((), random.Random(7)) == []


def test_shapes_become_demands() -> None:
    assert shape_demand(PAIR) == Demand(num_gpu=2)
    assert shape_demand(TaskShape(4000, 470, 1, ("V100*",))) == Demand(
        gpu_milli=470, cpu_milli=4000, products=("V100*",))
    assert shape_demand(TaskShape(2000, 0, 0)) == Demand(cpu_milli=2000)


class ScriptedRollOut(RollOut):
    """A roll-out whose draws are given, one list per ``draw`` call, in order."""

    def __init__(self, script: list[list[Demand]], **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.script = list(script)

    def draw(self, workload: object, rng: random.Random) -> list[Demand]:
        return self.script.pop(0)


CPU_TASK = Demand(cpu_milli=1000)
PAIR_D = Demand(num_gpu=2)


def test_every_keeps_the_base_unless_each_draw_says_otherwise() -> None:
    # One draw of the mix's pair (on ``one`` it fits, after ``two`` it does not) and
    # two of a CPU task (alike after either): "mean" follows the one draw to ``one``;
    # "every" keeps ``two``, as one draw alone would not be evidence.
    for rule, draws, want in (("mean", [[PAIR_D], [CPU_TASK], [CPU_TASK]], "one"),
                              ("every", [[PAIR_D], [CPU_TASK], [CPU_TASK]], "two"),
                              ("every", [[PAIR_D], [PAIR_D], [PAIR_D]], "one")):
        ro = ScriptedRollOut(draws, k=2, m=1, draws=3, rule=rule)
        a = two_and_one(FlatScorer((TypicalTask(PAIR, 1.0),), ro))
        before = a.snapshot()
        got = a.place(Demand(num_gpu=1))
        assert isinstance(got, Choice) and got.node == want, (rule, draws)
        assert not ro.script  # three draws, common to both candidates
        assert a.snapshot() == before  # the roll-outs undone
        assert ro.stats.get("vetoed", 0) == (1 if (rule, want) == ("every", "two") else 0)


def test_consistent_picks_among_the_candidates_that_beat_the_base_on_every_draw() -> None:
    base = [(100, 0, 0, -5.0), (100, 0, 0, -5.0), (100, 0, 0, -5.0)]
    once = [(100, 0, 0, -1.0), (100, 0, 0, -6.0), (100, 0, 0, -5.0)]  # better summed
    each = [(100, 0, 0, -4.0), (100, 0, 0, -4.0), (100, 0, 0, -4.9)]
    most = [(100, 0, 0, -3.0), (100, 0, 0, -3.0), (100, 0, 0, -3.0)]
    assert consistent([base, once, each], "mean") == 1
    assert consistent([base, once, each], "every") == 2
    assert consistent([base, each, most], "every") == 2  # the best summed of those
    assert consistent([base, base], "every") == 0  # a tie is no evidence
    assert consistent([base, base], "mean") == 0  # nor under the mean: the base order
    assert consistent([None, once], "every") == 1  # the base did not fit: any beats it
    assert consistent([base, None], "mean") == 0
    assert consistent([[(0, 0, 0, 0.0)]], "every") == 0


@pytest.mark.parametrize("bad", [{"k": 5}, {"k": 0}, {"m": -1}, {"margin": -1.0},
                                 {"leaf": "best"}, {"mix": "trace"},
                                 {"distinct": "shape"}, {"draws": 0},
                                 {"rule": "median"}, {"warmup": "any"}])
def test_settings_out_of_range_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="roll-out"):
        RollOut(**bad)  # type: ignore[arg-type]
