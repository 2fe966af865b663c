"""A preempted job task on the real test swarm: a ``replicated-job`` (batch by default:
lowest priority, preemptible) holds all 8 GPUs of the RTX 4090 box; a priority-100
service that can only use that box asks for 2. The job's task stops and the high one
runs; once the high one is removed, Swarm runs the job's task again and it gets its GPUs.

Seen here: every write to a job's spec (labels included) starts a new run of the job
(``JobIteration`` + 1), so the preemption's write (device lists gone, ``state.preempted``)
and placement's later device map each start one: the task that runs again belongs to the
third run of the job (the test prints the iterations). For this one-task job that is the
same as re-running the task.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from support.daemon import ModuleDaemon
from support.gpu_nodes import RTX4090, run_cli
from support.swarm_harness import SwarmCluster
from support.swarm_services import PREEMPTING, container_env, gpu_create, wait_running

pytestmark = pytest.mark.swarm
P = "swarmgpu."
JOB = "jp-batch"
HIGH = "jp-high"
RTX = "*RTX 4090*"


DAEMON = ModuleDaemon("job-preempt-daemon.log", PREEMPTING)


def job_tasks(swarm: SwarmCluster) -> list[dict[str, Any]]:
    api = swarm.client(swarm.manager).api
    return sorted(api.tasks(filters={"service": JOB}), key=lambda t: t["CreatedAt"])


def job_running(swarm: SwarmCluster) -> list[dict[str, Any]]:
    """The job's tasks that run now (a running job task's desired state is complete)."""
    return [t for t in job_tasks(swarm) if t["Status"]["State"] == "running"
            and t["DesiredState"] in ("running", "complete")]


def test_a_preempted_job_task_runs_again_with_gpus_once_room_exists(
        swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    try:
        run(swarm, daemon)
    finally:
        for name in (HIGH, JOB):
            swarm.cli(swarm.manager, "service", "rm", name, check=False)


def run(swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    gpu_create(swarm, JOB, "--mode", "replicated-job", "--replicas", "1",
               "--label", f"{P}gpus=8", "--label", f"{P}gpu-product={RTX}",
               "--restart-delay", "1s", "local/busybox:latest", "sleep", "3600")
    (first,) = swarm.wait_for(lambda: job_running(swarm) or None, 90, f"{JOB} running")
    assert swarm.node(first["NodeID"]).hostname == RTX4090.hostname
    devices = container_env(swarm, first)["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert sorted(devices) == sorted(RTX4090.uuids())

    start = time.monotonic()
    gpu_create(swarm, HIGH, "--replicas", "1", "--label", f"{P}gpus=2",
               "--label", f"{P}priority=100", "--label", f"{P}gpu-product={RTX}",
               "local/busybox:latest", "sleep", "3600")
    wait_running(swarm, HIGH, 1, timeout=90)
    swarm.wait_for(lambda: not job_running(swarm) or None, 60, "the job's task stopped")
    print(f"\n{HIGH} running and {JOB}'s task stopped {time.monotonic() - start:.1f} s "
          "after the high one was created")
    api = swarm.client(swarm.manager).api
    swarm.wait_for(lambda: api.inspect_task(first["ID"])["Status"]["State"] != "running"
                   or None, 60, "the preempted container gone (its stop_grace_period)")
    res = run_cli("plan", "--config", str(daemon["cfg"]), "--json")
    assert res.returncode == 0, res.stderr
    (p,) = [x for x in json.loads(res.stdout)["services"] if x["name"] == JOB]
    assert p["status"] == "pending" and f"preempted by {HIGH} (priority 100)" in p["reason"]
    # Swarm made the job a new task for the stopped one; it waits for a gate.
    waiting = [t for t in job_tasks(swarm) if t["ID"] != first["ID"]
               and t["DesiredState"] in ("running", "complete")]
    assert [t["Status"]["State"] for t in waiting] == ["pending"], job_tasks(swarm)

    swarm.cli(swarm.manager, "service", "rm", HIGH)
    start = time.monotonic()
    try:
        (again,) = swarm.wait_for(lambda: job_running(swarm) or None, 90,
                                  f"{JOB} running again")
    finally:
        print("job tasks:", [(t["ID"][:8], t["DesiredState"], t["Status"]["State"],
                              t["Status"].get("Err")) for t in job_tasks(swarm)])
    print(f"{JOB} running again {time.monotonic() - start:.1f} s after {HIGH}'s removal")
    print("job iterations: first", first.get("JobIteration"), "waiting",
          waiting[0].get("JobIteration"), "again", again.get("JobIteration"),
          "same task as the waiting one:", again["ID"] == waiting[0]["ID"])
    assert again["ID"] != first["ID"]
    assert swarm.node(again["NodeID"]).hostname == RTX4090.hostname
    devices = container_env(swarm, again)["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert sorted(devices) == sorted(RTX4090.uuids())
