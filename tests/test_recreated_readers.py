"""Preemption and the rebalancer read the ledger as placement did in the cycle it found
an entry a removed service left to one recreated under its name (``placement.recreated``,
``PlacementPlan.dropped``): not the live service's holding, whether its release landed
or not. Before, they read it by name as the live service's: preemption counted the live
service's reservation on a node it would never run on, and the rebalancer could move a
holding the live service did not have."""

from __future__ import annotations

from dataclasses import replace

from support.forged import FACTS, R_UUIDS, RecordingSwarm, reserving, snapshot, sw_node, sw_svc
from support.placement import apply, written

from swarmgpu.core.config import Config, RebalanceConfig
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.rebalance import ledger_after
from swarmgpu.manager.placement import (
    Holding,
    NodeWrites,
    PlacementPlan,
    Planner,
    ReplicaPlacement,
    ServicePlan,
    Status,
    assign_key,
    devices_key,
    gate_constraint,
    gate_key,
    read_ledger,
)
from swarmgpu.manager.placement.preempt import choose_preemptions
from swarmgpu.manager.rebalance.context import Context, Inputs, why_not_movable
from swarmgpu.manager.rebalance.record import service_ledger
from swarmgpu.manager.services.requests import GpuRequest, parse_all
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
OLD_AT, NEW_AT = "2026-12-06T10:00:00.5Z", "2026-12-06T10:05:00Z"


def _recreated(planner: Planner | None = None,
               ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask], PlacementPlan]:
    """A removed batch held six RTX 4090s, its task stopping there (stuck); low (priority 0,
    preemptible) holds the other two. batch (4 GPUs, reserving 40 of each node's 64
    CPUs) is recreated without a device map, its task not yet assigned; high (priority
    100, reserving 30 CPUs) asks for 2 RTX 4090s. A daemon restarted plans the cycle:
    the new batch placed on the DGX, the old entry released, and that release did not
    land (a failed node write)."""
    old = Holding("batch", "n-4090", R_UUIDS[:6], (1000,) * 6)
    mine = Holding("low", "n-4090", R_UUIDS[6:], (1000,) * 2)
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", {
                 assign_key(P, "batch"): old.label_value(), gate_key(P, "batch"): "true",
                 assign_key(P, "low"): mine.label_value(), gate_key(P, "low"): "true"})]
    batch = replace(reserving(sw_svc("batch", {f"{P}gpus": "4", f"{P}priority": "0"}),
                              40000), id="id-new", created_at=NEW_AT)
    low = sw_svc("low", {f"{P}gpus": "2", f"{P}priority": "0",
                         devices_key(P, "n-4090"): ",".join(R_UUIDS[6:])})
    high = reserving(sw_svc("high", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*",
                                     f"{P}priority": "100"}), 30000)
    tasks = [SwarmTask("t-batch", batch.id, "", 1, "pending", "running", (),
                       created_at=NEW_AT),
             SwarmTask("t-low", low.id, "n-4090", 1, "running", "running", (),
                       cpu_milli=1000),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ())]
    gone = SwarmTask("t-old", "id-old", "n-4090", 1, "running", "remove", (),
                     created_at=OLD_AT, constraints=(gate_constraint(P, "batch"),),
                     updated_at=1.0)  # stopping long past its grace: nothing to wait for
    services = [batch, low, high]
    plan = make_plan(replace(snapshot(nodes, services, tasks), stopping=[gone]),
                     Config(), planner=planner or Planner(prefix=P))
    assert {sp.name: sp.status for sp in plan.services} == {
        "batch": "placed", "low": "placed", "high": "pending"}, plan.services
    assert plan.dropped == {("batch", "n-4090")}, plan.disowned
    plan.landed = NodeWrites(dict(plan.node_set), {})  # the release failed
    return nodes, services, tasks, plan


def test_preemption_counts_no_reservation_of_a_recreated_service_on_its_namesakes_node(
) -> None:
    """high preempts low on gpu-node-2, the CPU it needs free once low stops. Before,
    the old entry, read by name as the live batch's holding there, counted batch's 40
    CPUs used on that node (a task that would never come): high fit nowhere, and
    preempted nothing."""
    nodes, services, tasks, plan = _recreated()
    got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                             preemptible_below=100, held=plan.stopping_held)
    assert [(p.node_id, [v.service for v in p.victims]) for p in got] == [
        ("n-4090", ["low"])], [p.describe() for p in got]


def test_the_rebalancer_reads_no_holding_of_a_recreated_service_on_its_namesakes_entry(
) -> None:
    nodes, _services, _tasks, plan = _recreated()
    got = ledger_after(nodes, plan, P, read_ledger(nodes, P))
    assert "n-4090" not in got.get("batch", {}), got
    assert set(got["batch"]) == {p.node_id for sp in plan.services if sp.name == "batch"
                                 for p in sp.placements}
    nothing = replace(plan, landed=NodeWrites())  # nothing landed: the entry still dropped
    assert "n-4090" not in ledger_after(nodes, nothing, P, read_ledger(nodes, P)).get(
        "batch", {})


