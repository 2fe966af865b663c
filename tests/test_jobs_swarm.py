"""Swarm jobs with a GPU request on the real test swarm: a ``replicated-job`` of 2 tasks,
1 GPU each, runs both pinned to a GPU, gives its GPUs back within a cycle of completing
(no ledger label left, a new service takes the whole node), and runs again with GPUs
after ``docker service update --force``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.daemon import ModuleDaemon
from support.gpu_nodes import GPU_NODES, RTX4090, run_cli
from support.swarm_harness import SwarmCluster
from support.swarm_services import P, gpu_create, removed_tasks_stopped, wait_running

pytestmark = pytest.mark.swarm
JOB = "embed"


DAEMON = ModuleDaemon("jobs-daemon.log", {"sync": {"interval_s": 2}})


def run_devices(swarm: SwarmCluster, job: str = JOB, timeout: float = 120,
                n: int = 2) -> dict[str, str]:
    """Once the ``n`` tasks of the job's current run completed: host/task -> the devices
    each saw."""
    api = swarm.client(swarm.manager).api

    def done() -> dict[str, str] | None:
        it = (api.inspect_service(job).get("JobStatus") or {}).get("JobIteration", {})
        ts = [t for t in api.tasks(filters={"service": job})
              if t.get("JobIteration", {}).get("Index") == it.get("Index")]
        if len(ts) != n or any(t["Status"]["State"] != "complete" for t in ts):
            return None
        out = {}
        for t in ts:
            node = swarm.node(t["NodeID"])
            cid = t["Status"]["ContainerStatus"]["ContainerID"]
            env = dict(e.split("=", 1) for e in
                       swarm.client(node).api.inspect_container(cid)["Config"]["Env"])
            out[f"{node.hostname}/{t['ID']}"] = env["NVIDIA_VISIBLE_DEVICES"]
        return out

    return swarm.wait_for(done, timeout, f"{n} tasks of {job}'s run complete")


def ledger_of(swarm: SwarmCluster, name: str) -> dict[str, str]:
    api = swarm.client(swarm.manager).api
    return {n["Description"]["Hostname"]: n["Spec"]["Labels"][f"{P}assign.{name}"]
            for n in api.nodes() if f"{P}assign.{name}" in (n["Spec"].get("Labels") or {})}


def plan_of(daemon: dict[str, Any], name: str) -> dict[str, Any]:
    res = run_cli("plan", "--config", str(daemon["cfg"]), "--json")
    assert res.returncode == 0, res.stderr
    (p,) = [s for s in json.loads(res.stdout)["services"] if s["name"] == name]
    return p


def assert_pinned(seen: dict[str, str]) -> None:
    """Every task (``host/task`` -> devices, as ``run_devices`` gives) saw a GPU of its
    own node, never ``void``."""
    for key, devices in seen.items():
        host = key.split("/")[0]
        assert devices != "void" and devices in GPU_NODES[host].uuids(), (key, devices)


def test_job_runs_pinned_releases_and_reruns(swarm: SwarmCluster,
                                             daemon: dict[str, Any]) -> None:
    gpu_create(swarm, JOB, "--mode", "replicated-job", "--replicas", "2",
               "--label", f"{P}gpus=1", "local/busybox:latest", "sleep", "4")
    first = run_devices(swarm)
    assert sorted(k.split("/")[0] for k in first) == sorted(GPU_NODES), first
    assert_pinned(first)
    # Within a cycle (2 s) of completing, the job holds nothing and is shown done.
    swarm.wait_for(lambda: not ledger_of(swarm, JOB) or None, 10, "the job's ledger gone")
    p = plan_of(daemon, JOB)
    assert p["status"] == "done" and p["mode"] == "replicated-job", json.dumps(p)
    assert p["progress"].startswith("2 of 2 complete, 0 GPU"), p
    # A service asking for every GPU of gpu-node-2 gets them, the job's one included.
    whole = "whole"
    n = len(RTX4090.facts().gpus)
    gpu_create(swarm, whole, "--label", f"{P}gpus={n}", "--constraint",
               "node.hostname==gpu-node-2", "local/busybox:latest", "sleep", "3600")
    (t,) = wait_running(swarm, whole, 1, timeout=60)
    assert swarm.node(t["NodeID"]).hostname == "gpu-node-2"
    swarm.cli(swarm.manager, "service", "rm", whole)
    swarm.wait_for(lambda: not ledger_of(swarm, whole) or None, 15, "whole's ledger gone")
    # Its task runs on until it stops (its grace period: `sleep` ignores SIGTERM), its GPUs
    # held meanwhile (docs/deploy.md): the next service waits for them, as Swarm's would.
    removed_tasks_stopped(swarm)
    # Re-run: Swarm runs the job again on --force; each task gets a GPU again.
    swarm.cli(swarm.manager, "service", "update", "-d", "--force", JOB)
    again = run_devices(swarm)
    assert set(again).isdisjoint(first)  # new tasks
    assert_pinned(again)
    swarm.wait_for(lambda: not ledger_of(swarm, JOB) or None, 10, "the re-run's ledger gone")
    swarm.cli(swarm.manager, "service", "rm", JOB)  # the swarm is the session's


def test_global_job_runs_once_on_each_gpu_node_pinned(swarm: SwarmCluster,
                                                      daemon: dict[str, Any]) -> None:
    """A global job: Swarm makes its tasks when a run starts, on the nodes matching then;
    swarmgpu writes the map, opens the gates, then starts a run (one task per GPU node)."""
    name = "sweep"
    gpu_create(swarm, name, "--mode", "global-job", "--label", f"{P}gpus=1",
               "local/busybox:latest", "sleep", "3")
    seen = run_devices(swarm, name, timeout=90)
    assert sorted(k.split("/")[0] for k in seen) == sorted(GPU_NODES), seen  # not mgr-1
    assert_pinned(seen)
    swarm.wait_for(lambda: not ledger_of(swarm, name) or None, 10, "the global job's ledger")
    p = plan_of(daemon, name)
    assert p["status"] == "done" and p["mode"] == "global-job", json.dumps(p)
    swarm.cli(swarm.manager, "service", "rm", name)  # the swarm is the session's


def test_job_with_fewer_at_once_than_completions_runs_each_task_pinned(
        swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    """MaxConcurrent 1 of 3 completions: one holding, kept while tasks are left; each task
    Swarm starts after a completion finds its node's device map; none left at the end."""
    name = "steps"
    gpu_create(swarm, name, "--mode", "replicated-job", "--replicas", "3",
               "--max-concurrent", "1", "--label", f"{P}gpus=1",
               "local/busybox:latest", "sleep", "2")
    seen = run_devices(swarm, name, timeout=120, n=3)
    assert_pinned(seen)
    swarm.wait_for(lambda: not ledger_of(swarm, name) or None, 10, "the job's ledger gone")
    assert plan_of(daemon, name)["status"] == "done"
    swarm.cli(swarm.manager, "service", "rm", name)  # the swarm is the session's
