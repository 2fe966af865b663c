"""Compose's GPU syntax as written, on the real test swarm (issue 23, point 1): the
`deploy.resources.reservations.devices` request every vLLM/Ollama compose file carries
is refused by `docker stack deploy`; through `swarmgpu render` it deploys, and the
task runs on exactly one GPU, pinned in NVIDIA_VISIBLE_DEVICES, by the real daemon."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from gpu_nodes import GPU_NODES, LOGS, agents, cfg_file, start_daemon, stop
from swarm_harness import SwarmCluster
from test_converge_swarm import deploy_file, remove_stacks, render
from test_placement_swarm import container_env, plan, wait_running

pytestmark = pytest.mark.swarm
_ = agents  # fixture, used by name
P = "swarmgpu."
LOG = LOGS / "render-compose-daemon.log"

COMPOSE = {"version": "3.8", "services": {"llm": {
    "image": "local/busybox:latest", "command": ["sleep", "3600"],
    "deploy": {
        "resources": {"reservations": {"memory": "16M", "devices": [
            {"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]}},
        "restart_policy": {"condition": "any", "delay": "1s"}}}}}


@pytest.fixture(scope="module")
def daemon(swarm: SwarmCluster, agents: dict[str, Any],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("render-compose")
    cfg = cfg_file(tmp, swarm, sync={"interval_s": 2})
    proc = start_daemon(swarm, cfg, LOG)
    yield {"cfg": cfg, "tmp": tmp}
    stop(proc)


def test_compose_devices_request_renders_deploys_and_runs_on_one_gpu(
        swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    src = daemon["tmp"] / "as-written.yml"
    src.write_text(json.dumps(COMPOSE))
    refused = swarm.cli(swarm.manager, "stack", "deploy", "--resolve-image", "never",
                        "-c", str(src), "cv", check=False)
    assert refused.returncode != 0 and "devices" in refused.stderr, refused.stderr

    out = render(daemon, "cv", json.dumps(COMPOSE))
    text = out.read_text()
    assert "devices became swarmgpu.gpus" in text.split("services:")[0]  # the comment
    svc = yaml.safe_load(text)["services"]["llm"]
    assert svc["deploy"]["labels"][f"{P}gpus"] == "1"
    assert "devices" not in svc["deploy"]["resources"]["reservations"]

    deploy_file(swarm, out, "cv")
    (task,) = wait_running(swarm, "cv_llm", 1, 90)
    host = swarm.node(task["NodeID"]).hostname
    visible = container_env(swarm, task)["NVIDIA_VISIBLE_DEVICES"].split(",")
    print(f"\ncv_llm runs on {host} with NVIDIA_VISIBLE_DEVICES={','.join(visible)}")
    assert len(visible) == 1 and visible[0] in GPU_NODES[host].uuids()
    p = plan(daemon)["cv_llm"]
    assert p["status"] == "placed"
    assert [pl["node"] for pl in p["placements"]] == [host]
    remove_stacks(swarm, "cv")
