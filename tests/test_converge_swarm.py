"""`swarmgpu render` sees what Swarm checks, and the daemon converges what it rendered,
on the real test swarm (issue 20, finding 4): stacks rendered by the real CLI, deployed
with `docker stack deploy` as separate stacks, the real daemon placing them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.daemon import ModuleDaemon
from support.gpu_nodes import (
    LOGS,
    eventually,
    remove_stacks,
    wait_log,
)
from support.swarm_harness import SwarmCluster
from support.swarm_services import deploy_file, plan, render, wait_running

pytestmark = pytest.mark.swarm
P = "swarmgpu."
LOG = LOGS / "converge-daemon.log"


DAEMON = ModuleDaemon(LOG.name, {"sync": {"interval_s": 2}})


def node_cpus(swarm: SwarmCluster, hostname: str) -> float:
    api = swarm.client(swarm.manager).api
    return float(api.inspect_node(swarm.node(hostname).node_id)["Description"]["Resources"]
                 ["NanoCPUs"]) / 1e9


def gpu_stack(name: str, cpus: float, constraints: tuple[str, ...] = ()) -> str:
    """A plain compose file, as a user writes it: a 1-GPU request and a CPU reservation,
    no gate or env lines (render adds them)."""
    svc: dict[str, Any] = {
        "image": "local/busybox:latest", "command": ["sleep", "3600"],
        "deploy": {"labels": {f"{P}gpus": "1"},
                   "resources": {"reservations": {"cpus": f"{cpus:.2f}", "memory": "16M"}},
                   "restart_policy": {"condition": "any", "delay": "1s"}}}
    if constraints:
        svc["deploy"]["placement"] = {"constraints": list(constraints)}
    return json.dumps({"version": "3.8", "services": {name: svc}})


def hog(swarm: SwarmCluster, tmp: Path, hostname: str, cpus: float) -> None:
    """A CPU-only service pinned to ``hostname`` that reserves ``cpus`` of it."""
    f = tmp / "hog.yml"
    f.write_text(json.dumps({"version": "3.8", "services": {"cpu": {
        "image": "local/busybox:latest", "command": ["sleep", "3600"],
        "deploy": {"placement": {"constraints": [f"node.hostname=={hostname}"]},
                   "resources": {"reservations": {"cpus": f"{cpus:.2f}"}}}}}}))
    deploy_file(swarm, f, "hog")
    wait_running(swarm, "hog_cpu", 1)


def rendered_nodes(path: Path, swarm: SwarmCluster) -> list[str]:
    """Hostnames the rendered file wrote device lists for."""
    text = path.read_text()
    return sorted(h for h in ("gpu-node-1", "gpu-node-2")
                  if f"{P}devices.{swarm.node(h).node_id}" in text)


def test_render_sees_the_cpu_another_stack_reserves(swarm: SwarmCluster,
                                                    daemon: dict[str, Any]) -> None:
    """The issue's X/Y case through render, as separate stacks: X is pinned to
    gpu-node-1 and reserves 3/4 of its CPUs; Y (1 GPU, 1/2 a node's CPUs) is rendered
    and deployed after it, and must run on gpu-node-2 within 60 s."""
    cpus = node_cpus(swarm, "gpu-node-1")
    x = render(daemon, "x", gpu_stack("x", cpus * 0.75, ("node.hostname==gpu-node-1",)))
    deploy_file(swarm, x, "x")
    (tx,) = wait_running(swarm, "x_x", 1, 60)
    assert swarm.node(tx["NodeID"]).hostname == "gpu-node-1"
    y = render(daemon, "y", gpu_stack("y", cpus * 0.5))
    assert rendered_nodes(y, swarm) == ["gpu-node-2"], y.read_text()
    deploy_file(swarm, y, "y")
    (ty,) = wait_running(swarm, "y_y", 1, 60)
    assert swarm.node(ty["NodeID"]).hostname == "gpu-node-2"  # (wait_running's 60 s)
    p = plan(daemon)
    assert p["y_y"]["status"] == "placed" and p["y_y"]["placements"][0]["node"] == "gpu-node-2"
    remove_stacks(swarm, "y", "x")


def test_rendered_service_whose_node_lost_the_cpu_is_replaced_and_runs(
        swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    """Rendered onto one GPU node; before it is deployed, another service takes that
    node's CPU. The daemon moves it to the other GPU node (it logs why) and it runs."""
    cpus = node_cpus(swarm, "gpu-node-1")
    r = render(daemon, "r", gpu_stack("r", cpus * 0.5))
    (first,) = rendered_nodes(r, swarm)
    other = "gpu-node-2" if first == "gpu-node-1" else "gpu-node-1"
    hog(swarm, daemon["tmp"], first, cpus * 0.75)
    deploy_file(swarm, r, "r")
    (tr,) = wait_running(swarm, "r_r", 1, 60)
    assert swarm.node(tr["NodeID"]).hostname == other
    wait_log(LOG, "Swarm cannot run its task where its GPUs are", "re-placed on")

    def planned_on_other() -> None:
        p = plan(daemon)
        assert p["r_r"]["status"] == "placed" and p["r_r"]["placements"][0]["node"] == other

    eventually(planned_on_other, 30, f"plan places r_r on {other}")
    # The back-off record, written with the move, goes once the replica runs.
    api = swarm.client(swarm.manager).api
    swarm.wait_for(lambda: f"{P}state.replaced" not in api.inspect_service("r_r")["Spec"]
                   ["Labels"], 30, "the re-placement record removed")
    remove_stacks(swarm, "hog")


def test_drained_node_re_places_the_running_service(swarm: SwarmCluster,
                                                    daemon: dict[str, Any]) -> None:
    """The service of the test above runs; its node is drained: the daemon re-places
    it on the other GPU node, where it runs again."""
    (tr,) = wait_running(swarm, "r_r", 1, 30)
    here = swarm.node(tr["NodeID"]).hostname
    other = "gpu-node-2" if here == "gpu-node-1" else "gpu-node-1"
    node_id = swarm.node(here).node_id
    swarm.cli(swarm.manager, "node", "update", "--availability", "drain", node_id)
    try:
        (moved,) = wait_running(
            swarm, "r_r", 1, 60,
            each=lambda t: swarm.node(t["NodeID"]).hostname == other, what=f" on {other}")
        assert moved["ID"] != tr["ID"]
        wait_log(LOG, "is drain")
    finally:
        swarm.cli(swarm.manager, "node", "update", "--availability", "active", node_id)
        remove_stacks(swarm, "r")
