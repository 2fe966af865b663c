"""The planner's memo of settled services reads nodes by content (placement.memo), and
the writes a placed service needs are no more than it needs (update parallelism)."""

from __future__ import annotations

from dataclasses import replace

from support.gpu_nodes import RTX4090
from support.memo import as_written
from support.placement import apply, node, svc

from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement import Planner
from swarmgpu.manager.placement.records import PlacementPlan
from swarmgpu.swarm.client import SwarmNode, SwarmService

PAR = "swarmgpu.state.update-parallelism"


def _settle(planner: Planner, nodes: list[SwarmNode], services: list[SwarmService],
            facts: dict[str, NodeFacts]) -> tuple[list[SwarmNode], list[SwarmService],
                                               PlacementPlan]:
    for _ in range(4):
        plan = planner.plan(nodes, services, [], facts)
        if not plan.node_set and not plan.node_remove and not any(
                sp.needs_service_write for sp in plan.services):
            return nodes, services, plan
        nodes, services = apply(nodes, plan), as_written(services, plan)
    raise AssertionError("did not settle")


def test_a_settled_service_is_not_planned_again_when_another_is_placed_beside_it() -> None:
    nodes = [node("n-a", "node-a", {"team": "ml"})]
    facts = {"n-a": RTX4090.facts()}
    planner = Planner()
    a = svc("a", {"swarmgpu.gpus": "1"})
    nodes, services, plan = _settle(planner, nodes, [a], facts)
    before = plan.services[0]
    assert before.status == "placed"
    # b's gate and ledger entry on the same node move the node's version, not a's inputs.
    nodes, services, plan = _settle(planner, nodes, [*services, svc("b", {"swarmgpu.gpus": "1"})],
                                    facts)
    by_name = {sp.name: sp for sp in plan.services}
    assert by_name["b"].status == "placed"
    assert by_name["a"] is before  # last cycle's plan: a was not planned again
    # A label of the node's own (the filters read them) plans a again.
    nodes = [replace(n, labels={**n.labels, "team": "cv"}, version=n.version + 1) for n in nodes]
    again = planner.plan(nodes, services, [], facts)
    sp_a = next(sp for sp in again.services if sp.name == "a")
    assert sp_a is not before and sp_a.to_dict() == before.to_dict()


def test_update_parallelism_is_set_only_where_a_batch_would_hold_back_a_task() -> None:
    nodes = [node("n-a", "node-a"), node("n-b", "node-b"), node("n-c", "node-c")]
    facts = {n.id: RTX4090.facts() for n in nodes}
    one = svc("one", {"swarmgpu.gpus": "1"})  # one replica: the first batch is all of it
    three = svc("three", {"swarmgpu.gpus": "1"}, replicas=3)  # parallelism 1 of 3 replicas
    plan = Planner().plan(nodes, [one, three], [], facts)
    by_name = {sp.name: sp for sp in plan.services}
    assert by_name["one"].force_update and by_name["one"].set_update_parallelism is None
    assert PAR not in by_name["one"].service_labels_set
    assert by_name["three"].force_update and by_name["three"].set_update_parallelism == 0
    assert by_name["three"].service_labels_set[PAR] == "1"


def test_the_cycle_after_its_gates_open_does_not_plan_the_service_again() -> None:
    nodes = [node("n-a", "node-a")]
    facts = {"n-a": RTX4090.facts()}
    planner = Planner()
    services = [svc("a", {"swarmgpu.gpus": "1"})]
    first = planner.plan(nodes, services, [], facts)  # the map, a forced update; gate waits
    assert first.services[0].gates_deferred and not first.node_set["n-a"].get(
        "swarmgpu.service.a")
    nodes, services = apply(nodes, first), as_written(services, first)
    opens = planner.plan(nodes, services, [], facts)  # only the gate opens
    sp2 = opens.services[0]
    assert opens.node_set == {"n-a": {"swarmgpu.service.a": "true"}} and sp2.node_writes
    closed, nodes = nodes, apply(nodes, opens)
    after = planner.plan(nodes, services, [], facts)
    sp3 = after.services[0]
    assert after.empty and not sp3.node_writes
    assert sp3.placements is sp2.placements  # the plan kept from the gate cycle, not a new one
    fresh = Planner().plan(nodes, services, [], facts).services[0]
    assert sp3.to_dict() == fresh.to_dict()
    # The gate write did not land (the node as it was): planned again, and it writes again.
    retry = planner.plan(closed, services, [], facts)
    assert retry.node_set == {"n-a": {"swarmgpu.service.a": "true"}}


def test_a_plan_that_places_is_planned_again_once_its_writes_landed() -> None:
    """The daemon writes a new placement's map, ledger and gate in one cycle
    (``cycle.placement.gates_ready_now``). The next cycle plans it again: what a planner
    says of a holding it finds in the ledger is not what it said when it chose it (state
    Allocated, not Bound; no score), so no key of the cycle after its writes may keep the
    first plan. The cycle after that keeps the second."""
    nodes = [node("n-a", "node-a")]
    facts = {"n-a": RTX4090.facts()}
    planner = Planner()
    services = [svc("a", {"swarmgpu.gpus": "1"})]
    first = planner.plan(nodes, services, [], facts)
    sp1 = first.services[0]
    assert sp1.new and sp1.gates_deferred
    first.node_set["n-a"]["swarmgpu.service.a"] = "true"  # opened in the same cycle
    nodes, services = apply(nodes, first), as_written(services, first)
    second = planner.plan(nodes, services, [], facts)
    sp2 = second.services[0]
    assert second.empty and sp2 is not sp1
    assert (sp1.state, sp2.state) == ("Bound", "Allocated")
    assert sp1.placements[0].score is not None and sp2.placements[0].score is None
    assert sp2.to_dict() == Planner().plan(nodes, services, [], facts).services[0].to_dict()
    third = planner.plan(nodes, services, [], facts)
    assert third.services[0] is sp2  # settled: kept
