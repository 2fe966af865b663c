"""Pure tests of Swarm jobs with a GPU request (placement.jobs)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.placement import FACTS, apply, node, svc

from swarmgpu.manager.placement import Planner
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
NODES = [node("n-dgx", "gpu-node-1"), node("n-4090", "gpu-node-2")]


def job(replicas: int = 2, it: int = 0) -> SwarmService:
    return replace(svc("embed", {f"{P}gpus": "1"}), mode="replicated-job", replicas=None,
                   total_completions=replicas, max_concurrent=replicas, job_iteration=it)


def task(tid: str, nid: str, state: str, it: int, fu: int = 1) -> SwarmTask:
    return SwarmTask(tid, "id-embed", nid, None, state, "complete", (), force_update=fu,
                     job_iteration=it)


def test_job_places_its_tasks_then_releases_when_complete_and_reruns() -> None:
    planner = Planner()
    s = job()
    plan = planner.plan(NODES, [s], [task("a", "", "pending", 0, 0)] * 2, FACTS)
    sp = plan.services[0]
    assert sp.mode == "replicated-job" and len(sp.placements) == 2
    assert sp.force_update and sp.set_update_parallelism is None
    assert sp.progress == "0 of 2 complete, 2 GPU holding(s) now"
    nodes = apply(NODES, plan)
    labels = {**s.labels, **sp.service_labels_set}
    s = replace(s, labels=labels, force_update=1, job_iteration=1, version=2)
    running = [task("b", "n-dgx", "running", 1), task("c", "n-4090", "running", 1)]
    plan = planner.plan(nodes, [s], running, FACTS)
    sp = plan.services[0]
    assert not sp.needs_service_write  # a write would run the job again
    nodes = apply(nodes, plan)
    assert all(n.labels.get(f"{P}service.embed") == "true" for n in nodes)
    # one completed: its node keeps its gate and its GPU while the run may still start a
    # task (c's replacement, were it to fail) on any gated node
    half = [task("b", "n-dgx", "complete", 1), task("c", "n-4090", "running", 1)]
    plan = planner.plan(nodes, [s], half, FACTS)
    sp = plan.services[0]
    assert [p.hostname for p in sp.placements] == ["gpu-node-1", "gpu-node-2"]
    assert not sp.needs_service_write and "n-dgx" not in plan.node_remove
    nodes = apply(nodes, plan)
    done = [task("b", "n-dgx", "complete", 1), task("c", "n-4090", "complete", 1)]
    plan = planner.plan(nodes, [s], done, FACTS)
    sp = plan.services[0]
    assert (sp.status, sp.state) == ("done", "Complete") and not sp.placements
    assert not sp.needs_service_write and sp.progress.startswith("2 of 2 complete, 0 GPU")
    nodes = apply(nodes, plan)
    assert not any(k.startswith(f"{P}assign.") for n in nodes for k in n.labels)
    # the gates stay: Swarm rejects (and runs again) a completed task whose node no
    # longer matches its constraints
    assert all(n.labels.get(f"{P}service.embed") == "true" for n in nodes)
    # docker service update --force: a new run, its tasks wait; they get GPUs again
    s = replace(s, force_update=2, job_iteration=2, version=3)
    rerun = [*done, task("d", "", "pending", 2, 2), task("e", "", "pending", 2, 2)]
    sp = planner.plan(nodes, [s], rerun, FACTS).services[0]
    assert sp.status == "placed" and len(sp.placements) == 2


def test_failed_task_not_restarted_releases_its_gpu() -> None:
    spec = {"TaskTemplate": {"RestartPolicy": {"Condition": "none"}}}
    s = replace(job(1, 1), spec=spec)
    planner = Planner()
    sp = planner.plan(NODES, [s], [task("a", "n-dgx", "failed", 1)], FACTS).services[0]
    assert not sp.placements and sp.progress == "0 of 1 complete, 0 GPU holding(s) now, 1 failed"


def test_done_job_holds_nothing_and_its_gpu_is_taken_by_a_new_service() -> None:
    """The device map stays on a finished job (removing it would run the job again); it is
    never adopted as a holding, so every GPU of the node is free for another service."""
    n4090 = [NODES[1]]
    s = replace(job(1, 1), labels={f"{P}gpus": "1", f"{P}devices.n-4090": "GPU-x"})
    s = replace(s, labels={**s.labels, f"{P}devices.n-4090":
                           FACTS["n-4090"].gpus[0].uuid})
    whole = svc("whole", {f"{P}gpus": str(len(FACTS["n-4090"].gpus))})
    plan = Planner().plan(n4090, [s, whole], [task("a", "n-4090", "complete", 1)],
                          {"n-4090": FACTS["n-4090"]})
    by = {sp.name: sp for sp in plan.services}
    assert by["embed"].status == "done" and not by["embed"].placements
    assert by["whole"].status == "placed", by["whole"].reason


def test_global_job_starts_a_run_once_its_gates_are_open_then_releases_done_nodes() -> None:
    """Swarm's global job makes tasks only when a run starts, on the nodes matching then:
    the map is written, the gates open, and then one run is started."""
    s = replace(svc("embed", {f"{P}gpus": "1"}), mode="global-job", replicas=None)
    planner = Planner()
    plan = planner.plan(NODES, [s], [], FACTS)
    sp = plan.services[0]
    assert len(sp.placements) == 2 and sp.service_labels_set and not plan.node_set.get(
        "n-dgx", {}).get(f"{P}service.embed")
    nodes = apply(NODES, plan)
    s = replace(s, labels={**s.labels, **sp.service_labels_set}, force_update=1,
                job_iteration=1, version=2)
    plan = planner.plan(nodes, [s], [], FACTS)  # no task: gates open now
    assert not plan.services[0].force_update
    nodes = apply(nodes, plan)
    assert all(n.labels.get(f"{P}service.embed") == "true" for n in nodes)
    sp = planner.plan(nodes, [s], [], FACTS).services[0]
    assert sp.force_update and not sp.service_labels_set  # a run starts: Swarm makes tasks
    s = replace(s, force_update=2, job_iteration=2, version=3)
    one_done = [task("a", "n-dgx", "complete", 2, 2), task("b", "n-4090", "running", 2, 2)]
    plan = planner.plan(nodes, [s], [replace(t, service_id=s.id) for t in one_done], FACTS)
    sp = plan.services[0]
    assert [p.hostname for p in sp.placements] == ["gpu-node-2"]
    assert not sp.needs_service_write and f"{P}assign.embed" in plan.node_remove["n-dgx"]
    assert f"{P}service.embed" not in plan.node_remove["n-dgx"]  # the done task's gate stays


def test_a_finished_jobs_gpus_are_free_in_the_cycle_that_sees_it_finish() -> None:
    """Its ledger entries are not committed once its run is done: a service planned in
    the same cycle (any order) may take those GPUs while the job's labels go."""
    n4090 = [NODES[1]]
    facts = {"n-4090": FACTS["n-4090"]}
    planner = Planner()
    s = job(1, 0)
    plan = planner.plan(n4090, [s], [task("a", "", "pending", 0, 0)], facts)
    nodes = apply(n4090, plan)
    s = replace(s, labels={**s.labels, **plan.services[0].service_labels_set},
                force_update=1, job_iteration=1, version=2)
    nodes = apply(nodes, planner.plan(nodes, [s], [task("b", "", "pending", 1)], facts))
    assert any(k.startswith(f"{P}assign.") for k in nodes[0].labels)
    whole = svc("aaa", {f"{P}gpus": str(len(FACTS["n-4090"].gpus))})
    plan = planner.plan(nodes, [s, whole], [task("b", "n-4090", "complete", 1)], facts)
    by = {sp.name: sp for sp in plan.services}
    assert by["embed"].status == "done"
    assert f"{P}assign.embed" in plan.node_remove["n-4090"]
    assert by["aaa"].status == "placed", by["aaa"].reason


