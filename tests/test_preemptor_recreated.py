"""A preemptor's settle time is its own, by service ID: Swarm's names are unique (and a
service cannot be renamed), so a listed service of a settling preemptor's name but
another ID was created under it after the preemptor was removed, and has preempted
nothing. Before, ``Preempter.preemptor_at`` (and the victims' moves it waits for) went
by name alone: such a service was passed over for preemption until the removed one's
settle time ended."""

from __future__ import annotations

from dataclasses import replace

from support.forged import FACTS, R_UUIDS, P, sw_node, sw_svc
from support.pending_high import pending_high

from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Planner
from swarmgpu.manager.placement.keys import assign_key, gate_key
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.nominated import Nomination
from swarmgpu.manager.placement.preempt import Preemption
from swarmgpu.manager.rebalance.record import record_key
from swarmgpu.swarm.client import SwarmTask
from swarmgpu.swarm.unkeyed import Unkeyed


def _preempted_by(sid: str) -> Preemption:
    return Preemption("high", sid, 100, "n-9", "gpu-node-9", ())


def test_a_service_created_under_a_settling_preemptors_name_may_preempt_at_once() -> None:
    snap, plan = pending_high()
    pre = Preempter(Config(), clock=lambda: 1000.0)
    pre.took(_preempted_by("id-old"), [], 995.0)  # the removed high's, 5 s ago
    got = pre.decide(snap, plan, FACTS, None, 5000.0, mono=1000.0)  # type: ignore[arg-type]
    assert [p.service_id for p in got] == ["id-high"]


def test_a_settling_preemptor_of_its_own_id_is_still_passed_over() -> None:
    snap, plan = pending_high()
    pre = Preempter(Config(), clock=lambda: 1000.0)
    pre.took(_preempted_by("id-high"), [], 995.0)
    assert pre.decide(snap, plan, FACTS, None, 5000.0, mono=1000.0) == []  # type: ignore[arg-type]
    pre.took(_preempted_by(""), [], 995.0)  # (its id unknown: by name, as ever)
    assert pre.decide(snap, plan, FACTS, None, 5000.0, mono=1000.0) == []  # type: ignore[arg-type]


LEFT = ("the engine's answer lists service 4 of 4 with ID None, not a non-empty text: "
        "it is left out")


def test_a_hold_whose_preemptors_name_a_plain_service_carries_keeps_off_no_preemption(
) -> None:
    """The removed first's hold (priority 100) of the 2 free RTX 4090s, while the list
    left a service out; a plain service (no GPU request, so no plan of placement's) was
    created under first's name. mid (priority 50) wants all 8: batch's 6 and the 2 the
    hold no longer holds. Before, the preemption step alone still held them (the other
    readers dropped the hold: ``live_nominations``), so mid preempted nothing there."""
    held = Holding("batch", "n-4090", R_UUIDS[:6], tuple(1000 for _ in R_UUIDS[:6]))
    nodes = [sw_node("n-4090", "gpu-node-2", {assign_key(P, "batch"): held.label_value(),
                                            gate_key(P, "batch"): "true"})]
    batch = sw_svc("batch", {f"{P}gpus": "6", f"{P}priority": "0"})
    mid = sw_svc("mid", {f"{P}gpus": "8", f"{P}gpu-product": "*RTX 4090*",
                         f"{P}priority": "50"})
    first = sw_svc("first", {}, gated=False)
    services = [batch, mid, first]
    tasks = [SwarmTask("t-batch", batch.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-mid", mid.id, "", 1, "pending", "running", ())]
    snap = Snapshot(nodes, services, tasks, {}, unkeyed=Unkeyed(services=(LEFT,)))
    plan = Planner(prefix=P).plan(nodes, services, tasks, FACTS, now=1000.0,
                                  unkeyed=snap.unkeyed)
    assert {sp.name: sp.status for sp in plan.services} == {"batch": "placed",
                                                            "mid": "pending"}
    pre = Preempter(Config(), clock=lambda: 1000.0)
    pre.nominated.by["first"] = (Nomination("first", 100, "n-4090", R_UUIDS[6:],
                                            service_id="id-old"), 995.0, 995.0)
    got = pre.decide(snap, plan, FACTS, None, 5000.0, mono=1000.0)  # type: ignore[arg-type]
    assert [p.describe() for p in got] == [
        "preempt batch (priority 0) on gpu-node-2 for mid (priority 50)"]


def test_a_service_created_under_a_preemptors_name_waits_for_none_of_its_victims_moves(
) -> None:
    """The removed high's settle time is over, but its victim other's move is still in
    flight (a record the daemon cannot read, under other's id): the removed high would
    wait for it; the new high does not."""
    snap, plan = pending_high()
    other = sw_svc("other", {})
    snap = replace(snap, services=[*snap.services, other])
    records = {record_key(P, other.id): "not a record"}
    pre = Preempter(Config(), clock=lambda: 1000.0)
    pre.took(_preempted_by("id-old"), [], 900.0)  # settled (30 s) long ago
    pre.moving = {"high": {"other"}}
    got = pre.decide(snap, plan, FACTS, None, 5000.0, records=records,  # type: ignore[arg-type]
                     mono=1000.0)
    assert [p.service_id for p in got] == ["id-high"]
    pre = Preempter(Config(), clock=lambda: 1000.0)
    pre.took(_preempted_by("id-high"), [], 900.0)  # its own victim's move: it waits
    pre.moving = {"high": {"other"}}
    assert pre.decide(snap, plan, FACTS, None, 5000.0, records=records,  # type: ignore[arg-type]
                      mono=1000.0) == []
