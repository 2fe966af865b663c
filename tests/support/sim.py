"""Simulator inputs: node specs and trace pods.

First written in tests/test_sim.py."""

from __future__ import annotations

import random

from swarmgpu.allocator.values import GpuSpec, NodeSpec
from swarmgpu.sim.trace import TracePod, load_nodes, load_pods
from swarmgpu.sim.traces import bundled


def node_spec(name: str, n: int, cpu: int = 64000) -> NodeSpec:
    return NodeSpec(name, tuple(GpuSpec(i, "T4", 0) for i in range(n)), cpu, 1 << 20)


def trace_pod(name: str, start: int, end: int, gpus: int = 1) -> TracePod:
    return TracePod(name, 1000, 1024, gpus, 1000, (), start, end)


def default_sample(gpu_pods: int, cpu_pods: int, n_nodes: int = 30,
                   seed: int = 5) -> tuple[list[NodeSpec], list[TracePod]]:
    """``n_nodes`` of the bundled default trace's nodes and a sample of its pods: the GPU
    pods first, then the CPU-only ones, drawn in that order from one seeded generator."""
    nodes_csv, pods_csv = bundled("default")
    rng = random.Random(seed)
    nodes = rng.sample(load_nodes(nodes_csv), n_nodes)
    pods = load_pods(pods_csv)
    cpu = [p for p in pods if p.total_gpu_milli == 0]
    gpu = [p for p in pods if p.total_gpu_milli > 0]
    return nodes, rng.sample(gpu, gpu_pods) + rng.sample(cpu, cpu_pods)