def test_departures_replay_runs_pods_as_jobs_and_frees_room_through_the_job_path() -> None:
    from support.sim import node_spec, trace_pod

    from swarmgpu.sim.swarm_replay import World, replay_departures_planner

    nodes = [node_spec("n", 2)]
    pods = [trace_pod("p1", 0, 10, 2), trace_pod("p2", 5, 20), trace_pod("p3", 10, 30, 2)]
    r = replay_departures_planner(nodes, pods, 1, batch=1)
    # p2 finds no GPU (p1 holds both); p1's job completes at 10 and p3 gets both.
    assert r.placed == 2 and r.failed == {"1gpu": 1}
    w = World.of(nodes, [0])
    w.jobs = True
    s = w.add_service(1, pods[0])
    assert s.mode == "replicated-job" and w.tasks[s.id].desired_state == "complete"
    w.complete(s.id)
    assert w.tasks[s.id].state == "complete"


def test_workload_model_counts_a_job_while_it_runs() -> None:
    planner = Planner()
    s = job(2, 1)
    planner.plan(NODES, [s], [task("a", "n-dgx", "running", 1)], FACTS)
    assert planner.model.knows(s.id)
    done = [task("a", "n-dgx", "complete", 1), task("b", "n-4090", "complete", 1)]
    planner.plan(NODES, [s], done, FACTS)
    assert not planner.model.knows(s.id)  # its run is over: its lifetime ended


