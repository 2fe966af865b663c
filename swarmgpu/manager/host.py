"""What the daemon offers the steps it runs: the ``CycleHost`` protocol.

The daemon wires the parts together (placement, rebalancing, the map, over-share
restarts); the parts see it only through this protocol, so none of them imports the
daemon and the daemon can import any of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from swarmgpu.core.config import Config
from swarmgpu.manager.agentbook import AgentBook
from swarmgpu.manager.daemon_metrics import DaemonMetrics
from swarmgpu.manager.placement import Planner
from swarmgpu.manager.sync import LabelSync, Snapshot
from swarmgpu.swarm.client import SwarmClient

# A step of the cycle: called with the host and this cycle's snapshot, leader only.
Step = Callable[["CycleHost", Snapshot], None]
Route = Callable[[], tuple[str, bytes]]
QueryRoute = Callable[[str], tuple[str, bytes]]


class CycleHost(Protocol):
    cfg: Config
    swarm: SwarmClient
    metrics: DaemonMetrics
    book: AgentBook
    leader: bool
    extra_steps: list[Step]
    labels: LabelSync  # its held node writes: ``held`` (see ``hold_labels``)
    hold_labels: bool  # label sync holds its node writes for placement to fold in
    planner: Planner | None  # placement's, kept across cycles as leader
    last_placement: Any  # the placement step's last plan, for status/plan
    last_ungranted: list[dict[str, Any]]  # services seeing GPUs without a grant (the map)
    last_metrics: dict[str, dict[str, Any]] | None  # GPU metrics scraped this cycle
    cluster_doc: Callable[[], dict[str, Any]] | None
    moves_view: Callable[[], dict[str, Any]] | None
    http_routes: dict[str, Route]
    http_query_routes: dict[str, QueryRoute]

    def trigger(self) -> None:
        """Run a cycle soon (e.g. once replaced tasks exist)."""