def _next_cycle(planner: Planner) -> tuple[list[SwarmNode], list[SwarmService],
                                           list[SwarmTask], ReplicaPlacement, SwarmTask]:
    """``_recreated``'s next cycle, for ``planner`` (its daemon's): batch runs where it
    was placed afresh (``q``, on the DGX), the old entry's release not landed, the
    removed batch's task still stopping on gpu-node-2 (``gone``)."""
    nodes, services, tasks, plan = _recreated(planner)
    (sp,) = [sp for sp in plan.services if sp.name == "batch"]
    (q,) = sp.placements
    nodes = apply(nodes, replace(plan, node_remove={}))  # the release failed
    services = [written(s, sp) if s.name == "batch" else s for s in services]
    tasks = [replace(t, node_id=q.node_id, state="running") if t.id == "t-batch" else t
             for t in tasks]
    gone = SwarmTask("t-old", "id-old", "n-4090", 1, "running", "remove", (),
                     created_at=OLD_AT, constraints=(gate_constraint(P, "batch"),),
                     updated_at=1.0)
    return nodes, services, tasks, q, gone


def test_an_entry_left_behind_stays_dropped_the_cycles_after_its_service_went_elsewhere(
) -> None:
    """The same daemon's next cycle: batch runs on the DGX, where it was placed afresh,
    the old entry's release still not landed, the removed task still stopping. The
    entry stays no holding of batch for preemption and the rebalancer. Before, the
    planner remembered every entry it disowned as one its service was placed on afresh
    (``Recreated``), wherever that was: from the next cycle on the old entry was
    batch's own again, a holding to move and a reservation counted there."""
    planner = Planner(prefix=P)
    nodes, services, tasks, q, gone = _next_cycle(planner)
    for _ in range(2):
        again = make_plan(replace(snapshot(nodes, services, tasks), stopping=[gone]),
                          Config(), planner=planner)
        assert again.dropped == {("batch", "n-4090")}, again.disowned
        got = ledger_after(nodes, again, P, read_ledger(nodes, P))
        assert set(got["batch"]) == {q.node_id}, got


def test_a_finished_plan_works_out_dropped_once_an_unfinished_one_at_each_read() -> None:
    """``PlacementPlan.finish`` (the planner's last step): ``dropped`` worked out once
    for its readers; a plan not finished (built by hand, an arrival's) reads its
    placements each time, as before."""
    on = ReplicaPlacement("n1", "h1", (0,), ("GPU-a",), (1000,))
    web = ServicePlan("web", "id-web", None, "", Status.PLACED, "ok", placements=(on,))
    plan = PlacementPlan(disowned=frozenset({("web", "n1"), ("web", "n2")}))
    plan.add(web)
    assert plan.dropped == {("web", "n2")}
    plan.services.clear()  # not finished: read again
    assert plan.dropped == {("web", "n1"), ("web", "n2")}
    plan.add(web)
    plan.finish()
    plan.services.clear()  # (no reader does so after finish: here to show the one read)
    assert plan.dropped == {("web", "n2")}


def test_the_rebalancer_proposes_no_move_its_start_refuses_for_a_namesakes_entry() -> None:
    """The next cycle's state above: batch runs on the DGX, the removed batch's entry
    still on gpu-node-2 (dropped). A move's start reads batch's holdings fresh by name,
    that entry among them: not converged, refused (its gate there open to a surge's
    task). Before, the rebalancer, planning without the entry, took batch for movable:
    the same move proposed, refused and logged every cycle while the entry lasted, a slot
    of the cycle's move budget taken by it each time."""
    planner = Planner(prefix=P)
    nodes, services, tasks, _, gone = _next_cycle(planner)
    again = make_plan(replace(snapshot(nodes, services, tasks), stopping=[gone]),
                      Config(), planner=planner)
    batch = next(s for s in services if s.name == "batch")
    req = parse_all(batch.labels, prefix=P)
    assert isinstance(req, GpuRequest)
    fresh = service_ledger(RecordingSwarm(nodes, services, tasks), P, "batch")
    start = why_not_movable(batch, req, tasks, fresh, P, 2e9, 0.0)
    assert start is not None and "not converged" in start
    inp = Inputs(nodes=nodes, services=services, tasks=tasks, facts=FACTS,
                 ledger=ledger_after(nodes, again, P, read_ledger(nodes, P)), gpus={},
                 node_signals={}, cfg=RebalanceConfig(cooldown_s=0.0), now=2e9, prefix=P,
                 dropped=again.dropped)
    why = Context.build(inp).movable("batch")
    assert why is not None and "removed service of its name" in why
