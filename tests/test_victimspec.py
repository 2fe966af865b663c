"""The preemption victim's spec write (``cycle.victimspec.victim_spec``), made by
placement's own ``service_compute``: what it removes, keeps and adds."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any, cast

import pytest

from swarmgpu.manager.cycle.victimspec import check_victim, victim_spec
from swarmgpu.swarm.client import SwarmService
from swarmgpu.swarm.specread import UnreadSpec, spec_texts

P = "swarmgpu."


def _spec() -> dict[str, Any]:
    return {"Name": "v",
            "Labels": {P + "devices.n1": "0", P + "devices.n1.0": "x",
                       P + "devices.n12": "1", "own": "kept"},
            "TaskTemplate": {"Placement": {"Constraints": [
                "node.role==worker", f"node.labels.{P}state.renew!=3"]}}}


def test_the_node_s_device_lists_go_and_the_record_is_set_the_rest_kept() -> None:
    spec = _spec()
    before = copy.deepcopy(spec)
    new = victim_spec(P, "n1", "rec")(spec)
    assert spec == before  # the spec read is never changed
    assert new is not None
    assert new["Labels"] == {P + "devices.n12": "1", "own": "kept",
                             P + "state.preempted": "rec"}
    assert new["TaskTemplate"] == spec["TaskTemplate"]


def test_a_renewal_replaces_only_the_victim_s_own_renewal_constraint() -> None:
    renew = cast(SwarmService, SimpleNamespace(version=2))
    new = victim_spec(P, "n1", "rec", renew)(_spec())
    assert new is not None
    assert new["TaskTemplate"]["Placement"]["Constraints"] == [
        "node.role==worker", f"node.labels.{P}state.renew!=4"]


def test_no_write_where_the_spec_already_says_it_all() -> None:
    spec = {"Name": "v", "Labels": {P + "state.preempted": "rec"}}
    assert victim_spec(P, "n1", "rec")(spec) is None
    assert "TaskTemplate" not in (victim_spec(P, "n1", "other")(spec) or {})


@pytest.mark.parametrize(("part", "where"), [
    ({"Placement": {"Constraints": "node.role==worker"}}, "TaskTemplate.Placement.Constraints"),
    ({"ContainerSpec": {"Env": "A=1"}}, "TaskTemplate.ContainerSpec.Env"),
])
def test_a_victim_s_text_list_part_is_refused_as_the_service_reader_refuses_it(
        part: dict[str, Any], where: str) -> None:
    """The victim write reads its constraints and env with the spec's one list reader
    (``spec_texts``): the same refusal and fix as the service's own read (before, its
    own check named a shorter fix)."""
    spec = {"Name": "v", "Labels": {}, "TaskTemplate": part}
    value = next(iter(next(iter(part.values())).values()))
    with pytest.raises(UnreadSpec) as shared:
        spec_texts(value, where)
    with pytest.raises(UnreadSpec) as got:
        check_victim(spec)
    assert str(got.value) == str(shared.value)
    assert check_victim({"TaskTemplate": {"Placement": {"Constraints": ["a==b"]}}}) == ["a==b"]


def test_a_renewal_leaves_the_owner_s_update_parallelism_as_it_is() -> None:
    """Its waiting tasks are replaced one batch after another at the owner's
    parallelism, never 0: the write lands beside a running replica (its own on the
    preempted node, whose gate closes after it), and a 0 left there would stay until it
    is placed again (giving it back is a write that waits while a task waits for a
    node), so its next placement's forced update restarted every running replica at
    once (docs/requests.md, "What happens")."""
    spec = {**_spec(), "UpdateConfig": {"Parallelism": 1, "Order": "stop-first"}}
    renew = cast(SwarmService, SimpleNamespace(version=2))
    new = victim_spec(P, "n1", "rec", renew)(spec)
    assert new is not None
    assert new["UpdateConfig"] == {"Parallelism": 1, "Order": "stop-first"}
    assert P + "state.update-parallelism" not in new["Labels"]
