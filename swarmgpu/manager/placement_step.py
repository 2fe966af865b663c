"""Placement inside the daemon's cycle, and its writes, in the only safe order.

1. node labels that go away (released gates and ledger entries);
2. service specs (device labels first: a task created later reads them);
3. node labels that appear (ledger + gate: the gate opens last).
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from loguru import logger

from swarmgpu.allocator.workload import STATE_KEY, WorkloadError, WorkloadModel, load_file
from swarmgpu.core.config import Config, parse_priority_classes, queue_quotas
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.audit import Finding
from swarmgpu.manager.host import CycleHost
from swarmgpu.manager.placement import PlacementPlan, Planner, ServicePlan
from swarmgpu.manager.sync import Snapshot
from swarmgpu.manager.writes import write_each
from swarmgpu.swarm.client import SwarmClient, SwarmError, SwarmService


def facts_by_node(snap: Snapshot, fallback: Mapping[str, NodeFacts] | None = None
                  ) -> dict[str, NodeFacts]:
    """Facts per node id; an unreachable agent's last good facts stand in."""
    out: dict[str, NodeFacts] = {}
    for node_id, res in snap.facts.items():
        if res.facts is not None:
            out[node_id] = res.facts
        elif fallback and node_id in fallback:
            out[node_id] = fallback[node_id]
    return out


def load_workload(cfg: Config, swarm: Any = None,
                  services: Sequence[SwarmService] = ()) -> WorkloadModel:
    """The model placement starts from: the pinned file, else the one stored in Swarm
    (the services live now were counted before it was stored), else the prior."""
    pc = cfg.placement
    if pc.workload != "auto":
        return load_file(pc.workload)
    text = None
    getter = getattr(swarm, "swarm_labels", None)
    if getter is not None:
        try:
            text = getter().get(cfg.sync.prefix + STATE_KEY)
        except SwarmError as exc:
            logger.warning("placement: cannot read the stored workload model: {}", exc)
    model = WorkloadModel.prior(pc.workload_window)
    if text:
        try:
            model = WorkloadModel.loads(text, pc.workload_window)
        except WorkloadError as exc:
            logger.warning("placement: {}", exc)
        else:
            for s in services:
                model.mark_seen(s.id)
    return model


def store_workload(swarm: Any, cfg: Config, model: WorkloadModel) -> bool:
    """Keep the learned model in Swarm (a label on the swarm object), so a restarted
    daemon or a new leader starts from it."""
    key = cfg.sync.prefix + STATE_KEY
    text = model.dumps()

    def compute(labels: Mapping[str, str]) -> Mapping[str, str] | None:
        return None if labels.get(key) == text else {**labels, key: text}

    try:
        return bool(swarm.update_swarm_labels(compute))
    except SwarmError as exc:
        logger.warning("placement: cannot store the workload model: {}", exc)
        return False


def new_planner(cfg: Config, swarm: Any = None,
                services: Sequence[SwarmService] = ()) -> Planner:
    return Planner(prefix=cfg.sync.prefix, zone_label=cfg.placement.zone_label,
                   adopt_ungated=cfg.placement.adopt_ungated,
                   generic_kind=cfg.placement.generic_resource_kind,
                   workload=load_workload(cfg, swarm, services),
                   priority_classes=parse_priority_classes(cfg.preemption.priority_classes),
                   queues=queue_quotas(cfg.queues))


def make_plan(snap: Snapshot, cfg: Config,
              fallback: Mapping[str, NodeFacts] | None = None, *,
              planner: Planner | None = None, swarm: Any = None) -> PlacementPlan:
    """One placement cycle: the daemon passes its long-lived planner; one-shot commands
    (``plan``, ``audit``, ``status``) get a fresh one from the stored model."""
    if planner is None:
        planner = new_planner(cfg, swarm, snap.services)
    return planner.plan(snap.nodes, snap.services, snap.tasks, facts_by_node(snap, fallback))


