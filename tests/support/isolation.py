"""Two RTX 4090 nodes with GPU UUIDs of their own, and a-bad, the service the placement
isolation tests make fail (first in serve order: every other service is planned after
it); ``settled`` is a service holding its GPUs on one of them, its writes landed
(``settled_all``: services placed by a given planner).

First written in tests/test_placement_isolation.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from support.gpu_nodes import RTX4090
from support.placement import apply, node, written
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement import PlacementPlan, Planner
from swarmgpu.manager.placement import queues as queues_mod
from swarmgpu.swarm.client import SwarmNode, SwarmService

BAD = "a-bad"


def node_facts(i: int) -> NodeFacts:
    """The RTX 4090 machine's eight GPUs, with UUIDs of this node's own."""
    text = json.dumps(RTX4090.facts().to_dict())
    return NodeFacts.from_dict(json.loads(text.replace("GPU-5ca1ab1e-", f"GPU-{i:08x}-")))


NODES = [node("n-a", "gpu-a"), node("n-b", "gpu-b")]
FACTS = {"n-a": node_facts(1), "n-b": node_facts(2)}


def settled(s: SwarmService) -> tuple[list[SwarmNode], SwarmService]:
    """``s`` holding its GPUs on one node, its writes landed (two cycles)."""
    nodes, (s,), _ = settled_all(Planner(), [s])
    return nodes, s


def settled_all(planner: Planner, services: list[SwarmService]) -> tuple[
        list[SwarmNode], list[SwarmService], PlacementPlan]:
    """``services`` planned by ``planner`` over both nodes, each cycle's writes landed (two
    cycles): the nodes, the services and the last cycle's plan."""
    nodes = list(NODES)
    for _ in range(2):
        plan = planner.plan(nodes, services, [], FACTS)
        by = {sp.name: sp for sp in plan.services}
        services = [written(s, by[s.name]) for s in services]
        nodes = apply(nodes, plan)
    return nodes, services, plan


def queue_count_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counting a-bad's holdings in its queue's use raises (``queues.held_in_ledger``)."""
    real = queues_mod.held_in_ledger

    def held_in_ledger(kept: Any, ledger: Any, *a: Any) -> Any:
        if any(h.service == BAD for h in ledger.values()):
            raise RuntimeError("boom counting a-bad's queue")
        return real(kept, ledger, *a)

    monkeypatch.setattr(queues_mod, "held_in_ledger", held_in_ledger)
