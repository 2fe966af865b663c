"""Hostile or odd task input read by the stopping holds (``swarm.taskstop``,
``keys.rejected_running``, ``nominated.StoppingGpus``): a clear reading or none, never
a raise out of the snapshot, never a hold that outlives the container."""

from __future__ import annotations

from typing import Any

from support.forged import sw_svc

from swarmgpu.swarm.client import task_from_api
from swarmgpu.swarm.taskstop import MAX_GRACE_S

STAMP = "2026-12-06T10:00:00Z"
ENFORCER = {"Message": "task rejected by constraint enforcer",
            "Err": "assigned node no longer meets constraints"}


def _raw(grace_ns: Any) -> dict[str, Any]:
    s = sw_svc("s", {})
    return {"ID": "t", "ServiceID": s.id, "NodeID": "n-4090", "Slot": 1,
            "DesiredState": "shutdown",
            "Status": {"State": "rejected", "Timestamp": STAMP, **ENFORCER},
            "Spec": {"ContainerSpec": {"Image": "x", "StopGracePeriod": grace_ns}}}


def test_a_grace_period_past_a_float_is_the_cap_not_an_overflow() -> None:
    """A StopGracePeriod JSON reads as an int too large for a float (no engine writes
    one; a proxy or a forged answer can): the cap, as any longer one. Before: its
    division raised OverflowError out of ``task_from_api``, and the whole snapshot
    failed every cycle Swarm kept the task."""
    base = task_from_api(_raw(0)).rejected_until
    assert base is not None
    for ns in (10**400, 2**1024, MAX_GRACE_S * 10**9 + 1):
        assert task_from_api(_raw(ns)).rejected_until == base + MAX_GRACE_S, ns
