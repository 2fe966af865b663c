"""Nodes and facts for rendering compose files.

First written in tests/test_render_compose.py."""

from __future__ import annotations

from support.gpu_nodes import DGX_A100, RTX4090
from swarmgpu.swarm.client import SwarmNode


def node(nid: str, host: str) -> SwarmNode:
    return SwarmNode(id=nid, hostname=host, addr="10.0.0.1", role="worker", state="ready",
                     availability="active", labels={}, engine_labels={}, version=1,
                     generic_resources={}, discrete_resources={})


NODES = [node("n-dgx", "gpu-node-1"), node("n-4090", "gpu-node-2")]
FACTS = {"n-dgx": DGX_A100.facts(), "n-4090": RTX4090.facts()}
