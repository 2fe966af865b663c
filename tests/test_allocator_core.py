"""The allocator core on small hand-made clusters."""

from __future__ import annotations

import pytest

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.fragmentation import (
    TaskShape,
    TypicalTask,
    node_fragmentation,
    typical_tasks,
)
from swarmgpu.allocator.values import Choice, Demand, GpuSpec, NodeSpec, NodeState, Unplaceable


def gpus(n: int, product: str = "NVIDIA A100-SXM4-40GB", mem: int = 40960) -> tuple[GpuSpec, ...]:
    return tuple(GpuSpec(index=i, product=product, memory_mib=mem) for i in range(n))


def cluster(*nodes: NodeSpec) -> Allocator:
    a = Allocator()
    for n in nodes:
        a.add_node(n)
    return a


def test_memory_filter_picks_the_big_gpu_node() -> None:
    a = cluster(NodeSpec("small", gpus(2, "Tesla T4", 15360)),
                NodeSpec("big", gpus(2, "NVIDIA A100-SXM4-80GB", 81920)))
    c = a.place(Demand(num_gpu=1, min_memory_mib=40960))
    assert isinstance(c, Choice) and c.node == "big"


def test_product_globs_are_case_insensitive() -> None:
    a = cluster(NodeSpec("t4", gpus(1, "Tesla T4", 15360)),
                NodeSpec("a100", gpus(1, "NVIDIA A100-SXM4-40GB")))
    c = a.place(Demand(num_gpu=1, products=("*a100*",)))
    assert isinstance(c, Choice) and c.node == "a100"
    c = a.place(Demand(num_gpu=1, products=("tesla t4",)))
    assert isinstance(c, Choice) and c.node == "t4"
    assert isinstance(a.place(Demand(num_gpu=1, products=("H100*",))), Unplaceable)


def test_fractions_never_exceed_capacity() -> None:
    a = cluster(NodeSpec("n", gpus(2)))
    placed = 0
    while True:
        c = a.place(Demand(gpu_milli=300))
        if isinstance(c, Unplaceable):
            break
        a.commit(c)
        placed += 1
    assert placed == 6  # three 0.3 shares per GPU
    assert all(0 <= f <= 1000 for f in a.snapshot()["n"])
    assert sorted(a.snapshot()["n"]) == [100, 100]


def test_shares_pack_onto_a_used_gpu_first() -> None:
    a = cluster(NodeSpec("n", gpus(2)))
    first = a.place(Demand(gpu_milli=500))
    assert isinstance(first, Choice)
    a.commit(first)
    second = a.place(Demand(gpu_milli=500))
    assert isinstance(second, Choice) and second.gpus == first.gpus


def test_cpu_and_memory_must_fit() -> None:
    a = cluster(NodeSpec("tight", gpus(4), cpu_milli=4000, memory_mib=8192),
                NodeSpec("roomy", gpus(4), cpu_milli=64000, memory_mib=262144))
    c = a.place(Demand(num_gpu=1, cpu_milli=8000))
    assert isinstance(c, Choice) and c.node == "roomy"
    c = a.place(Demand(num_gpu=1, memory_mib=16384))
    assert isinstance(c, Choice) and c.node == "roomy"


def test_commit_release_round_trip() -> None:
    a = cluster(NodeSpec("n", gpus(2), cpu_milli=1000, memory_mib=1000))
    c = a.place(Demand(num_gpu=2, cpu_milli=500, memory_mib=500))
    assert isinstance(c, Choice)
    a.commit(c)
    assert a.snapshot()["n"] == (0, 0)
    assert isinstance(a.place(Demand(num_gpu=1)), Unplaceable)
    a.release(c)
    assert a.snapshot()["n"] == (1000, 1000)
    with pytest.raises(ValueError, match="released twice"):
        a.release(c)


