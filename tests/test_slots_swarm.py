"""Several replicas on one node, on the real test swarm: the daemon packs the replicas of
a service that cannot be spread on the one node that holds them all, and every replica's
container (``docker inspect``) gets its own GPUs through ``.Task.Slot``; a service that
can be spread still gets one replica per node, with the older per-node template too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.daemon import ModuleDaemon
from support.gpu_nodes import RTX4090, run_cli
from support.swarm_harness import SwarmCluster
from support.swarm_services import container_env, removed_tasks_stopped, tasks_running
from support.swarm_services import deploy as placement_deploy
from support.swarm_services import wait_running as placement_wait_running

from swarmgpu.manager.placement import env_template, env_template_per_node, gate_constraint

pytestmark = pytest.mark.swarm
P = "swarmgpu."


def stack(name: str, services: dict[str, dict[str, Any]]) -> str:
    out: dict[str, Any] = {"version": "3.8", "services": {}}
    for svc, spec in services.items():
        out["services"][svc] = {
            "image": "local/busybox:latest",
            "command": ["sleep", "3600"],
            "environment": [spec.get("template", env_template(P)),
                            "CUDA_DEVICE_ORDER=PCI_BUS_ID"],
            "deploy": {
                "replicas": spec["replicas"],
                "labels": spec["labels"],
                # as `swarmgpu render` wrote it before packing existed
                "placement": {"constraints": [gate_constraint(P, f"{name}_{svc}"),
                                              *spec.get("constraints", [])],
                              "max_replicas_per_node": 1},
                "restart_policy": {"condition": "any", "delay": "1s"},
            },
        }
    return json.dumps(out, indent=1)


DAEMON = ModuleDaemon("slots-daemon.log", {"sync": {"interval_s": 2}})


def deploy(swarm: SwarmCluster, tmp: Path, name: str, services: dict[str, Any]) -> None:
    placement_deploy(swarm, tmp, name, services, render=stack)


def wait_running(swarm: SwarmCluster, service: str, n: int, timeout: float = 90
                 ) -> list[dict[str, Any]]:
    # every task that runs is one created after its device map (no "void" left)
    return placement_wait_running(swarm, service, n, timeout,
                                  each=lambda t: env_of(swarm, t)[0] != "void",
                                  what=" with GPUs")


def env_of(swarm: SwarmCluster, task: dict[str, Any]) -> tuple[str, str]:
    """(NVIDIA_VISIBLE_DEVICES, hostname) of the task's container, by `docker inspect`."""
    return (container_env(swarm, task)["NVIDIA_VISIBLE_DEVICES"],
            swarm.node(task["NodeID"]).hostname)


def replicas_seen(swarm: SwarmCluster, service: str) -> dict[int, tuple[str, str]]:
    """slot -> (devices, hostname) of every running replica."""
    return {t["Slot"]: env_of(swarm, t) for t in tasks_running(swarm, service)}


