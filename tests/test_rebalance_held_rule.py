"""The rebalancer judges held GPUs by one rule (``rebalance.heldgpus.held_from``): a
move's target, a pending request's room and a move's start read it alike. Before,
defrag's search asked whether a holding could go elsewhere by the pending request's
rule (placement's: the GPUs held for the pending preemptor are its own), while the
holding's move was found by the move rule (held for another than the mover: no
target), so plans whose tasks had nowhere to go used up every try. Pure: real facts
and metrics pages, ``plan_moves``, ``room_for``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from support.defrag_cluster import RTX, defrag_cluster, uuids
from support.forged import victim_move
from support.health import F2 as HF2
from support.rebalance import F1, P, observed
from support.rebalance import node as rebalance_node
from support.rebalance import running as rebalance_running
from support.rebalance import service as rebalance_service

from swarmgpu.manager.placement.nominated import STOPPING_PRIORITY
from swarmgpu.manager.rebalance.context import Inputs
from swarmgpu.manager.rebalance.heldgpus import held_from
from swarmgpu.manager.rebalance.moves import Move, Trigger
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.record import room_for
from swarmgpu.swarm.client import SwarmService


def _defrag_on_n2(labels: dict[str, str], svcs: list[SwarmService], beside: str,
                  **held: Any) -> list[tuple[str, str, str]]:
    """Defrag's moves (service, source, target) with a and ``beside`` running on
    gpu-node-2 (two RTX 4090s, ``labels``), gpu-node-1's A100s free."""
    u = uuids(2)
    nodes = [rebalance_node("n1", "gpu-node-1", {}), rebalance_node("n2", "gpu-node-2", labels)]
    facts = {"n1": F1, "n2": replace(HF2, gpus=tuple(
        replace(g, uuid=v) for g, v in zip(HF2.gpus, u, strict=False)))}
    tasks = [replace(rebalance_running(s, "n2"), id=f"t-{s}") for s in ("a", beside)]
    inp = observed(nodes, svcs, tasks, facts, **held)
    return [(m.service, m.source_node, m.target_node) for m in plan_moves(inp).moves
            if m.trigger is Trigger.DEFRAG]


def _inputs(held: Mapping[tuple[str, str], tuple[str, int]]) -> Inputs:
    """gpu-node-2..5 (two RTX 4090s each): a<k> (1 GPU, 4090s only) on GPU 0, GPU 1
    ``held``; gpu-node-6: b and c (1 GPU each, any model); gpu-node-1: 7 whole A100s
    free. Pending p wants 2 RTX 4090s."""
    nodes, svcs, tasks, facts = defrag_cluster(
        [rebalance_service("p", {f"{P}gpus": "2", **RTX})])
    return observed(nodes, svcs, tasks, facts, held=held)


def _defrag(held: Mapping[tuple[str, str], tuple[str, int]]) -> list[Move]:
    return [m for m in plan_moves(_inputs(held)).moves if m.trigger is Trigger.DEFRAG]


def test_defrag_searches_movers_places_by_the_rule_their_moves_are_found_by() -> None:
    """GPU 1 of gpu-node-2..5 held for p: p's own room, but no target of a<k>'s move
    (held for another than a<k>). The search counted them a<k>'s other place, so the
    four one-move plans used up every try and the workable one (b and c off gpu-node-6,
    onto gpu-node-1's A100s) was never tried."""
    held = {(f"n{k}", uuids(k)[1]): ("p", 100) for k in range(2, 6)}
    got = _defrag(held)
    assert sorted((m.service, m.source_node, m.target_node) for m in got) == [
        ("b", "n6", "n1"), ("c", "n6", "n1")]
    assert all(m.target_uuids[0] in {g.uuid for g in F1.gpus} for m in got)
    (m,) = _defrag({})  # unheld: one move off gpu-node-2 is cheapest, to a GPU 1 beside
    assert (m.service, m.source_node) == ("a2", "n2")


