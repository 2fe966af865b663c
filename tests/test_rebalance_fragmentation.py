"""The fragmentation rebalance policy, pure: the simulator's defragmenting search proposing
moves of running shares in the daemon, its budgets (per hour, per 100 placements),
cooldown, opt-out, and no move when none lowers the cost."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import pytest
from support.rebalance import CFG, U2, P, load_rebalance, node, running, service
from support.rebalance_fragmentation import U1, plan, two_half_used

from swarmgpu.allocator.defrag import FragmentationMoves
from swarmgpu.allocator.fragmentation import TaskShape, TypicalTask
from swarmgpu.core.config import ConfigError, RebalanceConfig
from swarmgpu.core.rebalanceconfig import FragmentationConfig
from swarmgpu.manager.placement import MOVE_STATE, read_ledger
from swarmgpu.manager.rebalance.admission import admit
from swarmgpu.manager.rebalance.budget import (
    FINISHED,
    FINISHED_KEEP,
    FragBudget,
    finished_times,
    with_finished,
)
from swarmgpu.manager.rebalance.context import workload_now
from swarmgpu.manager.rebalance.mover import Mover
from swarmgpu.manager.rebalance.moves import Move, Trigger, moves_to_dicts, render_moves
from swarmgpu.sim.rebalance import Defragmenter
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.unkeyed import Unkeyed


def test_two_half_used_gpus_are_merged_by_one_move_with_its_gain() -> None:
    moves = plan(*two_half_used())
    assert len(moves) == 1
    (m,) = moves
    assert m.trigger is Trigger.FRAGMENTATION
    # Either half could go; the search's order is deterministic: b joins a.
    assert (m.service, m.source_host, m.target_host) == ("b", "gpu-node-2", "gpu-node-1")
    assert m.target_uuids == (U1[1],) and m.target_milli == (500,)
    # Workload: two halves and one whole GPU. Each node leaves 500 milli a whole-GPU task
    # cannot use (weight 1/3): 2 x 166.7 before, 0 after.
    assert m.frag_gain_milli == pytest.approx(1000 / 3)
    assert m.frag_before_milli == pytest.approx(1000 / 3)
    assert m.frag_gain_pct == pytest.approx(100.0)
    d = moves_to_dicts(moves)["proposed"][0]
    assert d["trigger"] == "fragmentation"
    assert d["frag_gain_milli"] == 333.3 and d["frag_gain_pct"] == 100.0
    assert "fragmentation -333 GPU-milli (0.33 GPU, 100.0% of the cluster's 333)" in d["gain"]
    assert "gpu-node-2 -> gpu-node-1" in render_moves(moves)


def test_no_move_when_none_lowers_the_cost() -> None:
    nodes, svcs, tasks = two_half_used()
    # Both halves on one GPU already: nothing to merge.
    n2 = {f"{P}assign.a": f"{U2[0]}@500", f"{P}service.a": "true",
          f"{P}assign.b": f"{U2[0]}@500", f"{P}service.b": "true"}
    packed = [node("n1", "gpu-node-1", {}), node("n2", "gpu-node-2", n2)]
    assert plan(packed, svcs, [running("a", "n2"), running("b", "n2")]) == []
    # Halves apart, but a workload of half-GPU tasks only: 500 free is all usable.
    only_halves = (TypicalTask(TaskShape(0, 500, 1), 1.0),)
    assert plan(nodes, svcs, tasks, workload=only_halves) == []


def test_workload_defaults_to_the_services_annotated_now() -> None:
    _nodes, svcs, _tasks = two_half_used()
    w = workload_now(svcs, P)
    assert {(t.shape.gpu_milli, t.shape.num_gpu): round(t.weight, 3) for t in w} == \
        {(500, 1): 0.667, (1000, 1): 0.333}


def test_opt_out_and_cooldown_keep_a_service_in_place() -> None:
    assert plan(*two_half_used(b_labels={f"{P}rebalance": "never"})) == []
    assert plan(*two_half_used(b_labels={f"{P}rebalance": "never"},
                               a_labels={f"{P}rebalance": "never"})) == []
    cooling = {f"{P}state.moved-at": "10"}  # 2 s before the plan; cooldown 300 s
    assert plan(*two_half_used(b_labels=cooling)) == []
    long_ago = {f"{P}state.moved-at": str(12 - 301)}
    assert [m.service for m in plan(*two_half_used(b_labels=long_ago))] == ["b"]


def test_constraints_and_moves_in_flight_are_respected() -> None:
    nodes, svcs, tasks = two_half_used()
    pinned = dataclasses.replace(svcs[1], constraints=(*svcs[1].constraints,
                                                       "node.hostname==gpu-node-2"))
    assert plan(nodes, [svcs[0], pinned, svcs[2]], tasks) == []
    moving = dataclasses.replace(svcs[1], labels={**svcs[1].labels, P + MOVE_STATE: "{}"})
    # In flight by the daemon's record (record.moving): left alone.
    assert plan(nodes, [svcs[0], moving, svcs[2]], tasks, moving=frozenset({"b"})) == []
    # The label alone is a stack's claim: no record, no move in flight, moved as before.
    assert [m.service for m in plan(nodes, [svcs[0], moving, svcs[2]], tasks)] == ["b"]


def test_an_over_committed_gpu_is_left_alone() -> None:
    nodes, svcs, tasks = two_half_used()
    # c also claims b's GPU, 800 milli: 1300 held on it; the allocator refuses one holding.
    n2 = {**nodes[1].labels, f"{P}assign.c": f"{U2[0]}@800", f"{P}service.c": "true"}
    bad = [nodes[0], dataclasses.replace(nodes[1], labels=n2)]
    c = service("c", {f"{P}gpu-fraction": "0.8"})
    assert plan(bad, [*svcs, c], [*tasks, running("c", "n2")]) == []


def test_policy_off_when_not_listed_or_budget_zero() -> None:
    args = two_half_used()
    assert plan(*args, cfg=dataclasses.replace(CFG, policies="hotspot,spread")) == []
    assert plan(*args, cfg=dataclasses.replace(
        CFG, fragmentation=FragmentationConfig(moves_per_hour=0))) == []
    assert plan(*args, cfg=dataclasses.replace(
        CFG, fragmentation=FragmentationConfig(moves_per_100_placements=0))) == []


def _admit(moves: Sequence[Move], svcs: list[SwarmService], tasks: list[SwarmTask],
           nodes: list[SwarmNode], frag_left: tuple[int, str] | None) -> list[Move]:
    ok, _refused = admit(moves, [], {s.name: s for s in svcs}, tasks, read_ledger(nodes, P),
                         CFG, P, 1000.0, frag_left)
    return ok


def test_mover_admits_fragmentation_moves_only_within_the_budget() -> None:
    nodes, svcs, tasks = two_half_used()
    (m,) = plan(nodes, svcs, tasks)
    assert _admit([m], svcs, tasks, nodes, (1, "")) == [m]
    ok, refused = admit([m], [], {s.name: s for s in svcs}, tasks, read_ledger(nodes, P), CFG,
                        P, 1000.0, (0, "budget: 4 fragmentation move(s) per hour"))
    assert ok == [] and refused == [(m, "budget: 4 fragmentation move(s) per hour")]
    # Other triggers are not rationed by it.
    hot = dataclasses.replace(m, trigger=Trigger.HOTSPOT)
    assert _admit([hot], svcs, tasks, nodes, (0, "none left")) == [hot]


def test_budget_per_100_placements_is_earned_by_placements() -> None:
    nodes, _svcs, _tasks = two_half_used()
    b = FragBudget(per_hour=100, per_100_placements=50)
    ledger = read_ledger(nodes, P)
    # The first look counts the replicas already placed (a and b): one move earned.
    assert b.observe(ledger, set(), [], 0.0) == 2
    assert b.left(0.0) == (1, "")
    b.spend(0.0)
    left, why = b.left(1.0)
    assert left == 0 and why == ("budget: 50 fragmentation move(s) per 100 placements "
                                 "(1 spent, 2 placement(s) seen)")
    # Nothing new placed: still none. A move's new holding is no placement.
    assert b.observe(ledger, set(), [], 2.0) == 0
    moved = {**ledger, "b": {"n1": ledger["b"]["n2"]}}
    assert b.observe(moved, {"b"}, [], 3.0) == 0
    # Two new replicas placed: one more move earned.
    more = {**moved, "c": {"n2": ledger["b"]["n2"]}, "d": {"n2": ledger["b"]["n2"]}}
    assert b.observe(more, {"b"}, [], 4.0) == 2
    assert b.left(4.0) == (1, "")


def test_budget_per_hour_rolls_and_counts_moves_finished_before_a_restart() -> None:
    nodes, _svcs, _tasks = two_half_used()
    # The mover's own list on the swarm object: a move finished 1000 s ago.
    labels = {P + FINISHED: with_finished([], 5000.0)}
    b = FragBudget(per_hour=2, per_100_placements=100)
    b.observe(read_ledger(nodes, P), set(), finished_times(labels, P), 6000.0)
    assert b.left(6000.0) == (1, "")
    b.spend(6100.0)
    left, why = b.left(6200.0)
    assert left == 0 and why == "budget: 2 fragmentation move(s) per hour (2 in the last hour)"
    assert b.left(5000.0 + 3600.0)[0] == 1  # a's move left the window
    # The hour is free again; the 2 placements earned 2 moves, 1 spent.
    assert b.left(6100.0 + 3600.0)[0] == 1


def test_config_keys_are_validated() -> None:
    assert RebalanceConfig().fragmentation.moves_per_hour == 4
    assert "fragmentation" in RebalanceConfig().enabled_policies
    with pytest.raises(ConfigError, match=r"fragmentation\.moves_per_hour"):
        load_rebalance({"fragmentation": {"moves_per_hour": -1}})
    with pytest.raises(ConfigError, match=r"fragmentation\.moves_per_100_placements"):
        load_rebalance({"fragmentation": {"moves_per_100_placements": 101}})
    with pytest.raises(ConfigError, match=r"fragmentation\.moves_per_100_placements"):
        load_rebalance({"fragmentation": {"moves_per_100_placements": "lots"}})


def test_the_simulator_drives_the_same_policy_object() -> None:
    w = (TypicalTask(TaskShape(0, 1000, 1), 1.0),)
    d = Defragmenter(w, reserve=1)
    assert isinstance(d.policy, FragmentationMoves) and d.cost is d.policy.cost


def test_forged_moved_at_labels_do_not_spend_the_budget() -> None:
    # A service's own moved-at label is the stack author's to write: a daemon starting
    # to lead counts only the mover's list on the swarm object as this hour's moves.
    nodes, svcs, tasks = two_half_used()
    forged = [dataclasses.replace(s, labels={**s.labels, f"{P}state.moved-at": "5999"})
              for s in svcs]

    class Swarm:
        labels: dict[str, str] = {}

        def swarm_labels(self) -> Mapping[str, str]:
            return self.labels

        def unkeyed(self) -> Unkeyed:
            return Unkeyed()  # every entry has its ID

    def budget_left(swarm_labels: dict[str, str]) -> int:
        swarm = Swarm()
        swarm.labels = swarm_labels
        rb = RebalanceConfig(fragmentation=FragmentationConfig(
            moves_per_hour=1, moves_per_100_placements=100))
        m = Mover(swarm, rb, prefix=P, dry_run=True,  # type: ignore[arg-type]
                  clock=lambda: 6000.0)
        m.run_cycle([], nodes, forged, tasks)
        return m.frag_budget.left(6000.0)[0]

    assert budget_left({}) == 1
    assert budget_left({P + FINISHED: with_finished([], 5999.0)}) == 0
    # The mover's list is bounded, and unreadable entries are dropped.
    many = with_finished([float(t) for t in range(5000, 5200)], 6000.0)
    assert len(many.split(",")) == FINISHED_KEEP
    assert finished_times({P + FINISHED: "1,x,nan,inf,2"}, P) == [1.0, 2.0]


def test_workload_now_counts_a_service_by_at_most_a_few_replicas() -> None:
    # Used only when placement is off: one service's replica count (its author's word)
    # cannot outweigh every other service.
    from swarmgpu.manager.rebalance.context import REPLICAS_COUNTED

    huge = dataclasses.replace(service("huge", {f"{P}gpus": "8"}), replicas=100_000)
    small = [service(f"s{i}", {f"{P}gpus": "1"}) for i in range(REPLICAS_COUNTED)]
    typical = {t.shape.num_gpu: t.weight for t in workload_now([huge, *small], P)}
    assert typical == {8: 0.5, 1: 0.5}
