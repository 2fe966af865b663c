"""On the real test swarm: a node Swarm runs a task of the agents' service on
(``agents.service``) is a GPU node whose agent has not answered, whatever its labels,
and a service of no GPU (``swarmgpu.gpus: "0"``) is not sent there first. mgr-1 (no
agent answers there, no ``gpu=true``, no GPU resources) is the swarm's CPU-only node
(test_cpu_placed_swarm.py's (4) sends such a service there); here a global service named
as this daemon's ``agents.service`` runs on it. ``audit`` and ``status`` say its agent is
unreachable, as the daemon's log does; a misspelled ``agents.service`` is said (audit's
advisory ``agents-service-missing``). The pure side: tests/test_cpu_nodes_agent_tasks.py,
tests/test_gpu_node_evidence.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.daemon import ModuleDaemon
from support.gpu_nodes import cfg_file, run_cli
from support.swarm_harness import SwarmCluster
from support.swarm_services import P, deploy, plan, wait_running

pytestmark = pytest.mark.swarm

AGENT = "agt_agent"  # as `docker stack deploy ... agt` names a stack's service "agent"
DAEMON = ModuleDaemon("agent-tasks-daemon.log",
                      {"sync": {"interval_s": 2}, "agents": {"service": AGENT}},
                      remove_stacks=("agt",))


def test_a_gpus_0_service_skips_the_node_running_the_agents_service(
    swarm: SwarmCluster, daemon: dict[str, Any]
) -> None:
    """``d`` (gpus 0, a quarter of mgr-1's CPUs, no constraint of its own) goes to a GPU
    node, not to mgr-1, which runs the agents' service's task (before: mgr-1 first, as
    a CPU-only node); the plan says the same."""
    api = swarm.client(swarm.manager).api
    mgr = swarm.manager.hostname
    swarm.cli(swarm.manager, "service", "create", "-d", "--no-resolve-image", "--name", AGENT,
              "--mode", "global", "--constraint", f"node.hostname=={mgr}",
              "local/busybox:latest", "sleep", "3600")
    try:
        (ta,) = wait_running(swarm, AGENT, 1)
        assert swarm.node(ta["NodeID"]).hostname == mgr
        ncpu = api.inspect_node(swarm.manager.node_id)["Description"]["Resources"][
            "NanoCPUs"] / 1e9
        deploy(swarm, daemon["tmp"], "agt", {"d": {"labels": {f"{P}gpus": "0"},
                                                   "cpus": ncpu * 0.25}})
        (td,) = wait_running(swarm, "agt_d", 1)
        assert swarm.node(td["NodeID"]).hostname != mgr, td
        p = plan(daemon)["agt_d"]
        assert p["status"] == "placed" and p["placements"][0]["node"] != mgr, p
    finally:
        swarm.cli(swarm.manager, "service", "rm", AGENT, check=False)


def _json(*args: str) -> dict[str, Any]:
    res = run_cli(*args, "--json")
    assert res.returncode in (0, 1), res.stdout + res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def test_audit_and_status_say_the_agents_node_is_unreachable_and_a_misspelling_is_said(
    swarm: SwarmCluster, daemon: dict[str, Any], tmp_path: Path
) -> None:
    """mgr-1 runs the agents' service's task, no agent answering there: ``audit`` has an
    ``unreachable`` finding for it and ``status`` shows its agent unreachable (before:
    neither, while the daemon logged it unreachable). Configured as ``agt-agent``, audit
    names the key, the value and ``agt_agent`` (advisory)."""
    mgr = swarm.manager.hostname
    swarm.cli(swarm.manager, "service", "create", "-d", "--no-resolve-image", "--name", AGENT,
              "--mode", "global", "--constraint", f"node.hostname=={mgr}",
              "local/busybox:latest", "sleep", "3600")
    try:
        wait_running(swarm, AGENT, 1)
        cfg = str(daemon["cfg"])
        found = _json("audit", "--config", cfg)["findings"]
        assert [f["kind"] for f in found if f["subject"] == mgr] == ["unreachable"], found
        (node,) = [n for n in _json("status", "--config", cfg)["nodes"]
                   if n["hostname"] == mgr]
        assert node["agent"]["status"] == "unreachable", node
        typo = cfg_file(tmp_path, swarm, agents={"service": "agt-agent"})
        found = _json("audit", "--config", str(typo))["findings"]
        (said,) = [f for f in found if f["kind"] == "agents-service-missing"]
        assert said["severity"] == "advisory", said
        assert "agents.service" in said["message"] and AGENT in said["message"], said
        assert not [f for f in found if f["subject"] == mgr and f["kind"] == "unreachable"]
    finally:
        swarm.cli(swarm.manager, "service", "rm", AGENT, check=False)
