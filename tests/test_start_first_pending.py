"""A GPU service whose spec updates start-first (``UpdateConfig.Order``) and whose first
task waits from before its device map: Swarm keeps that task until the new one (made by
the map's ForceUpdate) runs, and the gate opens only once every waiting task is newer
than the map, so it never does. The plan says so by name, with the fix, and ``audit``
reports it as a finding; stop-first (Swarm's default) waits one cycle without a word."""

from __future__ import annotations

from dataclasses import replace

from support.placement import DGX, FACTS, R4090, apply, svc

from swarmgpu.manager.cycle.placement import findings_of
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import plan_placement
from swarmgpu.manager.web.cluster_view import build_cluster, render_status
from swarmgpu.swarm.client import SwarmService, SwarmTask


def gpu_service(order: str) -> SwarmService:
    s = svc("llm", {"swarmgpu.gpus": "1"})
    return replace(s, spec={"UpdateConfig": {"Order": order, "Parallelism": 1}})


def pending(tid: str, s: SwarmService, force: int) -> SwarmTask:
    return SwarmTask(tid, s.id, "", 1, "pending", "running", (), force_update=force)


def two_cycles(order: str) -> list[object]:
    """The first cycle (the map written, the first task replaced) and the next (Swarm's
    updater made the new task; start-first keeps the old one waiting beside it)."""
    s = gpu_service(order)
    first = plan_placement([DGX, R4090], [s], [pending("t1", s, 0)], FACTS)
    sp = first.services[0]
    assert sp.force_update and sp.gates_deferred
    s2 = replace(s, labels={**s.labels, **sp.service_labels_set}, force_update=1)
    old = [pending("t1", s2, 0)] if order == "start-first" else []
    nxt = plan_placement(apply([DGX, R4090], first), [s2], [*old, pending("t2", s2, 1)], FACTS)
    return [first, nxt]


def test_start_first_waiting_behind_its_old_task_is_named_with_the_fix() -> None:
    for plan in two_cycles("start-first"):
        (sp,) = plan.services  # type: ignore[attr-defined]
        (w,) = [w for w in sp.warnings if "start-first" in w]
        assert w.startswith("never placed: update_config.order is start-first: ")
        assert "keeps a task made before" in w and "order: stop-first" in w and "replicas >= 2" in w
        (f,) = [f for f in findings_of(plan) if f.kind == "start-first"]  # type: ignore[arg-type]
        assert f.subject == "llm" and f.message == w and not f.advisory
    assert "swarmgpu.service.llm" not in plan.node_set.get("n-dgx", {})  # type: ignore[attr-defined]


def test_stop_first_waits_one_cycle_unsaid_and_its_gate_opens() -> None:
    first, nxt = two_cycles("stop-first")
    for plan in (first, nxt):
        (sp,) = plan.services  # type: ignore[attr-defined]
        assert not [w for w in sp.warnings if "start-first" in w]
        assert not [f for f in findings_of(plan) if f.kind == "start-first"]  # type: ignore[arg-type]
    assert nxt.node_set == {"n-dgx": {"swarmgpu.service.llm": "true"}}  # type: ignore[attr-defined]


def test_status_names_a_start_first_service_that_is_never_placed() -> None:
    _, nxt = two_cycles("start-first")
    (sp,) = nxt.services  # type: ignore[attr-defined]
    (w,) = [w for w in sp.warnings if "start-first" in w]
    text = render_status(build_cluster(Snapshot([DGX, R4090], [], [], {}), nxt)).splitlines()  # type: ignore[arg-type]
    at = text.index("never placed (update_config.order: start-first):")
    assert text[at + 1] == f"  llm: {w}"[: len(text[at + 1])]
    first, _ = two_cycles("stop-first")
    assert "never placed" not in render_status(
        build_cluster(Snapshot([DGX, R4090], [], [], {}), first)
    )  # type: ignore[arg-type]


def test_a_running_start_first_service_whose_map_is_rewritten_is_not_named() -> None:
    """A repin's or move's write beside a running task: the old task runs, only the map's
    new one waits, so the gate is not held for it and nothing is said."""
    s = gpu_service("start-first")
    first = plan_placement([DGX, R4090], [s], [pending("t1", s, 0)], FACTS)
    sp = first.services[0]
    s2 = replace(s, labels={**s.labels, **sp.service_labels_set}, force_update=2)
    node = sp.placements[0].node_id
    old = SwarmTask("t1", s2.id, node, 1, "running", "running", (), force_update=1)
    nxt = plan_placement(apply([DGX, R4090], first), [s2], [old, pending("t2", s2, 2)], FACTS)
    (sp2,) = nxt.services
    assert not [w for w in sp2.warnings if "start-first" in w]
    assert not [f for f in findings_of(nxt) if f.kind == "start-first"]
