"""A preemptor whose every replica is placed (its GPUs held in the ledger, as placement
counts replicas) and whose task Swarm has merely not put on a node yet preempts no one.

Placement calls such a service pending while Swarm's scheduler says it cannot run the
task ("Swarm cannot run its task: no suitable node ..."), a message often written
before its gate opened, gone once Swarm schedules it. Preemption took it for a service
short of GPUs and stopped a victim on another node for a replica it already holds: a
victim stopped for nothing, and again each cycle the message stayed. Where Swarm will
not run it where its GPUs are and no other node takes it (``converge``: stuck, kept),
it does need GPUs elsewhere, and preempts for them as before. Pure: the lists as Swarm
answers them."""

from __future__ import annotations

from dataclasses import replace

from support.forged import DGX_F, FACTS, R_UUIDS, held_labels, sw_node, sw_svc

from swarmgpu.manager.placement import Planner, devices_key
from swarmgpu.manager.placement.preempt import Preemption, choose_preemptions
from swarmgpu.manager.placement.records import Status
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
D = tuple(g.uuid for g in DGX_F.gpus if not g.mig_enabled)
REFUSED = "no suitable node (insufficient resources on 2 nodes)"


def _cluster(availability: str = "active", replicas: int = 1,
             ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """hi (priority 100, one GPU a replica, ``replicas`` of them) holds R[0] on n-4090;
    low services (priority 0) hold every other GPU, one each. hi's tasks wait for a
    node, Swarm's message saying it cannot run them. n-4090 is ``availability``."""
    labels = held_labels("hi", "n-4090", R_UUIDS[0])
    low: list[SwarmService] = []
    for i, u in enumerate(R_UUIDS[1:]):
        labels |= held_labels(f"r{i}", "n-4090", u)
        low.append(sw_svc(f"r{i}", {f"{P}gpus": "1", devices_key(P, "n-4090"): u}))
    dgx: dict[str, str] = {}
    for i, u in enumerate(D):
        dgx |= held_labels(f"d{i}", "n-dgx", u)
        low.append(sw_svc(f"d{i}", {f"{P}gpus": "1", devices_key(P, "n-dgx"): u}))
    nodes = [sw_node("n-dgx", "gpu-node-1", dgx),
             replace(sw_node("n-4090", "gpu-node-2", labels), availability=availability)]
    hi = sw_svc("hi", {f"{P}gpus": "1", f"{P}priority": "100",
                       devices_key(P, "n-4090"): R_UUIDS[0]}, replicas=replicas)
    tasks = [SwarmTask(f"t-{s.name}", s.id, "n-4090" if s.name.startswith("r") else "n-dgx",
                       1, "running", "running", ()) for s in low]
    tasks += [SwarmTask(f"t-hi-{k}", hi.id, "", k, "pending", "running", (), error=REFUSED)
              for k in range(1, replicas + 1)]
    return nodes, [*low, hi], tasks


def _preempted(nodes: list[SwarmNode], services: list[SwarmService],
               tasks: list[SwarmTask]) -> tuple[Status, int, list[Preemption]]:
    plan = Planner(prefix=P).plan(nodes, services, tasks, FACTS)
    sp = next(sp for sp in plan.services if sp.name == "hi")
    got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                             preemptible_below=100)
    return sp.status, len(sp.placements), got


def test_a_preemptor_placed_whole_whose_task_swarm_has_not_placed_yet_preempts_none() -> None:
    status, placed, got = _preempted(*_cluster())
    assert (status, placed) == (Status.PENDING, 1)  # "Swarm cannot run its task: ..."
    assert got == []


def test_a_preemptor_short_of_a_replica_still_preempts_for_it() -> None:
    status, placed, got = _preempted(*_cluster(replicas=2))
    assert (status, placed) == (Status.PENDING, 1)
    assert [(p.service, p.hostname) for p in got] == [("hi", "gpu-node-1")]


def test_a_preemptor_stuck_where_its_gpus_are_still_preempts_elsewhere() -> None:
    """n-4090 paused: Swarm will not run hi there, and no other node takes it (converge
    keeps it, stuck): a victim on the DGX makes room for its re-placement."""
    status, placed, got = _preempted(*_cluster(availability="pause"))
    assert (status, placed) == (Status.PENDING, 1)
    assert [(p.service, p.hostname) for p in got] == [("hi", "gpu-node-1")]
