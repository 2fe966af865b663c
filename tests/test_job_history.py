"""A job's history in the snapshot: Swarm keeps every task a job service made, over all
its runs (no task history limit applies to jobs), and the daemon lists them by service
each cycle. The tasks of other runs that completed, and the ended tasks the daemon never
reads, are left out before they are parsed (``jobs.job_raw_read``); what the daemon reads
of the job (its progress, its idle done nodes, the tasks per service) is the same.
Before, every task of the job's history was parsed each cycle, and the completed tasks
of its earlier runs were kept in the snapshot."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from swarmgpu.core.config import Config
from swarmgpu.manager.nodes import sync
from swarmgpu.manager.placement import jobs
from swarmgpu.manager.placement.jobs import done_idle, job_progress, job_task_read
from swarmgpu.manager.placement.tasks import tasks_by_service
from swarmgpu.swarm import client as client_mod
from swarmgpu.swarm.client import SwarmClient, SwarmError, SwarmTask, task_from_api

RUN = 3  # the job's current run (JobStatus.JobIteration.Index)


def _raw(tid: str, desired: str, state: str, run: int | None, node: str = "n-a",
         slot: int = 1) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ID": tid, "ServiceID": "j", "NodeID": node, "Slot": slot,
        "DesiredState": desired, "Status": {"State": state},
        "Spec": {"ContainerSpec": {"Image": "x"},
                 "Placement": {"Constraints": ["node.labels.swarmgpu.gate.j==true"]}}}
    if run is not None:
        out["JobIteration"] = {"Index": run}
    return out


def _job() -> dict[str, Any]:
    tt = {"ContainerSpec": {"Image": "x"}, "RestartPolicy": {"Condition": "on-failure"},
          "Placement": {"Constraints": ["node.labels.swarmgpu.gate.j==true"]}}
    return {"ID": "j", "Version": {"Index": 9}, "JobStatus": {"JobIteration": {"Index": RUN}},
            "Spec": {"Name": "j", "Labels": {"swarmgpu.gpus": "1"}, "TaskTemplate": tt,
                     "Mode": {"ReplicatedJob": {"MaxConcurrent": 2, "TotalCompletions": 6}}}}


def _history() -> list[dict[str, Any]]:
    """Two earlier runs of six completions each (one failure), and the current run: two
    completed, one running, one failed whose replacement waits in its restart delay, and
    one Swarm shut down when a node left."""
    old = [_raw(f"old{run}-{i}", "complete", "complete", run, f"n-{'ab'[i % 2]}", i)
           for run in (1, 2) for i in range(6)]
    old += [_raw("old2-failed", "shutdown", "failed", 2, "n-b", 7),
            _raw("old2-shut", "shutdown", "shutdown", 2, "n-b", 8)]
    now = [_raw("done-1", "complete", "complete", RUN, "n-a", 1),
           _raw("done-2", "complete", "complete", RUN, "n-b", 2),
           _raw("live-3", "complete", "running", RUN, "n-a", 3),
           _raw("failed-4", "shutdown", "failed", RUN, "n-b", 4),
           _raw("again-4", "ready", "ready", RUN, "n-b", 4),
           _raw("gone-5", "shutdown", "shutdown", RUN, "n-c", 5)]
    return old + now


class _Api:
    """The engine's lists as the API sends them: tasks filtered by service and desired
    state as Moby filters them (both: both)."""

    def __init__(self, tasks: list[Any]) -> None:
        self.raw = tasks

    def tasks(self, filters: dict[str, Any]) -> list[Any]:
        want, sids = filters.get("desired-state"), filters.get("service")
        return [t for t in self.raw if not isinstance(t, dict)
                or ((want is None or t["DesiredState"] in want)
                    and (sids is None or t["ServiceID"] in sids))]

    def nodes(self, **_: object) -> list[object]:
        return []

    def services(self, **_: object) -> list[object]:
        return [_job()]

    def inspect_swarm(self) -> dict[str, object]:
        return {}


def _snapshot(monkeypatch: pytest.MonkeyPatch, tasks: list[Any]) -> tuple[sync.Snapshot,
                                                                            list[str]]:
    parsed: list[str] = []

    def counted(t: Any) -> SwarmTask:
        parsed.append(str(t["ID"]) if isinstance(t, dict) else repr(t))
        return task_from_api(t)

    monkeypatch.setattr(client_mod, "task_from_api", counted)
    monkeypatch.setattr(sync, "fetch_agents", lambda *_a, **_k: {})
    sw = SwarmClient.__new__(SwarmClient)
    sw.endpoint, sw._api = "unix:///test", _Api(tasks)
    return sync.take_snapshot(sw, Config()), parsed


def test_a_jobs_earlier_runs_are_neither_parsed_nor_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Of 20 tasks of the job, the 12 completed in earlier runs and the 2 shut down that
    did not fail are not parsed, nor kept: the other 6 are. Before: all 20 were parsed,
    and 18 kept in the snapshot."""
    snap, parsed = _snapshot(monkeypatch, _history())
    kept = ["again-4", "done-1", "done-2", "failed-4", "live-3", "old2-failed"]
    assert sorted(t.id for t in snap.tasks) == kept
    # the ready task is in the desired-state list too: parsed there and by service
    assert sorted(parsed) == ["again-4", *kept]


