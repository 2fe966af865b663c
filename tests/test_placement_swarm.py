"""Placement on the real test swarm: `docker stack deploy` of annotated stacks, the
daemon (real CLI, continuous mode) placing them, containers checked for their devices.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from support.daemon import ModuleDaemon
from support.gpu_nodes import (
    DGX_A100,
    LOGS,
    RTX4090,
    eventually,
    run_cli,
    stop,
)
from support.swarm_harness import SwarmCluster
from support.swarm_services import (
    P,
    container_env,
    deploy,
    devices_of,
    plan,
    tasks_running,
    wait_running,
)

pytestmark = pytest.mark.swarm


DAEMON = ModuleDaemon("placement-daemon.log", {"sync": {"interval_s": 2}})


def placement_writes(service: str) -> int:
    """Service writes the daemon made, as its log says (one line per landed write)."""
    text = (LOGS / "placement-daemon.log").read_text()
    return text.count(f"service={service} placement written")  # text log: key=value context


def test_nvlink_pair_on_dgx_with_plan_uuids(swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    deploy(swarm, daemon["tmp"], "llm", {"api": {
        "labels": {"swarmgpu.gpus": "2", "swarmgpu.topology": "nvlink",
                   # a 40GB A100 reports 40537 MiB: 40GiB (40960) fits none of it
                   "swarmgpu.gpu-memory": "39GiB"},
        "constraints": ["node.role==worker"], "env": ["MODEL=llama"]}})
    wait_running(swarm, "llm_api", 1)
    p = plan(daemon)["llm_api"]
    assert p["status"] == "placed" and p["state"] == "Active"
    (pl,) = p["placements"]
    assert pl["node"] == "gpu-node-1"
    assert devices_of(swarm, "llm_api") == {"gpu-node-1": pl["uuids"]}
    dgx = {g.uuid: g for g in DGX_A100.facts().gpus}
    assert all(u in dgx and not dgx[u].mig_enabled for u in pl["uuids"])
    # the user's own constraint and env are kept
    spec = swarm.client(swarm.manager).api.inspect_service("llm_api")["Spec"]
    assert "node.role==worker" in spec["TaskTemplate"]["Placement"]["Constraints"]
    assert "MODEL=llama" in spec["TaskTemplate"]["ContainerSpec"]["Env"]


def test_numa_group_on_4090_and_no_gpu_twice(swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    deploy(swarm, daemon["tmp"], "train", {
        "numa": {"labels": {"swarmgpu.gpus": "4", "swarmgpu.topology": "numa",
                            "swarmgpu.gpu-product": "*RTX 4090"}},
        "pair": {"labels": {"swarmgpu.gpus": "4"}, "replicas": 2},  # 2 replicas x 4 GPUs
    })
    wait_running(swarm, "train_numa", 1)
    wait_running(swarm, "train_pair", 2)
    numa = devices_of(swarm, "train_numa")
    assert list(numa) == ["gpu-node-2"]
    r4090 = RTX4090.facts()
    idx = sorted(g.index for g in r4090.gpus if g.uuid in numa["gpu-node-2"])
    assert idx in ([0, 1, 2, 3], [4, 5, 6, 7]), idx
    pairs = devices_of(swarm, "train_pair")
    assert sorted(pairs) == ["gpu-node-1", "gpu-node-2"]  # one replica per node
    seen: list[str] = []
    for svc in ("llm_api", "train_numa", "train_pair"):
        for uuids in devices_of(swarm, svc).values():
            seen += uuids
    assert len(seen) == len(set(seen)), "a GPU was handed out twice"


def test_memory_floor_and_pending_reason(swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    deploy(swarm, daemon["tmp"], "big", {"m": {"labels": {"swarmgpu.gpus": "1",
                                                          "swarmgpu.gpu-memory": "80GiB"}}})
    time.sleep(6)
    p = plan(daemon)["big_m"]
    assert p["status"] == "pending" and "best node" in p["reason"], p
    assert tasks_running(swarm, "big_m") == []
    audit = run_cli("audit", "--config", str(daemon["cfg"]), "--json")
    assert any(f["kind"] == "pending" and f["subject"] == "big_m"
               for f in json.loads(audit.stdout)["findings"])
    swarm.remove_stack("big")


def test_mig_request_gets_mig_device(swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    deploy(swarm, daemon["tmp"], "mig", {"s": {"labels": {"swarmgpu.mig": "1g.5gb"}}})
    wait_running(swarm, "mig_s", 1)
    ((host, uuids),) = devices_of(swarm, "mig_s").items()
    migs = {m.uuid: m.profile for g in DGX_A100.facts().gpus for m in g.mig_devices}
    assert host == "gpu-node-1" and len(uuids) == 1 and migs[uuids[0]] == "1g.5gb"


def test_redeploy_kill_and_daemon_restart_keep_devices(
    swarm: SwarmCluster, daemon: dict[str, Any]
) -> None:
    api = swarm.client(swarm.manager).api
    before_dev = devices_of(swarm, "llm_api")
    before_tasks = {t["ID"] for t in tasks_running(swarm, "llm_api")}
    writes0 = placement_writes("llm_api")
    # Re-deploy the unchanged stack: its labels lose the device lists, nothing restarts.
    swarm.cli(swarm.manager, "stack", "deploy", "--resolve-image", "never", "-c",
              str(daemon["tmp"] / "llm.yml"), "llm")
    swarm.wait_for(lambda: any(k.startswith("swarmgpu.devices.") for k in
                               api.inspect_service("llm_api")["Spec"]["Labels"]),
                   30, "device labels restored")
    time.sleep(5)  # a few more daemon cycles: no further writes

    def one_write() -> None:  # its log line follows the labels waited for: waited for too
        writes_by_daemon = placement_writes("llm_api") - writes0
        assert writes_by_daemon == 1, f"{writes_by_daemon} daemon writes after a re-deploy"

    eventually(one_write, 15, "the daemon's one placement write logged")
    assert {t["ID"] for t in tasks_running(swarm, "llm_api")} == before_tasks
    # Kill the container by hand: the replacement gets the same devices.
    (t,) = tasks_running(swarm, "llm_api")
    node = swarm.node(t["NodeID"])
    swarm.client(node).api.kill(t["Status"]["ContainerStatus"]["ContainerID"])
    swarm.wait_for(lambda: (lambda ts: ts and ts[0]["ID"] not in before_tasks)(
        tasks_running(swarm, "llm_api")), 60, "replacement task")
    assert devices_of(swarm, "llm_api") == before_dev
    # Restart the daemon: nothing is written, no task restarts.
    stop(daemon["proc"])
    ids = {s: {t["ID"] for t in tasks_running(swarm, s)}
           for s in ("llm_api", "train_numa", "train_pair", "mig_s")}
    versions = {s: api.inspect_service(s)["Version"]["Index"] for s in ids}
    node_versions = {n["ID"]: n["Version"]["Index"] for n in api.nodes()}
    daemon["start"]()
    time.sleep(8)  # several cycles
    assert {s: api.inspect_service(s)["Version"]["Index"] for s in ids} == versions
    assert {n["ID"]: n["Version"]["Index"] for n in api.nodes()} == node_versions
    assert {s: {t["ID"] for t in tasks_running(swarm, s)} for s in ids} == ids
    assert daemon["proc"].poll() is None


def test_a_service_whose_request_is_removed_runs_again_without_a_gpu(
    swarm: SwarmCluster, daemon: dict[str, Any]
) -> None:
    """``docker service update --label-rm swarmgpu.gpu-fraction``: the daemon releases
    its GPU and takes its gate, device map and share lines out of the spec; Swarm runs
    its task again, told no GPU (void). Before: its gate closed, its task stopped and
    was never placed again (its constraint matched no node)."""
    deploy(swarm, daemon["tmp"], "bare", {"app": {
        "labels": {"swarmgpu.gpu-fraction": "0.5"}, "env": ["MODEL=x"]}})
    (first,) = wait_running(swarm, "bare_app", 1)
    assert devices_of(swarm, "bare_app")
    swarm.cli(swarm.manager, "service", "update", "-d", "--label-rm",
              "swarmgpu.gpu-fraction", "bare_app")
    api = swarm.client(swarm.manager).api

    def ungated() -> bool:
        spec = api.inspect_service("bare_app")["Spec"]
        cons = (spec["TaskTemplate"].get("Placement") or {}).get("Constraints") or []
        return not [c for c in cons if "swarmgpu" in c] and not [
            k for k in spec.get("Labels") or {} if k.startswith("swarmgpu.")]

    swarm.wait_for(ungated, 30, "swarmgpu's gate and labels out of bare_app's spec")
    (t,) = wait_running(swarm, "bare_app", 1, each=lambda t: t["ID"] != first["ID"],
                        what=" (a new one)")
    env = container_env(swarm, t)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void" and env["MODEL"] == "x", env
    assert "SWARMGPU_GPU_FRACTION" not in env
    assert not any(k.endswith(".bare_app") for n in api.nodes()
                   for k in n["Spec"].get("Labels") or {})
    swarm.remove_stack("bare")


def test_removing_stacks_releases_gpus(swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    for stack in ("llm", "train", "mig"):
        swarm.remove_stack(stack)
    api = swarm.client(swarm.manager).api

    def released() -> bool:
        return not any(k.startswith(("swarmgpu.assign.", "swarmgpu.service."))
                       for n in api.nodes() for k in (n["Spec"].get("Labels") or {}))

    swarm.wait_for(released, 30, "gates and ledger released")


def test_cpu_aware_placement_and_truthful_pending(
    swarm: SwarmCluster, daemon: dict[str, Any]
) -> None:
    """The issue's case on the real swarm: X runs on gpu-node-1 and reserves 1.5 of its
    2 CPUs; Y (1 GPU, 1 CPU) must not get devices there (Swarm would never run it) but
    on gpu-node-2, and run. Z, pinned to gpu-node-1 with 1 CPU, is reported pending
    with the CPU reason, not 'placed'."""
    api = swarm.client(swarm.manager).api
    ncpu = {swarm.node(h).hostname: api.inspect_node(swarm.node(h).node_id)["Description"]
            ["Resources"]["NanoCPUs"] for h in ("gpu-node-1", "gpu-node-2")}
    x_cpus = ncpu["gpu-node-1"] / 1e9 * 0.75
    deploy(swarm, daemon["tmp"], "cpu", {
        "x": {"labels": {"swarmgpu.gpus": "1"},
              "constraints": ["node.hostname==gpu-node-1"], "cpus": x_cpus}})
    (tx,) = wait_running(swarm, "cpu_x", 1)
    assert swarm.node(tx["NodeID"]).hostname == "gpu-node-1"
    y_cpus = ncpu["gpu-node-1"] / 1e9 * 0.5
    deploy(swarm, daemon["tmp"], "cpu", {
        "x": {"labels": {"swarmgpu.gpus": "1"},
              "constraints": ["node.hostname==gpu-node-1"], "cpus": x_cpus},
        "y": {"labels": {"swarmgpu.gpus": "1"}, "cpus": y_cpus},
        "z": {"labels": {"swarmgpu.gpus": "1"},
              "constraints": ["node.hostname==gpu-node-1"], "cpus": y_cpus}})
    (ty,) = wait_running(swarm, "cpu_y", 1)
    assert swarm.node(ty["NodeID"]).hostname == "gpu-node-2"
    p = plan(daemon)
    assert p["cpu_y"]["status"] == "placed" and p["cpu_y"]["placements"][0]["node"] == \
        "gpu-node-2"
    assert p["cpu_z"]["status"] == "pending", p["cpu_z"]
    assert "CPU" in p["cpu_z"]["reason"], p["cpu_z"]
    assert tasks_running(swarm, "cpu_z") == []
    swarm.remove_stack("cpu")


def test_workload_model_is_kept_in_swarm_and_reloaded(
    swarm: SwarmCluster, daemon: dict[str, Any]
) -> None:
    api = swarm.client(swarm.manager).api
    key = f"{P}state.workload"
    stored = swarm.wait_for(
        lambda: (api.inspect_swarm()["Spec"].get("Labels") or {}).get(key), 30,
        "the workload model stored on the swarm object")
    doc = json.loads(stored)
    # stored at the first change, then at most once a minute while it learns
    assert doc["v"] == 1 and doc["seen"] >= 1
    # A restarted daemon (or a new leader) and the one-shot commands start from it.
    stop(daemon["proc"])
    daemon["start"]()
    w = json.loads(run_cli("plan", "--config", str(daemon["cfg"]), "--json").stdout)["workload"]
    assert w["source"] == "learned" and w["tasks_seen"] >= doc["seen"], w
    # Swarm's other settings survive the label writes.
    spec = api.inspect_swarm()["Spec"]
    assert spec["Orchestration"]["TaskHistoryRetentionLimit"] >= 1
