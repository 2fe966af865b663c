"""A queue whose use this cycle could not be counted (its row's ``used_unknown``; its
``used_gpus`` only what was counted, too low) neither reclaims by its guarantee nor is
reclaimed from that cycle: the undercount made a queue at its guarantee look below it."""

from __future__ import annotations

from typing import Any

import pytest
from support.isolation import BAD, FACTS, NODES, queue_count_raises
from support.placement import P, apply, svc, written

from swarmgpu.manager.cycle.preempt_notes import note_unknown_use
from swarmgpu.manager.placement import Planner
from swarmgpu.manager.placement.preempt import choose_preemptions
from swarmgpu.manager.placement.queues import reclaimable, within_guarantee
from swarmgpu.manager.services.requests import GpuRequest


def test_a_queue_whose_use_is_unknown_reclaims_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Queue q (guarantee 8, no max): a-bad holds 4 of it, uncounted this cycle, so q
    looked at 0 and b-new (8 GPUs of q: 12 with a-bad's) preempted unqueued work to
    "reclaim" GPUs past q's guarantee. Now it preempts nothing, its plan saying why."""
    q = {f"{P}queue": "q"}
    services = [svc(BAD, {f"{P}gpus": "4", **q}), svc("c-low", {f"{P}gpus": "8"}),
                svc("d-fill", {f"{P}gpus": "4"})]
    nodes, planner = list(NODES), Planner(queues={"q": (8000, None)})
    for _ in range(2):
        plan = planner.plan(nodes, services, [], FACTS)
        by = {sp.name: sp for sp in plan.services}
        services = [written(s, by[s.name]) for s in services]
        nodes = apply(nodes, plan)
    queue_count_raises(monkeypatch)
    services.append(svc("b-new", {f"{P}gpus": "8", **q}))
    plan = planner.plan(nodes, services, [], FACTS)
    (row,) = [r for r in plan.queues if r["queue"] == "q"]
    assert row["used_unknown"], row
    assert {sp.name: sp.status for sp in plan.services}["b-new"] == "pending"
    assert choose_preemptions(plan, nodes, services, [], FACTS, prefix=P,
                              preemptible_below=100) == []
    note_unknown_use(plan)  # as the preemption step (cycle and `plan`) notes it
    (new,) = [sp for sp in plan.services if sp.name == "b-new"]
    (said,) = [w for w in new.warnings if w.startswith("preemption:")]
    assert "queue q's use is not known this cycle" in said and BAD in said, said
    assert "reclaims no GPUs" in said and "fix:" in said


def _row(used: float, guaranteed: float, unknown: str | None) -> dict[str, Any]:
    return {"used_gpus": used, "guaranteed_gpus": guaranteed, "max_gpus": None,
            "configured": True, "tenant": None, "used_unknown": unknown}


def test_a_victim_queue_whose_use_is_unknown_is_not_reclaimed_from() -> None:
    """The victim queue's counted use is no ground to judge it above its guarantee."""
    p, v = GpuRequest(gpus=1, queue="p"), GpuRequest(gpus=1, queue="v")
    queues = {"p": _row(0, 4, None), "v": _row(8, 1, None)}
    assert reclaimable(p, v, 1000, queues)
    queues["v"] = _row(8, 1, "counting the use of a-bad raised")
    assert not reclaimable(p, v, 1000, queues)
    queues["p"] = _row(0, 4, "counting the use of a-bad raised")
    assert not within_guarantee(p, queues)
