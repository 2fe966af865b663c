"""A service whose spec has a part that is not what Docker sends fails alone.

Docker sends a service's Spec, TaskTemplate, Placement, Mode and ContainerSpec as objects,
its Labels as texts by texts, its Constraints and Env as lists of texts; a proxy may send
a null or a string instead. ``service_from_api`` read them unguarded: a string
TaskTemplate raised an AttributeError, and the whole services list (so the whole cycle)
failed. Now such a service is read as far as it can be and marked ``unread`` (the field
and its fix): placement fails it alone, its plan naming the field (not a swarmgpu
fault), nothing is written for it, what it holds stays held (its containers still run),
and the grants step says it cannot judge it, never failing the others. A service with
no ID, or listed as no object, is still refused (SwarmError), as a task is; one without
a Name reads as nameless, as ever (the engine's fakes in tests send such)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from support.forged import RecordingSwarm, offline_daemon, snapshot, sw_node, sw_svc
from support.isolation import BAD, FACTS, NODES, settled_all
from support.placement import P, apply, svc
from support.unread import listed_client

from swarmgpu.manager.commands.plan import render_plan
from swarmgpu.manager.cycle.placement import findings_of
from swarmgpu.manager.cycle.releases import hold_stale_releases
from swarmgpu.manager.placement import PlacementPlan, Planner, assign_key
from swarmgpu.manager.services.grants import ImageEnv, find_ungranted, service_access
from swarmgpu.manager.web.cluster_view import build_cluster, render_status
from swarmgpu.swarm.client import (
    SwarmError,
    SwarmService,
    SwarmTask,
    UnreadWrite,
    service_from_api,
)
from swarmgpu.swarm.specread import UnreadSpec

GPUS4 = {f"{P}gpus": "4"}


def _raw(name: str, labels: Any = None, sid: str = "", **parts: Any) -> dict[str, Any]:
    spec = {"Name": name, "Labels": GPUS4 if labels is None else labels, **parts}
    return {"ID": sid or f"id-{name}", "Version": {"Index": 2}, "Spec": spec}


def test_a_text_task_template_marks_that_service_unread_the_others_read() -> None:
    got = listed_client([_raw("a"), _raw(BAD, TaskTemplate="x"), _raw("c")]).services()
    assert [s.name for s in got] == ["a", BAD, "c"]
    bad = got[1]
    assert bad.unread.startswith("Spec.TaskTemplate is str 'x', not an object")
    assert "check any proxy" in bad.unread
    assert (bad.id, bad.version, bad.labels) == (f"id-{BAD}", 2, GPUS4)
    assert got[0].unread == got[2].unread == ""


@pytest.mark.parametrize(("parts", "field"), [
    ({"TaskTemplate": {"Placement": "x"}}, "Spec.TaskTemplate.Placement is"),
    ({"TaskTemplate": {"ContainerSpec": ["x"]}}, "Spec.TaskTemplate.ContainerSpec is"),
    ({"TaskTemplate": {"Placement": {"Constraints": "node.role==worker"}}},
     "Spec.TaskTemplate.Placement.Constraints is"),
    ({"TaskTemplate": {"ContainerSpec": {"Env": "A=1"}}}, "Spec.TaskTemplate.ContainerSpec.Env"),
    ({"TaskTemplate": {"ForceUpdate": "often"}}, "Spec.TaskTemplate.ForceUpdate is"),
    ({"Mode": "replicated"}, "Spec.Mode is"),
    ({"Mode": {"Replicated": "x"}}, "Spec.Mode.Replicated is"),
    ({"Mode": {"Replicated": {"Replicas": "many"}}}, "Spec.Mode.Replicated.Replicas is"),
    ({"Mode": {"ReplicatedJob": 3}}, "Spec.Mode.ReplicatedJob is"),
    ({"Name": 7}, "Spec.Name is"),
])
def test_each_part_that_is_not_what_docker_sends_is_named(parts: dict[str, Any],
                                                         field: str) -> None:
    s = service_from_api(_raw(BAD, **parts))
    assert s.unread.startswith(field) and s.id == f"id-{BAD}"


@pytest.mark.parametrize("labels", ["x", ["a"], {"a": 1}])
def test_labels_that_are_not_texts_by_texts_are_named(labels: Any) -> None:
    s = service_from_api(_raw(BAD, labels))
    assert s.unread.startswith("Spec.Labels is") and s.labels == {}


def test_a_spec_that_is_no_object_keeps_the_id_and_version() -> None:
    s = service_from_api({"ID": "id-x", "Version": {"Index": 5}, "Spec": "x"})
    assert s.unread.startswith("Spec is str 'x'") and (s.id, s.name, s.version) == (
        "id-x", "", 5)


def test_a_service_without_a_name_reads_as_nameless_not_unread() -> None:
    s = service_from_api({"ID": "id-x", "Spec": {"Labels": {}}})
    assert (s.name, s.unread, s.version) == ("", "", 0)


@pytest.mark.parametrize("sid", [None, "", 7, "missing"])
def test_a_service_read_without_an_id_is_refused(sid: Any) -> None:
    """(An inspect's answer: a list leaves such an entry out, tests/test_unkeyed_answers.py)"""
    raw = _raw("x")
    if sid == "missing":
        del raw["ID"]
    else:
        raw["ID"] = sid
    with pytest.raises(SwarmError, match="a service listed without an ID"):
        service_from_api(raw)


@pytest.mark.parametrize("raw", [None, "s-x", 3])
def test_a_service_read_as_no_object_is_refused(raw: Any) -> None:
    with pytest.raises(SwarmError, match=f"a service listed as {type(raw).__name__}"):
        service_from_api(raw)


def _unread(s: SwarmService, part: str = "TaskTemplate", value: Any = "x") -> SwarmService:
    """``s`` as the engine answered it through a proxy: its ``part`` ``value``."""
    spec = {"Name": s.name, "Labels": dict(s.labels), "TaskTemplate": {}, part: value}
    return service_from_api({"ID": s.id, "Version": {"Index": s.version + 1}, "Spec": spec})


def test_placement_fails_a_service_with_a_text_task_template_alone() -> None:
    planner = Planner()
    bad = _unread(svc(BAD, GPUS4))
    got = {sp.name: sp for sp in planner.plan(
        list(NODES), [bad, svc("b-ok", GPUS4)], [], FACTS).services}
    assert got[BAD].status == "failed" and not got[BAD].placements
    reason = got[BAD].reason or ""
    assert f"{BAD}'s spec cannot be read: Spec.TaskTemplate is str 'x'" in reason
    assert "swarmgpu fault" not in reason
    assert not got[BAD].service_labels_set and not got[BAD].service_labels_remove
    assert got["b-ok"].status == "placed"


def _task(s: SwarmService, node: str = "n-a") -> SwarmTask:
    return SwarmTask(id=f"t-{s.name}", service_id=s.id, node_id=node, slot=1,
                     state="running", desired_state="running", env=())


@pytest.mark.parametrize(("part", "value"), [("TaskTemplate", "x"), ("Labels", "x"),
                                             ("Name", 7)])
@pytest.mark.parametrize("fresh", [False, True], ids=["same-planner", "restarted"])
def test_an_unread_service_keeps_what_it_holds(fresh: bool, part: str, value: Any) -> None:
    """a-bad holds 4 GPUs of n-a, its task running there; its spec then reads unread: its
    holding stays in the ledger and counted used, so of two services asking for a whole
    node one waits, cycle after cycle. Its labels unread are not taken for a request
    removed, nor its name unread for a service gone (released)."""
    planner = Planner()
    nodes, (bad,), _ = settled_all(planner, [svc(BAD, GPUS4)])
    held = {n.id: dict(n.labels) for n in nodes}
    assert held["n-a"]
    big = [svc("c-big", {f"{P}gpus": "8"}), svc("d-big", {f"{P}gpus": "8"})]
    planner = Planner() if fresh else planner
    for _ in range(2):
        plan = planner.plan(nodes, [_unread(bad, part, value), *big], [_task(bad)], FACTS)
        got = {sp.id: sp for sp in plan.services}
        assert got[bad.id].status == "failed" and f"Spec.{part} is " in (
            got[bad.id].reason or "")
        assert BAD not in plan.released
        nodes = apply(nodes, plan)
        assert {k: v for k, v in nodes[0].labels.items() if BAD in k} == held["n-a"]
        assert sorted(got[s.id].status for s in big) == ["pending", "placed"]
        assert all(p.node_id == "n-b" for s in big for p in got[s.id].placements)


def test_grants_say_an_unread_service_and_judge_the_others() -> None:
    bad = _unread(svc(BAD, GPUS4))
    other = service_from_api(_raw("b-all", {}, TaskTemplate={"ContainerSpec": {
        "Image": "cuda", "Env": ["NVIDIA_VISIBLE_DEVICES=all"]}}))
    found = find_ungranted([bad, other], [_task(bad), _task(other)], {"n-a": "gpu-a"},
                           prefix=P, managed=(), images={})
    by = {u.service: u for u in found}
    assert set(by) == {BAD, "b-all"}
    assert not by[BAD].known and not by[BAD].voidable
    assert "its spec cannot be read: Spec.TaskTemplate is str 'x'" in by[BAD].reason
    assert "make its spec readable" in by[BAD].fix
    assert by["b-all"].voidable


@pytest.mark.parametrize(("spec", "field"), [
    ({"TaskTemplate": "x"}, "TaskTemplate is"),
    ({"TaskTemplate": {"ContainerSpec": {"Mounts": "x"}}}, "ContainerSpec.Mounts is"),
    ({"TaskTemplate": {"Resources": {"Reservations": "x"}}}, "Reservations is"),
    ({"Labels": "x"}, "Labels is"),
])
def test_service_access_names_a_part_it_cannot_read(spec: dict[str, Any],
                                                    field: str) -> None:
    with pytest.raises(UnreadSpec, match=field):
        service_access(spec, ImageEnv("cuda", None), prefix=P, managed=False)


def test_plan_status_and_audit_name_the_field_not_a_swarmgpu_fault() -> None:
    nodes = [sw_node("n-dgx", "gpu-node-1"), sw_node("n-4090", "gpu-node-2")]
    bad = _unread(sw_svc(BAD, GPUS4))
    plan = Planner().plan(nodes, [bad, sw_svc("b-ok", GPUS4)], [], FACTS)
    sp = {sp.name: sp for sp in plan.services}[BAD]
    assert sp.unread and sp.to_dict()["unread"] is True
    text = render_plan(plan.services, ungranted=[], workload={}, health=[], moves=None,
                       listen="")
    assert text.splitlines()[-1].startswith(
        f"not planned, a spec that cannot be read: {BAD}: fix the field")
    assert "swarmgpu fault" not in text
    status = render_status(build_cluster(snapshot(nodes, [bad], []), plan))
    assert "not planned, a spec that cannot be read (fix the field named):" in status
    assert f"  {BAD}: {BAD}'s spec cannot be read: Spec.TaskTemplate is str" in status
    assert "swarmgpu fault" not in status
    assert {f.kind for f in findings_of(plan) if f.subject == BAD} == {"unreadable-spec"}


@pytest.mark.parametrize(("part", "value"), [("TaskTemplate", "x"), ("Labels", "x"),
                                             ("Mode", "x"), ("Name", 7)])
def test_the_daemons_cycles_go_on_past_an_unread_service(tmp_path: Any, part: str,
                                                         value: Any) -> None:
    """Every step the daemon runs, cycle after cycle, a-bad's task running on the DGX:
    a-bad failed alone (its plan naming the field), b-one placed, grants say a-bad,
    and nothing is written for a-bad."""
    bad = _unread(sw_svc(BAD, GPUS4), part, value)
    gpu = {f"{P}gpu.present": "true"}  # (label sync's: a GPU node, for grants)
    sw = RecordingSwarm([sw_node("n-dgx", "gpu-node-1", gpu), sw_node("n-4090", "gpu-node-2")],
                        [bad, sw_svc("b-one", GPUS4)], [_task(bad, "n-dgx")])
    d = offline_daemon(sw, str(tmp_path), False)
    for _ in range(3):
        d.cycle()
        plan = d.last_session.placement
        assert plan is not None
        got = {sp.id: sp for sp in plan.services}
        assert got[bad.id].status == "failed" and got[bad.id].unread
        assert f"Spec.{part} is" in (got[bad.id].reason or "")
        assert got["id-b-one"].status == "placed"
        (u,) = [u for u in d.last_session.ungranted if u.service_id == bad.id]
        assert not u.known and f"Spec.{part} is" in u.reason
    assert ("service", bad.id) not in sw.calls


@pytest.mark.parametrize(("part", "value"), [("TaskTemplate", "x"), ("Labels", "x"),
                                             ("Name", 7)])
def test_an_unread_service_of_a_version_already_read_fails_all_the_same(
        part: str, value: Any) -> None:
    """a-bad read whole at its version, then the same version unread (a proxy between):
    the reader's memo of that version is not its read, so it fails, named, as ever."""
    planner = Planner()
    nodes, (bad,), _ = settled_all(planner, [svc(BAD, GPUS4)])
    planner.plan(nodes, [bad], [_task(bad)], FACTS)
    spec = {"Name": bad.name, "Labels": dict(bad.labels), "TaskTemplate": {}, part: value}
    same = service_from_api({"ID": bad.id, "Version": {"Index": bad.version}, "Spec": spec})
    sp = {sp.id: sp for sp in planner.plan(nodes, [same], [_task(bad)], FACTS).services}
    assert sp[bad.id].status == "failed" and sp[bad.id].unread
    assert f"Spec.{part} is" in (sp[bad.id].reason or "")
    again = {sp.id: sp for sp in planner.plan(nodes, [bad], [_task(bad)], FACTS).services}
    assert again[bad.id].status == "placed"  # read whole again: planned as ever


class _Gate:
    def reread(self, kind: str, obj_id: str) -> None:
        pass


class _NowUnread:
    """The engine answering a-bad, read whole at the snapshot, unread at write time."""

    def service(self, service_id: str) -> SwarmService:
        return service_from_api({"ID": service_id, "Version": {"Index": 9},
                                 "Spec": {"Name": BAD, "Labels": {}, "TaskTemplate": "x"}})


def test_a_release_of_a_service_unread_at_write_time_is_held_back() -> None:
    """a-bad's plan releases its ledger entry on n-a; read again before the write, its
    TaskTemplate is a string: nothing of its plan is written (as for one that cannot be
    read), never the cycle's writes failed for it."""
    plan = PlacementPlan()
    plan.node_remove["n-a"] = [assign_key(P, BAD)]
    held = hold_stale_releases(_NowUnread(), _Gate(), plan,  # type: ignore[arg-type]
                               [svc(BAD, GPUS4)], P)
    assert held == {BAD} and not plan.node_remove.get("n-a")


def test_a_spec_write_to_a_service_unread_at_write_time_is_refused() -> None:
    """Any writer (placement, a move, a preemption, a restart) reads the spec afresh: a
    part of it unread, nothing is computed from it nor written (a SwarmError, and an
    UnreadSpec for the writers that skip such a spec)."""
    sw = listed_client([_raw(BAD, TaskTemplate="x")])
    seen: list[Any] = []
    with pytest.raises(SwarmError, match=re.escape(
            "service write refused: Spec.TaskTemplate is str 'x'")) as got:
        sw.update_service_spec(f"id-{BAD}", lambda spec: seen.append(spec) or {})
    assert seen == []
    assert isinstance(got.value, UnreadSpec)  # (a writer's own skip of such a spec: taken)
    assert type(got.value) is UnreadWrite and str(got.value) == (
        f"service write refused: {service_from_api(_raw(BAD, TaskTemplate='x')).unread}")


def test_an_update_config_that_is_no_object_is_named_not_a_swarmgpu_fault() -> None:
    """a-bad's Spec.UpdateConfig a string (its parallelism read for the device map): its
    plan names the field and the fix, not a fault to report; the others placed."""
    bad = _unread(svc(BAD, GPUS4), "UpdateConfig", "x")
    got = {sp.name: sp for sp in Planner().plan(
        list(NODES), [bad, svc("b-ok", GPUS4)], [_task(bad)], FACTS).services}
    assert got[BAD].status == "failed" and got[BAD].unread
    assert "Spec.UpdateConfig is str 'x', not an object" in (got[BAD].reason or "")
    assert "swarmgpu fault" not in (got[BAD].reason or "")
    assert got["b-ok"].status == "placed"


def test_a_service_whose_name_cannot_be_read_is_named_by_its_id() -> None:
    """Spec a string: no name to say, so the plan, its log and status name its ID."""
    bad = service_from_api({"ID": "id-q", "Version": {"Index": 2}, "Spec": "x"})
    plan = Planner().plan(list(NODES), [bad, svc("b-ok", GPUS4)], [], FACTS)
    sp = {sp.id: sp for sp in plan.services}["id-q"]
    assert (sp.reason or "").startswith("service id-q's spec cannot be read: Spec is str")
    text = render_plan(plan.services, ungranted=[], workload={}, health=[], moves=None,
                       listen="")
    assert "not planned, a spec that cannot be read: service id-q: fix" in text
    status = render_status(build_cluster(snapshot(list(NODES), [bad], []), plan))
    assert "  service id-q: service id-q's spec cannot be read" in status


@pytest.mark.parametrize("spec", ["missing", None])
def test_a_service_listed_without_its_spec_keeps_what_it_holds(spec: Any) -> None:
    """a-bad listed with no Spec (or a null one; Docker sends one with every service):
    read as empty, its name was "" and its request none, so its ledger entries were
    released while its task ran there. Now it is unread and what it holds stays."""
    planner = Planner()
    nodes, (bad,), _ = settled_all(planner, [svc(BAD, GPUS4)])
    raw: dict[str, Any] = {"ID": bad.id, "Version": {"Index": bad.version + 1}}
    if spec is None:
        raw["Spec"] = None
    got = service_from_api(raw)
    assert got.unread.startswith("Spec is null or missing, not an object")
    plan = planner.plan(nodes, [got], [_task(bad)], FACTS)
    assert plan.released == [] and not plan.node_remove
