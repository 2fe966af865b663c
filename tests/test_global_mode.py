"""Pure tests of ``mode: global`` with a GPU request (placement.globalmode)."""

from __future__ import annotations

from dataclasses import replace

from support.gpu_nodes import DGX_A100, RTX4090
from support.placement import FACTS, apply, node, svc

from swarmgpu.manager.placement import Planner, plan_placement
from swarmgpu.swarm.client import SwarmTask

P = "swarmgpu."


def gsvc(name: str, labels: dict[str, str]) -> object:
    return replace(svc(name, labels), mode="global", replicas=None)


def test_global_gets_one_holding_per_gpu_node_and_none_elsewhere() -> None:
    cpu = node("n-cpu", "mgr-1")
    nodes = [node("n-dgx", "gpu-node-1"), node("n-4090", "gpu-node-2"), cpu]
    s = gsvc("infer", {f"{P}gpus": "1"})
    sp = plan_placement(nodes, [s], [], FACTS).services[0]  # type: ignore[list-item]
    assert sp.status == "placed" and sp.mode == "global"
    assert sorted(p.hostname for p in sp.placements) == ["gpu-node-1", "gpu-node-2"]
    assert {k for k in sp.service_labels_set if k.startswith(f"{P}devices.")} == {
        f"{P}devices.n-dgx",
        f"{P}devices.n-4090",
    }
    assert sp.to_dict()["mode"] == "global" and sp.to_dict()["nodes_waiting"] == {}


def test_global_node_without_room_waits_and_says_why_then_joins() -> None:
    nodes = [node("n-dgx", "gpu-node-1"), node("n-4090", "gpu-node-2")]
    s = gsvc("big", {f"{P}gpus": "1", f"{P}gpu-memory": "39GiB"})  # A100: 40537 MiB, 4090: 24564
    planner = Planner()
    plan = planner.plan(nodes, [s], [], FACTS)  # type: ignore[list-item]
    sp = plan.services[0]
    assert [p.hostname for p in sp.placements] == ["gpu-node-1"]
    assert list(sp.nodes_waiting) == ["gpu-node-2"]
    assert any("gpu-node-2" in w for w in sp.warnings)
    # A node joining is placed within one cycle (the plan is not the settled one).
    nodes = apply(nodes, plan)
    s2 = replace(s, labels={**s.labels, **sp.service_labels_set})  # type: ignore[type-var]
    third = node("n-dgx2", "gpu-node-3")
    facts = {**FACTS, "n-dgx2": DGX_A100.facts()}
    sp = planner.plan([*nodes, third], [s2], [], facts).services[0]
    assert sorted(p.hostname for p in sp.placements) == ["gpu-node-1", "gpu-node-3"]
    # ... and a node leaving takes its holding with it (its labels are gone with it).
    plan = planner.plan(nodes[1:], [s2], [], {"n-4090": RTX4090.facts()})
    assert plan.services[0].status == "pending" and not plan.services[0].placements


def test_status_lists_global_nodes_waiting_and_jobs_done() -> None:
    from swarmgpu.manager.web.cluster_view import render_status

    nodes = [node("n-dgx", "gpu-node-1"), node("n-4090", "gpu-node-2")]
    s = gsvc("big", {f"{P}gpus": "1", f"{P}gpu-memory": "39GiB"})
    sp = plan_placement(nodes, [s], [], FACTS).services[0]  # type: ignore[list-item]
    done = {
        "name": "embed",
        "mode": "replicated-job",
        "status": "done",
        "placements": [],
        "progress": "2 of 2 complete, 0 GPU holding(s) now",
        "nodes_waiting": {},
    }
    services = [sp.to_dict(), done, {"name": "r", "placements": []}]
    lines = render_status({"nodes": [], "services": services, "pending": []}).split("\n")
    assert lines[1] == "global services and jobs:"
    assert lines[2] == "  big (global): on gpu-node-1"
    assert lines[3].startswith("    gpu-node-2: waiting, gate closed: ")
    assert lines[4] == "  embed (replicated-job): done, 2 of 2 complete, 0 GPU holding(s) now"


