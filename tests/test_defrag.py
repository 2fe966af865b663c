"""Defragmenting moves: the search (swarmgpu.allocator.defrag) and the replay's use of it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.defrag import (
    DefragMove,
    FragmentationMoves,
    Held,
    NodeCost,
    best_move,
    cheapest_target,
    movable,
)
from swarmgpu.allocator.fragmentation import typical_tasks
from swarmgpu.allocator.scorer import SwarmScorer
from swarmgpu.allocator.values import Choice, Demand, GpuSpec, NodeSpec
from swarmgpu.manager.placement import Planner
from swarmgpu.sim import swarm_replay
from swarmgpu.sim.rebalance import Defragmenter, Running, apply_moves
from swarmgpu.sim.runs import DEFRAG_EVERY, workload_of
from swarmgpu.sim.swarm_replay import (
    DEFRAG_MIN_BATCH,
    FragmentationMover,
    Replay,
    World,
    carry_out,
    replay_planner,
)
from swarmgpu.sim.trace import TracePod

WHOLE = Demand(num_gpu=1, cpu_milli=4000)
HALF = Demand(gpu_milli=470, cpu_milli=2000)


def _node(name: str, gpus: int, cpu: int = 32000) -> NodeSpec:
    return NodeSpec(name, tuple(GpuSpec(i, "T4", 16384) for i in range(gpus)), cpu, 1 << 20)


def _alloc(*nodes: NodeSpec) -> Allocator:
    workload = typical_tasks([WHOLE.shape()] * 3 + [HALF.shape()])
    alloc = Allocator(SwarmScorer(workload))
    for n in nodes:
        alloc.add_node(n)
    return alloc


def _run(alloc: Allocator, running: Running, tid: int, node: str, gpu: int, d: Demand) -> None:
    c = Choice(node, (gpu,), (d.gpu_milli or 1000,), 0.0, "", d.cpu_milli, d.memory_mib)
    alloc.commit(c)
    running.setdefault(node, {})[tid] = (d, c)


def _held(running: Running) -> list[Held]:
    return [Held(t, d, c) for tasks in running.values() for t, (d, c) in tasks.items()]


def _frag() -> NodeCost:
    return Defragmenter(typical_tasks([WHOLE.shape()] * 3 + [HALF.shape()])).cost


def test_two_half_used_gpus_are_merged_and_a_whole_gpu_freed() -> None:
    alloc = _alloc(_node("a", 1), _node("b", 1))
    running: Running = {}
    _run(alloc, running, 1, "a", 0, HALF)
    _run(alloc, running, 2, "b", 0, HALF)
    assert not isinstance(alloc.place(WHOLE), Choice)  # no whole GPU anywhere
    mv = best_move(alloc, _held(running), _frag())
    assert mv is not None and mv.gain > 0
    assert {mv.old.node, mv.new.node} == {"a", "b"}
    assert alloc.snapshot() == {"a": (530,), "b": (530,)}  # pure: nothing changed yet
    alloc.release(mv.old)
    alloc.commit(mv.new)
    assert sorted(alloc.snapshot().values()) == [(60,), (1000,)]
    assert isinstance(alloc.place(WHOLE), Choice)


def test_no_move_when_none_lowers_the_cost() -> None:
    alloc = _alloc(_node("a", 2), _node("b", 2))
    running: Running = {}
    _run(alloc, running, 1, "a", 0, HALF)
    _run(alloc, running, 2, "a", 0, HALF)  # a GPU0 holds both shares; the rest is free
    assert best_move(alloc, _held(running), _frag()) is None


def test_whole_gpus_mig_and_topology_requests_never_move() -> None:
    c = Choice("a", (0,), (1000,), 0.0, "", 0, 0)
    assert not movable(Held(1, WHOLE, c))
    assert not movable(Held(1, Demand(gpu_milli=300, min_memory_mib=1), c))
    assert not movable(Held(1, Demand(gpu_milli=300, node_labels=(("zone", "x"),)), c))
    assert movable(Held(1, HALF, Choice("a", (0,), (470,), 0.0, "", 0, 0)))


def test_cheapest_target_respects_cpu_and_prefers_used_nodes() -> None:
    alloc = _alloc(_node("a", 1, cpu=1000), _node("b", 2), _node("c", 2))
    running: Running = {}
    _run(alloc, running, 1, "c", 0, HALF)
    got = cheapest_target(alloc, HALF, _frag())
    assert got is not None
    assert got[1].node == "c" and got[1].gpus == (0,)  # a lacks CPU; c pairs the shares


def test_defragmenter_spends_at_most_the_budget_and_keeps_state_consistent() -> None:
    alloc = _alloc(*(_node(f"n{i}", 1) for i in range(6)))
    running: Running = {}
    for i in range(6):
        _run(alloc, running, i, f"n{i}", 0, HALF)
    workload = typical_tasks([WHOLE.shape()] * 3 + [HALF.shape()])
    moves = Defragmenter(workload)(alloc, running, 2)
    assert len(moves) == 2
    assert apply_moves(running, moves) == 2  # as the replay records them
    used: Counter[tuple[str, int]] = Counter()
    for tasks in running.values():
        for _d, c in tasks.values():
            for g, milli in zip(c.gpus, c.milli, strict=True):
                used[(c.node, g)] += milli
    assert {n: (1000 - used[(n, 0)],) for n in alloc.snapshot()} == alloc.snapshot()
    assert sum(1 for f in alloc.snapshot().values() if f == (1000,)) == 2  # two GPUs freed
    assert Defragmenter(workload)(alloc, running, 0) == []
    assert Defragmenter(workload, reserve=3)(alloc, running, 3) == []  # kept for rescues


def _pods() -> list[TracePod]:
    shapes = [(1, 1000)] * 6 + [(1, 470)] * 5 + [(1, 320)] * 3 + [(1, 810)] * 2 + [(0, 0)] * 2
    return [TracePod(f"p{i:03d}", 2000, 1024, n, m) for i, (n, m) in enumerate(shapes * 3)]


def test_replay_with_defrag_counts_moves_within_the_budget_and_the_allocator_agrees() -> None:
    # CPU enough for the workload (16 per GPU-milli; it asks 10): where it is short, the
    # placement's CPU step is on and moves can cost a pod (x-cpux2 and x-share810cpu at
    # 2 moves per 100 place less than placing only: docs/simulate.md)
    nodes = [_node(f"n{i}", 2, cpu=32000) for i in range(6)]
    pods = _pods()
    moves_per_100 = 10.0
    res = replay_planner(nodes, pods, 3, moves_per_100=moves_per_100,
                         defrag=FragmentationMover(), defrag_every=5, min_batch=1)
    assert 0 < res.moves <= int(res.pods * moves_per_100 / 100)
    spent = [res.moves_at[lv] for lv in sorted(res.moves_at)]
    assert spent == sorted(spent) and spent[-1] <= res.moves
    plain = replay_planner(nodes, pods, 3)
    assert res.pods == plain.pods and res.placed >= plain.placed


class _CountingMover(FragmentationMover):
    """The daemon's mover, counting the replay's calls (the policy object is unchanged)."""

    def __init__(self) -> None:
        super().__init__()
        self.budgets: list[int] = []
        self.judged: list[bool] = []  # each call: moves judged by placement's model then

    def run(self, planner: Planner, w: World, budget: int) -> int:
        self.budgets.append(budget)
        typical = planner.model.typical()
        got = super().run(planner, w, budget)
        self.judged.append(self.policy is not None and self.policy.workload == typical)
        return got


def test_planner_replay_plans_moves_every_50_arrivals_in_batches_of_five() -> None:
    # The planner path checks the budget every DEFRAG_EVERY arrivals, as the baselines'
    # replay does (it once planned every 250 and so spent about 500 of 830 moves allowed
    # at 10 per 100), and plans once DEFRAG_MIN_BATCH moves are allowed.
    nodes = [_node(f"n{i}", 2, cpu=16000) for i in range(6)]
    pods = _pods() * 3  # 162 pods: 10 per 100 allow 5 more after 50, 100 and 150 arrivals
    mover = _CountingMover()
    res = replay_planner(nodes, pods, 3, moves_per_100=10.0, defrag=mover)
    assert len(mover.budgets) == len(pods) // DEFRAG_EVERY == 3
    assert mover.budgets[0] == 50 * 10 // 100 == DEFRAG_MIN_BATCH  # never spent ahead
    assert res.moves <= int(len(pods) * 10.0 / 100)
    slow = _CountingMover()  # 2 per 100: 5 allowed only after 250 arrivals
    res = replay_planner(nodes, pods, 3, moves_per_100=2.0, defrag=slow)
    assert slow.budgets == [] and res.moves == 0


def test_the_replays_mover_judges_moves_by_placements_model_as_the_daemon_does() -> None:
    # The daemon's rebalance cycle hands the fragmentation policy placement's model
    # (cycle/rebalance.py: ``planner.model.typical()``); the replay once gave it the whole
    # trace's mix, which no daemon has, so its moves figures were not the daemon's.
    nodes = [_node(f"n{i}", 2, cpu=32000) for i in range(6)]
    pods = _pods()
    for mode in ("oracle", "online"):
        rp = Replay(nodes, pods, 3, workload=mode)
        mover = _CountingMover()
        rp.run(10.0, mover, defrag_every=5, min_batch=1)
        assert len(mover.judged) > 1 and all(mover.judged)
    # online: the prior's shapes and the tasks seen so far, not the whole trace's mix
    assert mover.policy is not None and mover.policy.workload != workload_of(pods)


def test_the_replays_mover_moves_a_task_once_per_call_as_the_daemons_pass_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The daemon's fragmentation pass plans with ``again=False`` (a service moves at most
    # once per pass); the replay once let a task moved in a call move again in it, so its
    # moves figures were a little above the daemon's (docs/simulate.md, stop 59).
    calls: list[bool] = []
    carried: list[list[str]] = []
    plan = FragmentationMoves.plan

    def spy(self: FragmentationMoves, *args: Any, **kwargs: Any) -> list[DefragMove]:
        calls.append(kwargs["again"])  # required keyword: every caller says which
        return plan(self, *args, **kwargs)

    def record(planner: Planner, w: World, moves: Sequence[tuple[str, str, Choice]]) -> None:
        carried.append([svc for svc, _old, _new in moves])
        carry_out(planner, w, moves)

    monkeypatch.setattr(FragmentationMoves, "plan", spy)
    monkeypatch.setattr(swarm_replay, "carry_out", record)
    nodes = [_node(f"n{i}", 2, cpu=32000) for i in range(6)]
    res = replay_planner(nodes, _pods() * 2, 3, moves_per_100=30.0,
                         defrag=FragmentationMover(), defrag_every=5, min_batch=1)
    assert calls and not any(calls)
    assert res.moves == sum(map(len, carried)) > 0
    assert all(len(set(svcs)) == len(svcs) for svcs in carried)