def test_jobs_default_to_the_lowest_priority_class_and_preemptible() -> None:
    classes = {"critical": 1000, "inference": 100, "batch": -5}
    planner = Planner(priority_classes=classes)
    plain, told = job(1, 0), replace(job(1, 0), id="id-told", name="told",
                                     labels={f"{P}gpus": "1", f"{P}priority": "inference",
                                             f"{P}preemptible": "false"})
    by = {sp.name: sp.request for sp in planner.plan(NODES, [plain, told], [], FACTS).services}
    r = by["embed"]
    assert r is not None and (r.priority, r.priority_class, r.preemptible) == (-5, "batch", True)
    r = by["told"]
    assert r is not None and (r.priority, r.preemptible) == (100, False)
    service = planner.plan(NODES, [svc("svc", {f"{P}gpus": "1"})], [], FACTS).services[0]
    assert service.request is not None and service.request.preemptible is None  # unchanged


def _read_as_the_daemon(monkeypatch: pytest.MonkeyPatch, s: SwarmService,
                        tasks: list[SwarmTask], nodes: list[SwarmNode] | None = None,
                        ) -> tuple[list[SwarmService], list[SwarmTask]]:
    """Services and tasks as ``take_snapshot`` reads them from Swarm (no agent read)."""
    from support.forged import RecordingSwarm

    from swarmgpu.core.config import Config
    from swarmgpu.manager.nodes import sync

    monkeypatch.setattr(sync, "fetch_agents", lambda *_a, **_k: {})
    snap = sync.take_snapshot(RecordingSwarm(nodes or NODES, [s], tasks), Config())  # type: ignore[arg-type]
    return list(snap.services), list(snap.tasks)


def test_failed_task_swarm_shut_down_releases_its_gpu_as_the_daemon_reads_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Swarm's restart supervisor sets every failed job task's desired state to shutdown,
    restarted or not (swarmkit ``restart.Supervisor.Restart``); with restart condition
    none nothing replaces it. Before: the daemon read a job's tasks of desired state
    complete only, never saw the failure, and held the job's GPU for good."""
    spec = {"TaskTemplate": {"RestartPolicy": {"Condition": "none"}}}
    s = replace(job(1, 1), spec=spec)
    failed = replace(task("a", "n-dgx", "failed", 1), desired_state="shutdown", slot=1)
    services, tasks = _read_as_the_daemon(monkeypatch, s, [failed])
    sp = Planner().plan(NODES, services, tasks, FACTS).services[0]
    assert not sp.placements and sp.progress == "0 of 1 complete, 0 GPU holding(s) now, 1 failed"
    # Swarm fills the slot again when another event reconciles the job: it holds again
    again = replace(task("b", "", "pending", 1), slot=1)
    services, tasks = _read_as_the_daemon(monkeypatch, s, [failed, again])
    sp = Planner().plan(NODES, services, tasks, FACTS).services[0]
    assert len(sp.placements) == 1 and sp.progress == "0 of 1 complete, 1 GPU holding(s) now"


def _run_job(monkeypatch: pytest.MonkeyPatch, s: SwarmService, pending: list[SwarmTask],
             ) -> tuple[Planner, list[SwarmNode], SwarmService]:
    """``s`` placed and its run started (iteration 1): device map written, gates open."""
    planner = Planner()
    plan = planner.plan(NODES, [s], pending, FACTS)
    nodes = apply(NODES, plan)
    s = replace(s, labels={**s.labels, **plan.services[0].service_labels_set},
                force_update=1, job_iteration=1, version=2)
    pending = [replace(t, force_update=1, job_iteration=1) for t in pending]
    services, tasks = _read_as_the_daemon(monkeypatch, s, pending, nodes)
    nodes = apply(nodes, planner.plan(nodes, services, tasks, FACTS))
    return planner, nodes, s


