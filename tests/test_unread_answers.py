"""What the engine's answers hold that cannot be read is never read as nothing.

A holder whose spec's reservations cannot be read (Resources not a mapping: a spec no
docker CLI makes), with no task on its node yet, counted no CPU and no memory there
(``swarm.specread.held_reservations``): preemption's room (``preemptroom.Room``) and the
rebalance policies' allocator (``SwarmTargets.reserve``) sent work onto a node whose CPU
it may hold. Now it counts its node's whole CPU and memory (never less than Swarm
counts), and its own stop frees them.

A task whose Status (or Spec) is null, which Docker never sends but a proxy might,
raised an AttributeError out of ``task_from_api`` (the daemon's cycle failed with a
traceback); now it is refused with a SwarmError naming the task, the error the cycle
takes for an engine it cannot read (aborted, tried again next interval). So too a task
listed as no object (an AttributeError before) or without its ID (a KeyError), or whose
ContainerSpec, JobIteration or reservations are not what Docker sends (an AttributeError,
or a reservation of "lots" CPUs read as none).

A spec whose parts cannot be read is never read as reserving nothing
(``swarm.specread.UnreadSpec`` names the field): a reservation (``reservations``:
NanoCPUs "lots" read as 0 before) counts its node's whole where it is held
(``held_reservations``), and placement fails that service alone, its plan naming the field;
Swarm's filters for it (``SwarmFilters``: its generic resources) refuse it every node, it
alone (before, the AttributeError failed the health policy's whole pass)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import pytest
from support.forged import sw_node, sw_svc
from support.health import F1, F2, ONE, U2, hold, mark, plan, running, service, setup
from support.isolation import BAD, FACTS, NODES
from support.placement import P, svc
from support.unread import listed_client, reserving, task

from swarmgpu.manager.placement import Planner
from swarmgpu.manager.placement.filters import SwarmFilters
from swarmgpu.manager.placement.generic import generic_reservations
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.preemptroom import Room
from swarmgpu.manager.rebalance.targets import SwarmTargets
from swarmgpu.swarm.client import (
    SwarmError,
    SwarmService,
    task_from_api,
)
from swarmgpu.swarm.specread import UnreadSpec, held_reservations, reservations

UNREAD = {"TaskTemplate": {"Resources": "lots"}}
CPUS2 = {"TaskTemplate": {"Resources": {"Reservations": {"NanoCPUs": 2_000_000_000}}}}


@dataclass(frozen=True)
class Victim:
    service: str


def _with(s: SwarmService, spec: dict[str, Any]) -> SwarmService:
    return replace(s, spec={**s.spec, **spec})


def test_an_unread_holder_counts_its_node_s_whole_cpu_for_preemption() -> None:
    node = sw_node("n1", "gpu-node-1")  # 64 CPUs
    bad, pre = _with(sw_svc("bad", ONE), UNREAD), _with(sw_svc("pre", ONE), CPUS2)
    held = {"n1": {"bad": Holding("bad", "n1", (U2[0],), (1000,))}}
    room = Room.of([node], [bad, pre], [], held)  # no task of bad there yet
    assert not room.fits(pre, "n1", (), 1)
    assert room.fits(pre, "n1", [Victim("bad")], 1)  # its stop frees what it holds


def test_an_unread_holder_s_node_takes_no_health_move_that_needs_cpu() -> None:
    nodes, svcs, tasks = setup({"a": [U2[0]]})  # big holds the rest of gpu-node-2
    n1 = replace(nodes[0], labels=hold("bad", [F1.gpus[0].uuid]), cpu_milli=8000,
                 memory_mib=64000)  # bad holds a GPU there, no task of it yet
    svcs = [*(replace(s, spec=CPUS2) for s in svcs), replace(service("bad", ONE), spec=UNREAD)]
    p = plan([n1, nodes[1]], svcs, tasks, mark(F2, failed=[0]))
    assert not p.policy_errors, p.policy_errors
    assert [(m.service, m.target_node) for m in p.moves] == []  # before: a to gpu-node-1


@pytest.mark.parametrize("field", ["Status", "Spec"])
def test_a_task_with_a_null_status_is_refused_naming_it(field: str) -> None:
    raw = {"ID": "t-null", "ServiceID": "s", "NodeID": "n", "DesiredState": "shutdown",
           "Status": {"State": "running"}, "Spec": {}, field: None}
    with pytest.raises(SwarmError, match=f"task 't-null': .*{field} NoneType"):
        task_from_api(raw)
    for states in (None, {"running"}):
        with pytest.raises(SwarmError, match="t-null"):
            listed_client([raw]).tasks({"desired-state": ["shutdown"]}, states=states)


@pytest.mark.parametrize("raw", [None, "t-x", 3, ["t-x"]])
def test_a_task_that_is_no_object_is_refused(raw: Any) -> None:
    """A task listed as no object (a proxy's null or string) raised an AttributeError."""
    with pytest.raises(SwarmError, match=f"a task listed as {type(raw).__name__}"):
        task_from_api(raw)
    with pytest.raises(SwarmError, match="Docker sends objects"):
        listed_client([raw]).tasks({"desired-state": ["running"]}, states={"running"})


@pytest.mark.parametrize("task_id", [None, "", 7, "missing"])
def test_a_task_without_an_id_is_refused(task_id: Any) -> None:
    """A task listed without its ID raised a KeyError (or took a non-string as its id)."""
    raw: dict[str, Any] = {"ServiceID": "s-x", "NodeID": "n", "DesiredState": "running",
                           "Status": {"State": "running"}, "Spec": {}}
    if task_id != "missing":
        raw["ID"] = task_id
    with pytest.raises(SwarmError, match="task of service 's-x' listed without an ID"):
        task_from_api(raw)
    with pytest.raises(SwarmError, match="without an ID"):
        listed_client([raw]).tasks({"desired-state": ["running"]})


CPUS8 = {"TaskTemplate": {"Resources": {"Reservations": {"NanoCPUs": 8_000_000_000}}}}


def test_a_same_node_move_frees_what_its_task_reserves_not_what_its_spec_says() -> None:
    """The health policy's move within a node subtracted its spec's reservation for the
    task it replaces, not what that task reserves (an older spec's, here less): it
    planned a repin Swarm leaves pending for the CPU others hold there."""
    nodes, svcs, tasks = setup({"a": [U2[0]]}, full_n2=False,
                               constraints={"a": ["node.hostname==gpu-node-2"]})
    n2 = replace(nodes[1], cpu_milli=16000, memory_mib=64000)
    hog = replace(service("hog", {}), constraints=())
    tasks = [replace(t, cpu_milli=2000) for t in tasks]  # a's task: 2 CPUs (its old spec)
    tasks.append(replace(running("hog", "n2"), cpu_milli=12000))
    svcs = [*(replace(s, spec=CPUS8) if s.name == "a" else s for s in svcs), hog]
    p = plan([nodes[0], n2], svcs, tasks, mark(F2, failed=[0]))
    # 12 + 8 CPUs once its 2 are freed: more than the node's 16 (before: 14 - 8 + 8)
    assert [(m.service, m.target_node) for m in p.moves] == []


def test_an_unread_service_s_task_reserves_a_whole_node_not_nothing() -> None:
    """``SwarmTargets.reservation`` read (0, 0) for a service whose spec cannot be read:
    the rebalance policies (health's target, fragmentation's check, the moves' new tasks
    counted on their targets) counted its new task as reserving nothing."""
    n1 = replace(sw_node("n1", "gpu-node-1"), cpu_milli=8000, memory_mib=64000)
    n2 = replace(sw_node("n2", "gpu-node-2"), cpu_milli=16000, memory_mib=32000)
    bad, ok = _with(sw_svc("bad", ONE), UNREAD), _with(sw_svc("ok", ONE), CPUS2)
    t = SwarmTargets([n1, n2], [bad, ok], [], "swarmgpu.")
    assert t.reservation("bad") == (16000, 64000)  # the largest node's whole
    assert t.reservation("ok") == (2000, 0)


def _health_with_bad(spec: dict[str, Any]) -> Any:
    """a and bad on failed GPUs of gpu-node-2, bad's spec ``spec``; room on gpu-node-1."""
    nodes, svcs, tasks = setup({"a": [U2[0]], "bad": [U2[1]]})
    svcs = [replace(s, spec=spec) if s.name == "bad" else s for s in svcs]
    return plan(nodes, svcs, tasks, mark(F2, failed=[0, 1]))


GENERIC = "TaskTemplate.Resources.Reservations.GenericResources"


@pytest.mark.parametrize(("spec", "field"), [
    (UNREAD, "TaskTemplate.Resources is str"),
    ({"TaskTemplate": {"Resources": {"Reservations": {"GenericResources": "gpu"}}}},
     f"{GENERIC} is str"),
    ({"TaskTemplate": {"Resources": {"Reservations": {"GenericResources": ["gpu"]}}}},
     f"{GENERIC}[] is str"),
    ({"TaskTemplate": {"Resources": {"Reservations": {"GenericResources": [
        {"DiscreteResourceSpec": {"Kind": "gpu", "Value": "lots"}}]}}}},
     f"{GENERIC}['gpu'].Value is 'lots'"),
])
def test_health_refuses_a_service_whose_filter_cannot_be_read_alone(
        spec: dict[str, Any], field: str) -> None:
    """The health policy's target for bad read its generic resources from a spec whose
    Resources are not a mapping (``generic_reservations``, through ``SwarmFilters``):
    an AttributeError failed the policy's whole pass, no holder of a failed GPU moved.
    Now bad alone stays, the note naming the field; a is moved."""
    p = _health_with_bad(spec)
    assert not p.policy_errors, p.policy_errors
    assert [(m.service, m.target_node) for m in p.moves] == [("a", "n1")]
    said = [n for n in p.notes if n.startswith("bad on gpu-node-2 stays")]
    assert len(said) == 1 and "bad's spec cannot be read" in said[0] and field in said[0], \
        p.notes
    with pytest.raises(UnreadSpec, match=re.escape(field)):
        generic_reservations(spec)


def test_swarm_s_filters_refuse_an_unread_spec_every_node_naming_it() -> None:
    nodes = [sw_node("n1", "gpu-node-1"), sw_node("n2", "gpu-node-2")]
    bad, ok = _with(sw_svc("bad", ONE), UNREAD), sw_svc("ok", ONE)
    f = SwarmFilters("swarmgpu.", "", lambda _sid: None)
    f.new_cycle(nodes)
    assert f.refused(bad) == {"n1", "n2"} and f.refused(ok) == frozenset()
    assert "bad's spec cannot be read: TaskTemplate.Resources is str" in f.unread_why(bad)
    assert f.unread_why(ok) == ""
    t = SwarmTargets(nodes, [bad, ok], [], "swarmgpu.")
    assert "bad's spec cannot be read" in (t.why(bad, "n1") or "")
    fixed = replace(bad, spec=CPUS2, version=bad.version + 1)  # re-read once fixed
    assert f.refused(fixed) == frozenset() and f.unread_why(fixed) == ""


@pytest.mark.parametrize(("fields", "said"), [
    ({"Spec": {"ContainerSpec": "x"}}, "Spec.ContainerSpec is str 'x', not an object"),
    ({"Spec": {"ContainerSpec": ["x"]}}, "Spec.ContainerSpec is list"),
    ({"JobIteration": "x"}, "JobIteration is str 'x', not an object"),
    ({"JobIteration": {"Index": "x"}}, "JobIteration.Index is 'x', not a whole number"),
    ({"Spec": {"ForceUpdate": "x"}}, "Spec.ForceUpdate is 'x', not a whole number"),
    ({"Spec": {"Resources": "lots"}}, "Resources is str 'lots', not an object"),
    ({"Spec": {"Resources": {"Reservations": {"NanoCPUs": "lots"}}}},
     "Resources.Reservations.NanoCPUs is 'lots', not a whole number"),
    ({"Spec": {"Resources": {"Reservations": {"MemoryBytes": [1]}}}},
     "Resources.Reservations.MemoryBytes is [1], not a whole number"),
])
def test_a_task_whose_parts_are_no_objects_is_refused_naming_it(
        fields: dict[str, Any], said: str) -> None:
    """A task whose ContainerSpec or JobIteration is not an object raised an
    AttributeError out of ``task_from_api``; one reserving "lots" CPUs was read as
    reserving none. Each is refused with a SwarmError naming the task and the field."""
    raw = task(**fields)
    with pytest.raises(SwarmError, match=re.escape(f"task 't-bad': {said}")):
        task_from_api(raw)
    with pytest.raises(SwarmError, match="t-bad"):
        listed_client([raw]).tasks({"desired-state": ["running"]})


def test_a_task_as_docker_sends_it_is_read_as_ever() -> None:
    got = task_from_api(task(Spec={"ContainerSpec": {"Env": ["A=1"]}, "ForceUpdate": 2,
                                   "Resources": {"Reservations": {
                                       "NanoCPUs": 1_500_000_000, "MemoryBytes": 1 << 20}}},
                             JobIteration={"Index": 3}))
    assert (got.env, got.force_update, got.cpu_milli, got.memory_mib, got.job_iteration) == (
        ("A=1",), 2, 1500, 1, 3)
    assert task_from_api(task()).job_iteration is None


@pytest.mark.parametrize(("cpus", "memory", "field"), [
    ("lots", None, "NanoCPUs is 'lots'"),
    ({"n": 1}, None, "NanoCPUs is {'n': 1}"),
    (True, None, "NanoCPUs is True"),
    (-1, None, "NanoCPUs is -1"),
    (None, "1Gi", "MemoryBytes is '1Gi'"),
    (float("nan"), None, "NanoCPUs is nan"),
])
def test_a_reservation_that_is_no_number_is_never_read_as_none(
        cpus: Any, memory: Any, field: str) -> None:
    """``reservations`` read a NanoCPUs or MemoryBytes that is no number as 0: the
    service looked as if it reserved nothing. Now it is unread, naming the field."""
    spec = reserving(cpus, memory)
    with pytest.raises(UnreadSpec, match=re.escape(f"Reservations.{field}")):
        reservations(spec)
    assert held_reservations(spec) is None
    assert reservations(reserving(2_000_000_000, "1048576")) == (2000, 1)
    assert reservations(reserving()) == (0, 0)


def test_a_holder_reserving_lots_of_cpus_counts_its_node_s_whole() -> None:
    """A holder whose spec reserves NanoCPUs "lots" counted none on its node
    (preemption's room, the rebalance policies' count), and placement planned it as
    reserving nothing; now its node's whole, and placement fails it alone, naming it."""
    node = sw_node("n1", "gpu-node-1")
    lots = reserving("lots")
    bad, pre = _with(sw_svc("bad", ONE), lots), _with(sw_svc("pre", ONE), CPUS2)
    held = {"n1": {"bad": Holding("bad", "n1", (U2[0],), (1000,))}}
    room = Room.of([node], [bad, pre], [], held)
    assert not room.fits(pre, "n1", (), 1)
    assert room.fits(pre, "n1", [Victim("bad")], 1)
    assert room.want(bad, "n1") == (node.cpu_milli, node.memory_mib)
    t = SwarmTargets([node], [bad, pre], [], "swarmgpu.")
    assert t.reservation("bad") == (node.cpu_milli, node.memory_mib)


def test_placement_fails_a_service_reserving_lots_of_cpus_alone() -> None:
    planner = Planner()
    planner.plan(list(NODES), [], [], FACTS)
    bad = replace(svc(BAD, {f"{P}gpus": "4"}), spec=reserving("lots"))
    got = {sp.name: sp for sp in planner.place_arrivals(
        [bad, svc("b-ok", {f"{P}gpus": "4"})], []).services}
    assert got[BAD].status == "failed" and not got[BAD].placements
    assert got[BAD].reason is not None and f"{BAD}'s spec cannot be read: " \
        "TaskTemplate.Resources.Reservations.NanoCPUs is 'lots'" in got[BAD].reason
    assert "swarmgpu fault" not in got[BAD].reason
    assert got["b-ok"].status == "placed"


def test_placement_fails_a_service_whose_generic_resources_cannot_be_read_alone() -> None:
    """Swarm's filters for a-bad (its generic resources, a string): placement failed it
    as a swarmgpu fault (an AttributeError); now its plan names the field, b-ok placed."""
    planner = Planner()
    planner.plan(list(NODES), [], [], FACTS)
    spec = {"TaskTemplate": {"Resources": {"Reservations": {"GenericResources": "gpu"}}}}
    bad = replace(svc(BAD, {f"{P}gpus": "4"}), spec=spec)
    got = {sp.name: sp for sp in planner.plan(
        list(NODES), [bad, svc("b-ok", {f"{P}gpus": "4"})], [], FACTS).services}
    assert got[BAD].status == "failed" and not got[BAD].placements
    assert got[BAD].reason is not None and f"{BAD}'s spec cannot be read: {GENERIC} is " \
        "str, not a list" in got[BAD].reason
    assert got["b-ok"].status == "placed"
