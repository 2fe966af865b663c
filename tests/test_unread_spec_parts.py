"""A service spec part that is not what Docker sends (a proxy's string or null where an
object goes) fails that one service, naming the field and the fix: in ``audit``, the
grants check and a preemption victim's write; the other services go on."""

from __future__ import annotations

from typing import Any

import pytest

from swarmgpu.manager.commands.audit import audit
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.swarm.client import SwarmService

P = "swarmgpu."
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