def test_unplaceable_names_the_closest_node() -> None:
    a = cluster(NodeSpec("gpu-node-1", gpus(1)), NodeSpec("gpu-node-3", gpus(2)))
    r = a.place(Demand(num_gpu=3, min_memory_mib=40960))
    assert isinstance(r, Unplaceable)
    assert "needs 3 GPUs >= 40 GiB" in r.reason
    assert "best node gpu-node-3 has 2 free" in r.reason


def test_unplaceable_on_a_drained_or_unmatched_node_reads_as_a_sentence() -> None:
    # (plan, status and audit said "best node a has it is not schedulable" and "best
    # node a has labels do not match": the node's state put after "has")
    a = cluster(NodeSpec("a", gpus(1)))
    a.set_blocked("a", True)
    r = a.place(Demand(num_gpu=1))
    assert isinstance(r, Unplaceable)
    assert r.reason.endswith("best node a is not schedulable (down, paused or drained)")
    b = cluster(NodeSpec("b", gpus(1), labels={"zone": "x"}))
    r = b.place(Demand(num_gpu=1, node_labels=(("zone", "y"),)))
    assert isinstance(r, Unplaceable)
    assert r.reason.endswith("best node b does not carry the node labels asked for"), r


def test_nvlink_request_uses_the_link_matrix() -> None:
    # GPUs 0-1 and 2-3 are NVLink pairs; across pairs only PCIe.
    def pair(a: int, b: int) -> int:
        return 200 if a // 2 == b // 2 else 10

    a = Allocator()
    a.add_node(NodeSpec("dgx", gpus(4), pair_score=pair))
    c = a.place(Demand(num_gpu=2, topology="nvlink"))
    assert isinstance(c, Choice) and c.gpus[0] // 2 == c.gpus[1] // 2
    a.commit(c)
    c2 = a.place(Demand(num_gpu=2, topology="nvlink"))
    assert isinstance(c2, Choice) and set(c2.gpus).isdisjoint(c.gpus)
    plain = Allocator()
    plain.add_node(NodeSpec("box", gpus(2)))
    r = plain.place(Demand(num_gpu=2, topology="nvlink"))
    assert isinstance(r, Unplaceable) and "NVLink" in r.reason


def test_label_filter_and_mig_delegation() -> None:
    a = Allocator(mig_picker=lambda spec, free, d: "MIG-1" if spec.name == "b" else None)
    a.add_node(NodeSpec("a", gpus(1), labels={"zone": "x"}))
    a.add_node(NodeSpec("b", gpus(1), labels={"zone": "y"}))
    c = a.place(Demand(num_gpu=1, node_labels=(("zone", "y"),)))
    assert isinstance(c, Choice) and c.node == "b"
    m = a.place(Demand(mig_profile="1g.10gb"))
    assert isinstance(m, Choice) and m.node == "b" and m.mig == "MIG-1"


def test_bad_demands_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"1\.\.999"):
        Demand(gpu_milli=1000)
    with pytest.raises(ValueError, match="topology"):
        Demand(num_gpu=1, topology="ring")


def test_fragmentation_counts_unusable_shares() -> None:
    tasks = typical_tasks([TaskShape(1000, 1000, 1)] * 3 + [TaskShape(1000, 500, 1)])
    # one whole GPU free and one with 300 left: the 300 is fragment for both kinds
    f = node_fragmentation("A", 8000, (1000, 300), tasks)
    assert f == pytest.approx(300.0)
    # too little CPU: everything is fragment
    assert node_fragmentation("A", 0, (1000, 300), tasks) == pytest.approx(1300.0)


def test_fragmentation_aware_choice_keeps_whole_gpus() -> None:
    tasks = typical_tasks([TaskShape(0, 1000, 1)] * 5 + [TaskShape(0, 500, 1)] * 5)
    from swarmgpu.allocator.scorer import SwarmScorer

    a = Allocator(SwarmScorer(tasks))
    a.add_node(NodeSpec("half", gpus(1)))
    a.add_node(NodeSpec("whole", gpus(1)))
    c = a.place(Demand(gpu_milli=500))
    assert isinstance(c, Choice)
    a.commit(c)
    c2 = a.place(Demand(gpu_milli=500))
    assert isinstance(c2, Choice) and c2.node == c.node  # fill the half-used GPU


