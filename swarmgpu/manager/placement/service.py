"""One service's plan, step by step (``plan_service``)."""

from __future__ import annotations

from collections.abc import Mapping

from swarmgpu.manager.placement.converge import converge
from swarmgpu.manager.placement.cycle import Cycle, release_dropped
from swarmgpu.manager.placement.devicemap import write_devices_and_gates
from swarmgpu.manager.placement.gating import gate_service
from swarmgpu.manager.placement.globalmode import GLOBAL_MODES, plan_global
from swarmgpu.manager.placement.jobs import JobProgress, finish_job_plan, job_replicas
from swarmgpu.manager.placement.keys import (
    MAX_STATE,
    REPLACED_STATE,
)
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.packing import packed_env
from swarmgpu.manager.placement.records import ServicePlan, State, Status
from swarmgpu.manager.placement.replicas import placement_order, replicas_of
from swarmgpu.manager.placement.spread import place_replicas
from swarmgpu.manager.placement.tasks import Waiting
from swarmgpu.manager.services.requests import GpuRequest, Rebalance, RequestError
from swarmgpu.swarm.client import SwarmService


def plan_service(
    s: SwarmService, r: GpuRequest | RequestError, kept: dict[str, Holding],
    old: Mapping[str, Holding], running_on: Mapping[str, int],
    waiting: Waiting, res: tuple[int, int], cyc: Cycle,
    slots: Mapping[int, str] | None = None, job: JobProgress | None = None,
    cap: int | None = None,
) -> ServicePlan:
    """One service's plan, in steps: can it be placed at all, is it gated, which
    holdings it keeps, where its missing replicas go, what to write, what to report.
    ``cap``: at most this many replicas are placed (its queue's max, ``placement.queues``;
    the caller says why the others wait)."""
    if isinstance(r, RequestError):
        return ServicePlan(s.name, s.id, None, "", Status.INVALID, State.INVALID, reason=str(r))
    sp = ServicePlan(s.name, s.id, r, r.describe(), Status.PLACED, State.ACTIVE)
    sp.mode = s.mode
    if s.mode not in _MODES:
        sp.status, sp.state = Status.INVALID, State.INVALID
        sp.reason = f"mode {s.mode} is not one swarmgpu places ({', '.join(sorted(_MODES))})"
        return sp
    if s.name in cyc.moving:
        # A rebalancing move owns this service until it ends (swarmgpu.manager.rebalance.mover):
        # its holdings stay reserved (committed above), nothing is written here. Only the
        # daemon's record says so (rebalance.record.move_of): a move label alone is a
        # stack's claim, and such a service is placed like any other.
        sp.state = State.REBALANCING
        sp.placements = sorted((p for nid, h in kept.items() if nid in cyc.by_id
                                for p in replicas_of(h, cyc.by_id[nid], cyc.facts.get(nid))),
                               key=placement_order)
        sp.warnings.append("a rebalancing move is in progress; placement waits for it")
        return sp
    if not gate_service(sp, s, cyc):
        return sp
    if s.mode in GLOBAL_MODES:  # one holding per GPU node (placement.globalmode)
        plan_global(sp, s, r, kept, old, running_on, waiting, res, cyc,
                    job.done_nodes if job is not None else frozenset())
        if s.mode == "global-job":
            finish_job_plan(sp, s, job or JobProgress(), cyc)
        return sp
    if s.mode == "replicated-job":  # as many holdings as tasks may run now
        job = job or JobProgress()
    want = replicas = job_replicas(s, job) if job is not None else s.replicas or 0
    if cap is not None:
        replicas = min(replicas, cap)
    holdings = _keep_holdings(sp, s, kept, old, running_on, replicas, cyc)
    stuck = converge(sp, s, r, holdings, running_on, waiting, res, cyc)
    placements, reasons = place_replicas(sp, s, r, holdings, replicas, slots or {}, res, cyc)
    sp.placements = sorted(placements, key=placement_order)
    # ``want``: Swarm runs every task; one per node keeps the capped ones off held GPUs
    if sp.packed is None and want > 1 and s.max_replicas_per_node != 1:
        sp.set_max_replicas = 1
    elif sp.packed is not None and not packed_env(sp, s, cyc):
        return sp
    gates_open = write_devices_and_gates(sp, s, running_on, waiting, cyc)
    # swarmgpu's own record of the MaxReplicas it set (not a device map: no restart)
    sp.service_labels_set.update({k: v for k, v in sp.state_labels.items()
                                  if s.labels.get(k) != v})
    if cyc.prefix + MAX_STATE in s.labels and cyc.prefix + MAX_STATE not in sp.state_labels:
        sp.service_labels_remove.append(cyc.prefix + MAX_STATE)
    if len(sp.placements) < replicas:
        sp.status = Status.PENDING
        sp.reason = "; ".join(reasons) or "not enough nodes"
        if len(sp.placements) and reasons:
            sp.reason = f"{len(sp.placements)} of {replicas} replicas placed; {sp.reason}"
    elif gates_open and waiting.refused and not sp.replaced:
        # Placed by the ledger, but Swarm says it cannot run the task there: not placed.
        sp.status = Status.PENDING
        sp.reason = f"Swarm cannot run its task: {waiting.refused}"
    if stuck:  # held where Swarm will not run it, and not moved: it waits
        sp.status = Status.PENDING
        sp.reason = f"{sp.reason}; {stuck}" if sp.reason else stuck
    if sp.replaced:
        now_on = sorted({p.hostname for p in sp.placements})
        sp.replaced += f"; re-placed on {', '.join(now_on) or 'no node yet'}"
        sp.warnings.append(sp.replaced)
    if sp.status == Status.PLACED and replicas and sum(running_on.values()) >= replicas:
        cyc.backoff.pop(s.id, None)  # converged: a later refusal starts afresh
        if cyc.prefix + REPLACED_STATE in s.labels:
            sp.service_labels_remove.append(cyc.prefix + REPLACED_STATE)
    sp.state = _state(sp, s, running_on, want)
    if r.rebalance is Rebalance.NEVER:
        sp.warnings.append("opted out of rebalancing")
    if job is not None:
        finish_job_plan(sp, s, job, cyc)
    return sp


_MODES = frozenset(("replicated", "global", "replicated-job", "global-job"))


def _keep_holdings(sp: ServicePlan, s: SwarmService, kept: Mapping[str, Holding],
                   old: Mapping[str, Holding], running_on: Mapping[str, int], replicas: int,
                   cyc: Cycle) -> dict[str, Holding]:
    """Holdings the service keeps: valid ones up to its replica count (idle nodes are
    dropped first on a scale-down); the rest are released."""
    holdings = dict(kept)
    by_id = cyc.by_id
    if len(holdings) > replicas:
        order = sorted(holdings, key=lambda nid: (running_on.get(nid, 0), by_id[nid].hostname
                                                  if nid in by_id else nid))
        for nid in order[: len(holdings) - replicas]:
            del holdings[nid]
    release_dropped(cyc, sp, s.name, old, holdings)
    return holdings


def _state(sp: ServicePlan, s: SwarmService, running_on: Mapping[str, int], replicas: int) -> str:
    if not sp.placements:
        return State.PENDING
    if sp.service_labels_set or sp.new or sp.gates_deferred:
        return State.BOUND
    if sum(running_on.values()) >= replicas and replicas > 0:
        return State.ACTIVE
    return State.ALLOCATED