def test_the_start_and_the_policies_hold_a_gpu_alike() -> None:
    """The mover's start (``room_for``) asks the policies' rule for each kind of hold:
    a preemptor's (whole), a stopping task's share (counted used, the rest free), the
    moved service's own hold (nothing), a GPU no hold names."""
    m = replace(victim_move(), target_milli=(500,))
    k, svc = (m.target_node, m.target_uuids[0]), m.service
    node = replace(rebalance_node("n9", "gpu-node-2", {}), id=m.target_node)
    stopping = ("tasks stopping on gpu-node-2", STOPPING_PRIORITY)
    for held, shares, kept, refused in (
            ({k: ("q", 100)}, {}, None, True),
            ({k: stopping}, {k: 250}, 250, False),
            ({k: stopping}, {k: 600}, 600, True),
            ({k: (svc, 100)}, {}, 0, False),
            ({k: (svc, STOPPING_PRIORITY)}, {k: 900}, 0, False),
            ({}, {}, 0, False)):
        assert held_from(held, shares, svc, *k) == kept
        why = room_for(m, node, P, own_moves=False, held=held, shares=shares)
        assert (why is not None) is refused, (held, shares, why)


def _beside_stopping(p_labels: Mapping[str, str], stopping: bool = True
                     ) -> list[tuple[str, str, str]]:
    """gpu-node-2 (two RTX 4090s): a (0.5, any model) on GPU 0 beside a stopping task's
    0.25 (``stopping``); x (1 GPU, 4090s only: nowhere else to go) on GPU 1.
    gpu-node-1's A100s free. Pending p (4090s only) asks ``p_labels``."""
    u = uuids(2)
    labels = {f"{P}assign.a": f"{u[0]}@500", f"{P}service.a": "true",
              f"{P}assign.x": u[1], f"{P}service.x": "true"}
    svcs = [rebalance_service("p", {**p_labels, **RTX}),
            rebalance_service("a", {f"{P}gpu-fraction": "0.5"}),
            rebalance_service("x", {f"{P}gpus": "1", **RTX})]
    k = ("n2", u[0])
    held = {k: ("tasks stopping on n2", STOPPING_PRIORITY)} if stopping else {}
    return _defrag_on_n2(labels, svcs, "x", held=held,
                         held_shares={k: 250} if stopping else {})


def test_defrag_moves_a_share_off_a_gpu_a_stopping_task_partly_uses() -> None:
    """The stopping task's share pins its GPU in defrag's search (it cannot move), not
    the shares beside it: a's 0.5 moves, and p's 0.5 fits beside the stopping 0.25. A
    whole GPU there is no plan: placement counts the stopping share used until the task
    stops, so the move would not make room now (the search and the last check agree)."""
    assert _beside_stopping({f"{P}gpu-fraction": "0.5"}) == [("a", "n2", "n1")]
    assert _beside_stopping({f"{P}gpus": "1"}) == []
    assert _beside_stopping({f"{P}gpus": "1"}, stopping=False) == [("a", "n2", "n1")]


def _beside_opted_out(w_labels: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """gpu-node-2 (two RTX 4090s): a (1 GPU, any model) on GPU 0, w (1 GPU, ``w_labels``)
    on GPU 1; gpu-node-1's A100s free. Pending p wants one RTX 4090."""
    u = uuids(2)
    labels = {f"{P}assign.a": u[0], f"{P}service.a": "true",
              f"{P}assign.w": u[1], f"{P}service.w": "true"}
    svcs = [rebalance_service("p", {f"{P}gpus": "1", **RTX}),
            rebalance_service("a", {f"{P}gpus": "1"}),
            rebalance_service("w", {f"{P}gpus": "1", **w_labels})]
    return _defrag_on_n2(labels, svcs, "w")


def test_defrag_counts_the_gpu_of_a_holding_that_may_not_move_as_no_room() -> None:
    """w opted out of moves: its GPU is used all the same. The search left w out, so its
    GPU counted as room no move was needed for and gpu-node-2 got no plan at all; a's
    move makes room for p."""
    assert _beside_opted_out({}) == [("a", "n2", "n1")]
    assert _beside_opted_out({f"{P}rebalance": "never"}) == [("a", "n2", "n1")]
