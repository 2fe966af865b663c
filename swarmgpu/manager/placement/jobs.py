"""Swarm jobs (``replicated-job``, ``global-job``) with a GPU request: how far the job's
current run is, how many holdings it still needs, and which writes it must not get.

Swarm starts a new run of a job (``JobIteration``) on ANY update of its spec, not only
``docker service update --force``: a label write while the job runs would run it again
from the start. So once a task of the run has started, swarmgpu writes nothing to the
service: a completed or failed task gives its GPUs back through node labels only (ledger
and gate), and the device map stays on the service for the next run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from swarmgpu.manager.placement.cycle import Cycle
from swarmgpu.manager.placement.keys import DEVICES, gate_key
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.records import NO_WRITES, ReplicaPlacement, SpecWrites
from swarmgpu.manager.services.requests import DEFAULT_CLASSES, GpuRequest, RequestError
from swarmgpu.swarm.client import SwarmService, SwarmTask

R = TypeVar("R")
JOB_MODES = frozenset(("replicated-job", "global-job"))
_FAILED = frozenset(("failed", "rejected"))
_STARTED = frozenset(("running", "complete", "failed"))
_SHUT = frozenset(("shutdown", "remove"))


@dataclass(frozen=True)
class JobProgress:
    """A job's current run, from its tasks of that iteration."""

    complete: int = 0
    failed: int = 0
    started: bool = False  # a task of this run has run: no service write from now on
    done_nodes: frozenset[str] = frozenset()  # nodes whose task completed (global jobs)
    tasks: int = 0  # tasks of this run, in any state
    failed_nodes: frozenset[str] = frozenset()  # a global job's nodes Swarm gave up on

    def text(self, total: int, held: int, no_gpu: bool = False) -> str:
        what = "holding(s) of no GPU" if no_gpu else "GPU holding(s)"  # (gpus: "0")
        out = f"{self.complete} of {total} complete, {held} {what} now"
        return out + (f", {self.failed} failed" if self.failed else "")


def job_progress(services: Iterable[SwarmService], tasks: Sequence[SwarmTask],
                 failures: MutableMapping[str, Exception] | None = None,
                 ) -> dict[str, JobProgress]:
    """Per job service id, its current run's progress (one pass over the tasks; none
    when there is no job). A job whose spec cannot be read is left out and named in
    ``failures`` (service id -> the fault; raised when None): the others are read."""
    jobs = [s for s in services if s.mode in JOB_MODES]
    runs: dict[str, int] = {}
    restarts: set[str] = set()
    for s in jobs:
        try:
            iteration, restart = s.job_iteration, restarts_failed(s)
        except Exception as exc:  # its fault is its own
            if failures is None:
                raise
            failures.setdefault(s.id, exc)
            continue
        runs[s.id] = iteration
        if restart:
            restarts.add(s.id)
    if not runs:
        return {}
    per_node = {s.id for s in jobs if s.mode == "global-job"}
    complete: dict[str, int] = dict.fromkeys(runs, 0)
    # A slot (a global job's: its node) failed while none of its tasks lives or completed,
    # nor waits for Swarm's restart: Swarm gave up on it. Swarm fills a failed slot again
    # when it reconciles the job, and the slot's failure then no longer counts.
    failed: dict[str, set[object]] = {sid: set() for sid in runs}
    alive: dict[str, set[object]] = {sid: set() for sid in runs}
    started: set[str] = set()
    done: dict[str, set[str]] = {sid: set() for sid in runs}
    count: dict[str, int] = dict.fromkeys(runs, 0)
    for t in tasks:
        sid = t.service_id
        if sid not in runs or (t.job_iteration is not None and t.job_iteration != runs[sid]):
            continue  # a task of an earlier run
        count[sid] += 1
        slot = t.node_id or t.id if sid in per_node else t.slot or t.node_id or t.id
        if t.state == "complete":
            complete[sid] += 1
            done[sid].add(t.node_id)
        if t.state not in _FAILED:
            alive[sid].add(slot)
        elif t.desired_state in _SHUT or sid not in restarts:
            failed[sid].add(slot)
        else:  # not shut down yet: Swarm's restart supervisor has still to decide on it
            alive[sid].add(slot)
        if t.state in _STARTED:
            started.add(sid)
    out = {}
    for sid in runs:
        gone = failed[sid] - alive[sid]
        nodes = frozenset(str(x) for x in gone) if sid in per_node else frozenset()
        out[sid] = JobProgress(complete[sid], len(gone), sid in started,
                               frozenset(done[sid]), count[sid], nodes)
    return out


