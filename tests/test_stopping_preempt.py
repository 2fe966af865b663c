"""A pending service that the GPUs of tasks Swarm is stopping keep waiting stops no
running service for them: the stopping tasks end within their grace period and give
those GPUs back (``placement.preempt``, ``nominated.StoppingGpus``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.forged import DGX_F, R_UUIDS, snapshot, sw_node, sw_svc
from support.placement import apply

from swarmgpu.core.config import Config, PreemptionConfig
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import facts_by_node
from swarmgpu.manager.placement import Holding, Planner, Status, assign_key, gate_key
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."


def _task(tid: str, s: SwarmService, node: str, state: str, desired: str) -> SwarmTask:
    return SwarmTask(tid, s.id, node, 1, state, desired, ())


def _held(name: str, uuids: tuple[str, ...], nid: str = "n-4090") -> dict[str, str]:
    h = Holding(name, nid, uuids, tuple(1000 for _ in uuids))
    return {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}


def _cluster(gpus: int) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask],
                                 SwarmTask]:
    """old held six RTX 4090s of n-4090 and was scaled to 0 (its task stops, desired
    shutdown, still running); filler (preemptible) holds the other two; high (priority
    100) asks for ``gpus`` RTX 4090s."""
    old = sw_svc("old", {f"{P}gpus": "6"}, replicas=0)
    filler = sw_svc("filler", {f"{P}gpus": "2"})
    high = sw_svc("high", {f"{P}gpus": str(gpus), f"{P}gpu-product": "*RTX 4090*",
                           f"{P}priority": "100"})
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", {**_held("old", R_UUIDS[:6]),
                                            **_held("filler", R_UUIDS[6:])})]
    tasks = [_task("t-filler", filler, "n-4090", "running", "running"),
             _task("t-high", high, "", "pending", "running")]
    return nodes, [old, filler, high], tasks, _task("t-old", old, "n-4090", "running",
                                                    "shutdown")


def _round(gpus: int, stops: bool) -> list[tuple[str, list[str]]]:
    """Two cycles with old's task stopping, then one with it stopped (``stops``): each
    cycle's preemptions (preemptor, victims)."""
    nodes, services, tasks, t_old = _cluster(gpus)
    cfg = Config(preemption=PreemptionConfig(dry_run=False))
    planner, out = Planner(prefix=P), []
    for leaving in ([t_old], [t_old], [] if stops else [t_old]):
        snap = replace(snapshot(nodes, services, tasks), stopping=leaving)
        plan = make_plan(snap, cfg, planner=planner)
        chosen = Preempter(cfg).decide(snap, plan, facts_by_node(snap), None, 0.0, None, {})
        out += [(p.service, [v.service for v in p.victims]) for p in chosen]
        nodes = apply(nodes, plan)
        if not leaving:
            sp = {sp.name: sp for sp in plan.services}["high"]
            assert sp.status != Status.PENDING and sp.placements, sp
    return out


def test_a_preemptor_waits_for_gpus_a_stopping_task_gives_back_instead_of_a_victim(
        ) -> None:
    """high (2 GPUs) waits while old's task stops on six GPUs that fit it, and is placed
    on them once it stopped: filler keeps running. Before: high preempted filler at once
    (the stopping GPUs counted used for it), stopped for GPUs that were free seconds
    later."""
    assert _round(2, stops=True) == []


def test_a_preemptor_the_stopping_gpus_would_not_fit_still_preempts() -> None:
    """high asks for 8 RTX 4090s: the six old gives back are not enough, and no victim
    can free the rest while they stop; once old stopped, filler is its victim, as ever."""
    assert _round(8, stops=False) == []
    nodes, services, tasks, _t_old = _cluster(8)
    cfg = Config(preemption=PreemptionConfig(dry_run=False))
    snap = snapshot(nodes, services, tasks)
    plan = make_plan(snap, cfg, planner=Planner(prefix=P))
    chosen = Preempter(cfg).decide(snap, plan, facts_by_node(snap), None, 0.0, None, {})
    assert [(p.service, [v.service for v in p.victims]) for p in chosen] == \
        [("high", ["filler"])]


