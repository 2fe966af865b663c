"""A holding on a GPU that failed, the health policy off: the planner re-places it
(an evacuation). The failed GPU has no room (the allocator counts it 0 free), so its
holding cannot be counted there; it is said as a failed GPU, not as a refused commit."""

from __future__ import annotations

from dataclasses import replace

from support.placement import DGX, FACTS, apply, svc

from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement import PlacementPlan, Planner, ServicePlan
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

DEV = "swarmgpu.devices."
NID = DGX.id
STALE = "the choice is stale or released twice"


def _placed(services: list[SwarmService]) -> tuple[Planner, list[SwarmNode],
                                                   list[SwarmService], list[SwarmTask]]:
    """The daemon placed ``services`` on the DGX, their lists written, each task running."""
    daemon = Planner()
    plan = daemon.plan([DGX], services, [], FACTS)
    by = {sp.name: sp for sp in plan.services}
    services = [replace(s, labels={**s.labels, **by[s.name].service_labels_set},
                        version=s.version + 1) for s in services]
    runs = [SwarmTask(f"t-{s.name}", s.id, NID, 1, "running", "running", (),
                      created_at="2026-12-01T10:00:00Z") for s in services]
    nodes = apply([DGX], plan)
    nodes = apply(nodes, daemon.plan(nodes, services, runs, FACTS))
    return daemon, nodes, services, runs


def _fail(uuid: str) -> dict[str, NodeFacts]:
    """The facts with GPU ``uuid`` of the DGX failed."""
    f = FACTS[NID]
    sick = replace(f, gpus=tuple(replace(g, healthy=False) if g.uuid == uuid else g
                                 for g in f.gpus))
    return {**FACTS, NID: sick}


def _index(uuid: str) -> int:
    return [g.uuid for g in FACTS[NID].gpus].index(uuid)


def _evacuated(plan: PlacementPlan, name: str) -> ServicePlan:
    """``name``'s plan, evacuated off the failed GPU and said so (never as a refused
    commit)."""
    sp = {p.name: p for p in plan.services}[name]
    assert not any(STALE in w for w in sp.warnings), sp.warnings
    assert any("failed GPU" in w for w in sp.warnings), sp.warnings
    assert sp.decision is not None and sp.decision[0] == "evacuate", sp.decision
    return sp


def test_an_evacuation_off_a_failed_gpu_says_the_gpu_failed_and_counts_it_empty() -> None:
    """Before, the holding's commit on the failed GPU (0 free of 1000) was refused and
    said "would leave -1000 of 1000; the choice is stale or released twice", as if
    the planner had counted it twice."""
    tenant = svc("tenant", {"swarmgpu.gpus": "1", "swarmgpu.pack": "never"})
    victim = svc("victim", {"swarmgpu.gpus": "1", "swarmgpu.pack": "never"})
    daemon, nodes, (tenant, victim), runs = _placed([tenant, victim])
    own, theirs = tenant.labels[DEV + NID], victim.labels[DEV + NID]
    plan = daemon.plan(nodes, [tenant, victim], runs, _fail(own))
    new = _evacuated(plan, "tenant").service_labels_set[DEV + NID]
    assert new not in (own, theirs)
    free = daemon.cluster.alloc.snapshot()[NID]
    taken = {_index(own), _index(theirs), _index(new)}
    assert [free[i] for i in sorted(taken)] == [0, 0, 0]
    assert all(f == 1000 for i, f in enumerate(free) if i not in taken), free


def test_a_failed_gpu_two_services_shared_is_counted_empty_once_both_leave() -> None:
    """Two halves of one GPU: it fails, each is re-placed, each said as a failed GPU
    (before: two refused commits, each "stale or released twice")."""
    a = svc("a", {"swarmgpu.gpu-fraction": "0.5"})
    b = svc("b", {"swarmgpu.gpu-fraction": "0.5"})
    daemon, nodes, (a, b), runs = _placed([a, b])
    shared = a.labels[DEV + NID]
    assert b.labels[DEV + NID] == shared
    plan = daemon.plan(nodes, [a, b], runs, _fail(shared))
    news = {_evacuated(plan, n).service_labels_set[DEV + NID] for n in ("a", "b")}
    assert shared not in news
    free = daemon.cluster.alloc.snapshot()[NID]
    assert free[_index(shared)] == 0
    assert sum(free) == 1000 * (len(free) - 1) - 500 * 2, free
    assert all(0 <= f <= 1000 for f in free), free