def done_idle(services: Sequence[SwarmService], tasks: Sequence[SwarmTask],
              ) -> frozenset[tuple[str, str]]:
    """(job service id, node) where its run's task completed and none of the run lives:
    the holding a replicated job keeps there for the run's next task (``job_busy_nodes``)
    runs nothing. It is no preemption victim: stopping it frees no running work, and its
    closed gate makes Swarm reject the completed task and run it again. A job whose
    progress cannot be read has none (placement fails its plan for it alone:
    ``placement.isolate``; a victim as any failed plan). Raised here instead, such a job
    cost every preemption of the cycle (the daemon's cycle failed at that step, `plan`
    and `status` raised)."""
    runs = {s.id: s.job_iteration for s in services}
    live = {(t.service_id, t.node_id) for t in tasks
            if t.service_id in runs and t.node_id and t.state not in ("complete", "failed",
                                                                    "rejected")
            and (t.job_iteration is None or t.job_iteration == runs[t.service_id])}
    unread: dict[str, Exception] = {}  # (its failed plan says why)
    return frozenset((sid, nid) for sid, prog in job_progress(services, tasks, unread).items()
                     for nid in prog.done_nodes if nid and (sid, nid) not in live)


def job_task_read(t: SwarmTask, run: int | None = None) -> bool:
    """Whether the daemon reads task ``t`` of a job: desired state complete (its runs'
    live and completed tasks), ready (a failed task's replacement while its restart delay
    runs), or failed (rejected) and shut down. Swarm's restart supervisor sets every
    failed job task's desired state to shutdown and, in the same write, makes its
    replacement unless it restarts none (condition none, or past ``MaxAttempts``): a
    failure is seen only so (with no replacement its GPUs go), and a run whose only task
    that ran failed is seen as started (no write to the job's spec, which would run it
    again from the start, its restart attempts counted anew). ``run``: its job's run
    (``JobStatus.JobIteration``; None: any): a task that completed in another is not read
    (``job_read``)."""
    return job_read(t.desired_state, t.state, t.job_iteration, run)


def job_read(desired: str, state: str, iteration: int | None, run: int | None) -> bool:
    """``job_task_read`` of a task's desired and actual state and its run (``iteration``)."""
    # Swarm keeps every task a job made, over all its runs. A completed one of another run
    # is read by nothing: job progress counts the current run's, and no reader of tasks
    # counts a completed one on its node. Its failed ones stay (``backoff`` counts them).
    if state == "complete" and None not in (iteration, run) and iteration != run:
        return False
    return desired in ("complete", "ready") or (desired == "shutdown" and state in _FAILED)


def job_raw_read(runs: Mapping[str, int]) -> Callable[[Any], bool]:
    """``SwarmClient.tasks``'s ``read`` for the task list of the jobs ``runs`` names (their
    ids, each to its run): False for a listed object ``job_task_read`` would not read,
    True for any other (parsed; one not as Docker sends it: ``task_from_api`` says why),
    so that a job's history is not parsed every cycle."""
    def read(raw: Any) -> bool:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("ID"), str):
            return True
        status, job = raw.get("Status"), raw.get("JobIteration")
        desired = raw.get("DesiredState", "")
        state = status.get("State", "") if isinstance(status, Mapping) else None
        index = job.get("Index") if isinstance(job, Mapping) else None
        if not (isinstance(state, str) and isinstance(desired, str)) or (
                "JobIteration" in raw and not (type(index) is int and index >= 0)):
            return True  # read as ``task_from_api`` reads it, or refused there
        return job_read(desired, state, index, runs.get(str(raw.get("ServiceID", ""))))

    return read


def restarts_failed(s: SwarmService) -> bool:
    """Whether Swarm runs a failed task of ``s`` again (its restart policy)."""
    policy = (s.spec.get("TaskTemplate") or {}).get("RestartPolicy") or {}
    return str(policy.get("Condition") or "any") != "none"


def job_replicas(s: SwarmService, prog: JobProgress) -> int:
    """Holdings a replicated job needs now: at most ``MaxConcurrent`` tasks run at once,
    and no more than the completions left (a failed slot Swarm made no replacement for is
    no longer waiting for GPUs: ``job_progress``)."""
    total = s.total_completions if s.total_completions is not None else 1
    left = total - prog.complete - prog.failed
    return max(0, min(s.max_concurrent or total, left))


