"""A service whose planning raised this cycle (placement's plan: status ``failed``,
``placement.isolate``) is no move candidate: nothing is written for it, a move
included, and the plan's notes say why (``Inputs.failed``, from the daemon's
``cycle.rebalance.failed_of``). Its state shows Failed while a move of it is in flight.
Pure: real facts and metrics pages, ``plan_moves``."""

from __future__ import annotations

from collections.abc import Sequence

from support.health import F2 as HF2
from support.health import U2 as HU2
from support.health import mark, setup
from support.rebalance import CFG, F1, FACTS, P, cluster, feed

from swarmgpu.manager.cycle.rebalance import failed_of
from swarmgpu.manager.placement import PlacementPlan, ServicePlan, State, Status, read_ledger
from swarmgpu.manager.rebalance.attribution import service_states
from swarmgpu.manager.rebalance.context import Inputs
from swarmgpu.manager.rebalance.moves import HealthInputs, Proposal, Trigger
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.signals import Signals


def _hot(failed: Sequence[str]) -> Proposal:
    """a and b share gpu-node-2 GPU 0, hot for the whole window: one moves away."""
    nodes, svcs, tasks = cluster()
    sig = Signals(CFG)
    times = [float(t) for t in range(13)]
    feed(sig, nodes, times, {t: {0: 97.0} for t in times})
    return plan_moves(Inputs(nodes, svcs, tasks, FACTS, read_ledger(nodes, P), sig.gpus,
                             sig.nodes, CFG, times[-1], (), P, failed=frozenset(failed)))


def test_a_hotspot_never_moves_a_service_whose_planning_failed() -> None:
    (m,) = _hot([]).moves
    assert m.trigger is Trigger.HOTSPOT
    other = "b" if m.service == "a" else "a"
    p = _hot([m.service])
    assert [x.service for x in p.moves] == [other]  # the other holder relieves it
    (note,) = [n for n in p.notes if n.startswith(f"{m.service} is not moved")]
    assert "placement failed this cycle" in note and "swarmgpu plan" in note
    p = _hot(["a", "b"])
    assert p.moves == []
    assert {n.split(" ")[0] for n in p.notes if "is not moved: its placement failed" in n
            } == {"a", "b"}
    assert "hot spot gpu-node-2 GPU 0: a stays: its placement failed this cycle" in p.notes


def test_a_health_move_is_not_made_of_a_service_whose_planning_failed() -> None:
    """a's GPU failed; its move would write for it: none, the plan's note says why."""
    nodes, svcs, tasks = setup({"a": [HU2[0]]})

    def plan(failed: frozenset[str]) -> Proposal:
        inp = Inputs(nodes=nodes, services=svcs, tasks=tasks,
                     facts={"n1": F1, "n2": mark(HF2, failed=[0])},
                     ledger=read_ledger(nodes, P), gpus={}, node_signals={}, cfg=CFG,
                     now=1000.0, prefix=P, failed=failed)
        return plan_moves(inp, HealthInputs(left=2))

    assert [(m.service, m.trigger) for m in plan(frozenset()).moves] == [
        ("a", Trigger.HEALTH)]
    p = plan(frozenset({"a"}))
    assert p.moves == [] and p.releases == []
    assert any(n.startswith("a is not moved: its placement failed") for n in p.notes)
    assert ("a", "n2") in p.failed_holders  # its holding on the failed GPU stays held


def test_the_daemon_hands_the_rebalancer_the_services_whose_planning_failed() -> None:
    plan = PlacementPlan()
    plan.add(ServicePlan("ok", "id-ok", None, "", Status.PLACED, State.ACTIVE))
    plan.add(ServicePlan("bad", "id-bad", None, "", Status.FAILED, State.FAILED))
    plan.add(ServicePlan("wait", "id-wait", None, "", Status.PENDING, State.PENDING))
    assert failed_of(plan) == {"bad"}
    assert failed_of(None) == frozenset()


def test_a_failed_plan_shows_failed_while_a_move_of_it_is_in_flight() -> None:
    plans = [ServicePlan("bad", "id-bad", None, "", Status.FAILED, State.FAILED),
             ServicePlan("ok", "id-ok", None, "", Status.PLACED, State.ACTIVE)]
    assert service_states(plans, {"bad", "ok"}) == {"bad": "Failed", "ok": "Rebalancing"}
