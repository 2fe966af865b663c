"""A job the engine's service list leaves out (``swarm.unkeyed``): its running tasks
have desired state complete, which the snapshot's list of tasks meant to run omits, and
no listed job's task list holds them. Swarm counts their CPU, memory and host-mode ports
on their node all the same. Before, the snapshot held none of them: placement counted
nothing of theirs and chose a node Swarm then refused. Pure: ``take_snapshot`` over the
recording Swarm stand-in, then the real planner."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.forged import RecordingSwarm, sw_svc
from support.placement import svc
from support.planner import two_nodes

from swarmgpu.core.config import Config
from swarmgpu.manager.nodes import sync
from swarmgpu.manager.placement import Planner
from swarmgpu.manager.placement.cluster import ClusterAllocator
from swarmgpu.manager.placement.preemptroom import Room
from swarmgpu.swarm.client import SwarmService, SwarmTask, task_from_api
from swarmgpu.swarm.unkeyed import Unkeyed

LEFT = ("the engine's answer lists service 2 of 2 with ID None, not a non-empty text: "
        "it is left out")
PORT = {"Protocol": "tcp", "TargetPort": 80, "PublishedPort": 8000, "PublishMode": "host"}


def _job_task(node_id: str, cpu_milli: int = 0, state: str = "running") -> SwarmTask:
    """A task of job id-job (not listed), as the engine lists it: running, its port
    reported, or on its way (``state``), none reported yet."""
    status: dict[str, object] = {"State": state}
    if state == "running":
        status["PortStatus"] = {"Ports": [PORT]}
    return task_from_api({
        "ID": "t-job", "ServiceID": "id-job", "NodeID": node_id, "Slot": 1,
        "DesiredState": "complete", "JobIteration": {"Index": 3},
        "Spec": {"Resources": {"Reservations": {"NanoCPUs": cpu_milli * 1_000_000}}},
        "Status": status})


def _snapshot(busy: str, left_out: bool, cpu_milli: int = 0,
              state: str = "running") -> sync.Snapshot:
    nodes, _facts = two_nodes()
    sw = RecordingSwarm(nodes, [sw_svc("other", {}, gated=False)],
                        [_job_task(busy, cpu_milli=cpu_milli, state=state)])
    sw.left_out = Unkeyed(services=(LEFT,)) if left_out else Unkeyed()
    return sync.take_snapshot(sw, Config())  # type: ignore[arg-type]


def _publishing(s: SwarmService) -> SwarmService:
    return replace(s, spec={"EndpointSpec": {"Ports": [PORT]}})


@pytest.fixture(autouse=True)
def _no_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sync, "fetch_agents", lambda *_a, **_k: {})


def test_a_left_out_jobs_running_task_is_in_the_snapshot() -> None:
    snap = _snapshot("n-a", left_out=True)
    assert [t.id for t in snap.tasks] == ["t-job"]
    assert snap.unkeyed.services == (LEFT,)


def test_no_list_of_completed_tasks_is_read_while_nothing_is_left_out() -> None:
    """(a job's whole history is in it: read only while a service is left out)"""
    assert _snapshot("n-a", left_out=False).tasks == []


def test_a_left_out_jobs_host_port_refuses_its_node() -> None:
    _nodes, facts = two_nodes()
    llm = _publishing(svc("llm", {"swarmgpu.gpus": "1"}))
    for busy, free in (("n-a", "n-b"), ("n-b", "n-a")):
        snap = _snapshot(busy, left_out=True)
        plan = Planner().plan(snap.nodes, [llm], snap.tasks, facts,  # type: ignore[arg-type]
                              unkeyed=snap.unkeyed)
        sp = next(p for p in plan.services if p.name == "llm")
        assert sp.status == "placed" and [p.node_id for p in sp.placements] == [free], sp


def test_a_left_out_jobs_port_is_said_as_a_left_out_services_not_a_removed_ones() -> None:
    _nodes, facts = two_nodes()
    llm = _publishing(svc("llm", {"swarmgpu.gpus": "1"}))
    snap = _snapshot("n-a", left_out=True)
    plan = Planner().plan(snap.nodes[:1], [llm], snap.tasks,  # type: ignore[arg-type]
                          {"n-a": facts["n-a"]}, unkeyed=snap.unkeyed)
    sp = next(p for p in plan.services if p.name == "llm")
    assert sp.status == "pending", sp
    assert "8000/tcp is taken by a task of a service the engine's list leaves out" in (
        sp.reason or ""), sp.reason


def test_a_left_out_jobs_cpu_reservation_counts_on_its_node() -> None:
    """Each node has 2000 CPU milli; the job's task reserves 1500 of one, llm asks 1000."""
    _nodes, facts = two_nodes()
    tt = {"Resources": {"Reservations": {"NanoCPUs": 1000 * 1_000_000}}}
    llm = svc("llm", {"swarmgpu.gpus": "1"})
    llm = replace(llm, spec={**llm.spec, "TaskTemplate": tt})
    for busy, free in (("n-a", "n-b"), ("n-b", "n-a")):
        snap = _snapshot(busy, left_out=True, cpu_milli=1500)
        plan = Planner().plan(snap.nodes, [llm], snap.tasks, facts,  # type: ignore[arg-type]
                              unkeyed=snap.unkeyed)
        sp = next(p for p in plan.services if p.name == "llm")
        assert sp.status == "placed" and [p.node_id for p in sp.placements] == [free], sp


def test_a_left_out_jobs_task_not_running_yet_is_noted_on_a_plan_publishing_a_port() -> None:
    """Its ports are reported once it runs, its spec is unread: a replica placed beside
    it may be refused by Swarm, which the plan says (it is not refused: not known)."""
    _nodes, facts = two_nodes()
    llm = _publishing(svc("llm", {"swarmgpu.gpus": "1"}))
    snap = _snapshot("n-a", left_out=True, state="starting")
    plan = Planner().plan(snap.nodes[:1], [llm], snap.tasks,  # type: ignore[arg-type]
                          {"n-a": facts["n-a"]}, unkeyed=snap.unkeyed)
    sp = next(p for p in plan.services if p.name == "llm")
    assert sp.status == "placed", sp
    (note,) = [w for w in sp.warnings if "leaves out" in w]
    assert "8000/tcp" in note and "node-a" in note and "not known until it runs" in note


def test_a_jobs_running_task_reserves_its_cpu_in_the_movers_allocator_too() -> None:
    """The mover's allocator (rebalance.context: ``ClusterAllocator`` over the tasks)
    counted only tasks desired running or ready: a job's running task (desired
    complete), listed or left out, reserved nothing there, so a move's target was
    chosen where Swarm then refused its task."""
    nodes, facts = two_nodes()
    snap = _snapshot("n-a", left_out=True, cpu_milli=1500)
    alloc = ClusterAllocator(nodes, facts, {}, tasks=snap.tasks)  # type: ignore[arg-type]
    left = {n: alloc.alloc.nodes[n].cpu_left for n in ("n-a", "n-b")}
    assert left["n-a"] is not None and left["n-b"] is not None
    assert left["n-b"] - left["n-a"] == 1500, left
    assert ("id-job", "n-a") in alloc.tasks_on


def test_a_jobs_running_task_reserves_its_cpu_in_preemptions_room_too() -> None:
    """Preemption's room (``preemptroom.Room``) counted only tasks desired running or
    ready: a job's running task reserved nothing there, so victims were stopped for a
    preemptor Swarm then refused on that node."""
    nodes, _facts = two_nodes()
    snap = _snapshot("n-a", left_out=True, cpu_milli=1500)
    room = Room.of(nodes, snap.services, snap.tasks, {})
    assert room.left["n-b"][0] == 2000 and room.left["n-a"][0] == 500, room.left
