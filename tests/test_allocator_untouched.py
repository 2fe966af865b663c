"""The value of untouched nodes to tasks only such a node can host (allocator.untouched)."""

from __future__ import annotations

import math

import pytest

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.fragmentation import TaskShape, typical_tasks
from swarmgpu.allocator.scorer import SwarmScorer
from swarmgpu.allocator.untouched import (
    Confined,
    exclusive_groups,
    forced_breaks,
    loss,
    other_breaks,
    poisson_at_least,
    untouched_values,
    whole_groups,
)
from swarmgpu.allocator.values import Choice, Demand, GpuSpec, NodeSpec

G3 = ("G3", 8, 128_000)
G2 = ("G2", 8, 96_000)
BIG = TaskShape(128_000, 1000, 8)  # all of a G3 node: fits no G2 one
HEAVY = TaskShape(40_000, 1000, 1)  # one GPU and a lot of CPU


def gpus(n: int, product: str) -> tuple[GpuSpec, ...]:
    return tuple(GpuSpec(index=i, product=product, memory_mib=32768) for i in range(n))


def test_poisson_at_least_is_the_upper_tail() -> None:
    assert poisson_at_least(2.0, 0) == 1.0
    assert poisson_at_least(0.0, 1) == 0.0
    assert poisson_at_least(2.0, 1) == pytest.approx(1 - math.exp(-2))
    below = sum(math.exp(-2) * 2**i / math.factorial(i) for i in range(3))
    assert poisson_at_least(2.0, 3) == pytest.approx(1 - below)
    assert poisson_at_least(2.0, 60) == 0.0


def test_only_shapes_confined_to_untouched_nodes_of_some_classes_count() -> None:
    classes = {G3: 39 * 8000, G2: 549 * 8000, ("T4", 2, 104_000): 387 * 2000}
    shapes = {
        BIG: 0.01,
        TaskShape(64_000, 1000, 8): 0.01,  # any 8-GPU node: packing keeps those whole
        TaskShape(120_000, 1000, 4): 0.01,  # G3 only, but a used G3 node can take it
        HEAVY: 0.47,
        TaskShape(4_000, 500, 1): 0.5,
    }
    groups = exclusive_groups(shapes, classes, 1000 * 1000)
    per_task = 0.01 * 8000 + 0.01 * 8000 + 0.01 * 4000 + 0.47 * 1000 + 0.5 * 500
    assert list(groups) == [(G3,)]
    assert groups[(G3,)].expected == pytest.approx(0.01 * 1000 * 1000 / per_task)
    assert (groups[(G3,)].num_gpu, groups[(G3,)].cpu_milli) == (8, 128_000)
    # nothing without free capacity, or without a shape of whole GPUs
    assert exclusive_groups(shapes, classes, 0) == {}
    assert exclusive_groups({TaskShape(4_000, 500, 1): 1.0}, classes, 8000) == {}
    # a node class that reports no CPU may host any CPU: it joins the group
    nocpu = ("G2", 8, None)
    assert list(exclusive_groups(shapes, {**classes, nocpu: 8000}, 8000)) == [(nocpu, G3)]


def test_whole_groups_also_keep_the_shapes_every_class_of_their_gpus_hosts() -> None:
    # The roll-out's "covered" leaf: the 8-GPU task of 64 cores fits G2 and G3 alike,
    # which ``exclusive_groups`` leaves out; a shape a used node could host stays out.
    classes = {G3: 39 * 8000, G2: 549 * 8000, ("T4", 2, 104_000): 387 * 2000}
    any8 = TaskShape(64_000, 1000, 8)
    shapes = {BIG: 0.01, any8: 0.02, TaskShape(120_000, 1000, 4): 0.01, HEAVY: 0.96}
    per_task = 0.01 * 8000 + 0.02 * 8000 + 0.01 * 4000 + 0.96 * 1000
    groups = whole_groups(shapes, classes, 1000 * 1000)
    assert sorted(groups) == [(G2, G3), (G3,)]
    assert groups[(G2, G3)] == Confined(pytest.approx(0.02 * 1000 * 1000 / per_task),
                                        8, 64_000)
    assert groups[(G3,)] == exclusive_groups(shapes, classes, 1000 * 1000)[(G3,)]
    assert whole_groups(shapes, classes, 0) == {}


