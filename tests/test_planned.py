"""A plan's write checks that the spec still asks for what the plan was made from
(``placement.planned``): an owner's re-deploy since the snapshot refuses it, swarmgpu's
own writes never do. Pure: specs in, the guarded read-modify-write's answer out."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from swarmgpu.manager.placement import devices_key, env_template, gate_constraint, hold_constraint
from swarmgpu.manager.placement.planned import Planned, planned_from
from swarmgpu.manager.placement.records import SpecWrites
from swarmgpu.manager.placement.specwrite import service_compute

P = "swarmgpu."
MAP = SpecWrites(
    service_labels_set={devices_key(P, "n1"): "GPU-a"},
    add_constraints=(gate_constraint(P, "train"),),
    remove_constraints=(hold_constraint(P),),
    add_env=(env_template(P),),
    set_max_replicas=1,
    force_update=True,
)


def spec() -> dict[str, Any]:
    """As the owner deployed it: a request, a constraint, reservations, 2 replicas."""
    return {
        "Name": "train",
        "Labels": {f"{P}gpus": "1", "owner": "me", "com.docker.stack.namespace": "ml"},
        "TaskTemplate": {
            "ContainerSpec": {"Image": "busybox", "Env": ["A=1"]},
            "Placement": {"Constraints": ["node.labels.zone == a", hold_constraint(P)]},
            "Resources": {"Reservations": {"NanoCPUs": 2_000_000_000}},
        },
        "Mode": {"Replicated": {"Replicas": 2}},
    }


def test_swarmgpus_own_writes_leave_what_a_plan_was_made_from() -> None:
    """Everything the daemon writes on a service: the device map with its gate, env,
    MaxReplicas and ForceUpdate; the packed MaxReplicas it records; a generic
    reservation, update parallelism, mounts; state labels of a move, a preemption, a
    back-off. (A gate naming another service, which it takes out: below.)"""
    before = spec()
    every = SpecWrites(
        service_labels_set={
            f"{P}state.move": "{}",
            f"{P}state.preempted": "{}",
            f"{P}state.replaced": "1@2",
            f"{P}state.max-replicas": "2",
            f"{P}share.milli.n1": "500",
        },
        add_env=("NVIDIA_X=1",),
        add_mounts=({"Target": "/x", "Source": "/dev/null", "Type": "bind"},),
        set_max_replicas=2,
        set_update_parallelism=2,
        set_generic=("NVIDIA-GPU", 1),
        replace_env=(("A=1", "A=2"),),
    )
    after = service_compute(every)(service_compute(MAP)(before) or before) or before
    assert after != before
    assert planned_from(after, P) == planned_from(before, P)
    # The user's constraint however spaced is the same constraint.
    spaced = copy.deepcopy(before)
    spaced["TaskTemplate"]["Placement"]["Constraints"][0] = "node.labels.zone==a"
    assert planned_from(spaced, P) == planned_from(before, P)


def test_two_writes_planned_from_one_snapshot_both_land() -> None:
    """The daemon's second write of a service in a cycle reads the spec its first one
    wrote: planned from the same snapshot, both land."""
    snap = spec()
    planned = Planned(snap, P)
    first = planned.guard(service_compute(MAP))(copy.deepcopy(snap))
    assert first is not None and not planned.stale
    more = SpecWrites(
        service_labels_set={f"{P}state.replaced": "1@2"},
        set_generic=("NVIDIA-GPU", 1),
        set_update_parallelism=2,
    )
    second = planned.guard(service_compute(more))(first)
    assert second is not None and not planned.stale
    assert second["Labels"][devices_key(P, "n1")] == "GPU-a"
    assert second["Labels"][f"{P}state.replaced"] == "1@2"


def _set(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(s: dict[str, Any]) -> None:
        for k in path[:-1]:
            s = s.setdefault(k, {})
        s[path[-1]] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (_set(("Labels", f"{P}gpus"), "2"), f"{P}gpus 1 -> 2"),
        (_set(("Labels", f"{P}gpu-memory"), "40GiB"), f"{P}gpu-memory unset -> 40GiB"),
        (_set(("Mode",), {"Replicated": {"Replicas": 3}}), "replicas 2 -> 3"),
        (_set(("Mode",), {"Global": {}}), "mode Replicated -> Global"),
        (
            _set(("TaskTemplate", "Placement", "Constraints"), ["node.labels.zone == b"]),
            "constraints",
        ),
        (_set(("TaskTemplate", "Placement", "MaxReplicas"), 2), "max_replicas 0 -> 2"),
        (_set(("TaskTemplate", "Placement", "Platforms"), [{"OS": "linux"}]), "platforms"),
        (
            _set(("TaskTemplate", "Resources", "Reservations", "NanoCPUs"), 4_000_000_000),
            "reserves (2000, 0) -> (4000, 0)",
        ),
        (_set(("Labels", "com.docker.stack.namespace"), "other"), "stack ml -> other"),
    ],
)
def test_an_owners_change_of_what_placement_reads_refuses_the_write(
    edit: Callable[[dict[str, Any]], None], named: str
) -> None:
    planned = Planned(spec(), P)
    now = spec()
    edit(now)
    assert planned.guard(service_compute(MAP))(now) is None
    assert planned.stale and any(c.startswith(named) for c in planned.changed), planned.changed


def test_a_retried_write_judges_the_spec_it_reads_again() -> None:
    """Each read of a retried write is judged afresh: refused while the spec asks for
    another request, written once it asks again for what was planned."""
    planned = Planned(spec(), P)
    compute = planned.guard(service_compute(MAP))
    other = spec()
    other["Labels"][f"{P}gpus"] = "4"
    assert compute(other) is None and planned.stale
    got: Mapping[str, Any] | None = compute(spec())
    assert got is not None and not planned.stale


def test_an_owner_adding_a_gate_that_names_another_service_refuses_the_write() -> None:
    """A re-deploy from a file rendered under another name adds that name's gate: the
    plan, made without it, would land beside it (the tasks then wait for the other
    service's gate, and are replaced again when the next cycle takes it out)."""
    planned = Planned(spec(), P)
    now = spec()
    now["TaskTemplate"]["Placement"]["Constraints"].append(gate_constraint(P, "other"))
    assert planned.guard(service_compute(MAP))(now) is None
    assert planned.stale and any(gate_constraint(P, "other") in c for c in planned.changed), (
        planned.changed
    )


def test_swarmgpu_taking_out_a_gate_that_names_another_service_leaves_the_plan_current() -> None:
    """Swarmgpu replaces a gate naming another service with the service's own: a second
    write planned from the snapshot that had it still lands."""
    snap = spec()
    snap["TaskTemplate"]["Placement"]["Constraints"].append(gate_constraint(P, "other"))
    planned = Planned(snap, P)
    swap = SpecWrites(
        add_constraints=(gate_constraint(P, "train"),),
        remove_constraints=(gate_constraint(P, "other"), hold_constraint(P)),
    )
    first = planned.guard(service_compute(swap))(copy.deepcopy(snap))
    assert first is not None and not planned.stale
    second = planned.guard(service_compute(MAP))(first)
    assert second is not None and not planned.stale


def test_an_owner_dropping_a_constraint_on_a_gate_label_refuses_the_write() -> None:
    """``!= true`` on another service's gate label is the owner's constraint, not a gate
    swarmgpu takes out: a re-deploy without it changed what the plan was made from."""
    away = f"node.labels.{P}service.db != true"
    snap = spec()
    snap["TaskTemplate"]["Placement"]["Constraints"].append(away)
    planned = Planned(snap, P)
    assert planned.guard(service_compute(MAP))(spec()) is None
    assert planned.stale and any(away.replace(" ", "") in c for c in planned.changed), (
        planned.changed
    )


def test_a_forced_update_since_the_snapshot_refuses_a_write_that_forces_one() -> None:
    """The plan bumps ForceUpdate from what it read (its tasks are replaced once, and
    ``state.devices-gen`` records the value it makes). An owner's ``docker service update
    --force`` (or the daemon's own earlier force a stale snapshot missed) between the
    snapshot and the write already replaced them: bumped again on the fresh spec, Swarm
    replaced them a second time. The write is refused; the service is planned again."""
    snap = spec()
    snap["TaskTemplate"]["ForceUpdate"] = 3
    planned = Planned(snap, P)
    now = copy.deepcopy(snap)
    now["TaskTemplate"]["ForceUpdate"] = 4
    assert planned.guard(service_compute(MAP))(now) is None
    assert planned.stale and any(c.startswith("ForceUpdate 3 -> 4") for c in planned.changed), (
        planned.changed
    )


def test_a_write_that_forces_nothing_lands_after_a_forced_update() -> None:
    """A write that forces no update (labels, a gate) replaces no task: an owner's
    ``--force`` since the snapshot leaves it current."""
    snap = spec()
    planned = Planned(snap, P)
    now = copy.deepcopy(snap)
    now["TaskTemplate"]["ForceUpdate"] = 1
    labels_only = SpecWrites(service_labels_set={devices_key(P, "n1"): "GPU-a"})
    got = planned.guard(service_compute(labels_only))(now)
    assert got is not None and not planned.stale
    assert got["TaskTemplate"]["ForceUpdate"] == 1