def test_a_done_nodes_open_gate_holds_while_the_run_still_makes_tasks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """3 completions, 2 at once: once 2 complete, 1 holding is needed, but both nodes keep
    the job's gate (their completed tasks need it). Swarm's next task may land on either.
    Before: the dropped node kept its gate without its ledger entry: the third task ran
    there on GPUs no longer held, and another service could be placed on them."""
    s = replace(job(3, 0), max_concurrent=2)
    planner, nodes, s = _run_job(monkeypatch, s, [task("p", "", "pending", 0, 0)] * 2)
    assert all(n.labels.get(f"{P}service.embed") == "true" for n in nodes)
    two_done = [replace(task("a", "n-dgx", "complete", 1), slot=1),
                replace(task("b", "n-4090", "complete", 1), slot=2),
                replace(task("c", "", "pending", 1), slot=3)]
    services, tasks = _read_as_the_daemon(monkeypatch, s, two_done, nodes)
    nodes = apply(nodes, planner.plan(nodes, services, tasks, FACTS))
    for n in nodes:  # wherever Swarm starts task c, its GPUs are held
        if n.labels.get(f"{P}service.embed") == "true":
            assert f"{P}assign.embed" in n.labels, n.hostname
    # the run finished: nothing is held, the gates of its completed tasks stay
    done = [*two_done[:2], replace(task("c", "n-dgx", "complete", 1), slot=3)]
    services, tasks = _read_as_the_daemon(monkeypatch, s, done, nodes)
    nodes = apply(nodes, planner.plan(nodes, services, tasks, FACTS))
    assert not any(k.startswith(f"{P}assign.") for n in nodes for k in n.labels)
    assert all(n.labels.get(f"{P}service.embed") == "true" for n in nodes)


def test_a_done_nodes_gate_without_a_holding_closes_while_the_run_makes_tasks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A done node's gate open with no ledger entry (as an earlier release left it) is
    closed while the run still makes tasks: a task Swarm starts there would use GPUs
    nothing holds. (Its completed task may be rejected and run again: no double use.)"""
    s = replace(job(3, 0), max_concurrent=2)
    planner, nodes, s = _run_job(monkeypatch, s, [task("p", "", "pending", 0, 0)] * 2)
    nodes = [replace(n, labels={k: v for k, v in n.labels.items()
                                if k != f"{P}assign.embed"}) if n.id == "n-dgx" else n
             for n in nodes]
    two_done = [replace(task("a", "n-dgx", "complete", 1), slot=1),
                replace(task("b", "n-4090", "complete", 1), slot=2),
                replace(task("c", "", "pending", 1), slot=3)]
    services, tasks = _read_as_the_daemon(monkeypatch, s, two_done, nodes)
    plan = planner.plan(nodes, services, tasks, FACTS)
    gated_unheld = [n.hostname for n in apply(nodes, plan)
                    if n.labels.get(f"{P}service.embed") == "true"
                    and f"{P}assign.embed" not in n.labels]
    assert not gated_unheld


def test_a_run_whose_task_failed_and_restarts_is_started_and_gets_no_service_write(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Swarm restarts a failed job task (its default restart condition) and sets the failed
    one's desired state to shutdown: the run did start. Before: that task was not read,
    the run looked not started, and a device map write (here its node drained) or a
    global job's run start was made: any update of a job runs it again from the start
    (JobIteration + 1, its restart attempts counted anew)."""
    s = job(1, 0)
    planner, nodes, s = _run_job(monkeypatch, s, [task("p", "", "pending", 0, 0)])
    failed = replace(task("a", "n-dgx", "failed", 1), desired_state="shutdown", slot=1)
    again = replace(task("b", "", "pending", 1), slot=1)
    nodes = [replace(n, availability="drain") if n.id == "n-dgx" else n for n in nodes]
    services, tasks = _read_as_the_daemon(monkeypatch, s, [failed, again], nodes)
    sp = planner.plan(nodes, services, tasks, FACTS).services[0]
    assert not sp.needs_service_write, sp.warnings
    # a global job whose every task failed, their replacements not made yet (restart delay)
    g = replace(svc("embed", {f"{P}gpus": "1"}), mode="global-job", replicas=None)
    planner = Planner()
    for _ in range(3):  # map written, gates opened, run started
        plan = planner.plan(NODES if _ == 0 else nodes, [g], [], FACTS)
        nodes = apply(NODES if _ == 0 else nodes, plan)
        sp = plan.services[0]
        g = replace(g, labels={**g.labels, **sp.service_labels_set}, version=g.version + 1,
                    force_update=g.force_update + sp.force_update,
                    job_iteration=(g.job_iteration or 0) + 1)
    assert sp.force_update
    both = [replace(task(t, nid, "failed", g.job_iteration or 0), desired_state="shutdown")
            for t, nid in (("a", "n-dgx"), ("b", "n-4090"))]
    services, tasks = _read_as_the_daemon(monkeypatch, g, both, nodes)
    sp = planner.plan(nodes, services, tasks, FACTS).services[0]
    assert not sp.force_update and not sp.needs_service_write, sp.warnings


