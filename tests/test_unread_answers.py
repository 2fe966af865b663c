"""What the engine's answers hold that cannot be read is never read as nothing.

A holder whose spec's reservations cannot be read (Resources not a mapping: a spec no
docker CLI makes), with no task on its node yet, counted no CPU and no memory there
(``swarm.client.held_reservations``): preemption's room (``preemptroom.Room``) and the
rebalance policies' allocator (``SwarmTargets.reserve``) sent work onto a node whose CPU
it may hold. Now it counts its node's whole CPU and memory (never less than Swarm
counts), and its own stop frees them.

A task whose Status (or Spec) is null, which Docker never sends but a proxy might,
raised an AttributeError out of ``task_from_api`` (the daemon's cycle failed with a
traceback); now it is refused with a SwarmError naming the task, the error the cycle
takes for an engine it cannot read (aborted, tried again next interval). So too a task
listed as no object (an AttributeError before) or without its ID (a KeyError)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest
from support.forged import sw_node, sw_svc
from support.health import F1, F2, ONE, U2, hold, mark, plan, running, service, setup

from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.preemptroom import Room
from swarmgpu.manager.rebalance.targets import SwarmTargets
from swarmgpu.swarm.client import SwarmClient, SwarmError, SwarmService, task_from_api

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


class _Api:
    """The engine's task list as a proxy answered it."""

    def __init__(self, raw: list[Any]) -> None:
        self.raw = raw

    def tasks(self, filters: dict[str, Any]) -> list[Any]:
        return self.raw


def _client(raw: list[Any]) -> SwarmClient:
    sw = SwarmClient.__new__(SwarmClient)
    sw.endpoint, sw._api = "unix:///test", _Api(raw)  # type: ignore[assignment]
    return sw


@pytest.mark.parametrize("field", ["Status", "Spec"])
def test_a_task_with_a_null_status_is_refused_naming_it(field: str) -> None:
    raw = {"ID": "t-null", "ServiceID": "s", "NodeID": "n", "DesiredState": "shutdown",
           "Status": {"State": "running"}, "Spec": {}, field: None}
    with pytest.raises(SwarmError, match=f"task 't-null': .*{field} NoneType"):
        task_from_api(raw)
    for states in (None, {"running"}):
        with pytest.raises(SwarmError, match="t-null"):
            _client([raw]).tasks({"desired-state": ["shutdown"]}, states=states)


@pytest.mark.parametrize("raw", [None, "t-x", 3, ["t-x"]])
def test_a_task_that_is_no_object_is_refused(raw: Any) -> None:
    """A task listed as no object (a proxy's null or string) raised an AttributeError."""
    with pytest.raises(SwarmError, match=f"a task listed as {type(raw).__name__}"):
        task_from_api(raw)
    with pytest.raises(SwarmError, match="Docker sends objects"):
        _client([raw]).tasks({"desired-state": ["running"]}, states={"running"})


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
        _client([raw]).tasks({"desired-state": ["running"]})


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
