"""A preemption's hold is its preemptor's by service ID where the daemon knows it
(``Nomination.service_id``): Swarm's names are unique, so a listed service of the
preemptor's name but another ID is another service (the preemptor removed, one created
under its name). Before, holds went by name alone: such a service kept the hold (while
pending, ``Nominations.keep``) and took its GPUs ahead of every service of the hold's
priority or lower, though it had preempted nothing."""

from __future__ import annotations

import json
from dataclasses import replace

from support.forged import R4090_F, R_UUIDS, P, sw_node, sw_svc, victim_stopping_on_4090s

from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.placement import Planner
from swarmgpu.manager.placement.nominated import Nomination, Nominations, live_nominations
from swarmgpu.manager.placement.preempted import PREEMPTED_STATE
from swarmgpu.manager.placement.records import PlacementPlan, ServicePlan, Status
from swarmgpu.swarm.client import SwarmTask
from swarmgpu.swarm.unkeyed import Unkeyed

R = tuple(g.uuid for g in R4090_F.gpus)  # 8 RTX 4090s on n-4090
# first's preemption freed them all; first (id-old) was removed since, and a service
# created under its name (id-first, ``sw_svc``'s) is listed now
OLD = Nomination("first", 100, "n-4090", R, service_id="id-old")
LEFT = ("the engine's answer lists service 3 of 3 with ID None, not a non-empty text: "
        "it is left out")


def test_a_hold_ends_when_its_preemptors_name_is_listed_under_another_id() -> None:
    assert live_nominations([OLD], {"first": "id-first"}) == []
    assert live_nominations([OLD], {"first": "id-first"}, left_out=True) == []
    assert live_nominations([OLD], {"first": "id-old"}) == [OLD]  # its own: held
    assert live_nominations([OLD], {"second": "id-second"}, left_out=True) == [OLD]
    by_name = Nomination("first", 100, "n-4090", R)  # (its id unknown: by name, as ever)
    assert live_nominations([by_name], {"first": "id-first"}) == [by_name]


def test_the_recreated_service_of_a_preemptors_name_takes_none_of_its_hold() -> None:
    """new first (priority 0) and second (priority 50) both want the 8 GPUs the removed
    first's preemption freed: second, the higher, gets them. Before, the hold was held
    from second for the new first, which took them."""
    nodes = [sw_node("n-4090", "gpu-node-2")]
    want = {f"{P}gpus": "8", f"{P}gpu-product": "*RTX 4090*"}
    first = sw_svc("first", {**want, f"{P}priority": "0"})
    second = sw_svc("second", {**want, f"{P}priority": "50"})
    tasks = [SwarmTask(f"t-{s.name}", s.id, "", 1, "pending", "running", ())
             for s in (first, second)]
    for left in (Unkeyed(), Unkeyed(services=(LEFT,))):
        plan = Planner(prefix=P).plan(nodes, [first, second], tasks, {"n-4090": R4090_F},
                                      now=1000.0, nominated=[OLD], unkeyed=left)
        got = {sp.name: sp.status for sp in plan.services}
        assert got == {"first": Status.PENDING, "second": Status.PLACED}, plan


def test_the_preempter_ends_a_hold_whose_preemptors_name_another_service_carries() -> None:
    def pending(sid: str) -> PlacementPlan:
        return PlacementPlan(services=[ServicePlan("first", sid, None, "", Status.PENDING,
                                                   "pending")])

    for left in (False, True):
        noms = Nominations(30.0)
        noms.by["first"] = (OLD, 1000.0, 1000.0)
        noms.keep(pending("id-old"), 1005.0, left_out=left)  # its own, pending: held
        assert noms.current(1005.0) == (OLD,)
        noms.keep(pending("id-first"), 1006.0, left_out=left)
        assert noms.current(1006.0) == ()


def _victim_recorded_by(by_id: str | None) -> PlacementPlan:
    """`plan`'s (a one-shot's) of high's victim stopping on two RTX 4090s, its record
    naming high, and ``by_id`` as high's id then (None: a record from before ids)."""
    snap, victim = victim_stopping_on_4090s(1000.0)
    rec = {"by": "high", "priority": 100, "at": 995.0, "node": "n-4090"}
    if by_id is not None:
        rec["by_id"] = by_id
    victim = replace(victim, labels={**victim.labels,
                                     f"{P}{PREEMPTED_STATE}": json.dumps(rec)})
    snap = replace(snap, services=[victim if s.id == victim.id else s
                                   for s in snap.services])
    return make_plan(snap, Config())


def test_a_one_shot_holds_no_victims_gpus_for_a_service_created_under_its_preemptors_name(
) -> None:
    """The victim's record names its preemptor's id (id-old); high is listed as id-high,
    created under its name since. The daemon's hold, by id, ended; `plan` and `status`
    held the victim's stopping GPUs for the new high, by the record's name."""
    held = frozenset(("n-4090", u) for u in R_UUIDS[:2])
    assert _victim_recorded_by("id-high").stopping_spared == dict.fromkeys(held, "high")
    assert _victim_recorded_by(None).stopping_spared == dict.fromkeys(held, "high")
    other = _victim_recorded_by("id-old")
    assert other.stopping_spared == {} and other.stopping_waits == held
