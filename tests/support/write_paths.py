"""A service with env and constraints, as the write-path tests build it; a node's facts
as its agent might list them another time.

First written in tests/test_write_paths.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from swarmgpu.core.model import NodeFacts
from swarmgpu.swarm.client import SwarmService, service_from_api


def svc(name: str, labels: Mapping[str, str], env: list[str], cons: list[str]) -> SwarmService:
    spec = {"Name": name, "Labels": dict(labels),
            "TaskTemplate": {"ContainerSpec": {"Image": "busybox", "Env": env},
                             "Placement": {"Constraints": cons}, "ForceUpdate": 0},
            "Mode": {"Replicated": {"Replicas": 1}}}
    return service_from_api({"ID": f"id-{name}", "Spec": spec, "Version": {"Index": 1}})


def reread(f: NodeFacts) -> NodeFacts:
    """``f`` as an agent might list it another time: its GPUs, each GPU's MIG devices and
    the link matrix in the reverse order (each GPU keeps its index and UUID)."""
    n = len(f.gpus)
    gpus = tuple(replace(g, mig_devices=tuple(reversed(g.mig_devices)))
                 for g in reversed(f.gpus))
    links = tuple(tuple(f.links[n - 1 - i][n - 1 - j] for j in range(n)) for i in range(n))
    return replace(f, gpus=gpus, links=links if f.links else f.links)
