"""A service without a GPU placed by swarmgpu (``swarmgpu.gpus: "0"``) on the real test
swarm: the daemon opens its gate on the node its planner chose by the CPU it reserves,
Swarm runs its task there told no GPU, its CPU is counted against the next one, and
dropping the label gives it back to Swarm with the owner's own lines kept; on the
swarm's CPU-only node (mgr-1: no agent, no GPU resources) first, where it may run
(docs/requests.md, "A service without a GPU"; the pure side: tests/test_cpu_placed.py,
tests/test_cpu_nodes.py). The first two tests keep theirs on the GPU nodes by a
constraint of their own (``node.role==worker``).
"""

from __future__ import annotations

from typing import Any

import pytest
from support.daemon import ModuleDaemon
from support.swarm_harness import SwarmCluster
from support.swarm_services import (
    P,
    container_env,
    deploy,
    plan,
    tasks_running,
    wait_running,
)

from swarmgpu.manager.placement import gate_constraint

pytestmark = pytest.mark.swarm

DAEMON = ModuleDaemon("cpu-placed-daemon.log", {"sync": {"interval_s": 2}},
                      remove_stacks=("cpu0",))
GPU_HOSTS = ("gpu-node-1", "gpu-node-2")
WORKERS = "node.role==worker"  # the GPU nodes: mgr-1, the manager, has no agent


def node_labels(swarm: SwarmCluster) -> dict[str, dict[str, str]]:
    api = swarm.client(swarm.manager).api
    return {n["Description"]["Hostname"]: n["Spec"].get("Labels") or {} for n in api.nodes()}


def ours(labels: dict[str, dict[str, str]], service: str) -> dict[str, dict[str, str]]:
    """hostname -> swarmgpu's gate and ledger labels for ``service`` there."""
    keys = (f"{P}service.{service}", f"{P}assign.{service}")
    return {h: {k: v for k, v in ls.items() if k in keys}
            for h, ls in labels.items() if any(k in keys for k in ls)}


def test_the_cpu_only_service_runs_behind_its_gate_on_the_planners_node_and_counts(
    swarm: SwarmCluster, daemon: dict[str, Any]
) -> None:
    """(1) ``a`` (gpus 0, 3/4 of a node's CPUs) gets its gate and an empty ledger entry
    on the node the plan names, and Swarm runs its task there with
    NVIDIA_VISIBLE_DEVICES=void. (2) ``b`` (half a node's CPUs) goes to the other GPU
    node; ``c`` (the same, pinned to a's node) is pending with CPU named and runs nowhere:
    a's reservation is counted."""
    api = swarm.client(swarm.manager).api
    ncpu = {h: api.inspect_node(swarm.node(h).node_id)["Description"]["Resources"]
            ["NanoCPUs"] / 1e9 for h in GPU_HOSTS}
    assert ncpu["gpu-node-1"] == ncpu["gpu-node-2"], ncpu
    a = {"labels": {f"{P}gpus": "0", "team": "x"},
         "constraints": ["node.platform.os==linux", WORKERS],
         "env": ["MODEL=x"], "cpus": ncpu["gpu-node-1"] * 0.75}
    deploy(swarm, daemon["tmp"], "cpu0", {"a": a})
    (ta,) = wait_running(swarm, "cpu0_a", 1)
    on = swarm.node(ta["NodeID"]).hostname
    p = plan(daemon)["cpu0_a"]
    assert p["status"] == "placed", p
    (pl,) = p["placements"]
    assert pl["node"] == on and on in GPU_HOSTS, (pl, on)
    assert ours(node_labels(swarm), "cpu0_a") == {
        on: {f"{P}service.cpu0_a": "true", f"{P}assign.cpu0_a": ""}}
    env = container_env(swarm, ta)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void" and env["MODEL"] == "x", env

    other = next(h for h in GPU_HOSTS if h != on)
    half = ncpu[on] * 0.5
    deploy(swarm, daemon["tmp"], "cpu0", {
        "a": a,
        "b": {"labels": {f"{P}gpus": "0"}, "constraints": [WORKERS], "cpus": half},
        "c": {"labels": {f"{P}gpus": "0"}, "constraints": [f"node.hostname=={on}"],
              "cpus": half}})
    (tb,) = wait_running(swarm, "cpu0_b", 1)
    assert swarm.node(tb["NodeID"]).hostname == other
    p = plan(daemon)
    assert p["cpu0_b"]["status"] == "placed" and p["cpu0_b"]["placements"][0]["node"] == other
    assert p["cpu0_c"]["status"] == "pending", p["cpu0_c"]
    assert "CPU" in p["cpu0_c"]["reason"], p["cpu0_c"]
    assert tasks_running(swarm, "cpu0_c") == []
    assert not ours(node_labels(swarm), "cpu0_c")
    assert [t["ID"] for t in tasks_running(swarm, "cpu0_a")] == [ta["ID"]]  # a untouched


