"""Room for a pending task (swarmgpu.allocator.rescue): the search the daemon's defrag
policy proposes from, the replay carrying it out, and the mover's model pressure."""

from __future__ import annotations

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.defrag import FragmentationMoves
from swarmgpu.allocator.fragmentation import typical_tasks
from swarmgpu.allocator.rescue import make_room, plans
from swarmgpu.allocator.scorer import SwarmScorer
from swarmgpu.allocator.values import Choice, Demand, GpuSpec, NodeSpec
from swarmgpu.sim.swarm_replay import replay_departures_planner, replay_planner
from swarmgpu.sim.swarm_rescue import PlannerRescuer
from swarmgpu.sim.trace import TracePod

WHOLE = Demand(num_gpu=1, cpu_milli=4000)
HALF = Demand(gpu_milli=470, cpu_milli=2000)
SMALL = Demand(gpu_milli=320, cpu_milli=2000)


def _node(name: str, gpus: int, product: str = "T4") -> NodeSpec:
    return NodeSpec(name, tuple(GpuSpec(i, product, 16384) for i in range(gpus)), 32000,
                    1 << 20)


def _alloc(*nodes: NodeSpec) -> Allocator:
    alloc = Allocator(SwarmScorer(typical_tasks([WHOLE.shape()] * 3 + [HALF.shape()])))
    for n in nodes:
        alloc.add_node(n)
    return alloc


Tasks = dict[str, dict[object, tuple[Demand, Choice]]]


def _run(alloc: Allocator, tasks: Tasks, key: str, node: str, d: Demand) -> None:
    c = Choice(node, (0,), (d.gpu_milli or 1000,), 0.0, "", d.cpu_milli, d.memory_mib)
    alloc.commit(c)
    tasks.setdefault(node, {})[key] = (d, c)


def test_room_is_made_by_the_fewest_and_smallest_moves() -> None:
    alloc = _alloc(_node("a", 1), _node("b", 1), _node("c", 1))
    tasks: Tasks = {}
    _run(alloc, tasks, "x", "a", HALF)
    _run(alloc, tasks, "y", "b", SMALL)
    _run(alloc, tasks, "z", "c", HALF)
    assert not isinstance(alloc.place(WHOLE), Choice)  # 1.41 GPUs free, no whole one
    first = plans(alloc, tasks, WHOLE, 2)[0]
    assert (first.node, first.tasks, first.moved_milli) == ("b", ("y",), 320)
    got = make_room(alloc, tasks, WHOLE, budget=5)
    assert got is not None
    moves, here = got
    assert [(m.key, m.old.node) for m in moves] == [("y", "b")]
    assert moves[0].new.node in ("a", "c") and here.node == "b"
    snap = alloc.snapshot()  # the move is committed; the pending task is not
    assert snap["b"] == (1000,) and sorted([snap["a"], snap["c"]]) == [(210,), (530,)]


def test_no_room_within_the_budget_changes_nothing() -> None:
    alloc = _alloc(_node("a", 1), _node("b", 1))
    tasks: Tasks = {}
    _run(alloc, tasks, "x", "a", HALF)
    _run(alloc, tasks, "y", "b", HALF)
    before = alloc.snapshot()
    assert make_room(alloc, tasks, WHOLE, budget=0) is None
    # Either half could join the other (0.94 of one GPU), but not with 0 moves allowed,
    # and no plan exists for a task that fits nowhere else.
    assert make_room(alloc, tasks, Demand(num_gpu=2), budget=3) is None
    assert alloc.snapshot() == before