def job_busy_nodes(s: SwarmService, prog: JobProgress, running_on: Mapping[str, int],
                   ) -> frozenset[str]:
    """The nodes a replicated job keeps its holding on while its run still makes tasks
    (none once it makes no more): those running a task of it, and those whose task
    completed. Such a node keeps the job's gate (``job_run``), and Swarm may start the
    run's next task, or a failed task's replacement, on any gated node."""
    if s.mode != "replicated-job" or not job_replicas(s, prog):
        return frozenset()
    return prog.done_nodes | {nid for nid, n in running_on.items() if n}


@dataclass(frozen=True, slots=True)
class JobRun:
    """The job step's answer: the run's progress, whether it is done, the gates of its
    nodes (a completed task's node keeps its gate, other nodes that hold nothing lose
    theirs), and what of the plan's spec writes the run allows (``writes``): a running
    job gets none, since any update of a job runs it again."""

    progress: str
    done: bool
    keep_gates: AbstractSet[str]  # nodes whose gate stays though their ledger entry goes
    close_gates: tuple[str, ...]  # other nodes whose gate goes
    writes: SpecWrites
    warnings: tuple[str, ...] = ()
    running: bool = False  # its run started: no spec write of any kind (it would re-run)


def job_run(s: SwarmService, prog: JobProgress, placements: Sequence[ReplicaPlacement],
            nodes_waiting: Mapping[str, str], writes: SpecWrites, cyc: Cycle,
            no_gpu: bool = False, run_waits: Mapping[str, float] | None = None,
            run_capped: bool = False) -> JobRun:
    """A job's plan after placement: its progress, ``done`` once every task completed, the
    gates its completed tasks need, and no service write a running job would be re-run by.
    ``no_gpu``: a job of ``gpus: "0"`` (its holdings are said as of no GPU). ``run_waits``:
    a global job's nodes its run waits for (``globalmode``): no write starts it yet;
    ``run_capped``: such a node left out, its run having waited its most. When its run
    first waited is kept (``Cycle.run_waited``) while it waits or is so capped."""
    prefix = cyc.prefix
    gate = gate_key(prefix, s.name)
    held = {p.node_id for p in placements}
    total = (s.total_completions if s.total_completions is not None else 1
             ) if s.mode == "replicated-job" else (prog.complete + len(placements)
                                                   + len(prog.failed_nodes))
    progress = prog.text(total, len(placements), no_gpu)
    finished = (prog.complete >= total if s.mode == "replicated-job"
                else bool(prog.complete) and not nodes_waiting)
    # The device map of nodes given back stays: removing it would re-run the job, and a
    # run started again finds it (and keeps it, when the same GPUs are free then). A
    # job has no rolling update to pace.
    par_key = f"{prefix}state.update-parallelism"
    writes = replace(writes, service_labels_remove=tuple(
        k for k in writes.service_labels_remove
        if not k.startswith(prefix + DEVICES) and k != par_key),
        service_labels_set={k: v for k, v in writes.service_labels_set.items()
                            if k != par_key}, set_update_parallelism=None)
    warnings: list[str] = []
    if (s.mode == "global-job" and not prog.tasks and placements and not writes
            and all(cyc.by_id[p.node_id].labels.get(gate) == "true" for p in placements)):
        # Swarm's global job makes its tasks when a run starts, on the nodes that match
        # then: none did (gates closed). With every gate open, a run is started now.
        writes = replace(writes, force_update=True)
        warnings.append("its gates are open: a run is started so that Swarm creates its "
                        "tasks on those nodes")
    if run_waits and writes and not prog.started:
        # the run would make no task on them (``globalmode``): started once they are free
        cyc.run_waited.setdefault(s.id, cyc.now)
        warnings.append(f"its run waits for {', '.join(sorted(run_waits))} (GPUs held for "
                        "tasks Swarm is stopping there, "
                        f"{max(run_waits.values()):.0f} s at most)")
        writes = NO_WRITES
    elif prog.started or not (run_waits or run_capped):  # started, or none keeps it
        cyc.run_waited.pop(s.id, None)
    if prog.started and writes:
        if withheld := _withheld(writes):
            warnings.append("not written while the job runs (any update of a job runs it "
                            f"again): {withheld}")
        writes = NO_WRITES
    # A completed task's node keeps the job's gate (its ledger goes once the run makes no
    # more tasks): Swarm's constraint enforcer rejects a completed task whose node no
    # longer matches the constraints, and the job then runs that task again. Gates of
    # other nodes that hold nothing go (a gate left from an earlier run, or a done node's
    # while its run makes tasks, would let a task start there without a holding).
    keep = (prog.done_nodes if s.mode != "replicated-job" or not job_replicas(s, prog)
            else prog.done_nodes & held)
    close = tuple(nid for nid, n in cyc.by_id.items()
                  if n.labels.get(gate) and nid not in held and nid not in keep)
    return JobRun(progress, finished and not placements, keep, close, writes,
                  tuple(warnings), running=prog.started)