def test_without_a_workload_used_nodes_then_best_fit() -> None:
    a = cluster(NodeSpec("empty", gpus(4)), NodeSpec("half", gpus(4)), NodeSpec("most", gpus(4)))
    for name, n in (("half", 2), ("most", 3)):
        a.commit(Choice(name, tuple(range(n)), (1000,) * n, 0.0, ""))
    c = a.place(Demand(num_gpu=1))
    assert isinstance(c, Choice) and c.node == "most"  # least GPU left after placement


def test_stranded_capacity_is_what_the_cpu_cannot_feed() -> None:
    from swarmgpu.allocator.fragmentation import CpuSpread, cpu_per_gpu_milli, stranded_milli

    tasks = typical_tasks([TaskShape(8000, 1000, 1)] * 3 + [TaskShape(2000, 500, 1)])
    c = cpu_per_gpu_milli(tasks)
    assert c == pytest.approx((0.75 * 8000 + 0.25 * 2000) / (0.75 * 1000 + 0.25 * 500))
    one = CpuSpread(typical_tasks([TaskShape(8000, 1000, 1)]))  # one ratio: 8 per milli
    assert one(16_000, (1000, 1000)) == 0.0  # CPU for both GPUs
    assert one(8_000, (1000, 1000)) == pytest.approx(1000.0)  # one idles
    assert one(0, (0, 0)) == 0.0
    assert cpu_per_gpu_milli(typical_tasks([TaskShape(4000, 0, 0)])) is None  # CPU-only
    # Spread: half the GPU-milli asks 2 per milli, half 16 (each share counts by its
    # GPU-milli): 9 on average. s(rho) = 0.5 max(0, 1 - rho/2) + 0.5 max(0, 1 - rho/16).
    spread = CpuSpread(typical_tasks([TaskShape(2000, 1000, 1), *[TaskShape(8000, 500, 1)] * 2]))

    def s(rho: float) -> float:
        return 0.5 * max(0, 1 - rho / 2) + 0.5 * max(0, 1 - rho / 16)

    # 4 per free milli feeds the light half and a quarter of the heavy one's: below the
    # mean's line (2000 * (1 - 4/9)), as the light tasks still use the node
    assert spread(8000, (1000, 1000)) == pytest.approx(2000 * (s(4) - s(9)) / (s(0) - s(9)))
    assert spread(8000, (1000, 1000)) < 2000 * (1 - 4 / 9)
    assert spread(0, (1000, 1000)) == pytest.approx(2000.0)  # no CPU: all idles
    # at the mean or above nothing counts, though the heavy half asks more (16)
    assert spread(18_000, (1000, 1000)) == pytest.approx(0.0)
    assert spread(24_000, (1000, 1000)) == 0.0
    # where the CPU is short, the mean's line (the reserve's ratio, excess included)
    assert stranded_milli(16_000, (1000, 1000), 8.0) == 0.0  # CPU for both GPUs
    assert stranded_milli(8_000, (1000, 1000), 8.0) == pytest.approx(1000.0)  # one idles