def test_packed_replicas_get_distinct_gpus_and_spread_stays_spread(
        swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    deploy(swarm, daemon["tmp"], "pk", {
        # four replicas that only gpu-node-2 may run: they cannot be spread
        "inf": {"replicas": 4, "labels": {"swarmgpu.gpus": "1"},
                "constraints": ["node.hostname==gpu-node-2"]},
        # two replicas with room on both nodes, deployed with the older template
        "two": {"replicas": 2, "labels": {"swarmgpu.gpus": "1"},
                "template": env_template_per_node(P)},
    })
    wait_running(swarm, "pk_inf", 4)
    wait_running(swarm, "pk_two", 2)
    packed = replicas_seen(swarm, "pk_inf")
    print("\npk_inf replicas (slot -> NVIDIA_VISIBLE_DEVICES, node):")
    for slot, (dev, host) in sorted(packed.items()):
        print(f"  slot {slot}: {dev} on {host}")
    assert sorted(packed) == [1, 2, 3, 4]
    assert {host for _, host in packed.values()} == {"gpu-node-2"}
    devs = [dev for dev, _ in packed.values()]
    assert all("," not in d for d in devs) and len(set(devs)) == 4, devs
    assert set(devs) <= set(RTX4090.uuids())
    spec = swarm.client(swarm.manager).api.inspect_service("pk_inf")["Spec"]
    labels = spec["Labels"]
    node_id = swarm.node("gpu-node-2").node_id
    assert {k: v for k, v in labels.items() if k.startswith(f"{P}devices.")} == {
        f"{P}devices.{node_id}.{slot}": dev for slot, (dev, _) in packed.items()}
    # 1 (one per node) became 4: no more tasks on the node than slot lists
    assert spec["TaskTemplate"]["Placement"].get("MaxReplicas") == 4
    plan = json.loads(run_cli("plan", "--config", str(daemon["cfg"]), "--json").stdout)
    by = {s["name"]: s for s in plan["services"]}
    assert by["pk_inf"]["status"] == "placed" and "packed on gpu-node-2" in by["pk_inf"]["packed"]
    assert by["pk_two"]["packed"] is None
    spread = replicas_seen(swarm, "pk_two")
    print("pk_two replicas (older per-node template):")
    for slot, (dev, host) in sorted(spread.items()):
        print(f"  slot {slot}: {dev} on {host}")
    assert sorted(host for _, host in spread.values()) == ["gpu-node-1", "gpu-node-2"]
    every = devs + [dev for dev, _ in spread.values()]
    assert len(every) == len(set(every)), "a GPU was handed out twice"
    status = run_cli("status", "--config", str(daemon["cfg"]))
    assert "replicas packed on one node:" in status.stdout and "slot 4" in status.stdout

    # Scale down: the replicas left keep their GPUs and are not restarted.
    before = {t["ID"] for t in tasks_running(swarm, "pk_inf")}
    swarm.cli(swarm.manager, "service", "scale", "pk_inf=2")
    swarm.wait_for(lambda: len(tasks_running(swarm, "pk_inf")) == 2 or None, 60, "scaled to 2")
    left = replicas_seen(swarm, "pk_inf")
    assert {t["ID"] for t in tasks_running(swarm, "pk_inf")} <= before
    assert all(packed[slot] == v for slot, v in left.items())
    api = swarm.client(swarm.manager).api
    swarm.wait_for(lambda: sorted(k for k in api.inspect_service("pk_inf")["Spec"]["Labels"]
                                  if k.startswith(f"{P}devices."))
                   == sorted(f"{P}devices.{node_id}.{s}" for s in left) or None,
                   30, "the gone slots' lists removed")
    print(f"after scale to 2: {sorted(left.items())}")
    swarm.wait_for(lambda: api.inspect_service("pk_inf")["Spec"]["TaskTemplate"]["Placement"]
                   .get("MaxReplicas") == 2 or None, 30, "MaxReplicas 2")

    # Scale up again: the new slot gets a GPU of its own on the same node (the running
    # replicas restart once, rolling, so that every task carries the new map).
    swarm.cli(swarm.manager, "service", "scale", "-d", "pk_inf=3")
    wait_running(swarm, "pk_inf", 3)
    swarm.wait_for(lambda: len({d for d, _ in replicas_seen(swarm, "pk_inf").values()}) == 3
                   or None, 60, "three distinct device lists")
    up = replicas_seen(swarm, "pk_inf")
    print(f"after scale to 3: {sorted(up.items())}")
    assert sorted(up) == [1, 2, 3] and {h for _, h in up.values()} == {"gpu-node-2"}
    assert all(up[k] == left[k] for k in left)  # slots 1 and 2 kept their GPUs
    spread = [dev for dev, _ in replicas_seen(swarm, "pk_two").values()]
    assert not {d for d, _ in up.values()} & set(spread)
    swarm.remove_stack("pk")


def test_service_from_before_packing_is_packed_where_its_replica_runs(
        swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    """Deployed one per node with the older template (as before packing existed, here
    through pack: never): one replica runs, two wait. Once packing is allowed the daemon
    packs it on that node: the per-slot template replaces the older one, the replica that
    ran keeps its slot and GPU, the others get GPUs of their own."""
    svc = {"replicas": 3, "labels": {"swarmgpu.gpus": "1", "swarmgpu.pack": "never"},
           "constraints": ["node.hostname==gpu-node-2"], "template": env_template_per_node(P)}
    deploy(swarm, daemon["tmp"], "cv", {"old": svc})
    (t,) = wait_running(swarm, "cv_old", 1)
    first = env_of(swarm, t)
    print(f"\ncv_old, spread (pack: never): slot {t['Slot']}: {first}")
    deploy(swarm, daemon["tmp"], "cv", {"old": {**svc, "labels": {"swarmgpu.gpus": "1"}}})
    wait_running(swarm, "cv_old", 3)
    swarm.wait_for(lambda: len({d for d, _ in replicas_seen(swarm, "cv_old").values()}) == 3
                   or None, 60, "three distinct device lists")
    seen = replicas_seen(swarm, "cv_old")
    print("cv_old, packed:")
    for slot, (dev, host) in sorted(seen.items()):
        print(f"  slot {slot}: {dev} on {host}")
    assert seen[t["Slot"]] == first
    assert {h for _, h in seen.values()} == {"gpu-node-2"}
    spec = swarm.client(swarm.manager).api.inspect_service("cv_old")["Spec"]
    assert env_template(P) in spec["TaskTemplate"]["ContainerSpec"]["Env"]
    swarm.remove_stack("cv")


def test_eight_replicas_of_one_gpu_fill_the_8gpu_box(
        swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    """The issue's case: 8 replicas x 1 GPU, no constraint. Two nodes cannot take one
    each of eight; the RTX 4090 box (8 GPUs; the DGX has 7 whole ones) takes them all."""
    api = swarm.client(swarm.manager).api
    def held() -> list[str]:
        return [k for n in api.nodes() for k in (n["Spec"].get("Labels") or {})
                if k.startswith(f"{P}assign.")]

    try:
        swarm.wait_for(lambda: not held() or None, 60, "earlier stacks' GPUs released")
    except Exception as exc:  # name what still holds GPUs (another module's leftovers?)
        raise AssertionError(f"{exc}: still held: {held()}") from exc
    removed_tasks_stopped(swarm)  # their GPUs are held while their tasks stop
    deploy(swarm, daemon["tmp"], "eight", {"inf": {"replicas": 8,
                                                   "labels": {"swarmgpu.gpus": "1"}}})
    wait_running(swarm, "eight_inf", 8, timeout=120)
    seen = replicas_seen(swarm, "eight_inf")
    print("\neight_inf replicas:")
    for slot, (dev, host) in sorted(seen.items()):
        print(f"  slot {slot}: {dev} on {host}")
    assert sorted(seen) == list(range(1, 9))
    assert {h for _, h in seen.values()} == {"gpu-node-2"}
    assert sorted(d for d, _ in seen.values()) == sorted(RTX4090.uuids())
    swarm.remove_stack("eight")
