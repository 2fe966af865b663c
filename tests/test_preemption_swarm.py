"""Preemption on the real test swarm (config ``preemption.dry_run: false``): a priority-0
batch service holds all 8 GPUs of the RTX 4090 box; a priority-100 service that can only
use that box asks for 2. Within 60 s it runs, the batch service does not, and ``plan``
gives "preempted by ... (priority 100)" as the batch service's reason; once the high one
is removed, the batch service runs again within 60 s (its spec untouched but for
swarmgpu's own state labels). A preemptible victim that can run on the other node is
moved there (make-before-break), not stopped.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from support.daemon import ModuleDaemon
from support.gpu_nodes import LOGS, RTX4090, eventually, run_cli, wait_log
from support.swarm_harness import SwarmCluster
from support.swarm_services import PREEMPTING, deploy, plan, tasks_running, wait_running

pytestmark = pytest.mark.swarm
P = "swarmgpu."


DAEMON = ModuleDaemon("preemption-daemon.log", PREEMPTING)


def test_high_priority_preempts_batch_and_batch_comes_back(
        swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    api = swarm.client(swarm.manager).api
    deploy(swarm, daemon["tmp"], "pre", {
        "batch": {"labels": {f"{P}gpus": "8", f"{P}priority": "0"}}})
    wait_running(swarm, "pre_batch", 1, timeout=90)
    (t,) = tasks_running(swarm, "pre_batch")
    assert swarm.node(t["NodeID"]).hostname == RTX4090.hostname
    spec_before = api.inspect_service("pre_batch")["Spec"]

    start = time.monotonic()
    deploy(swarm, daemon["tmp"], "pre", {
        "batch": {"labels": {f"{P}gpus": "8", f"{P}priority": "0"}},
        "high": {"labels": {f"{P}gpus": "2", f"{P}priority": "100",
                            f"{P}gpu-product": "*RTX 4090*"}}})
    wait_running(swarm, "pre_high", 1, timeout=60)
    swarm.wait_for(lambda: not tasks_running(swarm, "pre_batch") or None,
                   max(1.0, 60 - (time.monotonic() - start)), "the batch service stopped")
    took = time.monotonic() - start
    print(f"\npre_high running and pre_batch stopped {took:.1f} s after the deploy")
    why = "preempted by pre_high (priority 100)"

    # What the daemon writes and reports around the stop the test waited for: each
    # waited for in turn, with a deadline.
    def plan_says() -> None:
        by = plan(daemon)
        print(f"plan: pre_batch {by['pre_batch']['status']}: {by['pre_batch']['reason']}")
        assert by["pre_batch"]["status"] == "pending"
        assert why in by["pre_batch"]["reason"]
        assert by["pre_high"]["status"] == "placed"

    def labelled() -> None:
        labels = api.inspect_service("pre_batch")["Spec"]["Labels"]
        assert json.loads(labels[f"{P}state.preempted"])["by"] == "pre_high"

    def shown(cmd: str) -> None:  # the same reason wherever a pending service shows
        out = run_cli(cmd, "--config", str(daemon["cfg"])).stdout
        assert any("pre_batch" in line and why in line for line in out.splitlines()), out

    eventually(plan_says, 30, "plan says pre_batch is preempted")
    eventually(labelled, 30, "the preemption record on pre_batch")
    for cmd in ("status", "audit"):
        eventually(lambda cmd=cmd: shown(cmd), 30, f"{cmd} shows the reason")
    wait_log(LOGS / "preemption-daemon.log", why)

    # The high one goes: the batch service comes back on its own.
    api.remove_service("pre_high")
    start = time.monotonic()
    wait_running(swarm, "pre_batch", 1, timeout=60)
    print(f"pre_batch running again {time.monotonic() - start:.1f} s after pre_high's removal")
    swarm.wait_for(lambda: f"{P}state.preempted" not in
                   api.inspect_service("pre_batch")["Spec"]["Labels"] or None, 30,
                   "the preempted record removed")
    spec_after = api.inspect_service("pre_batch")["Spec"]
    # Nothing but swarmgpu's own state changed: same image, env, constraints, labels.
    mine = (f"{P}devices.", f"{P}state.")
    def user(labels: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in labels.items() if not k.startswith(mine)}
    assert user(spec_after["Labels"]) == user(spec_before["Labels"])
    assert spec_after["TaskTemplate"]["ContainerSpec"] == \
        spec_before["TaskTemplate"]["ContainerSpec"]
    assert spec_after["TaskTemplate"]["Placement"]["Constraints"] == \
        spec_before["TaskTemplate"]["Placement"]["Constraints"]
    swarm.cli(swarm.manager, "stack", "rm", "pre", check=False)  # network removal may lag


def test_a_victim_that_can_run_elsewhere_is_moved_not_stopped(
        swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    """gpu-node-2 is filled by small (priority 0, 2 GPUs of any product) and fill
    (priority 50, not preemptible, 6 GPUs), placed while gpu-node-1 was drained; the
    DGX has 7 whole GPUs free. high wants 2 RTX 4090s: small is moved to gpu-node-1 and
    keeps running; high runs on gpu-node-2; fill is untouched."""
    api = swarm.client(swarm.manager).api
    dgx = swarm.node("gpu-node-1").node_id
    swarm.cli(swarm.manager, "node", "update", "--availability", "drain", dgx)
    try:
        deploy(swarm, daemon["tmp"], "mv", {
            "small": {"labels": {f"{P}gpus": "2", f"{P}priority": "0"}},
            "fill": {"labels": {f"{P}gpus": "6", f"{P}priority": "50",
                                f"{P}preemptible": "false"}}})
        wait_running(swarm, "mv_small", 1, timeout=90)
        wait_running(swarm, "mv_fill", 1, timeout=90)
    finally:
        swarm.cli(swarm.manager, "node", "update", "--availability", "active", dgx)
    (fill_task,) = tasks_running(swarm, "mv_fill")
    assert swarm.node(tasks_running(swarm, "mv_small")[0]["NodeID"]).hostname == "gpu-node-2"
    start = time.monotonic()
    deploy(swarm, daemon["tmp"], "mv", {
        "small": {"labels": {f"{P}gpus": "2", f"{P}priority": "0"}},
        "fill": {"labels": {f"{P}gpus": "6", f"{P}priority": "50",
                            f"{P}preemptible": "false"}},
        "high": {"labels": {f"{P}gpus": "2", f"{P}priority": "100",
                            f"{P}gpu-product": "*RTX 4090*"}}})
    wait_running(swarm, "mv_high", 1, timeout=90)
    (small,) = wait_running(swarm, "mv_small", 1, timeout=30)
    took = time.monotonic() - start
    print(f"\nmv_high running {took:.1f} s after the deploy; mv_small now on "
          f"{swarm.node(small['NodeID']).hostname}")
    assert swarm.node(small["NodeID"]).hostname == "gpu-node-1"
    labels = api.inspect_service("mv_small")["Spec"]["Labels"]
    assert f"{P}state.preempted" not in labels  # moved, never stopped
    (high,) = tasks_running(swarm, "mv_high")
    assert swarm.node(high["NodeID"]).hostname == "gpu-node-2"
    assert [t["ID"] for t in tasks_running(swarm, "mv_fill")] == [fill_task["ID"]]
    wait_log(LOGS / "preemption-daemon.log", "to make room for mv_high (priority 100)")
    swarm.cli(swarm.manager, "stack", "rm", "mv", check=False)  # network removal may lag