def _withheld(w: SpecWrites) -> str:
    return ", ".join([*w.service_labels_set, *w.service_labels_remove,
                      *(["constraints"] if w.add_constraints or w.remove_constraints else []),
                      *(["env"] if w.add_env or w.replace_env or w.remove_env else []),
                      *(["mounts"] if w.add_mounts else []),
                      *(["max_replicas_per_node"] if w.set_max_replicas is not None else []),
                      *(["force update"] if w.force_update else [])])


def without_finished(ledger: Mapping[str, Mapping[str, Holding]],
                     parsed: Iterable[tuple[SwarmService, object]],
                     jobs: Mapping[str, JobProgress],
                     failed: MutableMapping[str, Exception] | None = None,
                     ) -> Mapping[str, Mapping[str, Holding]]:
    """The ledger to commit this cycle: a job's holdings its run no longer needs (every
    task of a replicated job done, a global job's nodes whose task completed or failed
    with no replacement) are left
    out, so their GPUs are free to every service planned in this cycle; their labels
    are still removed (the job's plan reads the whole ledger). A job whose counts
    cannot be read keeps its holdings, named in ``failed`` (raised when None)."""
    if not jobs:
        return ledger
    out = dict(ledger)
    for s, _r in parsed:
        prog = jobs.get(s.id)
        if prog is None or s.name not in ledger:
            continue
        try:
            done = s.mode == "replicated-job" and job_replicas(s, prog) == 0
        except Exception as exc:  # its fault is its own: what it holds stays held
            if failed is None:
                raise
            failed.setdefault(s.id, exc)
            continue
        if done:
            out.pop(s.name)
        elif s.mode == "global-job" and (prog.done_nodes or prog.failed_nodes):
            out[s.name] = {nid: h for nid, h in ledger[s.name].items()
                           if nid not in prog.done_nodes and nid not in prog.failed_nodes}
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
                 jobs: Mapping[str, JobProgress],
                 failed: MutableMapping[str, Exception] | None = None,
                 ) -> list[tuple[SwarmService, R]]:
    """``parsed`` without the replicated jobs whose run is over: the workload model counts
    a job while it runs (its real lifetime), as a service until it is removed. A job
    whose counts cannot be read is left out, named in ``failed`` (raised when None)."""
    if not jobs:
        return list(parsed)
    out: list[tuple[SwarmService, R]] = []
    for s, r in parsed:
        try:
            over = (s.mode == "replicated-job" and s.id in jobs
                    and job_replicas(s, jobs[s.id]) == 0)
        except Exception as exc:  # its fault is its own
            if failed is None:
                raise
            failed.setdefault(s.id, exc)
            continue
        if not over:
            out.append((s, r))
    return out


def job_defaults(s: SwarmService, r: GpuRequest | RequestError | None, prefix: str,
                 classes: Mapping[str, int] | None, ceiling: int | None = None,
                 ) -> GpuRequest | RequestError | None:
    """A job is batch work: unless its labels say otherwise it is of the lowest priority
    class and preemptible (a preempted job runs again: preemption's write to its spec
    starts a new run, whatever its restart condition; docs/requests.md). ``ceiling``:
    its tenant's ``max_priority`` (None: no tenants), which a default never passes: the
    stack asked for no priority, so none of it is a request above its limit (capped by
    ``Tenants.apply`` it read as one: `plan`'s "limited", `audit`'s tenant-limit)."""
    if s.mode not in JOB_MODES or not isinstance(r, GpuRequest):
        return r
    if f"{prefix}priority" not in s.labels:
        named = classes if classes is not None else DEFAULT_CLASSES
        if named:
            name, lowest = min(named.items(), key=lambda kv: (kv[1], kv[0]))
            if ceiling is not None and lowest > ceiling:
                name, lowest = "", ceiling
            r = replace(r, priority=lowest, priority_class=name)
    if r.preemptible is None:
        r = replace(r, preemptible=True)
    return r
