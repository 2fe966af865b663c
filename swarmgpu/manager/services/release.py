"""The operator's word: write the spec changes placement holds back for a service.

Placement never restarts a running task for a change that is no decision of its own
(``placement.restarts``): the env lines a newer swarmgpu tells a share's container, a
template, a reservation. ``plan`` and ``audit`` list them; ``swarmgpu apply --service
NAME`` writes them now, through the actuator's gate, with the decision logged as the
operator's. Its running tasks restart once (Swarm's rolling update, as configured).
Node labels (gates, ledger) are left to the daemon, which owns them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from swarmgpu.core.andmore import and_more
from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.placement import make_plan, one_shot_planner
from swarmgpu.manager.engine.actuator import Why, Writes
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement.planned import Planned
from swarmgpu.manager.placement.specwrite import service_compute
from swarmgpu.manager.services.tenants import FROM_CONFIG, FromConfig, Tenants
from swarmgpu.swarm.client import SwarmClient, SwarmError
from swarmgpu.swarm.taskspec import task_changes


@dataclass
class Released:
    service: str
    changes: list[str] = field(default_factory=list)  # what the write changes in the task spec
    written: bool = False
    error: str | None = None


def release_held(swarm: SwarmClient, snap: Snapshot, cfg: Config, names: Sequence[str],
                 *, dry_run: bool, tenants: Tenants | FromConfig | None = FROM_CONFIG,
                 ) -> list[Released]:
    """For each named service, plan as the daemon would but with its held changes let
    through, and write its spec (``dry_run``: say what would change, write nothing;
    ``tenants``: the command's, built once)."""
    planner = one_shot_planner(cfg, swarm, snap, tenants)
    planner.release = set(names)
    plan = make_plan(snap, cfg, planner=planner)
    plans = {sp.name: sp for sp in plan.services}
    specs = {s.name: s for s in snap.services}
    gate = Writes(swarm, dry_run=dry_run, who="apply", prefix=cfg.sync.prefix)
    out: list[Released] = []
    for name in names:
        r = Released(name)
        out.append(r)
        sp, s = plans.get(name), specs.get(name)
        if sp is None or s is None:
            r.error = (f"no service {name!r} with a swarmgpu GPU request"
                       + left_out(snap.unkeyed.services) if s is None else
                       f"{name!r} carries no swarmgpu GPU request")
            continue
        if sp.status == "invalid":
            r.error = f"{name}: invalid GPU request: {sp.reason}"
            continue
        if sp.status == "failed":  # nothing planned to let through (placement.isolate)
            r.error = f"{name}: {sp.reason}"
            continue
        new = service_compute(sp.writes)(s.spec) if sp.needs_service_write else None
        r.changes = task_changes(s.spec, new) if new is not None else []
        if not r.changes or dry_run:
            continue
        why = Why(*sp.decision) if sp.decision else Why(
            "operator", f"the operator's word (swarmgpu apply --service {name})")
        planned = Planned(s.spec, cfg.sync.prefix)
        try:
            r.written = gate.service_spec(s.id, planned.guard(service_compute(sp.writes)), why)
        except SwarmError as exc:
            r.error = f"{name}: the write failed: {exc}"
        if planned.stale:  # re-deployed since it was read: its plan is for the old spec
            r.error = (f"{name}: changed since it was read ({'; '.join(planned.changed)}); "
                       "nothing written: run the command again")
    return out


def left_out(said: Sequence[str]) -> str:
    """For a name not found: the services the engine's list left out (``swarm.unkeyed``,
    ``said``: their messages, each with its fix), of which it may be one; "" if none."""
    if not said:
        return ""
    return (f"; it may be a service the engine's list left out, listed without an ID: "
            f"{said[0]}{and_more(len(said))}")