def test_a_light_task_does_not_break_a_fresh_node_for_a_ratio_it_cannot_host() -> None:
    from swarmgpu.allocator.scorer import SwarmScorer

    # One-GPU tasks of 1 CPU and 8-GPU ones of 120 (15 per GPU; they need a node of 120
    # CPU), the same GPU-milli each: 8 CPU per GPU on average. The 96-CPU nodes (12 per
    # GPU) are above the mean, so neither strands anything: the light task packs onto
    # the used node. Counting the shortfall up to the heaviest ratio (15) priced the
    # fresh node's 12 per GPU as stranding that any light task there relieved, so light
    # tasks broke whole nodes (multigpu60s11, seed 43: 94.56 against 97.40).
    tasks = typical_tasks([TaskShape(1000, 1000, 1)] * 8 + [TaskShape(120_000, 1000, 8)])
    a = Allocator(SwarmScorer(tasks))
    a.add_node(NodeSpec("fresh", gpus(8), cpu_milli=96_000, memory_mib=1 << 20))
    a.add_node(NodeSpec("used", gpus(8), cpu_milli=96_000, memory_mib=1 << 20))
    a.commit(Choice("used", (0,), (1000,), 0.0, "", cpu_milli=1000))
    got = a.place(Demand(num_gpu=1, cpu_milli=1000))
    assert isinstance(got, Choice) and got.node == "used"


def test_cpu_heavy_gpu_task_goes_to_the_cpu_rich_node() -> None:
    from swarmgpu.allocator.scorer import SwarmScorer

    # Light (2 CPU) and heavy (12 CPU) one-GPU tasks, 7 CPU per GPU on average; "lean"
    # has 6 CPU per GPU and comes second in node order, so only the score can pick it.
    tasks = typical_tasks([TaskShape(2000, 1000, 1)] * 5 + [TaskShape(12000, 1000, 1)] * 5)
    a = Allocator(SwarmScorer(tasks))
    a.add_node(NodeSpec("rich", gpus(4), cpu_milli=96_000, memory_mib=1 << 20))
    a.add_node(NodeSpec("lean", gpus(4), cpu_milli=24_000, memory_mib=1 << 20))
    heavy = a.place(Demand(num_gpu=1, cpu_milli=12_000))
    light = a.place(Demand(num_gpu=1, cpu_milli=2_000))
    assert isinstance(heavy, Choice) and heavy.node == "rich"
    assert isinstance(light, Choice) and light.node == "lean"


def test_residual_waste_is_what_the_workload_leaves_at_the_end() -> None:
    from swarmgpu.allocator.fragmentation import ResidualWaste, residual_waste_table

    # Without the stop draw: tasks keep landing while one fits.
    whole_only = typical_tasks([TaskShape(1000, 1000, 1)])
    table = residual_waste_table(whole_only, "A", stop=0.0)
    assert table[1000] == 0.0 and table[999] == 999.0  # a whole task or nothing
    mix = typical_tasks([TaskShape(1000, 320, 1), TaskShape(1000, 650, 1)])
    table = residual_waste_table(mix, "A", stop=0.0)
    assert table[350] == pytest.approx(30.0)  # takes a 0.32, then nothing fits
    assert table[120] == pytest.approx(120.0)  # nothing ever fits
    assert table[0] == 0.0
    # From 1000: a 0.65 first (half the time) leaves 350 -> 30; a 0.32 first leaves 680,
    # then 0.65 (-> 30) or 0.32 (-> 360 -> 40), each half the time.
    assert table[1000] == pytest.approx(0.5 * 30 + 0.5 * (0.5 * 30 + 0.5 * 40))
    pinned = typical_tasks([TaskShape(1000, 500, 1, ("A100*",))])
    assert residual_waste_table(pinned, "T4", stop=0.0)[500] == 500.0  # never fits
    assert residual_waste_table(pinned, "A100-SXM4", stop=0.0)[500] == 0.0
    w = ResidualWaste(mix, stop=0.0)
    assert w("A", (350, 120)) == pytest.approx(150.0) == w("A", (120, 350))
    assert w("A", (0, 0)) == 0.0