def test_the_value_grows_as_the_last_untouched_nodes_go() -> None:
    groups = {(G3,): Confined(2.0, 8, 120_000)}
    assert untouched_values(groups, {G3: 39}) == {}  # 39 such tasks will not come
    assert untouched_values(groups, {}) == {}  # none left to keep
    one = untouched_values(groups, {G3: 1})[G3]
    assert one == ((8, 120_000, pytest.approx(1 - math.exp(-2))),)
    three = untouched_values(groups, {G3: 3})[G3]
    assert three[0][2] < one[0][2]
    # lost when the placement leaves too few whole GPUs or too little CPU; not when it
    # leaves the node able to host the smallest of those tasks
    assert loss(one, 8, 7, 127_000) == pytest.approx((1 - math.exp(-2)) * 8000)
    assert loss(one, 8, 8, 119_000) == pytest.approx((1 - math.exp(-2)) * 8000)
    assert loss(one, 8, 8, 124_000) == 0.0
    assert loss(one, 8, 8, None) == 0.0
    assert loss(one + one, 8, 0, 0) == 8000  # at most the node


def test_allocator_counts_untouched_nodes_per_class() -> None:
    a = Allocator()
    a.add_node(NodeSpec("g3", gpus(8, "G3"), cpu_milli=128_000, memory_mib=1 << 20))
    a.add_node(NodeSpec("g3b", gpus(8, "G3"), cpu_milli=128_000, memory_mib=1 << 20))
    a.add_node(NodeSpec("g2", gpus(8, "G2"), cpu_milli=96_000, memory_mib=1 << 20))
    assert a.untouched == {G3: 2, G2: 1}
    c = a.place_on("g3", Demand(num_gpu=1, cpu_milli=1000))
    assert isinstance(c, Choice)
    a.commit(c)
    assert a.untouched == {G3: 1, G2: 1}
    a.release(c)
    assert a.untouched == {G3: 2, G2: 1}
    a.set_usage("g2", 1000, 0)  # CPU taken by a task swarmgpu does not place
    assert a.untouched == {G3: 2}
    a.set_blocked("g3b", True)
    assert a.untouched == {G3: 1}
    a.remove_node("g3")
    assert a.untouched == {}


def heavy_then_big(shapes: dict[TaskShape, float] | None) -> tuple[str, bool]:
    """Where a CPU-heavy one-GPU task goes on a G3 node (first in node order) and a G2
    one, and whether a task asking all of a G3 node then fits."""
    a = Allocator(SwarmScorer(typical_tasks([HEAVY]), shapes=shapes))
    a.add_node(NodeSpec("g3", gpus(8, "G3"), cpu_milli=128_000, memory_mib=1 << 20))
    a.add_node(NodeSpec("g2", gpus(8, "G2"), cpu_milli=96_000, memory_mib=1 << 20))
    heavy = a.place(Demand(num_gpu=1, cpu_milli=40_000))
    assert isinstance(heavy, Choice)
    a.commit(heavy)
    big = a.place(Demand(num_gpu=8, cpu_milli=128_000))
    return heavy.node, isinstance(big, Choice)


def test_a_rare_task_that_needs_all_of_a_node_keeps_the_last_one_untouched() -> None:
    # Both nodes strand alike and G3 is first: without the rare shape in the model the
    # heavy task breaks G3 and the 128-core task then finds no node.
    assert heavy_then_big(None) == ("g3", False)
    # One task in a hundred needs all of a G3 node: the heavy one goes to G2.
    assert heavy_then_big({HEAVY: 0.99, BIG: 0.01}) == ("g2", True)


