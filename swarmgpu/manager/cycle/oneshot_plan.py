"""The plan a one-shot (`plan`, `status`) makes as the daemon's cycle would
(``plan_as_daemon``): placement's planner, then preemption's decision as a preview
(``Preempter.preview``), with the holds its victims' records imply (``oneshot_holds``).
It writes nothing. Split out of ``cycle.preemption``, the daemon's step."""

from __future__ import annotations

from typing import Any

from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.oneshot_holds import one_shot_nominations
from swarmgpu.manager.cycle.placement import make_plan, one_shot_planner
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot, facts_by_node
from swarmgpu.manager.placement import PlacementPlan
from swarmgpu.manager.services.tenants import FROM_CONFIG, FromConfig, Tenants


def plan_as_daemon(snap: Snapshot, cfg: Config, swarm: Any = None,
                   tenants: Tenants | FromConfig | None = FROM_CONFIG) -> PlacementPlan:
    """The plan the daemon's cycle makes of ``snap``, for `plan` and `status` (the map
    shows the daemon's own): placement's planner, then, where the daemon runs this step
    (``placement.enabled``), its decision noted on each preemptor (``Preempter.preview``).
    Writes nothing; ``swarm`` is read for the stored workload model, and a victim the
    list left out (``recorded.left_out_victims``). ``tenants``: the command's, built
    once (``FROM_CONFIG``: read here, once for both)."""
    tenants = Tenants.given(cfg, tenants)
    planner = one_shot_planner(cfg, swarm, snap, tenants)
    facts = facts_by_node(snap)
    held = one_shot_nominations(snap, cfg, facts, swarm)  # (both read them, as the daemon's)
    plan = make_plan(snap, cfg, planner=planner, swarm=swarm, nominated=held)
    if cfg.placement.enabled:  # (no victim on a stale node, as ``PreemptStep``)
        live = {n: f for n, f in facts.items() if n not in planner.cluster.stale}
        Preempter(cfg, tenants=tenants).preview(snap, plan, live, planner.refused_nodes,
                                                ports=planner.port_takers, recorded=held)
    return plan
