"""The context one cycle's service steps share (``Cycle``)."""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement.backoff import Backoff
from swarmgpu.manager.placement.cluster import ClusterAllocator
from swarmgpu.manager.placement.filters import SwarmFilters
from swarmgpu.manager.placement.hostports import HostPorts
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.records import PlacementPlan
from swarmgpu.swarm.client import SwarmNode, SwarmService


@dataclass
class Cycle:
    """What every service's planning in one cycle reads. Its steps write nothing to the
    plan (they return what to write); they do keep the cycle's own records (back-off,
    gates seen open, nodes a service is moved off) and commit to the allocator."""

    cluster: ClusterAllocator
    by_id: Mapping[str, SwarmNode]
    facts: Mapping[str, NodeFacts]
    prefix: str
    zone_label: str
    all_zones: set[str]
    adopt_ungated: bool
    plan: PlacementPlan  # the plan so far (read only: the removals a spec write follows)
    exclude: Callable[[SwarmService], frozenset[str]]  # host-mode ports' refusals too
    most_gpus: int = 0  # GPUs of the largest node: no more replicas are ever packed
    now: float = 0.0
    backoff: dict[str, Backoff] = field(default_factory=dict)  # the planner's, by service id
    open_since: Mapping[tuple[str, str], float] = field(default_factory=dict)  # last cycle's
    open_seen: dict[tuple[str, str], float] = field(default_factory=dict)  # this cycle's
    avoid: dict[str, frozenset[str]] = field(default_factory=dict)  # nodes it is moved off
    # services with a move in flight by the daemon's records (rebalance.record.moving)
    moving: AbstractSet[str] = frozenset()
    grants: str = "env"  # placement.grants: mounts adds the device mount (envs.mount_target)
    generic_kind: str = ""  # whole GPUs also reserved as this generic resource (``generic``)
    release: AbstractSet[str] = frozenset()  # services whose held changes are written now
    ports: HostPorts = field(default_factory=HostPorts)  # (why ``exclude`` refuses a node)
    filters: SwarmFilters | None = None  # (why ``exclude`` refuses a node: its plugins)
    # ``TaskView.rules``: the constraints of each service's old tasks per node (none known
    # here: every such task is taken to read its gate, ``devicemap``)
    task_rules: Mapping[str, Mapping[str, AbstractSet[tuple[str, ...] | None]]] = field(
        default_factory=dict)
    # ``TaskView.made``: the CreatedAt of each service's running tasks per node
    task_made: Mapping[str, Mapping[str, list[str]]] = field(default_factory=dict)
    # service id -> node id -> the CreatedAt (ns) of its tasks there last seen running
    # while its device lists there were the ledger's: the planner's, kept across cycles
    # (``devicemap``: such a task was not made from a foreign list seen since)
    clean_made: dict[str, dict[str, frozenset[int]]] = field(default_factory=dict)
    # node id -> when the GPU hold of the tasks Swarm is stopping there ends at most (epoch
    # s, ``nominated.StoppingGpus.until``): a global job's run waits for such a node
    stopping_until: Mapping[str, float] = field(default_factory=dict)
    # global job id -> when its run first waited for such a node (epoch s): the planner's,
    # kept across cycles until its run starts or no such node keeps it (``globalmode``)
    run_waited: dict[str, float] = field(default_factory=dict)

    def plugins_why(self, s: SwarmService, node: SwarmNode) -> str:
        """Why Swarm's PluginFilter refuses ``s`` on ``node`` ("" when it does not)."""
        return self.filters.plugins_why(s, node) if self.filters is not None else ""

    def swarm_no(self, s: SwarmService) -> frozenset[str]:
        """Nodes the service's replicas may not take: those Swarm refuses, and those it
        is being moved off in this cycle (``converge``)."""
        avoid = self.avoid.get(s.id)
        return self.exclude(s) | avoid if avoid else self.exclude(s)


@dataclass(frozen=True, slots=True)
class Released:
    """The nodes a service no longer holds on, whose ledger entry and gate go."""

    nodes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


NOTHING_RELEASED = Released()


def release_dropped(cyc: Cycle, old: Mapping[str, Holding], keep: Container[str]) -> Released:
    """Every node of ``old`` the service no longer holds (``keep``), each said (a
    holding of no GPU, ``gpus: "0"``, as its place: it had no GPUs to release)."""
    nodes = tuple(nid for nid in old if nid not in keep)
    if not nodes:
        return NOTHING_RELEASED
    by_id = cyc.by_id

    def said(nid: str) -> str:
        where = by_id[nid].hostname if nid in by_id else nid
        if old[nid].uuids:
            return f"released its GPUs on {where}"
        return f"released its place on {where} (no GPU)"

    return Released(nodes, tuple(said(nid) for nid in nodes))
