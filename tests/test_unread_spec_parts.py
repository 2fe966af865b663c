"""A service spec part that is not what Docker sends (a proxy's string or null where an
object goes) fails that one service, naming the field and the fix: in ``audit``, the
grants check and a preemption victim's write; the other services go on."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from support.loglines import log_lines

from swarmgpu.manager.commands.audit import audit
from swarmgpu.manager.cycle.grants import ImageEnvs, void_one
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.services.grants import find_ungranted, images_to_read
from swarmgpu.swarm.client import SwarmService, SwarmTask

P = "swarmgpu."


@pytest.fixture
def errors() -> Iterator[list[str]]:
    yield from log_lines("ERROR")
GPU_RES = {"Reservations": {"GenericResources": [
    {"DiscreteResourceSpec": {"Kind": "NVIDIA-GPU", "Value": 2}}]}}


def _service(name: str, spec: dict[str, Any]) -> SwarmService:
    return SwarmService(id=f"id-{name}", name=name, labels={}, constraints=(), env=(),
                        mode="replicated", replicas=1, max_replicas_per_node=None,
                        version=1, spec={"Name": name, **spec})


# (the spec's TaskTemplate, the field the finding names)
UNREAD_RESOURCES = [
    ("x", "TaskTemplate"),
    ({"Resources": "x"}, "TaskTemplate.Resources"),
    ({"Resources": {"Reservations": "x"}}, "TaskTemplate.Resources.Reservations"),
    ({"Resources": {"Reservations": {"GenericResources": "x"}}}, "GenericResources"),
    ({"Resources": {"Reservations": {"GenericResources": ["x"]}}}, "GenericResources[]"),
]


@pytest.mark.parametrize(("tt", "field"), UNREAD_RESOURCES)
def test_audit_names_an_unreadable_reservation_as_that_services_finding(
        tt: Any, field: str) -> None:
    plain = _service("plain", {"TaskTemplate": {"Resources": GPU_RES}})
    bad = _service("bad", {"TaskTemplate": tt})
    found = audit(Snapshot(nodes=[], services=[bad, plain], tasks=[], facts={}))
    assert [(f.kind, f.subject) for f in found] == [
        ("unreadable-spec", "bad"), ("swarm-gpu-reservation", "plain")]
    assert field in found[0].message and "Docker sends" in found[0].message
    assert "check any proxy" in found[0].message  # the fix
    assert not found[0].advisory


# --- grants: that service listed with the reason, never written; the others go on -------

def _task(svc: SwarmService, nid: str) -> SwarmTask:
    return SwarmTask(f"t-{svc.name}", svc.id, nid, 1, "running", "running", ())


def _app(name: str, tt: Any = None) -> SwarmService:
    good = {"ContainerSpec": {"Image": "local/app:1", "Env": ["NVIDIA_VISIBLE_DEVICES=all"]}}
    return _service(name, {"TaskTemplate": good if tt is None else tt})


# (the spec's parts, the field the reason names)
UNREAD_GRANTS = [
    ({"TaskTemplate": "x"}, "TaskTemplate"),
    ({"TaskTemplate": {"ContainerSpec": "x"}}, "TaskTemplate.ContainerSpec"),
    ({"TaskTemplate": {"ContainerSpec": {"Env": "A=1"}}}, "ContainerSpec.Env"),
    ({"TaskTemplate": {"ContainerSpec": {"Mounts": 5}}}, "ContainerSpec.Mounts"),
    ({"TaskTemplate": {"Resources": "x"}}, "TaskTemplate.Resources"),
    ({"TaskTemplate": {"Resources": {"Reservations": "x"}}},
     "TaskTemplate.Resources.Reservations"),
    ({"TaskTemplate": {"Resources": {"Reservations": {"GenericResources": ["x"]}}}},
     "GenericResources[]"),
    ({"Labels": 5}, "Labels"),
]


@pytest.mark.parametrize(("parts", "field"), UNREAD_GRANTS)
def test_grants_list_an_unreadable_service_with_the_field_and_check_the_others(
        parts: dict[str, Any], field: str) -> None:
    bad = _service("bad", parts)
    app = _app("app")
    tasks = [_task(bad, "g"), _task(app, "g")]
    gpu = {"g": "gpu-1"}
    assert images_to_read([bad, app], tasks, gpu, P) == ["local/app:1"]
    found = find_ungranted([bad, app], tasks, gpu, prefix=P, managed=set(), images={})
    assert [u.service for u in found] == ["app", "bad"]
    assert "NVIDIA_VISIBLE_DEVICES=all" in found[0].reason
    u = found[1]
    assert field in u.reason and "Docker sends" in u.reason
    assert not u.known and not u.voidable  # unknown, so listed; never written to
    assert "make its spec readable" in u.fix


class _Specs:
    """swarmgpu's SwarmClient's read-modify-write over one in-memory spec."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.writes = 0

    def update_service_spec(self, service_id: str,
                            compute: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
                            **_: Any) -> bool:
        new = compute(copy.deepcopy(self.spec))
        if new is None or new == self.spec:
            return False
        self.writes += 1
        return True


@pytest.mark.parametrize(("parts", "field"), UNREAD_GRANTS[:4])
def test_a_void_write_on_a_spec_unreadable_at_write_time_writes_nothing(
        parts: dict[str, Any], field: str, errors: list[str]) -> None:
    app = _app("app")
    (u,) = find_ungranted([app], [_task(app, "g")], {"g": "gpu-1"}, prefix=P,
                          managed=set(), images={})
    sw = _Specs({"Name": "app", **parts})  # what Swarm answers when the write reads it
    gate = Writes(sw, dry_run=False, who="test")  # type: ignore[arg-type]
    landed = void_one(gate, u, prefix=P, managed=False, grants="env",
                      images=ImageEnvs(sw))  # type: ignore[arg-type]
    assert not landed and sw.writes == 0
    assert any("cannot be read" in line and field in line for line in errors)
