"""Fractional services deployed onto a chosen node of the real test swarm.

First written in tests/test_fragmentation_swarm.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.gpu_nodes import GPU_NODES
from support.swarm_harness import SwarmCluster
from support.swarm_rebalance import holder_gpu, node_labels
from support.swarm_services import deploy, wait_running

P = "swarmgpu."

HALF = {"labels": {f"{P}gpu-fraction": "0.5"}}


def availability(swarm: SwarmCluster, host: str, value: str) -> None:
    swarm.cli(swarm.manager, "node", "update", "--availability", value, host)


def deploy_on(swarm: SwarmCluster, tmp: Path, stack: str, svc: str, spec: dict[str, Any],
              host: str) -> None:
    """Place ``svc`` on ``host``: the other GPU node is paused while placement chooses
    (the service carries no constraint of its own, so a move may take it anywhere)."""
    other = next(h for h in GPU_NODES if h != host)
    availability(swarm, other, "pause")
    try:
        deploy(swarm, tmp, stack, {svc: spec})
        wait_running(swarm, f"{stack}_{svc}", 1)
    finally:
        availability(swarm, other, "active")
    assert holder_gpu(swarm, f"{stack}_{svc}")[0] == host


def no_gpu_held(swarm: SwarmCluster) -> None:
    """Start from idle GPUs: services left by earlier modules of the session removed."""
    api = swarm.client(swarm.manager).api
    for s in api.services():
        api.remove_service(s["ID"])
    swarm.wait_for(lambda: not any(k.startswith(f"{P}assign.")
                                   for h in GPU_NODES for k in node_labels(swarm, h)),
                   60, "every GPU released")
