"""Two GPU nodes (the DGX A100 and the RTX 4090 captures) and services as the
planner's unit tests build them; ``apply`` writes a plan's node labels back, ``written``
a service plan's writes; ``settle`` places services until their gates open, and
``daemon_plans`` is the daemon's plan (preemption decided) over the two nodes.

First written in tests/test_placement.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from support.gpu_nodes import DGX_A100, RTX4090
from swarmgpu.core.config import Config, PreemptionConfig
from swarmgpu.manager.cycle.oneshot_plan import plan_as_daemon
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import ServicePlan, env_template, gate_constraint, plan_placement
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

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


def written(s: SwarmService, sp: ServicePlan) -> SwarmService:
    """The service as Swarm holds it once the plan's service write landed."""
    labels = {k: v for k, v in s.labels.items() if k not in sp.service_labels_remove}
    labels.update(sp.service_labels_set)
    mrpn = s.max_replicas_per_node if sp.set_max_replicas is None else sp.set_max_replicas
    env = tuple(new if e == old else e for e in s.env for old, new in
                (sp.replace_env or [("", "")]))
    return replace(s, labels=labels, max_replicas_per_node=mrpn, env=env,
                   force_update=s.force_update + sp.force_update, version=s.version + 1)


def settle(nodes: list[SwarmNode], services: list[SwarmService]) -> tuple[
        list[SwarmNode], list[SwarmService], dict[str, ServicePlan]]:
    """Two fresh cycles, each one's writes landed: placed, then the gates open. The nodes,
    the services and the last cycle's plan by service name."""
    by: dict[str, ServicePlan] = {}
    for _ in range(2):
        plan = plan_placement(nodes, services, [], FACTS)
        by = {sp.name: sp for sp in plan.services}
        services = [written(s, by[s.name]) for s in services]
        nodes = apply(nodes, plan)
    return nodes, services, by


def daemon_plans(nodes: list[SwarmNode], services: list[SwarmService],
                 tasks: list[SwarmTask], queues: dict[str, Any] | None = None,
                 ) -> dict[str, ServicePlan]:
    """The daemon's plan over the two nodes' facts, preemption decided (not dry-run), by
    service name."""
    facts = {nid: FactsResult(nid, nid, "", f, None, 1.0) for nid, f in FACTS.items()}
    snap = Snapshot(nodes, services, tasks, facts, swarm_labels={})
    cfg = Config(preemption=PreemptionConfig(dry_run=False), queues=queues or {})
    return {sp.name: sp for sp in plan_as_daemon(snap, cfg).services}
