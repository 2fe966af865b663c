"""The services as Swarm holds them after a plan's writes.

First written in tests/test_memo.py."""

from __future__ import annotations

from dataclasses import replace

from swarmgpu.manager.placement.records import PlacementPlan
from swarmgpu.swarm.client import SwarmService


def as_written(services: list[SwarmService], plan: PlacementPlan) -> list[SwarmService]:
    """The services as Swarm holds them after the plan's service writes."""
    out = []
    for s in services:
        sp = next((x for x in plan.services if x.name == s.name), None)
        if sp is None or not sp.needs_service_write:
            out.append(s)
            continue
        labels = {k: v for k, v in {**s.labels, **sp.service_labels_set}.items()
                  if k not in sp.service_labels_remove}
        out.append(replace(s, labels=labels, version=s.version + 1,
                           force_update=s.force_update + sp.force_update))
    return out
