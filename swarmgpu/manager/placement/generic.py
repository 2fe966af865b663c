"""Swarm generic resources: what a service reserves, what a node advertises."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swarmgpu.core.peertext import quoted
from swarmgpu.manager.services.requests import GpuRequest
from swarmgpu.swarm.client import SwarmNode, SwarmService
from swarmgpu.swarm.specread import UnreadSpec, spec_count, spec_object


def reserve_generic(r: GpuRequest, s: SwarmService, kind: str, running: bool,
                    ) -> tuple[tuple[str, int] | None, str | None]:
    """Whole GPUs also reserved as Swarm generic resources, where Swarm's own accounting
    should hold: (the reservation to write, or None; a warning, or None). A reservation
    change rolls tasks, so it is only made before any runs."""
    if r.mig_profile or r.is_fraction:
        return None, None
    have = 0
    for k, v in generic_reservations(s.spec):
        if k == kind:
            have = v
    if have == r.gpus:
        return None, None
    if running:
        return None, (f"reserves {have} {kind} generic resources, request is {r.gpus}; "
                      "left as it is while tasks run")
    return (kind, r.gpus), None


def generic_reservations(spec: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(kind, count) of each discrete generic resource ``spec`` reserves; ``UnreadSpec``
    naming the field where a part is not what Docker sends (never none for it: a node
    without the resource would be taken for one Swarm accepts)."""
    where = "TaskTemplate.Resources.Reservations"
    res = spec_object(spec_object(spec.get("TaskTemplate"), "TaskTemplate").get("Resources"),
                      "TaskTemplate.Resources")
    listed = spec_object(res.get("Reservations"), where).get("GenericResources") or []
    if not isinstance(listed, list):
        raise UnreadSpec(f"{where}.GenericResources is {type(listed).__name__}, not a list "
                         "(Docker sends one; check any proxy)")
    out: list[tuple[str, int]] = []
    for gr in listed:
        one = where + ".GenericResources[]"
        d = spec_object(spec_object(gr, one).get("DiscreteResourceSpec"),
                        one + ".DiscreteResourceSpec")
        if d.get("Kind"):
            out.append((str(d["Kind"]), spec_count(d.get("Value"), f"{where}.GenericResources"
                                                   f"[{quoted(d['Kind'])}].Value")))
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