def test_dropping_the_label_releases_the_gate_and_keeps_the_owners_lines(
    swarm: SwarmCluster, daemon: dict[str, Any]
) -> None:
    """(3) ``--label-rm swarmgpu.gpus``: the gate and ledger entry leave the node, the
    gate constraint leaves the spec; the owner's label, constraint and env stay, the
    device line is the void one, and Swarm runs a new task (anywhere it likes)."""
    api = swarm.client(swarm.manager).api
    (first,) = tasks_running(swarm, "cpu0_a")
    b_tasks = [t["ID"] for t in tasks_running(swarm, "cpu0_b")]
    swarm.cli(swarm.manager, "service", "update", "-d", "--label-rm", f"{P}gpus", "cpu0_a")

    def released() -> bool:
        spec = api.inspect_service("cpu0_a")["Spec"]
        cons = (spec["TaskTemplate"].get("Placement") or {}).get("Constraints") or []
        return (gate_constraint(P, "cpu0_a") not in cons
                and not ours(node_labels(swarm), "cpu0_a"))

    swarm.wait_for(released, 30, "cpu0_a's gate out of its spec and off its node")
    spec = api.inspect_service("cpu0_a")["Spec"]
    assert spec["TaskTemplate"]["Placement"]["Constraints"] == ["node.platform.os==linux",
                                                                 WORKERS]
    labels = spec["Labels"]
    assert labels["team"] == "x" and labels["com.docker.stack.namespace"] == "cpu0"
    assert not [k for k in labels if k.startswith(P)], labels
    env = spec["TaskTemplate"]["ContainerSpec"]["Env"]
    assert "MODEL=x" in env and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in env, env
    assert [e for e in env if e.startswith("NVIDIA_VISIBLE_DEVICES=")] == \
        ["NVIDIA_VISIBLE_DEVICES=void"], env
    (t,) = wait_running(swarm, "cpu0_a", 1, each=lambda t: t["ID"] != first["ID"],
                        what=" (a new one)")
    got = container_env(swarm, t)
    assert got["NVIDIA_VISIBLE_DEVICES"] == "void" and got["MODEL"] == "x", got
    assert not plan(daemon).get("cpu0_a", {}).get("placements"), plan(daemon).get("cpu0_a")
    assert [t["ID"] for t in tasks_running(swarm, "cpu0_b")] == b_tasks  # b untouched

    # The CPU a held on its node is free for c, waiting for that node, unless Swarm put
    # a's new task back there (then c waits on its reservation, as Swarm would).
    on = swarm.node(first["NodeID"]).hostname

    def c_follows() -> bool:
        a_on = {swarm.node(x["NodeID"]).hostname for x in tasks_running(swarm, "cpu0_a")}
        c = plan(daemon)["cpu0_c"]
        c_on = [swarm.node(x["NodeID"]).hostname for x in tasks_running(swarm, "cpu0_c")]
        if a_on == {on}:
            return c["status"] == "pending" and "CPU" in c["reason"] and not c_on
        return c["status"] == "placed" and c_on == [on]

    swarm.wait_for(c_follows, 60, f"cpu0_c running on {on}, or pending where a runs")


def test_a_service_of_no_gpu_goes_to_the_cpu_only_node_first(
    swarm: SwarmCluster, daemon: dict[str, Any]
) -> None:
    """(4) ``d`` (gpus 0, a quarter of a node's CPUs, no constraint of its own) goes to
    mgr-1, the node without an agent that Swarm alone describes: its gate and an empty
    ledger entry there, Swarm runs its task there told no GPU. Before: CPU-only nodes
    were never chosen, it went to a GPU node."""
    api = swarm.client(swarm.manager).api
    mgr = swarm.manager.hostname
    ncpu = api.inspect_node(swarm.manager.node_id)["Description"]["Resources"]["NanoCPUs"] / 1e9
    deploy(swarm, daemon["tmp"], "cpu0", {"d": {"labels": {f"{P}gpus": "0"},
                                                "cpus": ncpu * 0.25}})
    (td,) = wait_running(swarm, "cpu0_d", 1)
    assert swarm.node(td["NodeID"]).hostname == mgr, td
    p = plan(daemon)["cpu0_d"]
    assert p["status"] == "placed" and p["placements"][0]["node"] == mgr, p
    assert p["placements"][0]["uuids"] == [], p
    assert ours(node_labels(swarm), "cpu0_d") == {
        mgr: {f"{P}service.cpu0_d": "true", f"{P}assign.cpu0_d": ""}}
    assert container_env(swarm, td)["NVIDIA_VISIBLE_DEVICES"] == "void"
