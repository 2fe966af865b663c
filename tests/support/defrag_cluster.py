"""The defrag search's cluster: four RTX 4090 nodes each half held by a mover pinned
to 4090s, a fifth holding two movers of any model, and a free DGX to move to.

First written in tests/test_defrag_mover_places.py."""

from __future__ import annotations

from dataclasses import replace

from support.health import F2 as HF2
from support.rebalance import F1, P
from support.rebalance import node as rebalance_node
from support.rebalance import running as rebalance_running
from support.rebalance import service as rebalance_service
from swarmgpu.core.model import NodeFacts
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

RTX = {f"{P}gpu-product": "*4090*"}


def uuids(k: int) -> list[str]:
    """gpu-node-``k``'s two GPU UUIDs, each node's its own."""
    return [f"{g.uuid[:-2]}{k:02d}" for g in HF2.gpus[:2]]


def defrag_cluster(pending: list[SwarmService], pinned: bool = False
                   ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask],
                              dict[str, NodeFacts]]:
    """gpu-node-2..5 (two RTX 4090s each): a<k> (1 GPU, 4090s only) on GPU 0, GPU 1
    free; gpu-node-6: b and c (1 GPU each, any model); gpu-node-1: 7 whole A100s free.
    The services are ``pending`` and then the running ones. ``pinned``: a<k> constrained
    to its own node (``node.hostname==gpu-node-<k>``)."""
    facts = {"n1": F1}
    for k in range(2, 7):
        facts[f"n{k}"] = replace(HF2, hostname=f"gpu-node-{k}", gpus=tuple(
            replace(g, uuid=u) for g, u in zip(HF2.gpus, uuids(k), strict=False)))
    nodes: list[SwarmNode] = [rebalance_node("n1", "gpu-node-1", {})]
    svcs = list(pending)
    tasks = []
    for k in range(2, 7):
        u = uuids(k)
        labels: dict[str, str] = {}
        for i, name in enumerate([f"a{k}"] if k < 6 else ["b", "c"]):
            labels.update({f"{P}assign.{name}": u[i], f"{P}service.{name}": "true"})
            s = rebalance_service(name, {f"{P}gpus": "1", **(RTX if k < 6 else {})})
            if pinned and k < 6:
                s = replace(s, constraints=(*s.constraints, f"node.hostname==gpu-node-{k}"))
            svcs.append(s)
            tasks.append(replace(rebalance_running(name, f"n{k}"), id=f"t-{name}"))
        nodes.append(rebalance_node(f"n{k}", f"gpu-node-{k}", labels))
    return nodes, svcs, tasks, facts
