"""The context one cycle's service steps share (``Cycle``)."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement.backoff import Backoff
from swarmgpu.manager.placement.cluster import ClusterAllocator
from swarmgpu.manager.placement.keys import assign_key, gate_key
from swarmgpu.manager.placement.records import PlacementPlan, ServicePlan, remove_node_labels
from swarmgpu.swarm.client import SwarmNode, SwarmService


@dataclass
class Cycle:
    """What every service's planning in one cycle reads (and the plan it writes to)."""

    cluster: ClusterAllocator
    by_id: Mapping[str, SwarmNode]
    facts: Mapping[str, NodeFacts]
    prefix: str
    zone_label: str
    all_zones: set[str]
    adopt_ungated: bool
    plan: PlacementPlan
    exclude: Callable[[SwarmService], frozenset[str]]
    most_gpus: int = 0  # GPUs of the largest node: no more replicas are ever packed
    now: float = 0.0
    backoff: dict[str, Backoff] = field(default_factory=dict)  # the planner's, by service id
    open_since: Mapping[tuple[str, str], float] = field(default_factory=dict)  # last cycle's
    open_seen: dict[tuple[str, str], float] = field(default_factory=dict)  # this cycle's
    avoid: dict[str, frozenset[str]] = field(default_factory=dict)  # nodes it is moved off
    # services with a move in flight by the daemon's records (rebalance.record.moving)
    moving: AbstractSet[str] = frozenset()
    grants: str = "env"  # placement.grants: mounts adds the device mount (envs.mount_target)

    def swarm_no(self, s: SwarmService) -> frozenset[str]:
        """Nodes the service's replicas may not take: those Swarm refuses, and those it
        is being moved off in this cycle (``converge``)."""
        avoid = self.avoid.get(s.id)
        return self.exclude(s) | avoid if avoid else self.exclude(s)


def release_dropped(cyc: Cycle, sp: ServicePlan, service: str, old: Iterable[str],
                    keep: Container[str]) -> None:
    """Remove the ledger entry and gate of ``service`` on every node of ``old`` it no
    longer holds (``keep``), each said on its plan."""
    for nid in old:
        if nid not in keep:
            remove_node_labels(cyc.plan, nid, [assign_key(cyc.prefix, service),
                                               gate_key(cyc.prefix, service)])
            sp.node_writes = True
            where = cyc.by_id[nid].hostname if nid in cyc.by_id else nid
            sp.warnings.append(f"released its GPUs on {where}")
