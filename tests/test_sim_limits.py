"""The daemon's budgets on the replay's moves (``simulate --move-limits daemon``,
``swarmgpu.sim.limits``): each call of a replay's mover is one rebalance cycle under
``rebalance.admission``'s rule with the daemon's defaults."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.fragmentation import typical_tasks
from swarmgpu.allocator.scorer import SwarmScorer
from swarmgpu.allocator.values import Choice, Demand, GpuSpec, NodeSpec
from swarmgpu.core.rebalanceconfig import RebalanceConfig
from swarmgpu.manager.placement import Planner
from swarmgpu.sim import report, swarm_replay
from swarmgpu.sim.cli_entry import run_simulate
from swarmgpu.sim.limits import DaemonLimits
from swarmgpu.sim.rebalance import Defragmenter, MoveRescuer, Running
from swarmgpu.sim.swarm_replay import FragmentationMover, World, carry_out, replay_planner
from swarmgpu.sim.swarm_rescue import PlannerRescuer
from swarmgpu.sim.trace import TracePod

WHOLE = Demand(num_gpu=1, cpu_milli=4000)
HALF = Demand(gpu_milli=470, cpu_milli=2000)
SMALL = Demand(gpu_milli=320, cpu_milli=2000)
WORKLOAD = typical_tasks([WHOLE.shape()] * 3 + [HALF.shape()])
DAEMON = RebalanceConfig()  # the daemon's defaults: 1 move per cycle, 1 per node


def _node(name: str, gpus: int) -> NodeSpec:
    return NodeSpec(name, tuple(GpuSpec(i, "T4", 16384) for i in range(gpus)), 32000, 1 << 20)


def _cluster(n: int) -> tuple[Allocator, Running]:
    """``n`` one-GPU nodes, each half used: every pair merges into a free GPU."""
    alloc = Allocator(SwarmScorer(WORKLOAD))
    running: Running = {}
    for i in range(n):
        alloc.add_node(_node(f"n{i}", 1))
        c = Choice(f"n{i}", (0,), (HALF.gpu_milli,), 0.0, "", HALF.cpu_milli, 0)
        alloc.commit(c)
        running[f"n{i}"] = {i: (HALF, c)}
    return alloc, running


def test_the_daemons_defaults_are_one_move_per_cycle_and_per_node() -> None:
    # The figures below measure these; a change of the defaults changes what they mean.
    assert (DAEMON.max_moves_per_cycle, DAEMON.max_moves_per_node) == (1, 1)


def test_the_defragmenter_makes_at_most_the_daemons_budget_per_call() -> None:
    alloc, running = _cluster(6)
    assert len(Defragmenter(WORKLOAD)(alloc, running, 3)) == 3  # the replay: all allowed
    alloc, running = _cluster(6)
    limited = Defragmenter(WORKLOAD, limits=DaemonLimits())
    assert len(limited(alloc, running, 3)) == DAEMON.max_moves_per_cycle
    assert len(limited(alloc, running, 3)) == 1  # the next call: a new cycle


def test_a_node_a_move_touched_this_cycle_takes_no_other() -> None:
    lim = DaemonLimits(dataclasses.replace(DAEMON, max_moves_per_cycle=5))
    lim.call()
    assert lim.admit("a", "b")
    assert not lim.admit("b", "c") and not lim.admit("c", "a")  # max_moves_per_node 1
    assert lim.admit("c", "d")
    assert lim.cycle_room(5) == 3  # of 5 per cycle, 2 admitted
    lim.call()
    assert lim.admit("b", "c")  # a new cycle: the moves ended at once


def test_a_move_in_flight_holds_its_nodes_and_the_cycle_until_it_ends() -> None:
    lim = DaemonLimits(flight=3)
    lim.call()
    assert lim.admit("a", "b")
    lim.now, _ = 2, lim.call()
    assert lim.cycle_room(5) == 0 and not lim.admit("c", "d")  # one in flight: the budget
    lim.now, _ = 3, lim.call()
    assert lim.cycle_room(5) == 1 and lim.admit("a", "c")  # it ended


def test_a_rescue_is_one_move_under_the_daemons_budgets() -> None:
    # Each node's GPU holds two small shares: a whole GPU needs two moves off one node,
    # which one cycle of the daemon does not start (max_moves_per_node 1).
    def cluster() -> tuple[Allocator, Running]:
        alloc = Allocator(SwarmScorer(WORKLOAD))
        running: Running = {}
        for i, name in enumerate("abc"):
            alloc.add_node(_node(name, 1))
            for k in range(2):
                c = Choice(name, (0,), (SMALL.gpu_milli,), 0.0, "", SMALL.cpu_milli, 0)
                alloc.commit(c)
                running.setdefault(name, {})[2 * i + k] = (SMALL, c)
        return alloc, running

    alloc, running = cluster()
    got = MoveRescuer()(alloc, running, WHOLE, 5)
    assert got is not None and len(got.moves) == 2  # the replay: both at once
    alloc, running = cluster()
    before = alloc.snapshot()
    assert DaemonLimits().rescue_room(5) == 1
    assert MoveRescuer(limits=DaemonLimits())(alloc, running, WHOLE, 5) is None
    assert alloc.snapshot() == before


def _pods() -> list[TracePod]:
    # (a mix whose first call finds two moves at once on seed 3)
    shapes = [(1, 470)] * 4 + [(1, 320)] * 3 + [(1, 1000)] * 2
    return [TracePod(f"p{i:03d}", 2000, 1024, n, m) for i, (n, m) in enumerate(shapes * 6)]


def _carried(monkeypatch: pytest.MonkeyPatch, **kw: Any) -> tuple[int, list[int]]:
    """A planner replay's moves: the total and each call's."""
    calls: list[int] = []

    def record(planner: Planner, w: World, moves: Sequence[tuple[str, str, Choice]]) -> None:
        calls.append(len(moves))
        carry_out(planner, w, moves)

    monkeypatch.setattr(swarm_replay, "carry_out", record)
    nodes = [_node(f"n{i}", 2) for i in range(6)]
    res = replay_planner(nodes, _pods(), 3, moves_per_100=30.0, defrag_every=5, **kw)
    return res.moves, calls


def test_the_planner_replay_moves_at_most_the_daemons_budget_per_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    total, calls = _carried(monkeypatch, defrag=FragmentationMover())
    assert max(calls) > 1  # the replay's batches
    lim = DaemonLimits()
    total, calls = _carried(monkeypatch, defrag=FragmentationMover(limits=lim),
                            rescuer=PlannerRescuer(limits=lim), min_batch=1, limits=lim)
    assert total > 0 and max(calls) <= DAEMON.max_moves_per_cycle
    assert lim.now == len(_pods())  # the replay told it the arrivals


def test_simulate_hands_the_daemons_limits_to_both_movers_only_when_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake(*_a: Any, **kw: Any) -> str:
        seen.update(kw)
        return "ran"

    monkeypatch.setattr(report, "replay_planner", fake)
    monkeypatch.setattr(report, "load_nodes", lambda _p: [])
    monkeypatch.setattr(report, "load_pods", lambda _p: [])
    job = ("n", "p", "swarmgpu", 42, 2.0, "online", "policy")
    assert report._one((*job, "replay", 0)) == "ran"  # type: ignore[comparison-overlap]
    assert seen["limits"] is None and seen["min_batch"] == swarm_replay.DEFRAG_MIN_BATCH
    report._one((*job, "daemon", 4))
    lim = seen["limits"]
    assert isinstance(lim, DaemonLimits) and seen["min_batch"] == 1 and lim.flight == 4
    assert seen["defrag"].limits is lim and seen["rescuer"].limits is lim


@pytest.mark.parametrize("departures, moves", [(False, None), (False, 0.0), (True, 2.0)])
def test_the_daemons_limits_need_moves_in_the_replay_to_130_percent(
        departures: bool, moves: float | None) -> None:
    text, rc = run_simulate("n.csv", "p.csv", ["swarmgpu"], [1], False, None, departures,
                            moves, move_limits="daemon")
    assert rc == 2 and "--move-limits daemon applies with --rebalance-moves" in text


@pytest.mark.parametrize("limits, flight", [("replay", 3), ("daemon", -1)])
def test_a_moves_flight_needs_the_daemons_limits(limits: str, flight: int) -> None:
    text, rc = run_simulate("n.csv", "p.csv", ["swarmgpu"], [1], False, None, False, 2.0,
                            move_limits=limits, move_flight=flight)
    assert rc == 2 and f"--move-flight {flight}: arrivals a move stays in flight" in text
