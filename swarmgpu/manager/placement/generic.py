"""Swarm generic resources: what a service reserves, what a node advertises."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swarmgpu.manager.services.requests import GpuRequest
from swarmgpu.swarm.client import SwarmNode, SwarmService


def reserve_generic(r: GpuRequest, s: SwarmService, kind: str, running: bool,
                    ) -> tuple[tuple[str, int] | None, str | None]:
    """Whole GPUs also reserved as Swarm generic resources, where Swarm's own accounting
    should hold: (the reservation to write, or None; a warning, or None). A reservation
    change rolls tasks, so it is only made before any runs."""
    if r.mig_profile or r.is_fraction:
        return None, None
    res = (s.spec.get("TaskTemplate") or {}).get("Resources") or {}
    have = 0
    for gr in (res.get("Reservations") or {}).get("GenericResources") or []:
        d = gr.get("DiscreteResourceSpec") or {}
        if d.get("Kind") == kind:
            have = int(d.get("Value") or 0)
    if have == r.gpus:
        return None, None
    if running:
        return None, (f"reserves {have} {kind} generic resources, request is {r.gpus}; "
                      "left as it is while tasks run")
    return (kind, r.gpus), None


def generic_reservations(spec: Mapping[str, Any]) -> list[tuple[str, int]]:
    res = (spec.get("TaskTemplate") or {}).get("Resources") or {}
    out: list[tuple[str, int]] = []
    for gr in (res.get("Reservations") or {}).get("GenericResources") or []:
        d = gr.get("DiscreteResourceSpec") or {}
        if d.get("Kind"):
            out.append((str(d["Kind"]), int_or0(str(d.get("Value") or 0))))
    return out


def generic_count(node: SwarmNode, kind: str) -> int:
    """Generic resources of ``kind`` the node advertises (a node must have at least a
    task's reservation; what other tasks hold of them is Swarm's to count)."""
    return node.discrete_resources.get(kind, 0) + len(node.generic_resources.get(kind, ()))


def int_or0(v: str | None) -> int:
    try:
        return int(v or 0)
    except ValueError:
        return 0
