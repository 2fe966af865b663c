"""On the real test swarm: a node Swarm runs a task of the agents' service on
(``agents.service``) is a GPU node whose agent has not answered, whatever its labels,
and a service of no GPU (``swarmgpu.gpus: "0"``) is not sent there first. mgr-1 (no
agent answers there, no ``gpu=true``, no GPU resources) is the swarm's CPU-only node
(test_cpu_placed_swarm.py's (4) sends such a service there); here a global service named
as this daemon's ``agents.service`` runs on it. The pure side:
tests/test_cpu_nodes_agent_tasks.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.daemon import ModuleDaemon
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
