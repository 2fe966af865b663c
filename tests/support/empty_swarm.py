"""A swarm with no nodes and no services at swarmgpu's client boundary: the daemon's
own life (its cycles, schedule, signals, terms) without a swarm."""

from __future__ import annotations

from typing import Any

from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.unkeyed import Unkeyed


class EmptySwarm:
    """Leader of a swarm with nothing in it; takes no writes."""

    on_write: Any = None
    may_write: Any = None
    before_write: Any = None

    def is_leader(self) -> bool:
        return True

    def swarm_labels(self) -> dict[str, str]:
        return {}

    def nodes(self) -> list[SwarmNode]:
        return []

    def services(self) -> list[SwarmService]:
        return []

    def unkeyed(self) -> Unkeyed:
        return Unkeyed()  # every entry has its ID

    def tasks(self, filters: Any = None, *, states: Any = None,
              read: Any = None) -> list[SwarmTask]:
        return []
