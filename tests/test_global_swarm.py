"""``mode: global`` with a GPU request on the real test swarm (mgr-1 without GPUs,
gpu-node-1 and gpu-node-2 with agents): one task per GPU node, each pinned to its own GPU.

The non-GPU node gets no task at all: its gate label is never set, and Swarm's global
orchestrator creates tasks only on nodes whose labels match the constraints.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.daemon import ModuleDaemon
from support.gpu_nodes import GPU_NODES, run_cli
from support.swarm_harness import SwarmCluster
from support.swarm_services import container_env, wait_running

from swarmgpu.manager.placement import env_template, gate_constraint

pytestmark = pytest.mark.swarm
P = "swarmgpu."


DAEMON = ModuleDaemon("global-daemon.log", {"sync": {"interval_s": 2}})


def test_global_service_one_pinned_gpu_per_gpu_node(swarm: SwarmCluster,
                                                     daemon: dict[str, Any]) -> None:
    name = "infer"
    swarm.cli(swarm.manager, "service", "create", "-d", "--no-resolve-image", "--name", name,
              "--mode", "global", "--label", f"{P}gpus=1",
              "--constraint", gate_constraint(P, name), "--env", env_template(P),
              "--env", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "local/busybox:latest", "sleep", "3600")
    tasks = wait_running(swarm, name, 2, timeout=90)
    seen: dict[str, list[str]] = {}
    for t in tasks:
        host = swarm.node(t["NodeID"]).hostname
        devices = container_env(swarm, t)["NVIDIA_VISIBLE_DEVICES"]
        assert devices != "void", host
        seen[host] = devices.split(",")
    assert sorted(seen) == sorted(GPU_NODES)  # one task per GPU node, none on mgr-1
    for host, uuids in seen.items():
        assert len(uuids) == 1 and uuids[0] in GPU_NODES[host].uuids(), (host, uuids)
    api = swarm.client(swarm.manager).api
    on = {swarm.node(t["NodeID"]).hostname for t in api.tasks(filters={"service": name})
          if t.get("NodeID")}
    assert "mgr-1" not in on  # the non-GPU node never gets a task
    res = run_cli("plan", "--config", str(daemon["cfg"]), "--json")
    assert res.returncode == 0, res.stderr
    (p,) = [s for s in json.loads(res.stdout)["services"] if s["name"] == name]
    assert p["mode"] == "global" and p["status"] == "placed", p
    assert sorted(pl["node"] for pl in p["placements"]) == sorted(GPU_NODES)
    assert {pl["node"]: pl["uuids"] for pl in p["placements"]} == seen
    # The swarm is shared by the session's tests: the service goes, and its GPUs with it.
    swarm.cli(swarm.manager, "service", "rm", name)

    def released() -> bool | None:
        return not any(f"{P}assign.{name}" in (n["Spec"].get("Labels") or {})
                       for n in api.nodes()) or None

    swarm.wait_for(released, 15, f"{name}'s ledger gone")


def test_global_service_of_no_gpu_runs_on_every_node_the_cpu_only_one_included(
        swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    """``swarmgpu.gpus=0`` in ``mode: global``: its gate opens on every node with room
    for its CPU, mgr-1 (no agent, no GPU: a CPU-only node) too, and Swarm runs one task
    on each, told no GPU (docs/requests.md, "A service without a GPU"; the pure side:
    tests/test_cpu_nodes_global.py). Before: the GPU nodes only, none on mgr-1."""
    name = "cpuagent"
    swarm.cli(swarm.manager, "service", "create", "-d", "--no-resolve-image", "--name", name,
              "--mode", "global", "--label", f"{P}gpus=0", "--reserve-cpu", "0.1",
              "--constraint", gate_constraint(P, name), "--env", env_template(P),
              "local/busybox:latest", "sleep", "3600")
    everyone = sorted([*GPU_NODES, "mgr-1"])
    tasks = wait_running(swarm, name, len(everyone), timeout=90)
    seen = {swarm.node(t["NodeID"]).hostname: container_env(swarm, t) for t in tasks}
    assert sorted(seen) == everyone, sorted(seen)
    assert all(env["NVIDIA_VISIBLE_DEVICES"] == "void" for env in seen.values()), seen
    res = run_cli("plan", "--config", str(daemon["cfg"]), "--json")
    assert res.returncode == 0, res.stderr
    (p,) = [s for s in json.loads(res.stdout)["services"] if s["name"] == name]
    assert p["mode"] == "global" and p["status"] == "placed" and not p["nodes_waiting"], p
    assert sorted(pl["node"] for pl in p["placements"]) == everyone, p
    assert all(pl["uuids"] == [] for pl in p["placements"]), p
    api = swarm.client(swarm.manager).api
    swarm.cli(swarm.manager, "service", "rm", name)

    def released() -> bool | None:
        return not any(f"{P}assign.{name}" in (n["Spec"].get("Labels") or {})
                       for n in api.nodes()) or None

    swarm.wait_for(released, 15, f"{name}'s ledger gone")
