"""A tenant's quota on the real test swarm, for stacks deployed without render (the file's
``swarmgpu.*`` labels only: no hold, no gate, no env template), so each task runs on a
GPU node before the daemon's first look, with no device list.

``default: {max: 0}``: the ``adhoc`` stack's 1-GPU service is held whole at its queue's
max. The daemon writes its gate and env template all the same: its task restarts behind
the gate, which no node opens, and waits ("no suitable node"); ``plan`` and ``status``
name the quota. Before (``tests/test_tenants_quota_ungated.py``) it got no write and its
task ran on with every GPU of its node, counted against no quota. team-a (``max: 2``)
deploys the same way and is adopted and placed, with its devices, as before.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from support.daemon import ModuleDaemon
from support.gpu_nodes import GPU_NODES, LOGS, eventually, run_cli
from support.swarm_harness import SwarmCluster
from support.swarm_services import container_env, deploy, plan, tasks_running, wait_running

from swarmgpu.manager.placement import gate_constraint

pytestmark = pytest.mark.swarm
P = "swarmgpu."
LOG = LOGS / "tenants-quota-daemon.log"
CONFIG: dict[str, Any] = {
    "sync": {"interval_s": 2},
    "tenants": {"team-a": {"stacks": ["team-a*"], "max": 2}, "default": {"max": 0}},
}
DAEMON = ModuleDaemon(LOG.name, CONFIG, remove_stacks=("adhoc", "team-a"))
UUIDS = {g.uuid for n in GPU_NODES.values() for g in n.facts().gpus}
QUOTA = "queue default at its quota: max 0 GPUs"


def labels_only(stack: str, services: dict[str, dict[str, Any]]) -> str:
    """The annotated file as written, not rendered: on a worker (a GPU node), no gate."""
    return json.dumps(
        {
            "version": "3.8",
            "services": {
                name: {
                    "image": "local/busybox:latest",
                    "command": ["sleep", "3600"],
                    "stop_grace_period": "1s",
                    "deploy": {
                        "labels": spec["labels"],
                        "placement": {"constraints": ["node.role==worker"]},
                        "restart_policy": {"condition": "any", "delay": "1s"},
                    },
                }
                for name, spec in services.items()
            },
        }
    )


def has_devices(swarm: SwarmCluster, task: dict[str, Any]) -> bool:
    devs = container_env(swarm, task).get("NVIDIA_VISIBLE_DEVICES", "")
    return bool(devs) and set(devs.split(",")) <= UUIDS


def test_a_stack_over_its_tenants_max_deployed_without_render_waits_gated(
    swarm: SwarmCluster, daemon: dict[str, Any]
) -> None:
    tmp, api = daemon["tmp"], swarm.client(swarm.manager).api
    gpu1 = {"labels": {f"{P}gpus": "1"}}
    deploy(swarm, tmp, "adhoc", {"train": gpu1}, render=labels_only)
    deploy(swarm, tmp, "team-a", {"train": gpu1}, render=labels_only)
    # team-a has room: adopted, its task replaced by one with its device list.
    wait_running(
        swarm,
        "team-a_train",
        1,
        timeout=90,
        each=lambda t: has_devices(swarm, t),
        what=" with its devices",
    )
    time.sleep(8)  # four more cycles at sync.interval_s 2
    spec = api.inspect_service("adhoc_train")["Spec"]
    constraints = spec["TaskTemplate"]["Placement"].get("Constraints", [])
    assert gate_constraint(P, "adhoc_train") in constraints, constraints
    assert "node.role==worker" in constraints  # the stack's own: kept
    assert tasks_running(swarm, "adhoc_train") == []
    waiting = [t for t in api.tasks(filters={"service": "adhoc_train", "desired-state": "running"})]
    assert [t["Status"]["State"] for t in waiting] == ["pending"], waiting
    assert "no suitable node" in waiting[0]["Status"].get("Err", ""), waiting[0]["Status"]
    adhoc = plan(daemon)["adhoc_train"]
    print(
        f"\nplan: adhoc_train {adhoc['status']}: {adhoc['reason']}; "
        f"task {waiting[0]['Status']['State']}: {waiting[0]['Status'].get('Err')}"
    )
    assert adhoc["status"] == "pending" and QUOTA in adhoc["reason"], adhoc
    status = run_cli("status", "--config", str(daemon["cfg"])).stdout
    assert QUOTA in status, status

    def logged() -> None:  # the daemon's line: waited for, as the sleep waited for none
        log = LOG.read_bytes()[daemon["log_at"] :].decode(errors="replace")
        assert "while its queue's max keeps it waiting" in log, log[-2000:]

    eventually(logged, 30, "adhoc_train's decision logged")