def test_the_planner_gives_the_scorer_every_shape_seen() -> None:
    from swarmgpu.allocator.workload import WorkloadModel
    from swarmgpu.manager.placement.planner import Planner

    model = WorkloadModel.fixed([HEAVY] * 99 + [BIG], "test")
    planner = Planner(workload=model)
    assert planner.scorer.shapes == model.current()
    planner.set_workload(model)
    assert planner.scorer.shapes == model.current()


ONE, ANY8 = TaskShape(12_000, 1000, 1), TaskShape(64_000, 1000, 8)  # any 8-GPU class hosts ANY8


def heavy_beside_cpu_taken(monkeypatch: pytest.MonkeyPatch, whole: bool) -> tuple[str, bool]:
    """``one_then_any8`` with ``SwarmScorer.whole_untouched`` as ``whole``."""
    monkeypatch.setattr(SwarmScorer, "whole_untouched", whole)
    return one_then_any8(SwarmScorer(typical_tasks([ONE]), shapes={ONE: 0.9, ANY8: 0.1}))


def one_then_any8(scorer: SwarmScorer) -> tuple[str, bool]:
    """Two G2 nodes, the second with CPU taken by work swarmgpu did not place: where a
    one-GPU task of 12 cores goes (the two cost alike, the first is first in node order),
    and whether an 8-GPU task of 64 cores then fits, placed by ``scorer``."""
    a = Allocator(scorer)
    for name in ("whole", "used"):
        a.add_node(NodeSpec(name, gpus(8, "G2"), cpu_milli=96_000, memory_mib=1 << 20))
    a.set_usage("used", 40_000, 0)
    got = a.place(Demand(num_gpu=1, cpu_milli=12_000))
    assert isinstance(got, Choice)
    a.commit(got)
    return got.node, isinstance(a.place(Demand(num_gpu=8, cpu_milli=64_000)), Choice)


def test_the_switch_prices_untouched_nodes_for_tasks_every_class_hosts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Off (main before stop 82): the 8-GPU task fits every 8-GPU class, so the last
    # untouched node is worth nothing to the score, and the one-GPU task takes it by node
    # order.
    assert heavy_beside_cpu_taken(monkeypatch, False) == ("whole", False)
    # On: that node is the 8-GPU task's only host, priced by the chance it comes.
    assert heavy_beside_cpu_taken(monkeypatch, True) == ("used", True)


def test_the_planners_scorer_prices_untouched_nodes_for_every_whole_node_shape() -> None:
    # Main's rule since stop 82, decided by the scorer's default alone: the daemon's
    # planner (and simulate's swarmgpu policy, which runs it) keeps the last untouched
    # node for the 8-GPU task every 8-GPU class hosts.
    from swarmgpu.allocator.workload import WorkloadModel
    from swarmgpu.manager.placement.planner import Planner

    planner = Planner(workload=WorkloadModel.fixed([ONE] * 9 + [ANY8], "test"))
    assert one_then_any8(planner.scorer) == ("used", True)


def test_other_breaks_extrapolate_the_untouched_nodes_lost_per_milli_placed() -> None:
    groups = {(G3,): Confined(2.0, 8, 120_000), (G2, G3): Confined(30.0, 8, 64_000)}
    before, after = {G3: 30, G2: 100}, {G3: 26, G2: 99}
    # 4 G3 nodes lost over 10,000 milli placed: 4 x 100,000 / 10,000 = 40 over what is
    # free, of which the group's own 2 tasks take some; G2 and G3 lost 5: 50 - 30
    got = other_breaks(groups, before, after, 10_000, 100_000)
    assert got == {(G3,): pytest.approx(38.0), (G2, G3): pytest.approx(20.0)}
    # no loss above the group's own tasks, a release, or nothing free: no breaks
    assert other_breaks(groups, before, before, 10_000, 100_000) == {}
    assert other_breaks(groups, after, before, -10_000, 100_000) == {}
    assert other_breaks(groups, before, after, 10_000, 0) == {}


