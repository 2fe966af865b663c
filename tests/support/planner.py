"""CPU-only nodes for the planner's bounds.

First written in tests/test_planner.py."""

from __future__ import annotations

from dataclasses import replace

from support.gpu_nodes import RTX4090
from support.placement import node
from swarmgpu.swarm.client import SwarmNode

CPU2 = 2000


def cpu_node(nid: str, host: str, cpu_milli: int = CPU2, **kw: object) -> SwarmNode:
    return replace(node(nid, host), cpu_milli=cpu_milli, memory_mib=8192, **kw)  # type: ignore[arg-type]


def two_nodes() -> tuple[list[SwarmNode], dict[str, object]]:
    nodes = [cpu_node("n-a", "node-a"), cpu_node("n-b", "node-b")]
    facts = {"n-a": RTX4090.facts(), "n-b": RTX4090.facts()}
    return nodes, facts
