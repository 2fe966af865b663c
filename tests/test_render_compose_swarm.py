"""Compose's GPU syntax as written, on the real test swarm (issue 23, point 1): the
`deploy.resources.reservations.devices` request every vLLM/Ollama compose file carries
is refused by `docker stack deploy`; through `swarmgpu render` it deploys, and the
task runs on exactly one GPU, pinned in NVIDIA_VISIBLE_DEVICES, by the real daemon."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest
import yaml
from support.daemon import ModuleDaemon
from support.gpu_nodes import GPU_NODES, LOGS, remove_stacks
from support.render_engines import STACKS, schema_errors
from support.swarm_harness import SwarmCluster
from support.swarm_services import container_env, deploy_file, plan, render, wait_running

pytestmark = pytest.mark.swarm
P = "swarmgpu."
LOG = LOGS / "render-compose-daemon.log"

COMPOSE = {"version": "3.8", "services": {"llm": {
    "image": "local/busybox:latest", "command": ["sleep", "3600"],
    "deploy": {
        "resources": {"reservations": {"memory": "16M", "devices": [
            {"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]}},
        "restart_policy": {"condition": "any", "delay": "1s"}}}}}


DAEMON = ModuleDaemon(LOG.name, {"sync": {"interval_s": 2}})


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


# Debian 12's docker.io CLI (20.10): the engines before 23.0 the README supports refuse a
# stack without `version` ("unsupported Compose file version: 1.0", docker/cli#2475).
# Named by path: /usr/local/bin/docker may be a newer client.
OLD_CLI = "/usr/bin/docker"


def test_rendered_stacks_deploy_with_a_docker_cli_before_23(
        swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    """Every example, a versionless stack, gpus: all and gpus: 2: rendered against the
    real swarm, the output fits docker/cli's schema 3.8 and `docker stack deploy` from a
    20.10 CLI creates every service, gated and labelled."""
    ver = subprocess.run([OLD_CLI, "--version"], capture_output=True, text=True,
                         check=True).stdout
    major = int(re.search(r"version (\d+)\.", ver).group(1))  # type: ignore[union-attr]
    assert major < 23, f"{OLD_CLI} is {ver.strip()}: this test needs a CLI before 23.0"

    as_written = daemon["tmp"] / "versionless.as-written.yml"
    as_written.write_text(STACKS["versionless"])
    refused = swarm.cli(swarm.manager, "stack", "deploy", "--resolve-image", "never", "-c",
                        str(as_written), "vl", check=False, docker=OLD_CLI)
    assert refused.returncode != 0
    assert "unsupported Compose file version: 1.0" in refused.stderr, refused.stderr

    for name, text in STACKS.items():
        out = render(daemon, name, text)
        doc = yaml.safe_load(out.read_text())
        assert doc["version"] == "3.8" and schema_errors(doc) == [], name
        res = swarm.cli(swarm.manager, "stack", "deploy", "--resolve-image", "never", "-c",
                        str(out), name, check=False, docker=OLD_CLI)
        assert res.returncode == 0, f"{name}: {res.stderr}"
        assert "unsupported" not in res.stderr.lower(), f"{name}: {res.stderr}"
        api = swarm.client(swarm.manager).api
        created = {s["Spec"]["Name"]: s["Spec"] for s in api.services()
                   if s["Spec"]["Name"].startswith(f"{name}_")}
        assert set(created) == {f"{name}_{svc}" for svc in doc["services"]}, name
        for full, spec in created.items():
            cons = spec["TaskTemplate"]["Placement"]["Constraints"]
            assert f"node.labels.{P}service.{full}==true" in cons, (full, cons)
            assert any(k.startswith(f"{P}devices.") for k in spec["Labels"]), full
        print(f"\n{name}: deployed by {ver.strip()}: {sorted(created)}")
        remove_stacks(swarm, name)