def test_a_hole_only_rare_tasks_fit_counts_as_mostly_wasted() -> None:
    from swarmgpu.allocator.fragmentation import STOP_WEIGHT, residual_waste_table

    # 0.81 shares are common, 0.16 ones rare: the 0.19 beside a 0.81 is filled only if
    # a 0.16 comes to it before the stop draw (weight STOP_WEIGHT beside the tasks').
    mix = (TypicalTask(TaskShape(4000, 810, 1), 0.3), TypicalTask(TaskShape(4000, 470, 1), 0.69),
           TypicalTask(TaskShape(4000, 160, 1), 0.01))
    stop = STOP_WEIGHT
    table = residual_waste_table(mix, "A")
    assert table[190] == pytest.approx((0.01 * 30 + stop * 190) / (0.01 + stop))
    assert residual_waste_table(mix, "A", stop=0.0)[190] == pytest.approx(30.0)
    # A hole the common 0.47 fits keeps nearly its value: the stop is a few percent there.
    common = residual_waste_table(mix, "A")[530]
    assert common == pytest.approx((0.69 * table[60] + 0.01 * table[370] + stop * 530)
                                   / (0.70 + stop))
    assert common < table[190]  # 0.53 free is worth more than a 0.19 sliver
    assert table[0] == 0.0 and table[120] == 120.0  # nothing fits: all of it is left
    # An untouched GPU stays whole: the stop draw leaves nothing wasted on it (a whole
    # GPU is what the next whole-GPU or large request needs), so a share still prefers
    # a broken GPU to an untouched one.
    whole = typical_tasks([TaskShape(1000, 1000, 1)])
    assert residual_waste_table(whole, "A")[1000] == 0.0
    assert residual_waste_table(whole, "A")[999] == 999.0
    assert table[1000] == pytest.approx((0.3 * table[190] + 0.69 * common + 0.01 * table[840])
                                        / (1.0 + stop))  # the stop adds nothing at 1000


def test_shares_are_paired_to_complete_each_other() -> None:
    from swarmgpu.allocator.scorer import SwarmScorer

    # GPU 0 holds a 0.65 share (0.35 free), GPU 1 a 0.47 share (0.53 free). A 0.23 share
    # beside the 0.65 would leave 0.12 that nothing fills; beside the 0.47 it leaves 0.30
    # that another 0.23 can take, and the 0.35 stays for a 0.32.
    shapes = [TaskShape(1000, m, 1) for m in (650, 470, 320, 230, 1000, 1000)]
    a = Allocator(SwarmScorer(typical_tasks(shapes)))
    a.add_node(NodeSpec("n", gpus(2), cpu_milli=64_000, memory_mib=1 << 20))
    a.commit(Choice("n", (0,), (650,), 0.0, "", 1000, 0))
    a.commit(Choice("n", (1,), (470,), 0.0, "", 1000, 0))
    c = a.place(Demand(gpu_milli=230, cpu_milli=1000))
    assert isinstance(c, Choice) and c.gpus == (1,)
    c = a.place(Demand(gpu_milli=320, cpu_milli=1000))
    assert isinstance(c, Choice) and c.gpus == (0,)


def test_restricted_pressure_weighs_pinned_demand_against_model_capacity() -> None:
    from swarmgpu.allocator.fragmentation import restricted_pressure

    # Half the GPU demand is pinned to T4, which has 1 of 4 GPUs: it claims all of it.
    tasks = typical_tasks([TaskShape(0, 1000, 1, ("T4",)), TaskShape(0, 1000, 1)])
    p = restricted_pressure(tasks, {"T4": 1, "G2": 3})
    assert p == {"T4": pytest.approx(1.0), "G2": 0.0}
    # Pins that follow capacity (1:3) claim each model alike: nothing to prefer.
    even = typical_tasks([TaskShape(0, 1000, 1, ("T4",))] + [TaskShape(0, 1000, 1, ("G2",))] * 3
                         + [TaskShape(0, 1000, 1)] * 4)
    assert all(v == pytest.approx(0.0) for v in restricted_pressure(even, {"T4": 1, "G2": 3})
               .values())
    # A task that accepts every model present restricts nothing; no capacity, no pressure.
    anywhere = typical_tasks([TaskShape(0, 1000, 1, ("T4", "G2"))])
    assert restricted_pressure(anywhere, {"T4": 1, "G2": 3}) == {"T4": 0.0, "G2": 0.0}
    assert restricted_pressure(tasks, {}) == {}


