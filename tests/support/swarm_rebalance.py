"""Rebalance on the real test swarm: who holds which GPU, hot and idle metrics.

First written in tests/test_rebalance_swarm.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.gpu_nodes import GPU_NODES
from support.swarm_harness import SwarmCluster
from support.swarm_services import container_env, tasks_running

P = "swarmgpu."
IDLE = {"default": {"util_pct": 5, "fb_used_mib": 1000}}


def labels(swarm: SwarmCluster, svc: str) -> dict[str, str]:
    return dict(swarm.client(swarm.manager).api.inspect_service(svc)["Spec"]["Labels"] or {})


def holder_gpu(swarm: SwarmCluster, svc: str) -> tuple[str, str]:
    """(hostname, UUID) of the service's one holding, from the node ledger."""
    for h in GPU_NODES:
        node = swarm.node(h)
        lab = swarm.client(swarm.manager).api.inspect_node(node.node_id)["Spec"]["Labels"] or {}
        if f"{P}assign.{svc}" in lab:
            return h, lab[f"{P}assign.{svc}"].split("@")[0]
    raise AssertionError(f"{svc} holds nothing")


def hot(path: Path, uuid: str | None) -> None:
    doc: dict[str, Any] = dict(IDLE)
    if uuid:
        doc["gpus"] = {uuid: [{"at": 0, "util_pct": 97}]}
    path.write_text(json.dumps(doc))


def where(swarm: SwarmCluster, svc: str) -> dict[str, str]:
    """hostname -> NVIDIA_VISIBLE_DEVICES of each running container of the service."""
    return {swarm.node(t["NodeID"]).hostname: container_env(swarm, t)["NVIDIA_VISIBLE_DEVICES"]
            for t in tasks_running(swarm, svc)}


def node_labels(swarm: SwarmCluster, host: str) -> dict[str, str]:
    nid = swarm.node(host).node_id
    return dict(swarm.client(swarm.manager).api.inspect_node(nid)["Spec"]["Labels"] or {})
