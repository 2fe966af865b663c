"""Two GPU nodes (the DGX A100 and the RTX 4090 captures) and services as the
planner's unit tests build them; ``apply`` writes a plan's node labels back.

First written in tests/test_placement.py."""

from __future__ import annotations

from dataclasses import replace

from support.gpu_nodes import DGX_A100, RTX4090
from swarmgpu.manager.placement import env_template, gate_constraint
from swarmgpu.swarm.client import SwarmNode, SwarmService

P = "swarmgpu."


def node(nid: str, host: str, labels: dict[str, str] | None = None) -> SwarmNode:
    return SwarmNode(id=nid, hostname=host, addr="10.0.0.1", role="worker", state="ready",
                     availability="active", labels=labels or {}, engine_labels={}, version=1,
                     generic_resources={}, discrete_resources={})


def svc(name: str, labels: dict[str, str], replicas: int = 1, gated: bool = True,
        sid: str | None = None) -> SwarmService:
    cons = (gate_constraint(P, name),) if gated else ()
    env = (env_template(P),) if gated else ()
    return SwarmService(id=sid or f"id-{name}", name=name, labels=labels, constraints=cons,
                        env=env, mode="replicated", replicas=replicas,
                        max_replicas_per_node=None, version=1)


DGX = node("n-dgx", "gpu-node-1")
R4090 = node("n-4090", "gpu-node-2")
FACTS = {"n-dgx": DGX_A100.facts(), "n-4090": RTX4090.facts()}


def apply(nodes: list[SwarmNode], plan: object) -> list[SwarmNode]:
    out = []
    for n in nodes:
        labels = dict(n.labels)
        for k in plan.node_remove.get(n.id, []):  # type: ignore[attr-defined]
            labels.pop(k, None)
        labels.update(plan.node_set.get(n.id, {}))  # type: ignore[attr-defined]
        # Swarm bumps a node's version on every update (a long-lived planner relies on it)
        out.append(replace(n, labels=labels, version=n.version + (labels != n.labels)))
    return out
