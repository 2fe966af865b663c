"""The read-modify-write of a service spec (``cycle.placement.service_compute``): every
change a plan asks for lands, and the spec it was given stays as it was (only the paths
it changes are copied)."""

from __future__ import annotations

import copy
from typing import Any

from swarmgpu.manager.placement.records import SpecWrites
from swarmgpu.manager.placement.specwrite import service_compute
from swarmgpu.swarm.taskspec import task_changes


def spec() -> dict[str, Any]:
    return {
        "Name": "svc", "Labels": {"swarmgpu.gpus": "1", "swarmgpu.devices.old": "GPU-a"},
        "TaskTemplate": {
            "ContainerSpec": {"Image": "x", "Env": ["A=1", "OLD=1"], "Mounts": [{"a": 1}]},
            "Placement": {"Constraints": ["node.labels.swarmgpu.gate.other==true", "x==y"]},
            "Resources": {"Reservations": {"NanoCPUs": 1, "GenericResources": [
                {"DiscreteResourceSpec": {"Kind": "NVIDIA-GPU", "Value": 9}},
                {"DiscreteResourceSpec": {"Kind": "fpga", "Value": 1}}]}},
            "ForceUpdate": 2,
        },
        "UpdateConfig": {"Parallelism": 2, "Order": "stop-first"},
        "Mode": {"Replicated": {"Replicas": 1}},
    }


def test_every_change_lands_and_the_given_spec_is_left_as_it_was() -> None:
    sp = SpecWrites(
        service_labels_set={"swarmgpu.devices.n1": "GPU-b"},
        service_labels_remove=("swarmgpu.devices.old",),
        remove_constraints=("node.labels.swarmgpu.gate.other == true",),
        add_constraints=("node.labels.swarmgpu.gate.svc==true",),
        set_max_replicas=1, force_update=True, set_generic=("NVIDIA-GPU", 2),
        set_update_parallelism=0, replace_env=(("OLD=1", "NEW=1"),), add_env=("A=2", "B=1"))
    given = spec()
    before = copy.deepcopy(given)
    new = service_compute(sp)(given)
    assert given == before
    assert new is not None
    tt = new["TaskTemplate"]
    assert new["Labels"] == {"swarmgpu.gpus": "1", "swarmgpu.devices.n1": "GPU-b"}
    assert tt["Placement"] == {"Constraints": ["x==y", "node.labels.swarmgpu.gate.svc==true"],
                               "MaxReplicas": 1}
    assert tt["ForceUpdate"] == 3
    assert tt["Resources"]["Reservations"] == {"NanoCPUs": 1, "GenericResources": [
        {"DiscreteResourceSpec": {"Kind": "fpga", "Value": 1}},
        {"DiscreteResourceSpec": {"Kind": "NVIDIA-GPU", "Value": 2}}]}
    assert new["UpdateConfig"] == {"Parallelism": 0, "Order": "stop-first"}
    assert tt["ContainerSpec"]["Env"] == ["A=1", "NEW=1", "B=1"]  # a user's A is kept
    assert tt["ContainerSpec"]["Mounts"] == [{"a": 1}] and new["Mode"] == given["Mode"]


def test_nothing_to_change_is_no_write() -> None:
    assert service_compute(SpecWrites())(spec()) is None


def test_a_write_adds_no_empty_part_to_the_task_template() -> None:
    # A label or MaxReplicas write on a spec without ContainerSpec, Placement or even a
    # TaskTemplate changes only what it sets: no empty ContainerSpec (a task spec change
    # Swarm replaces tasks for, which placement held back naming nothing: "held back: it
    # would restart its running task:  --"), no empty Placement or Labels.
    labels = SpecWrites(service_labels_set={"swarmgpu.x": "1"})
    for given in ({"Name": "svc"}, {"Name": "svc", "TaskTemplate": {}},
                  {"Name": "svc", "TaskTemplate": {"ForceUpdate": 0}}):
        new = service_compute(labels)(given)
        assert new is not None and task_changes(given, new) == []
        assert new == {**given, "Labels": {"swarmgpu.x": "1"}}
    new = service_compute(SpecWrites(set_max_replicas=2))({"Name": "svc"})
    assert new == {"Name": "svc", "TaskTemplate": {"Placement": {"MaxReplicas": 2}}}
    assert task_changes({"Name": "svc"}, new) == ["change Placement.MaxReplicas"]
