"""A service with env and constraints, as the write-path tests build it.

First written in tests/test_write_paths.py."""

from __future__ import annotations

from collections.abc import Mapping

from swarmgpu.swarm.client import SwarmService, service_from_api


def svc(name: str, labels: Mapping[str, str], env: list[str], cons: list[str]) -> SwarmService:
    spec = {"Name": name, "Labels": dict(labels),
            "TaskTemplate": {"ContainerSpec": {"Image": "busybox", "Env": env},
                             "Placement": {"Constraints": cons}, "ForceUpdate": 0},
            "Mode": {"Replicated": {"Replicas": 1}}}
    return service_from_api({"ID": f"id-{name}", "Spec": spec, "Version": {"Index": 1}})
