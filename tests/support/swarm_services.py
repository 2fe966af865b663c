"""Stacks and services on the real test swarm: deploy, wait until running, read
their tasks' env and devices, the CLI's plan; daemon configs (PREEMPTING).

First written in tests/test_converge_swarm.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.gpu_nodes import run_cli
from support.swarm_harness import SwarmCluster
from swarmgpu.manager.placement import env_template, gate_constraint
from swarmgpu.manager.services.sharing import env_lines


def render(daemon: dict[str, Any], stack: str, text: str) -> Path:
    src = daemon["tmp"] / f"{stack}.src.yml"
    src.write_text(text)
    out = daemon["tmp"] / f"{stack}.yml"
    res = run_cli("render", str(src), "-n", stack, "--config", str(daemon["cfg"]), "-o", str(out))
    assert res.returncode == 0, res.stderr
    return out


def deploy_file(swarm: SwarmCluster, path: Path, stack: str) -> None:
    swarm.cli(swarm.manager, "stack", "deploy", "--resolve-image", "never", "-c", str(path),
              stack)


P = "swarmgpu."


def gpu_create(swarm: SwarmCluster, name: str, *args: str) -> None:
    swarm.cli(swarm.manager, "service", "create", "-d", "--no-resolve-image", "--name", name,
              "--constraint", gate_constraint(P, name), "--env", env_template(P), *args)


def stack_yaml(stack: str, services: dict[str, dict[str, Any]]) -> str:
    """A compose file with the documented gate + env lines on every annotated service."""
    out: dict[str, Any] = {"version": "3.8", "services": {}}
    for name, spec in services.items():
        full = f"{stack}_{name}"
        svc: dict[str, Any] = {
            "image": "local/busybox:latest",
            "command": ["sleep", "3600"],
            "environment": [env_template(P), "CUDA_DEVICE_ORDER=PCI_BUS_ID",
                            # a share is told to the container (swarmgpu.manager.services.sharing)
                            *(env_lines(P) if f"{P}gpu-fraction" in spec["labels"] else ()),
                            *spec.get("env", [])],
            "deploy": {
                "replicas": spec.get("replicas", 1),
                "labels": spec["labels"],
                "placement": {"constraints": [gate_constraint(P, full),
                                              *spec.get("constraints", [])]},
                "restart_policy": {"condition": "any", "delay": "1s"},
            },
        }
        if spec.get("replicas", 1) > 1:
            svc["deploy"]["placement"]["max_replicas_per_node"] = 1
        if "cpus" in spec:
            svc["deploy"]["resources"] = {"reservations": {"cpus": f"{spec['cpus']:.2f}"}}
        out["services"][name] = svc
    return json.dumps(out, indent=1)


def deploy(swarm: SwarmCluster, tmp: Path, stack: str, services: dict[str, Any],
           render: Callable[[str, dict[str, dict[str, Any]]], str] = stack_yaml) -> None:
    """``docker stack deploy`` of the compose file ``render`` writes for ``services``."""
    f = tmp / f"{stack}.yml"
    f.write_text(render(stack, services))
    swarm.cli(swarm.manager, "stack", "deploy", "--resolve-image", "never", "-c", str(f), stack)


def plan(daemon: dict[str, Any]) -> dict[str, dict[str, Any]]:
    res = run_cli("plan", "--config", str(daemon["cfg"]), "--json")
    assert res.returncode == 0, res.stderr
    return {s["name"]: s for s in json.loads(res.stdout)["services"]}


def tasks_running(swarm: SwarmCluster, service: str) -> list[dict[str, Any]]:
    api = swarm.client(swarm.manager).api
    return [t for t in api.tasks(filters={"service": service, "desired-state": "running"})
            if t["Status"]["State"] == "running"]


def container_env(swarm: SwarmCluster, task: dict[str, Any]) -> dict[str, str]:
    node = swarm.node(task["NodeID"])
    cid = task["Status"]["ContainerStatus"]["ContainerID"]
    env = swarm.client(node).api.inspect_container(cid)["Config"]["Env"]
    return dict(e.split("=", 1) for e in env)


def wait_running(swarm: SwarmCluster, service: str, n: int, timeout: float = 60, *,
                 each: Callable[[dict[str, Any]], bool] | None = None, what: str = ""
                 ) -> list[dict[str, Any]]:
    """The ``n`` running tasks of ``service`` once there are exactly ``n`` (and ``each``,
    where given, holds for every one; ``what`` says what it checks)."""
    def ready() -> list[dict[str, Any]] | None:
        ts = tasks_running(swarm, service)
        return ts if len(ts) == n and (each is None or all(each(t) for t in ts)) else None

    try:
        return swarm.wait_for(ready, timeout, f"{n} running task(s) of {service}{what}")
    except Exception as exc:
        api = swarm.client(swarm.manager).api
        seen = [(t["Slot"], t["DesiredState"], t["Status"]["State"], t["Status"].get("Err"),
                 t["Status"].get("Message")) for t in api.tasks(filters={"service": service})]
        raise AssertionError(f"{exc}; tasks: {seen}") from exc


def devices_of(swarm: SwarmCluster, service: str) -> dict[str, list[str]]:
    """hostname -> the device UUIDs each running container of the service sees."""
    out = {}
    for t in tasks_running(swarm, service):
        env = container_env(swarm, t)
        out[swarm.node(t["NodeID"]).hostname] = env["NVIDIA_VISIBLE_DEVICES"].split(",")
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    return out


# The daemon's config here and in test_job_preempt_swarm: preemption on, moves on
# (through the rebalancer's mover), but no rebalancing policy of its own.
PREEMPTING: dict[str, Any] = {"sync": {"interval_s": 2},
                              "preemption": {"dry_run": False, "settle_s": 10},
                              "rebalance": {"dry_run": False, "policies": ""}}


def removed_tasks_stopped(swarm: SwarmCluster, timeout: float = 60) -> None:
    """Wait until no task of a removed service still runs: it keeps its GPUs for its stop
    grace period (`sleep` ignores SIGTERM: 10 s), held from every new service meanwhile
    (docs/deploy.md), so a test that wants every GPU idle waits for them."""
    api = swarm.client(swarm.manager).api

    def stopped() -> bool:
        live = {s["ID"] for s in api.services()}
        return not [t for t in api.tasks() if t["ServiceID"] not in live
                    and t["Status"]["State"] == "running"]
    swarm.wait_for(lambda: stopped() or None, timeout, "removed services' tasks stopped")
