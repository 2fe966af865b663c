"""The over-share restart's real test swarm: gpu-node-1's agent serving a fake NVML
(an 8x A100-SXM4-80GB layout) whose processes are the host PIDs a test writes to a
file, gpu-node-2's real agent, and the daemon on a module's config; the GPU a
service holds there, and a task's container PID.

First written in tests/test_overshare_swarm.py."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.gpu_nodes import (
    LOGS,
    cfg_file,
    kwargs_for_logs,
    start_agent,
    start_daemon,
    stop,
    swarmgpu_env,
    wait_port,
)
from support.paths import REPO
from support.swarm_harness import SwarmCluster

P = "swarmgpu."


def fake_nvml_swarm(swarm: SwarmCluster, tmp_path_factory: pytest.TempPathFactory,
                    log: Path, stacks: tuple[str, ...], **cfg: Any,
                    ) -> Iterator[dict[str, Any]]:
    """A module's fixture body: yields ``tmp``, ``procs`` (the fake NVML's process file:
    ``{gpu uuid: [{"pid": .., "used_mib": ..}]}``) and ``cfg`` (``cfg_file(tmp, swarm,
    **cfg)``, the daemon's config); ``stacks`` are removed when it ends."""
    tmp = tmp_path_factory.mktemp(log.stem)
    procs_file = tmp / "processes.json"
    procs_file.write_text("{}")
    node1 = swarm.node("gpu-node-1")
    LOGS.mkdir(parents=True, exist_ok=True)
    fake = swarm.exec_in_netns(node1, [
        sys.executable, str(REPO / "tests/support/fake_nvml_agent.py"), "dgx_a100_nv12",
        str(procs_file), str(tmp / "sysfs"), "--hostname", "gpu-node-1", "--listen",
        f"{node1.addr}:9401", "--refresh-s", "1", "--identity", "swarm-pki", "--data-root",
        str(node1.data_root)], env=swarmgpu_env(), **kwargs_for_logs(LOGS / "agent-nvml.log"))
    procs = [fake]
    try:
        wait_port(node1.addr, 9401)
        procs.append(start_agent(swarm, "gpu-node-2"))
        path = cfg_file(tmp, swarm, **cfg)
        log.write_text("")
        procs.append(start_daemon(swarm, path, log))
        yield {"tmp": tmp, "procs": procs_file, "cfg": path}
    finally:
        for p in reversed(procs):
            stop(p)
        for stack in stacks:
            swarm.cli(swarm.manager, "stack", "rm", stack, check=False)


def held_gpu(swarm: SwarmCluster, service: str) -> str:
    """The GPU UUID ``service`` holds on gpu-node-1, by its ledger label there."""
    nid = swarm.node("gpu-node-1").node_id
    labels = swarm.client(swarm.manager).api.inspect_node(nid)["Spec"]["Labels"] or {}
    return str(labels[f"{P}assign.{service}"].split("@")[0])


def pid_of(swarm: SwarmCluster, task: dict[str, Any]) -> int:
    """The host PID of ``task``'s container, from its node's engine."""
    node = swarm.node(task["NodeID"])
    cid = task["Status"]["ContainerStatus"]["ContainerID"]
    return int(swarm.client(node).api.inspect_container(cid)["State"]["Pid"])
