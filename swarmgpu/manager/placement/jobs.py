"""Swarm jobs (``replicated-job``, ``global-job``) with a GPU request: how far the job's
current run is, how many holdings it still needs, and which writes it must not get.

Swarm starts a new run of a job (``JobIteration``) on ANY update of its spec, not only
``docker service update --force``: a label write while the job runs would run it again
from the start. So once a task of the run has started, swarmgpu writes nothing to the
service: a completed or failed task gives its GPUs back through node labels only (ledger
and gate), and the device map stays on the service for the next run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from swarmgpu.manager.placement.cycle import Cycle
from swarmgpu.manager.placement.keys import DEVICES, gate_key
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.records import ServicePlan, State, Status, remove_node_labels
from swarmgpu.manager.services.requests import DEFAULT_CLASSES, GpuRequest, RequestError
from swarmgpu.swarm.client import SwarmService, SwarmTask

R = TypeVar("R")
JOB_MODES = frozenset(("replicated-job", "global-job"))
_FAILED = frozenset(("failed", "rejected"))
_STARTED = frozenset(("running", "complete", "failed"))


@dataclass(frozen=True)
class JobProgress:
    """A job's current run, from its tasks of that iteration."""

    complete: int = 0
    failed: int = 0
    started: bool = False  # a task of this run has run: no service write from now on
    done_nodes: frozenset[str] = frozenset()  # nodes whose task completed (global jobs)
    tasks: int = 0  # tasks of this run, in any state

    def text(self, total: int, held: int) -> str:
        out = f"{self.complete} of {total} complete, {held} GPU holding(s) now"
        return out + (f", {self.failed} failed" if self.failed else "")


def job_progress(services: Iterable[SwarmService], tasks: Sequence[SwarmTask],
                 ) -> dict[str, JobProgress]:
    """Per job service id, its current run's progress (one pass over the tasks; none
    when there is no job)."""
    runs = {s.id: s.job_iteration for s in services if s.mode in JOB_MODES}
    if not runs:
        return {}
    complete: dict[str, int] = dict.fromkeys(runs, 0)
    failed: dict[str, int] = dict.fromkeys(runs, 0)
    started: set[str] = set()
    done: dict[str, set[str]] = {sid: set() for sid in runs}
    count: dict[str, int] = dict.fromkeys(runs, 0)
    for t in tasks:
        sid = t.service_id
        if sid not in runs or (t.job_iteration is not None and t.job_iteration != runs[sid]):
            continue  # a task of an earlier run
        count[sid] += 1
        if t.state == "complete":
            complete[sid] += 1
            done[sid].add(t.node_id)
        elif t.state in _FAILED:
            failed[sid] += 1
        if t.state in _STARTED:
            started.add(sid)
    return {sid: JobProgress(complete[sid], failed[sid], sid in started, frozenset(done[sid]),
                             count[sid]) for sid in runs}


def restarts_failed(s: SwarmService) -> bool:
    """Whether Swarm runs a failed task of ``s`` again (its restart policy)."""
    policy = (s.spec.get("TaskTemplate") or {}).get("RestartPolicy") or {}
    return str(policy.get("Condition") or "any") != "none"


def job_replicas(s: SwarmService, prog: JobProgress) -> int:
    """Holdings a replicated job needs now: at most ``MaxConcurrent`` tasks run at once,
    and no more than the completions left (a failed task Swarm will not re-run is no
    longer waiting for GPUs)."""
    total = s.total_completions if s.total_completions is not None else 1
    left = total - prog.complete - (0 if restarts_failed(s) else prog.failed)
    return max(0, min(s.max_concurrent or total, left))


def finish_job_plan(sp: ServicePlan, s: SwarmService, prog: JobProgress, cyc: Cycle) -> None:
    """A job's plan after placement: its progress, ``done`` once every task completed, the
    gates its completed tasks need, and no service write a running job would be re-run by."""
    prefix = cyc.prefix
    sp.mode = s.mode
    _keep_done_gates(sp, s, prog, cyc)
    total = (s.total_completions if s.total_completions is not None else 1
             ) if s.mode == "replicated-job" else prog.complete + len(sp.placements)
    sp.progress = prog.text(total, len(sp.placements))
    finished = (prog.complete >= total if s.mode == "replicated-job"
                else bool(prog.complete) and not sp.nodes_waiting)
    if finished and not sp.placements:
        sp.status, sp.state, sp.reason = Status.DONE, State.COMPLETE, sp.progress
    # The device map of nodes given back stays: removing it would re-run the job, and a
    # run started again finds it (and keeps it, when the same GPUs are free then).
    sp.service_labels_remove = [k for k in sp.service_labels_remove
                                if not k.startswith(prefix + DEVICES)
                                and k != f"{prefix}state.update-parallelism"]
    sp.service_labels_set.pop(f"{prefix}state.update-parallelism", None)
    sp.set_update_parallelism = None  # a job has no rolling update to pace
    gate = gate_key(prefix, s.name)
    if (s.mode == "global-job" and not prog.tasks and sp.placements
            and not sp.needs_service_write
            and all(cyc.by_id[p.node_id].labels.get(gate) == "true" for p in sp.placements)):
        # Swarm's global job makes its tasks when a run starts, on the nodes that match
        # then: none did (gates closed). With every gate open, a run is started now.
        sp.force_update = True
        sp.warnings.append("its gates are open: a run is started so that Swarm creates "
                           "its tasks on those nodes")
    if prog.started and sp.needs_service_write:
        kept = _drop_writes(sp)
        if kept:
            sp.warnings.append("not written while the job runs (any update of a job runs it "
                               f"again): {kept}")