def test_a_task_stopping_past_its_grace_period_is_not_waited_for() -> None:
    """old's task (10 s grace period) is still desired shutdown and running 100 s after
    the daemon first saw it stopping (past its grace period and a minute of skew: a
    container that will not die, a process hung in the GPU driver): its GPUs stay held,
    but high no longer waits for them and preempts filler, as before. Without the bound
    it waited for ever."""
    nodes, services, tasks, t_old = _cluster(2)
    cfg = Config(preemption=PreemptionConfig(dry_run=False))
    planner, got = Planner(prefix=P), []
    for now in (1000.0, 1065.0, 1100.0):
        snap = replace(snapshot(nodes, services, tasks), stopping=[t_old])
        plan = planner.plan(snap.nodes, snap.services, snap.tasks, facts_by_node(snap),
                            now=now, stopping=[t_old])
        assert {("n-4090", u) for u in R_UUIDS[:6]} <= plan.stopping_held.keys()
        chosen = Preempter(cfg).decide(snap, plan, facts_by_node(snap), None, now, None, {})
        got.append([(p.service, [v.service for v in p.victims]) for p in chosen])
        nodes = apply(nodes, plan)
    assert got == [[], [], [("high", ["filler"])]]


def _publishing(s: SwarmService) -> SwarmService:
    """``s`` publishing 8000/tcp in host mode (Swarm's HostPortFilter)."""
    return replace(s, spec={**s.spec, "EndpointSpec": {"Ports": [
        {"Protocol": "tcp", "TargetPort": 80, "PublishedPort": 8000, "PublishMode": "host"}]}})


@pytest.mark.parametrize("web_binds", [False, True])
def test_a_preemptor_waits_for_the_gpus_and_the_host_port_of_one_stopping_task(
        web_binds: bool) -> None:
    """old's stopping task holds six RTX 4090s and binds 8000/tcp, which high (2 GPUs,
    any product) publishes too; low (preemptible) holds the DGX. Both free once old's
    task stops: high waits and low runs on. Before, n-4090 was refused for the port and
    skipped before its stopping GPUs were asked: low was stopped for GPUs and a port free
    seconds later (the GPU wait and the port wait each held alone). With web's running
    task binding 8000/tcp there too, n-4090 stays refused: low goes, as before."""
    nodes, services, tasks, t_old = _cluster(2)
    d = tuple(g.uuid for g in DGX_F.gpus)
    low = sw_svc("low", {f"{P}gpus": str(len(d))})
    nodes[1] = sw_node("n-dgx", "gpu-node-1", _held("low", d, "n-dgx"))
    high = _publishing(sw_svc("high", {f"{P}gpus": "2", f"{P}priority": "100"}))
    services = [_publishing(services[0]), services[1], low, high]
    tasks = [*tasks, SwarmTask("t-low", low.id, "n-dgx", 1, "running", "running", ())]
    if web_binds:
        web = _publishing(sw_svc("web", {}, gated=False))
        services.append(web)
        tasks.append(SwarmTask("t-web", web.id, "n-4090", 1, "running", "running", ()))
    t_old = replace(t_old, host_ports=("8000/tcp",))
    cfg = Config(preemption=PreemptionConfig(dry_run=False))
    planner = Planner(prefix=P)
    snap = replace(snapshot(nodes, services, tasks), stopping=[t_old])
    plan = make_plan(snap, cfg, planner=planner)
    (sp,) = [sp for sp in plan.services if sp.name == "high"]
    assert sp.status == Status.PENDING and "8000/tcp" in (sp.reason or ""), sp.reason
    chosen = Preempter(cfg).decide(snap, plan, facts_by_node(snap), planner.refused_nodes,
                                   0.0, planner.port_takers, {})
    assert [(p.service, [v.service for v in p.victims]) for p in chosen] == (
        [("high", ["low"])] if web_binds else [])
