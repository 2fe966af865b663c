"""The map (``web.cluster_view``) beside a ledger entry placement read as a removed
service's (``PlacementPlan.dropped``: web removed and created again under its name, the
old task still stopping on n-4090, the new web placed afresh on n-dgx). The ledger keys
by name: before, the map showed that entry as the new web's holding (its service ID,
its request), as the rest of the daemon no longer reads it. Now it shows it as a
removed service's entry (no service ID, no request), as an entry of a service not
listed."""

from __future__ import annotations

from support.forged import R4090_F, P, held_labels, snapshot, sw_node, sw_svc

from swarmgpu.manager.placement.records import (
    PlacementPlan,
    ReplicaPlacement,
    ServicePlan,
    Status,
)
from swarmgpu.manager.web.cluster_view import build_cluster
from swarmgpu.swarm.client import SwarmTask

R = tuple(g.uuid for g in R4090_F.gpus)


def _holders(dropped: bool) -> list[dict[str, object]]:
    web = sw_svc("web", {f"{P}gpus": "1"})
    nodes = [sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", held_labels("web", "n-4090", R[0]))]
    t_new = SwarmTask("t-new", web.id, "n-dgx", 1, "running", "running", ())
    placed = ReplicaPlacement("n-dgx", "gpu-node-1", (0,), ("GPU-dgx-0",), (1000,))
    plan = PlacementPlan(
        services=[ServicePlan("web", web.id, None, "1 GPU", Status.PLACED, "running",
                              placements=(placed,))],
        disowned=frozenset({("web", "n-4090")} if dropped else ()))
    doc = build_cluster(snapshot(nodes, [web], [t_new]), plan, prefix=P)
    (node,) = [n for n in doc["nodes"] if n["id"] == "n-4090"]
    (gpu,) = [g for g in node["gpus"] if g["uuid"] == R[0]]
    return list(gpu["holders"])


def test_the_map_shows_an_entry_placement_dropped_as_no_live_services() -> None:
    (h,) = _holders(dropped=True)
    assert (h["service"], h["service_id"], h["request"], h["tasks"]) == ("web", None, "", [])


def test_the_map_shows_a_live_services_entry_as_its_own() -> None:
    (h,) = _holders(dropped=False)
    assert (h["service_id"], h["request"]) == ("id-web", "1 GPU")
