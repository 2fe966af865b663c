"""Simulator inputs: node specs and trace pods.

First written in tests/test_sim.py."""

from __future__ import annotations

from swarmgpu.allocator.values import GpuSpec, NodeSpec
from swarmgpu.sim.trace import TracePod


def node_spec(name: str, n: int, cpu: int = 64000) -> NodeSpec:
    return NodeSpec(name, tuple(GpuSpec(i, "T4", 0) for i in range(n)), cpu, 1 << 20)


def trace_pod(name: str, start: int, end: int, gpus: int = 1) -> TracePod:
    return TracePod(name, 1000, 1024, gpus, 1000, (), start, end)
