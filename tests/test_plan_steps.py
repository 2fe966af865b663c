"""The placement steps hand each other frozen values (issue 35, items 1 and 2): every
step's result and the plan built from them cannot be changed after the step that made
them; the planner's memory is one ``PlannerMemo`` whose ``evict`` keeps its bounds."""

from __future__ import annotations

import dataclasses

import pytest

from swarmgpu.manager.placement.converge import Convergence
from swarmgpu.manager.placement.cycle import Released
from swarmgpu.manager.placement.devicemap import DeviceMap
from swarmgpu.manager.placement.gating import Gating
from swarmgpu.manager.placement.globalmode import GlobalPlacement
from swarmgpu.manager.placement.jobs import JobRun
from swarmgpu.manager.placement.memo import (
    SERVICES_SLACK,
    PlannerMemo,
    RequestEntry,
)
from swarmgpu.manager.placement.packing import PackedEnv, Spread
from swarmgpu.manager.placement.preempt import Preemption
from swarmgpu.manager.placement.queues import QueueLimit
from swarmgpu.manager.placement.records import ServicePlan, SpecWrites, State, Status
from swarmgpu.manager.placement.restarts import Restarts
from swarmgpu.swarm.client import SwarmService

STEP_RESULTS = (Gating, Convergence, Spread, PackedEnv, DeviceMap, GlobalPlacement, JobRun,
                Released, QueueLimit, Restarts, Preemption, SpecWrites, ServicePlan)


@pytest.mark.parametrize("kind", STEP_RESULTS, ids=lambda k: k.__name__)
def test_every_step_result_is_frozen(kind: type) -> None:
    assert dataclasses.is_dataclass(kind)
    assert kind.__dataclass_params__.frozen, f"{kind.__name__} can be changed after its step"  # type: ignore[attr-defined]


def test_a_plan_cannot_be_edited_only_replaced() -> None:
    sp = ServicePlan("s", "id-s", None, "", Status.PLACED, State.ACTIVE,
                     writes=SpecWrites(add_env=("A=1",)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        sp.status = Status.PENDING  # type: ignore[misc]
    assert sp.add_env == ("A=1",) and sp.needs_service_write
    noted = sp.noted("a cycle's problem")
    assert noted.warnings == ("a cycle's problem",) and sp.warnings == ()


def _svc(sid: str) -> SwarmService:
    return SwarmService(sid, f"svc-{sid}", {}, (), (), "replicated", 1, None, 1)


def test_evict_drops_gone_services_once_past_the_bound_with_the_parts_records() -> None:
    memo = PlannerMemo("swarmgpu.")
    declared: dict[str, object] = {}
    memo.by_service = (declared,)
    live = [_svc("live")]
    for sid in ["live", *(f"gone{i}" for i in range(2 * len(live) + SERVICES_SLACK - 1))]:
        memo.requests[sid] = RequestEntry(1, None, (0, 0), (0, ""))
        declared[sid] = object()
        memo.learned.add(sid)
    memo.evict(live, {})  # at the bound: kept (a departed service may come back)
    assert len(memo.requests) == 2 * len(live) + SERVICES_SLACK
    memo.requests["one-more"] = RequestEntry(1, None, (0, 0), (0, ""))
    memo.evict(live, {})
    assert set(memo.requests) == {"live"} and set(declared) == {"live"}
    assert memo.learned == {"live"}