def test_a_done_nodes_kept_holding_is_no_preemption_victim(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A holding a replicated job keeps on a node whose task completed (its run still
    makes tasks) runs nothing there: preempting it stops no task, spends the hour, and
    closing its gate makes Swarm reject the completed task and run it again. Before, it
    was chosen as a victim like a running one."""
    from swarmgpu.manager.placement.preempt import choose_preemptions

    s = replace(job(3, 0), max_concurrent=2)
    planner, nodes, s = _run_job(monkeypatch, s, [task("p", "", "pending", 0, 0)] * 2)
    two_done = [replace(task("a", "n-dgx", "complete", 1), slot=1),
                replace(task("b", "n-4090", "complete", 1), slot=2),
                replace(task("c", "", "pending", 1), slot=3)]
    services, tasks = _read_as_the_daemon(monkeypatch, s, two_done, nodes)
    nodes = apply(nodes, planner.plan(nodes, services, tasks, FACTS))
    high = svc("high", {f"{P}gpus": "8", f"{P}priority": "100"})
    tasks = [*tasks, SwarmTask("t-high", high.id, "", 1, "pending", "running", ())]
    plan = planner.plan(nodes, [*services, high], tasks, FACTS)
    assert {sp.name: sp.status for sp in plan.services}["high"] == "pending"
    assert all(f"{P}assign.embed" in n.labels for n in nodes)
    assert choose_preemptions(plan, nodes, [*services, high], tasks, FACTS, prefix=P,
                              preemptible_below=100) == []


def test_a_failed_task_past_max_attempts_releases_its_gpu_and_one_in_restart_delay_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Swarm's restart supervisor shuts a failed job task down and, in the same write,
    makes its replacement (desired state ready while the restart delay runs) unless the
    slot is past ``MaxAttempts`` (swarmkit ``restart.Supervisor.Restart``): a failed slot
    with no replacement is one Swarm gave up on, whatever its restart condition. Before:
    with condition any or on-failure it kept its GPU until Swarm refilled the slot, which
    for a job with nothing else left to run never comes."""
    spec = {"TaskTemplate": {"RestartPolicy": {"Condition": "on-failure", "MaxAttempts": 2}}}
    s = replace(job(1, 0), spec=spec)
    planner, nodes, s = _run_job(monkeypatch, s, [task("p", "", "pending", 0, 0)])
    assert any(f"{P}assign.embed" in n.labels for n in nodes)
    tries = [replace(task(t, "n-dgx", "failed", 1), desired_state="shutdown", slot=1)
             for t in ("a", "b")]
    # the third try's restart delay runs: its replacement exists, desired state ready
    delayed = replace(task("c", "n-dgx", "ready", 1), desired_state="ready", slot=1)
    services, tasks = _read_as_the_daemon(monkeypatch, s, [*tries, delayed], nodes)
    plan = planner.plan(nodes, services, tasks, FACTS)
    assert len(plan.services[0].placements) == 1, plan.services[0].progress
    nodes = apply(nodes, plan)
    assert any(f"{P}assign.embed" in n.labels for n in nodes)
    # it failed too, past its 2 restarts: Swarm made no replacement
    gave_up = [*tries, replace(delayed, state="failed", desired_state="shutdown")]
    services, tasks = _read_as_the_daemon(monkeypatch, s, gave_up, nodes)
    plan = planner.plan(nodes, services, tasks, FACTS)
    sp = plan.services[0]
    assert not sp.placements and sp.progress == "0 of 1 complete, 0 GPU holding(s) now, 1 failed"
    assert not any(f"{P}assign.embed" in n.labels for n in apply(nodes, plan))


def test_a_global_jobs_node_whose_task_failed_unrestarted_releases_its_gpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A global job with restart condition none: a node whose task failed gets no
    replacement (swarmkit ``restart.Supervisor.shouldRestart``), and its GPUs go as a
    replicated job's do. Before: only nodes whose task completed gave theirs back; the
    failed node's stayed held until the job ran again."""
    spec = {"TaskTemplate": {"RestartPolicy": {"Condition": "none"}}}
    g = replace(svc("embed", {f"{P}gpus": "1"}), mode="global-job", replicas=None, spec=spec)
    planner = Planner()
    nodes = NODES
    for _ in range(3):  # map written, gates opened, run started
        plan = planner.plan(nodes, [g], [], FACTS)
        nodes = apply(nodes, plan)
        sp = plan.services[0]
        g = replace(g, labels={**g.labels, **sp.service_labels_set}, version=g.version + 1,
                    force_update=g.force_update + sp.force_update,
                    job_iteration=(g.job_iteration or 0) + 1)
    it = g.job_iteration or 0
    ended = [task("a", "n-dgx", "complete", it),
             replace(task("b", "n-4090", "failed", it), desired_state="shutdown")]
    services, tasks = _read_as_the_daemon(monkeypatch, g, ended, nodes)
    plan = planner.plan(nodes, services, tasks, FACTS)
    sp = plan.services[0]
    assert not sp.placements and sp.progress == "1 of 2 complete, 0 GPU holding(s) now, 1 failed"
    after = {n.id: n.labels for n in apply(nodes, plan)}
    assert not any(f"{P}assign.embed" in labels for labels in after.values())
    # the completed task's gate stays; the failed node's goes (a task Swarm made there
    # when it next reconciles the job would run on GPUs nothing holds)
    assert after["n-dgx"].get(f"{P}service.embed") == "true"
    assert f"{P}service.embed" not in after["n-4090"]


def test_a_running_job_gets_no_write_for_a_cuda_device_order_record_whose_line_went(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The owner took adoption's CUDA_DEVICE_ORDER line out of a job (that update ran it
    again); its record (``state.order-env``) stayed. Dropping the record is a write of the
    job's spec, which runs the job again from the start: not once the run has started
    (the record goes before a later run starts). Before, the running job was started
    over."""
    s = job(1, 0)
    planner, nodes, s = _run_job(monkeypatch, s, [task("p", "", "pending", 0, 0)])
    s = replace(s, labels={**s.labels, f"{P}state.order-env": "true"})
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" not in s.env
    running = [replace(task("a", "n-dgx", "running", 1), slot=1)]
    services, tasks = _read_as_the_daemon(monkeypatch, s, running, nodes)
    sp = planner.plan(nodes, services, tasks, FACTS).services[0]
    assert not sp.needs_service_write, (sp.service_labels_remove, sp.warnings)


def test_a_running_job_gets_no_write_for_its_preemption_record(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A job preempted earlier, placed again and running, still has its record
    (``state.preempted``: its removal goes with a placement write, which a started run
    withholds). Removing it alone is a spec write all the same, which runs the job again
    from the start: not while it runs."""
    s = job(1, 0)
    planner, nodes, s = _run_job(monkeypatch, s, [task("p", "", "pending", 0, 0)])
    mark = '{"by": "urgent", "priority": 100, "at": 1, "node": "gpu-node-1"}'
    s = replace(s, labels={**s.labels, f"{P}state.preempted": mark})
    running = [replace(task("a", "n-dgx", "running", 1), slot=1)]
    services, tasks = _read_as_the_daemon(monkeypatch, s, running, nodes)
    sp = planner.plan(nodes, services, tasks, FACTS).services[0]
    assert not sp.needs_service_write, (sp.service_labels_remove, sp.warnings)
