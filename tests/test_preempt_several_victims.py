"""A preemptor that needs more GPUs on a node than one victim holds: the plan takes
victims until it fits (the fewest that free enough, then the lowest priorities), holds
for it every GPU it counts on (its victims' and the free ones beside them), and stops no
one where even every candidate together would not free enough. Pure, over
``choose_preemptions`` on a planned snapshot."""

from __future__ import annotations

import pytest
from support.forged import FACTS, R_UUIDS, P, sw_node, sw_svc

from swarmgpu.manager.placement import Holding, assign_key, devices_key, gate_key, plan_placement
from swarmgpu.manager.placement.preempt import Preemption, choose_preemptions
from swarmgpu.swarm.client import SwarmTask

# On the 8 RTX 4090s: a (priority 0) 2, b (priority 5) 2, keep (not preemptible) 3; one free.
HELD = {"a": (R_UUIDS[0:2], "0"), "b": (R_UUIDS[2:4], "5"), "keep": (R_UUIDS[4:7], "90")}
FREE = R_UUIDS[7]


def _preemptions(gpus: int) -> list[Preemption]:
    labels: dict[str, str] = {}
    for name, (uuids, _prio) in HELD.items():
        labels |= {assign_key(P, name): Holding(name, "n-4090", uuids,
                                                 (1000,) * len(uuids)).label_value(),
                   gate_key(P, name): "true"}
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-4090", "gpu-node-2", labels)]
    services = [sw_svc(name, {f"{P}gpus": str(len(uuids)), f"{P}priority": prio,
                              devices_key(P, "n-4090"): ",".join(uuids),
                              **({f"{P}preemptible": "false"} if name == "keep" else {})})
                for name, (uuids, prio) in HELD.items()]
    services.append(sw_svc("high", {f"{P}gpus": str(gpus), f"{P}priority": "100",
                                    f"{P}gpu-product": "*RTX 4090*"}))
    tasks = [SwarmTask(f"t-{s.name}", s.id, "n-4090" if s.name in HELD else "", 1,
                       "running" if s.name in HELD else "pending", "running", ())
             for s in services]
    plan = plan_placement(nodes, services, tasks, FACTS)
    return choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=100)


@pytest.mark.parametrize(("gpus", "victims"), [
    (3, ["a"]),  # the free GPU and one victim's 2: the lowest priority of the two
    (5, ["a", "b"]),  # the free one and both victims' 4
])
def test_victims_are_added_until_the_preemptor_fits_and_all_its_gpus_held(
        gpus: int, victims: list[str]) -> None:
    (p,) = _preemptions(gpus)
    assert sorted(v.service for v in p.victims) == victims
    freed = {u for v in p.victims for u in v.uuids}
    assert len(p.held) == gpus and set(p.held) == freed | {FREE}, p.held


def test_no_one_is_stopped_where_every_candidate_together_frees_too_few() -> None:
    assert _preemptions(6) == []  # keep's 3 are not preemptible: 5 at most
