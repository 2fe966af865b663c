"""The rebalancer reads a pending service as placement's plan leaves it, tenant caps
included (``cycle.rebalance.pending_of``). Pure.

Defragmentation makes room for a pending request by moving other services' tasks
(``policies.defrag``). The daemon handed it every service placement left pending: a
service its queue's max holds back (a tenant at its quota, ``default: {max: 0}``) was
among them, so another team's running task was moved -- restarted -- to make room that
placement then never gave (the max holds it whatever the room), once per cooldown for as
long as the tenant kept a service over its quota deployed. Preemption passes such a
service over (``placement.preempt._passed_over``); the rebalancer now does too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from support.forged import RecordingSwarm
from support.rebalance import CFG, FACTS, U2, P, node, page, running, service

from swarmgpu.core.config import Config
from swarmgpu.manager.placement import PlacementPlan
from swarmgpu.manager.placement.records import ServicePlan, Status


def _pending(name: str) -> ServicePlan:
    return ServicePlan(name, f"id-{name}", None, "", Status.PENDING, "pending")


def _defrag(tmp_path: Path, placement: PlacementPlan) -> list[tuple[str, str]]:
    """gpu-node-2: a (1 GPU) on GPU 0; pending p wants all 8 GPUs of a node. The moves
    the daemon's rebalance step (defrag alone) proposes after ``placement``, its
    thirteenth cycle (the windows filled)."""
    from swarmgpu.manager.cycle.rebalance import Rebalancer
    from swarmgpu.manager.cycle.session import CycleSession
    from swarmgpu.manager.daemon import Daemon
    from swarmgpu.manager.nodes.sync import Snapshot
    from swarmgpu.manager.placement import Planner
    from swarmgpu.manager.rebalance.scrape import judge

    n2 = {f"{P}assign.a": U2[0], f"{P}service.a": "true"}
    nodes = [node("n1", "gpu-node-1", {}), node("n2", "gpu-node-2", n2)]
    svcs = [service("a", {f"{P}gpus": "1"}), service("p", {f"{P}gpus": "8"})]
    sw = RecordingSwarm(nodes, svcs, [running("a", "n2")])
    cfg = Config(state_dir=str(tmp_path), rebalance=dataclasses.replace(
        CFG, dry_run=True, trust_unauthenticated_metrics=True, policies="defrag"))
    rb = Rebalancer(Daemon(cfg, swarm=sw))  # type: ignore[arg-type]
    moves: list[tuple[str, str]] = []
    for t in range(13):
        session = CycleSession(Snapshot(nodes, sw.services(), sw.tasks(), {},
                                        swarm_labels=sw.swarm_labels(), taken_at=float(t)))
        session.facts = dict(FACTS)
        session.scrapes = {n.id: judge(n, "http://x/metrics", page(FACTS[n.id], {}),
                                       float(t)) for n in nodes}
        session.placement = placement
        session.planner = Planner(prefix=P)
        rb.run(session)
        assert rb.last is not None
        moves = [(m.service, m.target_host) for m in rb.last.moves]
    return moves


def test_defrag_makes_room_for_a_pending_service(tmp_path: Path) -> None:
    assert _defrag(tmp_path, PlacementPlan(services=[_pending("p")])) == \
        [("a", "gpu-node-1")]


def test_defrag_moves_no_task_for_a_service_its_queues_max_holds_back(
        tmp_path: Path) -> None:
    """p waits at its tenant's max (``queue team-b at its quota``): room made for it is
    never given it, and a's task would restart for nothing."""
    held = PlacementPlan(services=[_pending("p")], queues=[
        {"name": "team-b", "blocked": ["p"]}])
    assert _defrag(tmp_path, held) == []


def test_defrag_makes_no_room_for_a_service_its_own_gate_step_keeps_waiting(
        tmp_path: Path) -> None:
    """A stack whose env sets NVIDIA_VISIBLE_DEVICES itself waits at its gate step
    whatever the room (swarmgpu never overwrites the owner's line): defrag moved other
    teams' tasks for it every cooldown. One pending for room is still looked for."""
    from support.forged import DGX_F, R4090_F, sw_node, sw_svc

    from swarmgpu.manager.cycle.placement import new_planner
    from swarmgpu.manager.cycle.rebalance import pending_of

    own = sw_svc("own", {f"{P}gpus": "1"}, gated=False)
    tt = {**own.spec["TaskTemplate"],
          "ContainerSpec": {"Image": "busybox", "Env": ["NVIDIA_VISIBLE_DEVICES=all"]}}
    own = dataclasses.replace(own, spec={**own.spec, "TaskTemplate": tt},
                              env=("NVIDIA_VISIBLE_DEVICES=all",))
    big = sw_svc("big", {f"{P}gpus": "64"})
    nodes = [sw_node("n-dgx", "gpu-node-1"), sw_node("n-4090", "gpu-node-2")]
    plan = new_planner(Config(state_dir=str(tmp_path))).plan(
        nodes, [own, big], [], {"n-dgx": DGX_F, "n-4090": R4090_F})
    by = {sp.name: sp for sp in plan.services}
    assert by["own"].status == Status.PENDING and "itself" in (by["own"].reason or "")
    assert by["big"].status == Status.PENDING
    assert pending_of(plan) == ["big"]
