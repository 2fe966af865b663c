"""Tenants on the real test swarm, preemption on (``preemption.dry_run: false``): the
operator's config decides what each stack's labels get.

``team-a`` may ask up to priority 100 and opt out of preemption; ``team-b`` up to 0 and
may not opt out. team-b's batch service holds all 8 GPUs of the RTX 4090 box. Another
team-b stack labelled ``swarmgpu.priority: "999999"`` and ``swarmgpu.preemptible:
"false"`` preempts nothing, and ``plan`` (text and JSON), ``status``, ``audit`` and the
daemon's log say its priority is capped at 0 by tenant team-b. A team-a service at
priority 100 asking for 2 GPUs then runs within 60 s, and the batch service is its
victim.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from support.daemon import ModuleDaemon
from support.gpu_nodes import LOGS, RTX4090, eventually, run_cli
from support.swarm_harness import SwarmCluster
from support.swarm_services import deploy, plan, tasks_running, wait_running

pytestmark = pytest.mark.swarm
P = "swarmgpu."
LOG = LOGS / "tenants-daemon.log"
TENANTS: dict[str, Any] = {
    "team-a": {"stacks": ["team-a*"], "max_priority": 100, "may_opt_out": True},
    "team-b": {"stacks": ["team-b*"], "max_priority": 0, "may_opt_out": False},
}
CONFIG: dict[str, Any] = {"sync": {"interval_s": 2},
                          "preemption": {"dry_run": False, "settle_s": 10},
                          "rebalance": {"dry_run": False, "policies": ""},
                          "tenants": TENANTS}
CAPPED = "priority 999999 capped at 0 by tenant team-b (its max_priority)"


DAEMON = ModuleDaemon(LOG.name, CONFIG,
                      remove_stacks=("team-a", "team-b-greedy", "team-b"))


def test_a_tenants_ceiling_holds_and_the_higher_tenant_preempts(
        swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    tmp = daemon["tmp"]
    deploy(swarm, tmp, "team-b", {"batch": {"labels": {f"{P}gpus": "8"}}})
    (batch,) = wait_running(swarm, "team-b_batch", 1, timeout=90)
    assert swarm.node(batch["NodeID"]).hostname == RTX4090.hostname

    # team-b asks for everything its labels can say: capped, nothing preempted.
    deploy(swarm, tmp, "team-b-greedy", {"x": {"labels": {
        f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*", f"{P}priority": "999999",
        f"{P}preemptible": "false"}}})
    time.sleep(12)  # six cycles at sync.interval_s 2
    assert [t["ID"] for t in tasks_running(swarm, "team-b_batch")] == [batch["ID"]]
    assert tasks_running(swarm, "team-b-greedy_x") == []
    by = plan(daemon)
    greedy = by["team-b-greedy_x"]
    print(f"\nplan: team-b-greedy_x {greedy['status']}: {greedy['reason']}; "
          f"tenant {greedy['tenant']}: {greedy['limits']}")
    assert greedy["status"] == "pending" and greedy["tenant"] == "team-b"
    assert greedy["limits"] == [
        CAPPED, f"{P}preemptible=false ignored: tenant team-b may not opt out of preemption"]
    assert "priority" not in greedy["request"]  # the request as granted: priority 0
    text = run_cli("plan", "--config", str(daemon["cfg"])).stdout
    assert f"  limited: {CAPPED}" in text and "  tenant: team-b" in text, text
    status = run_cli("status", "--config", str(daemon["cfg"])).stdout
    assert f"team-b-greedy_x: {CAPPED}" in status, status
    res = run_cli("audit", "--config", str(daemon["cfg"]), "--json")
    limits = [f for f in json.loads(res.stdout)["findings"] if f["kind"] == "tenant-limit"]
    assert res.returncode == 1 and {f["subject"] for f in limits} == {"team-b-greedy_x"}
    assert "self-declared-priority" not in res.stdout

    def logged() -> str:  # the daemon's line of the cap: waited for, as the sleep waited for none
        log = LOG.read_bytes()[daemon["log_at"]:].decode(errors="replace")
        assert f"team-b-greedy_x: {CAPPED}" in log, log[-2000:]
        return log

    log = eventually(logged, 30, "the daemon's cap of team-b-greedy_x logged")
    assert "preempt" not in log.replace("preemptible", "").replace("preemption", "")

    # team-a at its ceiling: team-b's batch (which may not opt out) is the victim.
    start = time.monotonic()
    deploy(swarm, tmp, "team-a", {"high": {"labels": {
        f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*", f"{P}priority": "100"}}})
    wait_running(swarm, "team-a_high", 1, timeout=60)
    swarm.wait_for(lambda: not tasks_running(swarm, "team-b_batch") or None,
                   max(1.0, 60 - (time.monotonic() - start)), "the batch service stopped")
    took = time.monotonic() - start
    print(f"team-a_high running and team-b_batch stopped {took:.1f} s after the deploy")
    by = plan(daemon)
    assert by["team-b_batch"]["status"] == "pending"
    assert "preempted by team-a_high (priority 100)" in by["team-b_batch"]["reason"]
    assert by["team-a_high"]["status"] == "placed" and by["team-a_high"]["limits"] == []
    labels = swarm.client(swarm.manager).api.inspect_service("team-b_batch")["Spec"]["Labels"]
    assert json.loads(labels[f"{P}state.preempted"])["by"] == "team-a_high"
