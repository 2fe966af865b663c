"""Hostile or odd task input read by the stopping holds (``swarm.taskstop``,
``keys.rejected_running``, ``nominated.StoppingGpus``): a clear reading or none, never
a raise out of the snapshot or the cycle."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from support.forged import FACTS, R_UUIDS, sw_svc
from support.planner import cpu_node

from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Planner, Status
from swarmgpu.manager.placement.nominated import StoppingGpus
from swarmgpu.swarm.client import SwarmTask, task_from_api
from swarmgpu.swarm.taskstop import MAX_GRACE_S

P = "swarmgpu."
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


def test_an_old_task_its_rolling_update_has_not_reached_binds_its_own_port() -> None:
    """proxy published 8000 in host mode and was updated to publish 9000; its rolling
    update has not reached its task on node-a (the only node) yet: that task, still
    desired running, binds 8000 (its own status says so; Swarm's HostPortFilter counts
    each task's own ports). llm, publishing 8000, waits for it. Before: only the new
    spec's port was read for a task meant to run, and llm was placed on node-a, where
    Swarm left its task pending on the port. A stopping task was read so already."""
    def ports(n: int) -> dict[str, Any]:
        return {"EndpointSpec": {"Ports": [{"Protocol": "tcp", "TargetPort": 80,
                                            "PublishedPort": n, "PublishMode": "host"}]}}
    llm = sw_svc("llm", {"swarmgpu.gpus": "1"})
    llm = replace(llm, spec={**llm.spec, **ports(8000)})
    facts = {"n-a": FactsResult("n-a", "n-a", "", FACTS["n-4090"], None, 1.0)}
    for published in (ports(9000), {}):  # updated to another port, or to none
        proxy = replace(sw_svc("proxy", {}), spec={"Name": "proxy", **published})
        old = SwarmTask("t-proxy", proxy.id, "n-a", 1, "running", "running", (),
                        host_ports=("8000/tcp",))
        snap = Snapshot([cpu_node("n-a", "node-a")], [llm, proxy], [old], facts)
        sp = {sp.name: sp for sp in make_plan(snap, Config(),
                                              planner=Planner(prefix=P)).services}
        assert sp["llm"].status == Status.PENDING and "8000/tcp" in (sp["llm"].reason or ""), \
            (published, sp["llm"])
        sp = {sp.name: sp for sp in make_plan(replace(snap, tasks=[]), Config(),
                                              planner=Planner(prefix=P)).services}
        assert sp["llm"].status == Status.PLACED  # stopped: 8000 free there