def test_the_mover_pays_for_taking_a_model_that_pinned_tasks_need() -> None:
    # Pinned whole-GPU tasks need the V100s: with placement's model pressure a move
    # pays for the V100 milli it takes, beyond FGD's fragmentation (gpuspec33: moves
    # that ignored it cost 0.5 points).
    pinned = Demand(num_gpu=1, products=("V100",))
    workload = typical_tasks([pinned.shape()] * 3 + [WHOLE.shape()] * 2 + [HALF.shape()] * 2)
    alloc = Allocator(SwarmScorer(workload))
    for n in (_node("t1", 1), _node("v1", 1, "V100"), _node("v2", 2, "V100")):
        alloc.add_node(n)
    tasks: Tasks = {}
    _run(alloc, tasks, "h1", "t1", HALF)
    _run(alloc, tasks, "h3", "v1", HALF)
    policy = FragmentationMoves(workload)
    cost = policy.search_cost(alloc)
    free = (530,)
    assert cost("T4", 30000, free) == policy.cost("T4", 30000, free)  # the least claimed
    assert cost("V100", 30000, free) < policy.cost("V100", 30000, free)
    # Moving t1's half into v1's hole: what it costs beyond FGD's measure is the pressure.
    cpu = 32000 - HALF.cpu_milli
    rise = {name: f("V100", cpu - HALF.cpu_milli, (60,)) - f("V100", cpu, free)
            for name, f in (("plain", policy.cost), ("pressed", cost))}
    assert rise["pressed"] - rise["plain"] > 0.1 * HALF.gpu_milli
    unpinned = FragmentationMoves(typical_tasks([WHOLE.shape()] * 3 + [HALF.shape()]))
    assert unpinned.search_cost(alloc) is unpinned.cost  # no pins: FGD's cost as it was


def _pods() -> list[TracePod]:
    # Whole GPUs and shares that complete each other (0.6 + 0.4): placed as they come,
    # some GPUs keep a lone share that a whole-GPU pod then cannot use.
    shapes = [(1, 1000)] * 4 + [(1, 600)] * 3 + [(1, 400)] * 3
    return [TracePod(f"p{i:03d}", 2000, 1024, n, m, creation_time=10 * i,
                     deletion_time=10 * i + 5000)
            for i, (n, m) in enumerate(shapes * 2)]


def test_planner_replay_makes_room_for_pods_that_find_no_node() -> None:
    nodes = [_node(f"n{i}", 2) for i in range(4)]
    pods = _pods()
    plain = replay_planner(nodes, pods, 1)
    res = replay_planner(nodes, pods, 1, moves_per_100=20.0, rescuer=PlannerRescuer())
    assert 0 < res.moves <= int(res.pods * 20.0 / 100)
    assert res.alloc_pct_at[100] > plain.alloc_pct_at[100]
    timed = replay_departures_planner(nodes, pods, 2, moves_per_100=20.0,
                                      rescuer=PlannerRescuer(), speedup=1.0, batch=3)
    assert timed.moves <= int(len(pods) * 20.0 / 100)


def test_a_rescue_gives_back_the_cpu_of_the_tasks_it_moves() -> None:
    """Nodes of 4 and 5 CPUs, pods asking 1 to 2.5 each: p8 (a whole GPU, 2.5 CPUs)
    finds no node, and the room made for it must count the CPU the moved shares' tasks
    leave behind (the node's usage holds a running task's CPU, not its holding's choice:
    before, the search gave none back, and p8 failed)."""
    nodes = [NodeSpec(name, tuple(GpuSpec(i, "T4", 16384) for i in range(gpus)), cpu,
                      1 << 20) for name, gpus, cpu in (("n0", 1, 4000), ("n1", 2, 4000),
                                                       ("n2", 1, 5000))]
    shapes = [(1000, 700), (2500, 700), (2500, 300), (2500, 300), (1000, 500),
              (1000, 500), (1000, 300), (1000, 500), (2500, 1000)]
    pods = [TracePod(f"p{i}", cpu, 1, 1, milli) for i, (cpu, milli) in enumerate(shapes)]
    res = replay_planner(nodes, pods, 1, moves_per_100=100.0, rescuer=PlannerRescuer())
    assert (res.placed, res.moves) == (8, 2)