def test_audit_names_a_global_services_gpu_node_without_room(tmp_path: object) -> None:
    import time

    from swarmgpu.core.config import Config
    from swarmgpu.manager.cycle.placement import audit_checks
    from swarmgpu.manager.nodes.agent_client import FactsResult
    from swarmgpu.manager.nodes.sync import Snapshot

    nodes = [node("n-dgx", "gpu-node-1"), node("n-4090", "gpu-node-2")]
    s = gsvc("big", {f"{P}gpus": "1", f"{P}gpu-memory": "39GiB"})
    facts = {n.id: FactsResult(n.id, n.hostname, "", FACTS[n.id], None, time.time()) for n in nodes}
    cfg = replace(Config(), state_dir=str(tmp_path))
    snap = Snapshot(nodes, [s], [], facts)  # type: ignore[list-item]
    (check,) = audit_checks(cfg)
    found = [f for f in check(snap) if f.kind == "global-node-waiting"]
    assert [(f.subject, f.advisory) for f in found] == [("big", True)]
    assert found[0].message.startswith("gpu-node-2: ")


def test_global_places_on_a_node_whose_namesake_has_no_room() -> None:
    """Waits are keyed by node ID: two nodes may share a hostname (one re-joined under
    a new ID, or two machines named alike). Before: keyed by hostname, the node without
    room made its namesake (with room, read after it) skip placement: no holding there,
    and one wait shown for both."""
    nodes = [node("n-dgx", "gpu-node-1"), node("n-4090", "gpu-node-1")]
    s = gsvc("big", {f"{P}gpus": "1", f"{P}gpu-memory": "39GiB"})  # A100: 40537 MiB, 4090: 24564
    sp = plan_placement(nodes, [s], [], FACTS).services[0]  # type: ignore[list-item]
    assert [p.node_id for p in sp.placements] == ["n-dgx"]
    assert list(sp.nodes_waiting) == ["gpu-node-1 (n-4090)"]


def test_a_node_joining_restarts_no_task_where_another_nodes_task_waits() -> None:
    """A global service runs on one GPU node; its task on the other waits (preparing: an
    image pull, a start that failed). A third GPU node joins: its device map is written
    and its gate opens, and nothing else. The waiting task was made after its own node's
    map (the new node's is nothing it reads): no ForceUpdate, which would restart the
    running task on the first node for an unrelated node."""
    nodes = [node("n-dgx", "gpu-node-1"), node("n-4090", "gpu-node-2")]
    s = replace(svc("infer", {f"{P}gpus": "1"}), mode="global", replicas=None)
    planner = Planner()
    plan = planner.plan(nodes, [s], [], FACTS)
    nodes = apply(nodes, plan)
    s = replace(s, labels={**s.labels, **plan.services[0].service_labels_set})
    tasks = [
        SwarmTask("t1", s.id, "n-dgx", None, "running", "running", ()),
        SwarmTask("t2", s.id, "n-4090", None, "preparing", "running", ()),
    ]
    assert not planner.plan(nodes, [s], tasks, FACTS).services[0].force_update
    facts = {**FACTS, "n-dgx2": DGX_A100.facts()}
    sp = planner.plan([*nodes, node("n-dgx2", "gpu-node-3")], [s], tasks, facts).services[0]
    assert sorted(p.hostname for p in sp.placements) == ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
    assert f"{P}devices.n-dgx2" in sp.service_labels_set
    assert not sp.force_update and (sp.decision or ("none",))[0] == "none"
    # A waiting task not on a node yet may land on the new node: that one is replaced.
    tasks[1] = replace(tasks[1], node_id="", state="pending")
    sp = planner.plan([*nodes, node("n-dgx2", "gpu-node-3")], [s], tasks, facts).services[0]
    assert sp.force_update


def test_global_pending_reason_names_a_shared_why_once() -> None:
    """Nodes that wait for the same reason share it: before, a long hint (the
    gpu-memory one) came once per node; the nodes are named, the first few, then
    counted."""
    from swarmgpu.manager.placement.cycle import Released
    from swarmgpu.manager.placement.globalmode import GlobalPlacement

    hint = "gpu-memory 80GB is more than any GPU has; ask for 79GiB"
    waits = {f"h{i}": hint for i in range(1, 7)} | {"z": "node is down, paused or drained"}
    pending, note = GlobalPlacement((), Released(), waits, False).outcome(frozenset())
    assert note is None
    assert pending == (
        f"no GPU node has room: h1, h2, h3 and 3 more: {hint}; z: node is down, paused or drained"
    )
    assert pending.count(hint) == 1