def test_nodes_other_tasks_break_raise_the_untouched_price() -> None:
    groups = {(G3,): Confined(2.0, 8, 120_000)}
    # 10 left and two tasks expected: worth nothing while only those take them
    assert untouched_values(groups, {G3: 10}) == {}
    # others expected to break 9 of them: the 10th is needed when the 11 expected in all
    # reach 10, and the one left without it is the group's with chance 2 / 11
    got = untouched_values(groups, {G3: 10}, {(G3,): 9.0})[G3]
    assert got == ((8, 120_000, pytest.approx(poisson_at_least(11.0, 10) * 2 / 11)),)
    assert got[0][2] > 0.1
    # no breaks read: main's price
    one = untouched_values(groups, {G3: 1}, {})
    assert one == untouched_values(groups, {G3: 1})


def test_poisson_at_least_holds_past_where_exp_underflows() -> None:
    assert poisson_at_least(800.0, 700) == pytest.approx(0.999856, abs=1e-5)
    assert poisson_at_least(800.0, 900) == pytest.approx(2.759e-4, rel=1e-3)


def g3_values_after_breaks(monkeypatch: pytest.MonkeyPatch, on: bool) -> bool:
    """Twenty G3 and twenty G2 nodes; one-GPU tasks break four G3 nodes, and with three
    on a G2 one the free total moves past a step: whether the remaining G3 nodes carry an
    untouched value, with ``SwarmScorer.untouched_breaks`` as ``on``."""
    monkeypatch.setattr(SwarmScorer, "untouched_breaks", "rate" if on else "")
    a = Allocator(SwarmScorer(typical_tasks([HEAVY]), shapes={HEAVY: 0.99, BIG: 0.01}))
    for i in range(20):
        a.add_node(NodeSpec(f"g3-{i}", gpus(8, "G3"), cpu_milli=128_000, memory_mib=1 << 20))
        a.add_node(NodeSpec(f"g2-{i}", gpus(8, "G2"), cpu_milli=96_000, memory_mib=1 << 20))
    for name in ("g2-0", "g3-0", "g3-1", "g3-2", "g3-3", "g2-0", "g2-0"):
        got = a.place_on(name, Demand(num_gpu=1, cpu_milli=4_000))
        assert isinstance(got, Choice)
        a.commit(got)
    assert a.untouched[G3] == 16
    scorer = a.scorer
    assert isinstance(scorer, SwarmScorer)
    return G3 in scorer.values


def test_the_switch_prices_untouched_nodes_other_tasks_break(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Off (main): the three 128-core tasks expected will not need 16 G3 nodes.
    assert not g3_values_after_breaks(monkeypatch, False)
    # On: four G3 nodes broken in the last step's placements, at that rate the rest go
    # before the free capacity does, and the 128-core task's chance is priced.
    assert g3_values_after_breaks(monkeypatch, True)


def test_forced_breaks_count_the_tasks_only_the_group_classes_host_in_nodes() -> None:
    classes = {G3: 39 * 8000, G2: 549 * 8000, ("T4", 2, 104_000): 387 * 2000}
    g3_only = TaskShape(120_000, 1000, 4)  # G3 only, one to a node by its CPU
    g3_share = TaskShape(110_000, 500, 1)  # G3 only, one to a node by its CPU
    two = TaskShape(50_000, 1000, 4, ("G3",))  # G3 only by its model, two to a node
    light = TaskShape(4_000, 1000, 1)
    shapes = {BIG: 0.01, g3_only: 0.02, g3_share: 0.02, two: 0.02, HEAVY: 0.43, light: 0.5}
    per_task = (0.01 * 8000 + 0.02 * 4000 + 0.02 * 500 + 0.02 * 4000 + 0.43 * 1000
                + 0.5 * 1000)
    free = 1000 * 1000
    groups = exclusive_groups(shapes, classes, free)
    assert list(groups) == [(G3,)]
    # G3's 128-core task is the group's own (E counts it); HEAVY and the light one can
    # go to other classes, whatever the price
    got = forced_breaks(shapes, classes, free, groups)
    assert got == {(G3,): pytest.approx((0.02 + 0.02 + 0.02 / 2) * free / per_task)}
    assert forced_breaks(shapes, classes, free, {}) == {}
    assert forced_breaks(shapes, classes, 0, groups) == {}