def test_restricted_claim_fades_as_the_free_models_fill() -> None:
    from swarmgpu.allocator.fragmentation import restricted_demand, restricted_pressure

    # A quarter of the GPU demand is pinned to T4 (2 of 8 GPUs). Empty, the pins claim
    # all of T4's free capacity; once G2 is mostly taken, what stays free elsewhere no
    # longer needs T4 kept apart, and with G2 full there is nothing left to prefer.
    tasks = typical_tasks([TaskShape(0, 1000, 1, ("T4",))] + [TaskShape(0, 1000, 1)] * 3)
    cap = {"T4": 2000, "G2": 6000}
    assert restricted_demand(tasks, cap) == {"T4": pytest.approx(0.25), "G2": 0.0}
    assert restricted_pressure(tasks, cap)["T4"] == pytest.approx(1.0)
    assert restricted_pressure(tasks, cap, {"T4": 2000, "G2": 2000})["T4"] == pytest.approx(0.5)
    assert restricted_pressure(tasks, cap, {"T4": 2000, "G2": 0}) == {"T4": 0.0}


def test_a_task_whose_cpu_fits_one_model_claims_it() -> None:
    from swarmgpu.allocator.fragmentation import restricted_demand

    # 2-GPU tasks of 120 cores fit only the 128-core G3 nodes: with the node classes they
    # claim G3; by model and GPU count alone they restrict nothing.
    tasks = typical_tasks([TaskShape(120_000, 1000, 2), TaskShape(1000, 1000, 1)])
    cap = {"G3": 2000, "G2": 2000}
    hosts: dict[tuple[str, int, int | None], int] = {
        ("G3", 2, 128_000): 2000, ("G2", 2, 96_000): 2000}
    assert restricted_demand(tasks, cap) == {"G3": 0.0, "G2": 0.0}
    assert restricted_demand(tasks, cap, hosts) == {"G3": pytest.approx(2 / 3), "G2": 0.0}
    # A node that reports no CPU may host any CPU.
    assert restricted_demand(tasks, cap, {**hosts, ("G2", 2, None): 2000}) == {
        "G3": 0.0, "G2": 0.0}
    # Narrowed by GPU count only (G2 nodes hold one GPU): a multi-GPU task needs whole
    # free nodes, which a claim on a model's free milli does not express.
    wide = typical_tasks([TaskShape(1000, 1000, 2), TaskShape(1000, 1000, 1)])
    assert restricted_demand(wide, cap, {("G3", 2, 128_000): 2000, ("G2", 1, 96_000): 2000}) == {
        "G3": 0.0, "G2": 0.0}


def test_a_task_keeps_the_node_only_its_cpu_fits_free() -> None:
    from swarmgpu.allocator.scorer import SwarmScorer

    # Same residual waste on both nodes and G3 first in node order: only the claim of the
    # 120-core tasks (which fit G3 alone) sends the small one to G2 (before: to G3, and
    # the 120-core task that came next found no node).
    tasks = typical_tasks([TaskShape(120_000, 1000, 2), TaskShape(1000, 1000, 1)])
    a = Allocator(SwarmScorer(tasks))
    a.add_node(NodeSpec("g3", gpus(2, "G3"), cpu_milli=128_000, memory_mib=1 << 20))
    a.add_node(NodeSpec("g2", gpus(2, "G2"), cpu_milli=96_000, memory_mib=1 << 20))
    assert a.gpu_hosts == {("G3", 2, 128_000): 2000, ("G2", 2, 96_000): 2000}
    small = a.place(Demand(num_gpu=1, cpu_milli=1000))
    assert isinstance(small, Choice) and small.node == "g2"
    a.commit(small)
    big = a.place(Demand(num_gpu=2, cpu_milli=120_000))
    assert isinstance(big, Choice) and big.node == "g3"
    a.remove_node("g2")
    assert a.gpu_hosts == {("G3", 2, 128_000): 2000}