def test_what_the_daemon_reads_of_a_job_is_the_same_without_its_history(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's progress, its idle done nodes and the tasks per service, read from the
    snapshot, equal what every task of its history, parsed and read as before, gives."""
    snap, _ = _snapshot(monkeypatch, _history())
    before = [t for t in map(task_from_api, _history()) if job_task_read(t)]
    services = snap.services
    assert job_progress(services, snap.tasks) == job_progress(services, before)
    assert job_progress(services, snap.tasks)["j"].complete == 2
    assert done_idle(services, snap.tasks) == done_idle(services, before)
    assert tasks_by_service(snap.tasks) == tasks_by_service(before)


def test_an_earlier_runs_task_still_running_is_read_as_one_swarm_is_stopping(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A new run of a job: Swarm's job orchestrators set each task of an earlier run that
    has not ended to desired remove (a replicated job's) or shutdown (a global job's,
    swarmkit jobs/*/reconciler.go). Such a task is in the snapshot's stopping tasks (its
    node's resources and GPUs counted until it stops), not among the job's; one still
    desired complete (the instant before Swarm marks it) among the job's tasks."""
    earlier = [_raw("old2-removed", "remove", "running", 2, "n-b", 9),
               _raw("old2-shutdown", "shutdown", "starting", 2, "n-a", 10),
               _raw("old2-unmarked", "complete", "running", 2, "n-a", 11)]
    snap, _ = _snapshot(monkeypatch, [*_history(), *earlier])
    assert sorted(t.id for t in snap.stopping) == ["old2-removed", "old2-shutdown"]
    assert {t.id for t in snap.tasks} & {t["ID"] for t in earlier} == {"old2-unmarked"}


def test_a_history_task_not_as_docker_sends_it_is_still_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A completed task of an earlier run whose run cannot be read is parsed (and refused,
    naming it), as every task of the list was: one not read is never guessed as another
    run's."""
    bad = _raw("odd", "complete", "complete", None)
    bad["JobIteration"] = {"Index": "one"}
    with pytest.raises(SwarmError, match="odd"):
        _snapshot(monkeypatch, [*_history(), bad])


STATES = ("complete", "ready", "running", "shutdown", "failed", "rejected", "remove", "")


@pytest.mark.parametrize("run", [None, 2, RUN])
def test_the_unparsed_read_agrees_with_the_parsed_one(run: int | None) -> None:
    """``job_raw_read`` leaves out just what ``job_task_read`` would, over every desired
    and actual state, with and without a run, and parses whatever it cannot read."""
    read = jobs.job_raw_read({"j": RUN})
    for desired, state in itertools.product(STATES, STATES):
        raw = _raw("t", desired, state, run)
        assert read(raw) == jobs.job_task_read(task_from_api(raw), RUN), (desired, state, run)
    odd = [None, "x", {"ServiceID": "j"}, {**_raw("t", "complete", "complete", 1),
                                          "Status": None},
           {**_raw("t", "complete", "complete", 1), "JobIteration": {"Index": -1}},
           {**_raw("t", "complete", "complete", 1), "JobIteration": {"Index": True}}]
    assert all(read(x) for x in odd)
