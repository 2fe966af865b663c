"""Preemption's victims stopped as the actuator stops them, over a test's own cluster
state (nodes, services and tasks by name): their ledger entry and gate off the node,
their device list off the service, a new task waiting.

First written in tests/test_preempt_nominated.py."""

from __future__ import annotations

from swarmgpu.manager.placement import assign_key, devices_key, gate_key
from swarmgpu.manager.placement.preempt import Preemption
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask, service_from_api

P = "swarmgpu."


def relabel(n: SwarmNode, labels: dict[str, str]) -> SwarmNode:
    """``n`` with ``labels``, its version bumped as Swarm bumps it."""
    return SwarmNode(**{**n.__dict__, "labels": labels, "version": n.version + 1})


def stop_victims(nodes: dict[str, SwarmNode], services: dict[str, SwarmService],
                 tasks: dict[str, SwarmTask], p: Preemption) -> None:
    """``p``'s victims stopped, in place: ``nodes`` by id, the others by service name."""
    for v in p.victims:
        n = nodes[v.node_id]
        drop = {assign_key(P, v.service), gate_key(P, v.service)}
        nodes[v.node_id] = relabel(n, {k: x for k, x in n.labels.items() if k not in drop})
        s = services[v.service]
        dk = devices_key(P, v.node_id)
        spec = {**s.spec, "Labels": {k: x for k, x in s.labels.items() if k != dk}}
        s = services[v.service] = service_from_api(
            {"ID": s.id, "Spec": spec, "Version": {"Index": s.version + 1}})
        tasks[v.service] = SwarmTask(f"t2-{v.service}", s.id, "", 2, "pending", "running", ())