def _keep_done_gates(sp: ServicePlan, s: SwarmService, prog: JobProgress, cyc: Cycle) -> None:
    """A completed task's node keeps the job's gate (its ledger goes): Swarm's constraint
    enforcer rejects a completed task whose node no longer matches the constraints, and
    the job then runs that task again. Gates of other nodes that hold nothing go (a gate
    left from an earlier run would let a new run's task start without a holding)."""
    gate = gate_key(cyc.prefix, s.name)
    held = {p.node_id for p in sp.placements}
    for nid in prog.done_nodes:
        drop = cyc.plan.node_remove.get(nid)
        if drop is not None and gate in drop:
            drop.remove(gate)
    for nid, n in cyc.by_id.items():
        if n.labels.get(gate) and nid not in held and nid not in prog.done_nodes:
            remove_node_labels(cyc.plan, nid, [gate])
            sp.node_writes = True


def _drop_writes(sp: ServicePlan) -> str:
    what = [*sp.service_labels_set, *sp.service_labels_remove,
            *(["constraints"] if sp.add_constraints or sp.remove_constraints else []),
            *(["env"] if sp.add_env or sp.replace_env else []),
            *(["mounts"] if sp.add_mounts else []),
            *(["max_replicas_per_node"] if sp.set_max_replicas is not None else []),
            *(["force update"] if sp.force_update else [])]
    sp.service_labels_set, sp.service_labels_remove = {}, []
    sp.add_constraints, sp.remove_constraints = [], []
    sp.add_env, sp.replace_env, sp.add_mounts = [], [], []
    sp.set_max_replicas, sp.force_update = None, False
    sp.set_generic = None
    return ", ".join(what)


def without_finished(ledger: Mapping[str, Mapping[str, Holding]],
                     parsed: Iterable[tuple[SwarmService, object]],
                     jobs: Mapping[str, JobProgress],
                     ) -> Mapping[str, Mapping[str, Holding]]:
    """The ledger to commit this cycle: a job's holdings its run no longer needs (every
    task of a replicated job done, a global job's nodes whose task completed) are left
    out, so their GPUs are free to every service planned in this cycle; their labels
    are still removed (the job's plan reads the whole ledger)."""
    if not jobs:
        return ledger
    out = dict(ledger)
    for s, _r in parsed:
        prog = jobs.get(s.id)
        if prog is None or s.name not in ledger:
            continue
        if s.mode == "replicated-job" and job_replicas(s, prog) == 0:
            out.pop(s.name)
        elif s.mode == "global-job" and prog.done_nodes:
            out[s.name] = {nid: h for nid, h in ledger[s.name].items()
                           if nid not in prog.done_nodes}
    return out


def learned_count(s: SwarmService) -> int:
    """The tasks the workload model counts for a service with a GPU request: its replicas,
    a replicated job's tasks at once; 0: not counted (global services, global jobs)."""
    if s.mode == "replicated":
        return max(1, s.replicas or 0)
    if s.mode == "replicated-job":
        return max(1, s.max_concurrent or s.total_completions or 1)
    return 0


def running_jobs(parsed: Sequence[tuple[SwarmService, R]],
                 jobs: Mapping[str, JobProgress]) -> list[tuple[SwarmService, R]]:
    """``parsed`` without the replicated jobs whose run is over: the workload model counts
    a job while it runs (its real lifetime), as a service until it is removed."""
    if not jobs:
        return list(parsed)
    return [(s, r) for s, r in parsed
            if not (s.mode == "replicated-job" and s.id in jobs
                    and job_replicas(s, jobs[s.id]) == 0)]


def job_defaults(s: SwarmService, r: GpuRequest | RequestError | None, prefix: str,
                 classes: Mapping[str, int] | None) -> GpuRequest | RequestError | None:
    """A job is batch work: unless its labels say otherwise it is of the lowest priority
    class and preemptible (a preempted task is run again by Swarm: its gate closes, Swarm
    rejects the task and the job makes a new one)."""
    if s.mode not in JOB_MODES or not isinstance(r, GpuRequest):
        return r
    if f"{prefix}priority" not in s.labels:
        named = classes if classes is not None else DEFAULT_CLASSES
        if named:
            name, lowest = min(named.items(), key=lambda kv: (kv[1], kv[0]))
            r = replace(r, priority=lowest, priority_class=name)
    if r.preemptible is None:
        r = replace(r, preemptible=True)
    return r
