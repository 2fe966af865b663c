"""The ledger is authoritative: a declared device list never takes another service's GPUs."""

from __future__ import annotations

from dataclasses import replace

from support.placement import DGX, FACTS, R4090, apply, svc

from swarmgpu.manager.placement import plan_placement
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask


def _placed_owner() -> tuple[list[SwarmNode], SwarmService, str, SwarmTask]:
    owner = svc("zz-owner", {"swarmgpu.gpus": "2"})
    plan = plan_placement([DGX, R4090], [owner], [], FACTS)
    sp = plan.services[0]
    (p,) = sp.placements
    owner = replace(owner, labels={**owner.labels, **sp.service_labels_set})
    run = SwarmTask("t-owner", owner.id, p.node_id, 1, "running", "running", ())
    return apply([DGX, R4090], plan), owner, ",".join(p.uuids), run


def test_declared_devices_of_another_service_are_refused_and_replanned() -> None:
    nodes, owner, uuids, run = _placed_owner()
    node_id = run.node_id
    # A newcomer whose name sorts first names the owner's GPUs in its own device label.
    thief = svc("aa-thief", {"swarmgpu.gpus": "2", f"swarmgpu.devices.{node_id}": uuids})
    plan = plan_placement(nodes, [owner, thief], [run], FACTS)
    by = {s.name: s for s in plan.services}
    o, t = by["zz-owner"], by["aa-thief"]
    # The owner keeps its GPUs: no service write that would restart it, no new placement.
    assert ",".join(o.placements[0].uuids) == uuids
    assert not o.new and not o.force_update and not o.service_labels_set
    assert not plan.node_remove.get(node_id) or \
        "swarmgpu.assign.zz-owner" not in plan.node_remove[node_id]
    # The thief is reported and placed on other GPUs.
    assert any("aa-thief" in w or "names GPU(s) that zz-owner" in w for w in t.warnings), \
        t.warnings
    assert t.placements and not set(t.placements[0].uuids) & set(uuids.split(","))


def test_declared_devices_on_free_gpus_are_adopted() -> None:
    uuid = FACTS["n-dgx"].gpus[3].uuid
    s = svc("rendered", {"swarmgpu.gpus": "1", "swarmgpu.devices.n-dgx": uuid})
    run = SwarmTask("t1", s.id, "n-dgx", 1, "running", "running", ())
    sp = plan_placement([DGX, R4090], [s], [run], FACTS).services[0]
    assert sp.placements[0].uuids == (uuid,) and not sp.warnings


def test_two_declared_lists_the_running_one_wins() -> None:
    uuid = FACTS["n-dgx"].gpus[0].uuid
    a = svc("aa-new", {"swarmgpu.gpus": "1", "swarmgpu.devices.n-dgx": uuid})
    b = svc("bb-running", {"swarmgpu.gpus": "1", "swarmgpu.devices.n-dgx": uuid})
    run = SwarmTask("t1", b.id, "n-dgx", 1, "running", "running", ())
    plan = plan_placement([DGX, R4090], [a, b], [run], FACTS)
    by = {s.name: s for s in plan.services}
    assert by["bb-running"].placements[0].uuids == (uuid,)
    assert not by["bb-running"].force_update
    assert by["aa-new"].placements and by["aa-new"].placements[0].uuids != (uuid,)


def test_a_declared_list_naming_one_gpu_twice_is_not_adopted() -> None:
    """`swarmgpu.devices.<node>: GPU-a,GPU-a` (a stack's own list): adopted as it was, the
    holding named one GPU twice for a two-GPU request (the ledger's parser refuses such an
    entry, and a packed list naming a GPU in two slots was never adopted)."""
    uuid = FACTS["n-dgx"].gpus[3].uuid
    s = svc("twice", {"swarmgpu.gpus": "2", "swarmgpu.devices.n-dgx": f"{uuid},{uuid}"})
    run = SwarmTask("t1", s.id, "n-dgx", 1, "running", "running", ())
    sp = plan_placement([DGX, R4090], [s], [run], FACTS).services[0]
    assert sp.placements, sp.reason
    for p in sp.placements:
        assert len(set(p.uuids)) == len(p.uuids) == 2, p.uuids