WORKLOAD_STORE_EVERY_S = 60.0  # one swarm write a minute at most while the model learns


def service_compute(sp: ServicePlan) -> Any:
    """The read-modify-write of one service's spec that applies ``sp``: None when the
    spec already says it all (no write)."""

    def compute(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
        new = copy.deepcopy(dict(spec))
        labels = dict(new.get("Labels") or {})
        for k in sp.service_labels_remove:
            labels.pop(k, None)
        labels.update(sp.service_labels_set)
        new["Labels"] = labels
        tt = new.setdefault("TaskTemplate", {})
        placement = tt.setdefault("Placement", {})
        gone = {c.replace(" ", "") for c in sp.remove_constraints}
        cons = [c for c in placement.get("Constraints") or [] if c.replace(" ", "") not in gone]
        for c in sp.add_constraints:
            if c not in cons:
                cons.append(c)
        if cons:
            placement["Constraints"] = cons
        if sp.set_max_replicas is not None:
            placement["MaxReplicas"] = sp.set_max_replicas
        if sp.force_update:
            tt["ForceUpdate"] = int(tt.get("ForceUpdate") or 0) + 1
        if sp.set_generic is not None:
            kind, count = sp.set_generic
            reservations = tt.setdefault("Resources", {}).setdefault("Reservations", {})
            others = [g for g in reservations.get("GenericResources") or []
                      if (g.get("DiscreteResourceSpec") or {}).get("Kind") != kind]
            reservations["GenericResources"] = [
                *others, {"DiscreteResourceSpec": {"Kind": kind, "Value": count}}]
        if sp.set_update_parallelism is not None:
            new.setdefault("UpdateConfig", {})["Parallelism"] = sp.set_update_parallelism
        cs = tt.setdefault("ContainerSpec", {})
        env = list(cs.get("Env") or [])
        for old, repl in sp.replace_env:
            # Only swarmgpu's own line, exactly as written, is replaced.
            env = [repl if x == old else x for x in env]
        for e in sp.add_env:
            name = e.split("=", 1)[0] + "="
            # A user's own value for the same variable is kept: never overwrite env.
            if not any(x.startswith(name) for x in env):
                env.append(e)
        if env:
            cs["Env"] = env
        return None if new == spec else new

    return compute


def apply_plan(swarm: SwarmClient, plan: PlacementPlan, *, dry_run: bool) -> int:
    """Apply in the safe order; return the number of writes that landed."""
    writes = 0
    if dry_run:
        for sp in plan.services:
            if sp.needs_service_write:
                logger.bind(service=sp.name).info(
                    "dry-run: would set {} remove {} add constraints {} env {}",
                    sp.service_labels_set, sp.service_labels_remove, sp.add_constraints,
                    [*sp.add_env, *(new for _, new in sp.replace_env)])
        for nid in set(plan.node_set) | set(plan.node_remove):
            logger.info("dry-run: node {} labels set {} remove {}", nid[:12],
                        plan.node_set.get(nid, {}), plan.node_remove.get(nid, []))
        return 0

    def node_write(nid: str, set_: Mapping[str, str], remove: list[str]) -> int:
        def compute(cur: Mapping[str, str]) -> Mapping[str, str] | None:
            new = dict(cur)
            for k in remove:
                new.pop(k, None)
            new.update(set_)
            return None if new == dict(cur) else new

        try:
            return int(swarm.update_node_labels(nid, compute))
        except SwarmError as exc:
            logger.error("placement: node {} label write failed: {}", nid[:12], exc)
            return 0

    def service_write(sp: ServicePlan) -> bool | None:
        """True: written, False: nothing to write, None: the write failed."""
        log = logger.bind(service=sp.name)
        try:
            if swarm.update_service_spec(sp.id, service_compute(sp)):
                log.info("placement written: {}", [p.to_dict() for p in sp.placements])
                return True
            return False
        except SwarmError as exc:
            log.error("placement: service write failed, gate stays closed: {}", exc)
            return None

    # Each phase's writes go to different objects: a few at a time (manager.writes);
    # a phase ends before the next one starts, which keeps the order above.
    writes += sum(write_each(list(plan.node_remove.items()),
                             lambda kv: node_write(kv[0], {}, kv[1])))
    todo = [sp for sp in plan.services if sp.needs_service_write]
    for sp, ok in zip(todo, write_each(todo, service_write), strict=True):
        writes += bool(ok)
        if ok is None:  # never open a gate whose devices were not written
            for p in sp.placements:
                plan.node_set.pop(p.node_id, None)
    writes += sum(write_each(list(plan.node_set.items()),
                             lambda kv: node_write(kv[0], kv[1], [])))
    return writes


def attach(daemon: CycleHost) -> None:
    cfg = daemon.cfg
    if not cfg.placement.enabled:
        return

    last_store = [0.0]

    def step(d: CycleHost, snap: Snapshot) -> None:
        fallback = {nid: r.facts for nid, r in d.book.records.items() if r.facts is not None}
        if d.planner is None:  # first cycle as leader: start from the stored model
            d.planner = new_planner(cfg, d.swarm, snap.services)
            logger.info("placement: workload model {}", d.planner.model.summary())
        plan = make_plan(snap, cfg, fallback, planner=d.planner)
        d.last_placement = plan
        now = time.monotonic()
        if (d.planner.model_changed and not cfg.dry_run
                and now - last_store[0] >= WORKLOAD_STORE_EVERY_S):
            if store_workload(d.swarm, cfg, d.planner.model):
                d.planner.model_changed = False
            last_store[0] = now
        pending = 0
        for sp in plan.services:
            log = logger.bind(service=sp.name)
            if sp.status == "invalid":
                log.warning("invalid GPU request, service left as it is: {}", sp.reason)
            elif sp.status == "pending":
                pending += 1
                log.warning("pending: {} ({})", sp.reason, sp.request_text)
            for w in sp.warnings:
                if w == sp.replaced:  # moved off a node where Swarm would not run it
                    log.warning("{}", w)
                else:
                    log.info("{}", w)
        d.metrics.pending.set(pending)
        if plan.empty:
            return
        n = apply_plan(d.swarm, plan, dry_run=cfg.dry_run)
        d.metrics.placements.labels(outcome="written").inc(n)
        if any(sp.gates_deferred or sp.force_update for sp in plan.services):
            # Replaced tasks appear within a second; open their gates right after.
            timer = threading.Timer(1.0, d.trigger)
            timer.daemon = True
            timer.start()

    daemon.extra_steps.append(step)


def audit_checks(cfg: Config) -> list[Any]:
    """Audit findings about placement: invalid requests, pending, ungated services."""

    def check(snap: Snapshot) -> list[Finding]:
        plan = make_plan(snap, cfg)
        out_gates = [Finding("foreign-gate", sp.name, w) for sp in plan.services
                     for w in sp.warnings if "names another service" in w]
        out: list[Finding] = []
        for sp in plan.services:
            if sp.status == "invalid":
                out.append(Finding("invalid-request", sp.name, sp.reason or ""))
            elif sp.status == "pending":
                out.append(Finding("pending", sp.name, f"{sp.request_text}: {sp.reason}"))
            for host, why in sorted(sp.nodes_waiting.items()):  # global: a node without room
                out.append(Finding("global-node-waiting", sp.name, f"{host}: {why}",
                                   advisory=sp.status != "pending"))
            for w in sp.warnings:
                if w.startswith("adopted"):
                    # advisory: the daemon adds the gate and env itself (adopt_ungated)
                    out.append(Finding("ungated", sp.name,
                                       "annotated service without the gate/env in its spec: " +
                                       w.removeprefix("adopted: "), advisory=True))
        return out + out_gates

    return [check]
