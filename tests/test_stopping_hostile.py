"""Hostile or odd task input read by the stopping holds (``swarm.taskstop``,
``keys.rejected_running``, ``nominated.StoppingGpus``): a clear reading or none, never
a raise out of the snapshot or the cycle."""

from __future__ import annotations

from typing import Any

from support.forged import FACTS, R_UUIDS, sw_svc

from swarmgpu.manager.placement.nominated import StoppingGpus
from swarmgpu.swarm.client import SwarmTask, task_from_api
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
    division raised OverflowError out of ``task_from_api`` (every task's grace period is
    read), and the whole snapshot failed every cycle Swarm kept the task."""
    base = task_from_api(_raw(0)).rejected_until
    assert base is not None
    for ns in (10**400, 2**1024, MAX_GRACE_S * 10**9 + 1):
        t = task_from_api(_raw(ns))
        assert t.rejected_until == base + MAX_GRACE_S and t.stop_grace_s == MAX_GRACE_S, ns


def test_a_stopping_tasks_env_entry_that_is_no_text_is_skipped_not_raised() -> None:
    """A stopping task's Env as an engine (or a proxy) should never send it: an entry
    that is no text is skipped, its device line still read. Before: AttributeError out
    of ``StoppingGpus.holds``, outside any service's isolation: the cycle failed every
    time while Swarm stopped the task."""
    s = sw_svc("s", {})
    t = SwarmTask("t", s.id, "n-4090", 1, "running", "shutdown",
                  (None, 7, ["x"], f"NVIDIA_VISIBLE_DEVICES={R_UUIDS[0]}"))  # type: ignore[arg-type]
    (n,) = StoppingGpus("swarmgpu.").holds([t], [s], {}, (), FACTS)
    assert (n.node_id, n.uuids) == ("n-4090", R_UUIDS[:1])