def test_changes_in_observed_once_reach_the_scorer_once_at_the_end() -> None:
    seen: list[int] = []

    class Watching:
        name = "watching"

        def score(self, node: NodeState, d: Demand) -> float:
            return 0.0

        def pick(self, node: NodeState, d: Demand, candidates: list[int]) -> None:
            return None

        def observe_cluster(self, capacity: object, free: dict[str, int], cpu: int = 0,
                            hosts: object = None, untouched: object = None) -> bool:
            seen.append(sum(free.values()))
            return False

    a = Allocator(Watching())
    a.add_node(NodeSpec("n", gpus(2, "G2"), cpu_milli=8000, memory_mib=1 << 16))
    c = a.place(Demand(num_gpu=1))
    assert isinstance(c, Choice)
    a.commit(c)
    del seen[:]
    # a cycle re-committing a holding: the state between is never decided in
    with a.observed_once():
        a.release(c)
        a.commit(c)
        assert seen == []
    assert seen == [1000]
    a.release(c)
    assert seen == [1000, 2000]


def test_unpinned_tasks_leave_the_contested_model_to_pinned_ones() -> None:
    from swarmgpu.allocator.scorer import SwarmScorer

    # T4 is first in node order and the residual waste of both nodes grows alike, so only
    # the pressure of the T4-pinned half of the workload sends the unpinned task to G2.
    tasks = typical_tasks([TaskShape(1000, 1000, 1, ("T4",)), TaskShape(1000, 1000, 1)])
    a = Allocator(SwarmScorer(tasks))
    a.add_node(NodeSpec("t4", gpus(1, "T4"), cpu_milli=8000, memory_mib=1 << 16))
    a.add_node(NodeSpec("g2", gpus(1, "G2"), cpu_milli=8000, memory_mib=1 << 16))
    assert a.gpu_capacity == {"T4": 1000, "G2": 1000}
    free_anywhere = a.place(Demand(num_gpu=1, cpu_milli=1000))
    assert isinstance(free_anywhere, Choice) and free_anywhere.node == "g2"
    a.commit(free_anywhere)
    assert a.gpu_free == {"T4": 1000, "G2": 0}
    pinned = a.place(Demand(num_gpu=1, cpu_milli=1000, products=("T4",)))
    assert isinstance(pinned, Choice) and pinned.node == "t4"
    # Without pinned tasks in the workload the node order decides, as before.
    b = Allocator(SwarmScorer(typical_tasks([TaskShape(1000, 1000, 1)])))
    b.add_node(NodeSpec("t4", gpus(1, "T4"), cpu_milli=8000, memory_mib=1 << 16))
    b.add_node(NodeSpec("g2", gpus(1, "G2"), cpu_milli=8000, memory_mib=1 << 16))
    c = b.place(Demand(num_gpu=1, cpu_milli=1000))
    assert isinstance(c, Choice) and c.node == "t4"


def test_cpu_only_demand_beyond_the_spare_cpu_raises_the_reserve() -> None:
    from swarmgpu.allocator.fragmentation import cpu_reserve_per_gpu_milli
    from swarmgpu.allocator.scorer import SwarmScorer

    # GPU tasks ask 8 CPU per GPU; CPU-only tasks another 8 per GPU-milli of GPU demand.
    tasks = typical_tasks([TaskShape(8000, 1000, 1), TaskShape(8000, 0, 0)])
    assert cpu_reserve_per_gpu_milli(tasks, 0, 0) == pytest.approx(8.0)  # unknown cluster
    # 20 CPU per GPU: the CPU-only tasks fit in the 12 the GPU tasks leave.
    assert cpu_reserve_per_gpu_milli(tasks, 80_000, 4000) == pytest.approx(8.0)
    # 12 CPU per GPU: 16 are asked, so 4 per GPU-milli come out of the GPU tasks' CPU.
    assert cpu_reserve_per_gpu_milli(tasks, 48_000, 4000) == pytest.approx(12.0)
    a = Allocator(SwarmScorer(tasks))
    a.add_node(NodeSpec("n", gpus(4), cpu_milli=48_000, memory_mib=1 << 20))
    assert a.cpu_capacity == 48_000
    assert isinstance(a.scorer, SwarmScorer) and a.scorer.cpu_per_milli == pytest.approx(12.0)
    a.add_node(NodeSpec("no-cpu-data", gpus(4)))
    assert a.cpu_capacity == 0 and a.scorer.cpu_per_milli == pytest.approx(8.0)


