"""``swarmgpu doctor``'s ``agents.service`` check on the real test swarm: the doctor, run
as on a manager (``--root /``, the engine found by DOCKER_HOST as docker's own CLI finds
it), lists Swarm's services, tasks and nodes itself (``cli.node``'s swarm read). A global
service named as the agents' service runs on the nodes labelled ``gpu=true``: ok; a
misspelled ``--agents-service``: fail, naming the key and the fix; a GPU-labelled node
without a task of it: warn, naming it; on a worker (no service list): skip. The pure
side: tests/test_doctor_agents_service.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.gpu_nodes import cfg_file, run_cli, swarmgpu_env
from support.swarm_harness import SwarmCluster, edit_node_labels
from support.swarm_services import tasks_running, wait_running

from swarmgpu.swarm.agentservice import gpu_labelled
from swarmgpu.swarm.client import SwarmClient

pytestmark = pytest.mark.swarm

AGENT = "swarmgpu_agent"  # the daemon's default agents.service (the shipped stack's)


def _doctor(swarm: SwarmCluster, host: str, *args: str) -> dict[str, Any]:
    """``agents.service`` of ``swarmgpu doctor --json`` run against ``host``'s engine."""
    env = swarmgpu_env(DOCKER_HOST=swarm.node(host).docker_host)
    res = run_cli("doctor", "--json", *args, env=env)
    # 1: other checks of this machine (no GPU here) fail; 2 would be the doctor's error
    assert res.returncode in (0, 1), res.stdout + res.stderr
    (check,) = [c for c in json.loads(res.stdout)["checks"] if c["id"] == "agents.service"]
    assert isinstance(check, dict)
    return check


@pytest.fixture(scope="module")
def gpu_hosts(swarm: SwarmCluster) -> Iterator[list[str]]:
    """The workers, and any node an earlier module left GPU-labelled, labelled
    ``gpu=true``; the agents' global service running on each of them. Their ``gpu``
    labels are put back as found after the module."""
    api = swarm.client(swarm.manager).api
    nodes = SwarmClient(swarm.manager.docker_host).nodes()
    worker_ids = {w.node_id for w in swarm.workers}
    hosts = sorted(n.hostname for n in nodes if n.id in worker_ids or gpu_labelled(n))
    before = {h: (api.inspect_node(swarm.node(h).node_id)["Spec"].get("Labels") or {})
              .get("gpu") for h in hosts}
    try:
        for h in hosts:
            edit_node_labels(api, swarm.node(h).node_id, lambda ls: ls.update(gpu="true"))
        swarm.cli(swarm.manager, "service", "create", "-d", "--no-resolve-image",
                  "--name", AGENT, "--mode", "global",
                  "--constraint", "node.labels.gpu==true",
                  "local/busybox:latest", "sleep", "3600")
        wait_running(swarm, AGENT, len(hosts))
        yield hosts
    finally:
        swarm.cli(swarm.manager, "service", "rm", AGENT, check=False)
        for h, value in before.items():
            def restore(ls: dict[str, str], value: str | None = value) -> None:
                ls.pop("gpu", None)
                if value is not None:
                    ls["gpu"] = value
            edit_node_labels(api, swarm.node(h).node_id, restore)


def _settled(swarm: SwarmCluster, hosts: list[str]) -> None:
    """The service's update done: a task running on each of ``hosts`` and nowhere else.
    A change of constraints only does not replace a task whose node still meets them
    (swarmkit's IsTaskDirtyPlacementConstraintsOnly), so tasks keep their old spec."""
    api = swarm.client(swarm.manager).api

    def done() -> bool:
        svc = api.inspect_service(AGENT)
        state = (svc.get("UpdateStatus") or {}).get("State")
        running = tasks_running(swarm, AGENT)
        return (state in (None, "completed")
                and sorted(swarm.node(t["NodeID"]).hostname for t in running)
                == sorted(hosts))

    swarm.wait_for(done, 90, f"{AGENT} updated, running on {hosts} only")


def test_the_doctor_on_a_manager_finds_the_agents_on_each_gpu_node(
    swarm: SwarmCluster, gpu_hosts: list[str], tmp_path: Path
) -> None:
    """By default (swarmgpu_agent), by --agents-service and by the daemon's --config."""
    mgr = swarm.manager.hostname
    for args in ((), ("--agents-service", AGENT)):
        c = _doctor(swarm, mgr, *args)
        assert c["status"] == "ok", c
        assert c["found"] == f"a task of '{AGENT}' runs on each GPU-labelled node", c
    cfg = cfg_file(tmp_path, swarm, agents={"service": AGENT})
    assert _doctor(swarm, mgr, "--config", str(cfg))["status"] == "ok"


def test_a_misspelled_agents_service_fails_naming_the_key_and_the_fix(
    swarm: SwarmCluster, gpu_hosts: list[str]
) -> None:
    c = _doctor(swarm, swarm.manager.hostname, "--agents-service", "swarmgpu-agent")
    assert c["status"] == "fail", c
    assert c["found"].startswith(
        "agents.service: no Swarm service is named 'swarmgpu-agent'"), c["found"]
    assert AGENT in c["found"], c["found"]  # the service of the stack's form, as Swarm has it
    assert 'agents.service: ""' in c["fix"] and "docker service ls" in c["fix"], c["fix"]
    assert "--agents-service" in c["fix"], c["fix"]


def test_a_gpu_labelled_node_without_an_agents_task_is_named(
    swarm: SwarmCluster, gpu_hosts: list[str]
) -> None:
    """The service's constraints leave out one GPU-labelled node: its task shuts down
    there, and the doctor names that node, not the others."""
    left, *served = sorted(gpu_hosts, reverse=True)
    swarm.cli(swarm.manager, "service", "update", "-d",
              "--constraint-add", f"node.hostname!={left}", AGENT)
    try:
        _settled(swarm, served)
        c = _doctor(swarm, swarm.manager.hostname, "--agents-service", AGENT)
        assert c["status"] == "warn", c
        assert c["found"] == (f"no task of '{AGENT}' runs on 1 GPU-labelled node(s): "
                              f"{left}"), c["found"]
        assert f"docker service ps {AGENT}" in c["fix"], c["fix"]
    finally:
        swarm.cli(swarm.manager, "service", "update", "-d",
                  "--constraint-rm", f"node.hostname!={left}", AGENT, check=False)
        _settled(swarm, gpu_hosts)


def test_on_a_worker_the_check_is_skipped_with_where_to_run_it(
    swarm: SwarmCluster, gpu_hosts: list[str]
) -> None:
    c = _doctor(swarm, swarm.workers[0].hostname, "--agents-service", AGENT)
    assert c["status"] == "skip", c
    assert "this node is no Swarm manager" in c["found"], c["found"]
    assert "run swarmgpu doctor on a manager" in c["found"], c["found"]