def test_cpu_unfit_is_the_share_of_gpu_tasks_the_cpu_left_cannot_take() -> None:
    from swarmgpu.allocator.fragmentation import CpuUnfit

    tasks = (TypicalTask(TaskShape(2000, 1000, 1), 0.4),
             TypicalTask(TaskShape(8000, 500, 1), 0.2),
             TypicalTask(TaskShape(16000, 1000, 2), 0.2),
             TypicalTask(TaskShape(4000, 0, 0), 0.1),  # CPU-only: no GPU to lose
             TypicalTask(TaskShape(32000, 1000, 1, ("*A100*",)), 0.1))  # pinned
    unfit = CpuUnfit(tasks)
    t4 = "Tesla T4"  # the pinned task never comes here: 0.8 of weight counts
    assert unfit(t4, 1000) == pytest.approx(0.6 / 0.8)  # the 2-GPU task is not counted
    assert unfit(t4, 2000) == pytest.approx(0.2 / 0.8)  # as much as asked: it fits
    assert unfit(t4, 8000) == 0.0
    a100 = "NVIDIA A100-SXM4-40GB"
    assert unfit(a100, 16_000) == pytest.approx(0.1 / 0.9)
    assert unfit(a100, 32_000) == 0.0
    assert CpuUnfit((TypicalTask(TaskShape(4000, 0, 0), 1.0),))(t4, 0) == 0.0


def test_a_cpu_only_task_leaves_the_cpu_that_gpu_tasks_still_fit() -> None:
    from swarmgpu.allocator.scorer import SwarmScorer

    # GPU tasks ask 8 or 16 CPU. "first" has 9 CPU left, "second" 20: 4 CPU more taken
    # strands as much of each by the workload's mean (the linear term is level), but on
    # "first" it stops the 8-CPU tasks, and on "second" the 16-CPU ones still fit there.
    tasks = typical_tasks([TaskShape(8000, 1000, 1), TaskShape(16000, 1000, 1)])
    a = Allocator(SwarmScorer(tasks))
    a.add_node(NodeSpec("first", gpus(2), cpu_milli=9000, memory_mib=1 << 20))
    a.add_node(NodeSpec("second", gpus(2), cpu_milli=20_000, memory_mib=1 << 20))
    got = a.place(Demand(cpu_milli=4000))
    assert isinstance(got, Choice) and got.node == "second"
    # 29 CPU for 4 GPUs that the workload would feed with 12 each: the cluster is short
    assert isinstance(a.scorer, SwarmScorer) and a.scorer.cpu_short
    # with a CPU-rich node beside them the cluster's CPU suffices: no step counted
    b = Allocator(SwarmScorer(tasks))
    b.add_node(NodeSpec("first", gpus(2), cpu_milli=9000, memory_mib=1 << 20))
    b.add_node(NodeSpec("second", gpus(2), cpu_milli=20_000, memory_mib=1 << 20))
    b.add_node(NodeSpec("cpu-rich", gpus(1), cpu_milli=400_000, memory_mib=1 << 20))
    assert isinstance(b.scorer, SwarmScorer) and not b.scorer.cpu_short
