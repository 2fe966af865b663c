"""The victims chosen on a node free the CPU and memory their preemptor reserves too
(``preemptroom.Room`` asked of each victim set, ``pick_victims``' ``allowed``), as
Kubernetes asks whether the pod fits once its victims go. Before, the set was chosen by
its GPUs alone and then checked: where the set ranked first freed the GPU but not the
CPU, the node was given up, though another holder's stop would have placed it, and the
request waited for ever. Pure: the real planner and ``choose_preemptions`` over a forged
snapshot."""

from __future__ import annotations

from dataclasses import replace

from support.forged import R4090_F, reserving, sw_node, sw_svc

from swarmgpu.manager.placement import Holding, assign_key, devices_key, gate_key, plan_placement
from swarmgpu.manager.placement.planner import Planner
from swarmgpu.manager.placement.preempt import Preemption, choose_preemptions
from swarmgpu.manager.placement.records import PlacementPlan, Status
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
R = tuple(g.uuid for g in R4090_F.gpus)
FACTS = {"n-b": R4090_F}


def _held(name: str, uuids: tuple[str, ...]) -> dict[str, str]:
    h = Holding(name, "n-b", uuids, tuple(1000 for _ in uuids))
    return {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}


def _cluster(gone: str = "") -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """n-b (4000 CPU milli, 8 GPUs): filler (not preemptible) holds GPUs 2-7; light
    (priority 0, started last: the rule's first victim) holds GPU 0 and reserves no CPU;
    heavy (priority 0) holds GPU 1 and reserves 3500 CPU milli. high (priority 100) wants
    1 GPU and 1000 CPU milli: it fits only once heavy goes. ``gone``: that one stopped
    (its holding and task gone)."""
    filler = sw_svc("filler", {f"{P}gpus": "6", f"{P}priority": "50",
                               f"{P}preemptible": "false",
                               devices_key(P, "n-b"): ",".join(R[2:])})
    light = sw_svc("light", {f"{P}gpus": "1", devices_key(P, "n-b"): R[0]})
    heavy = reserving(sw_svc("heavy", {f"{P}gpus": "1", devices_key(P, "n-b"): R[1]}), 3500)
    high = reserving(sw_svc("high", {f"{P}gpus": "1", f"{P}priority": "100"}), 1000)
    labels = {**_held("filler", R[2:])}
    services = [filler, high]
    tasks = [SwarmTask("t-filler", filler.id, "n-b", 1, "running", "running", ()),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ())]
    if gone != "light":
        labels.update(_held("light", R[:1]))
        services.append(light)
        tasks.append(SwarmTask("t-light", light.id, "n-b", 1, "running", "running", (),
                               created_at="2026-12-06T10:00:00Z"))
    if gone != "heavy":
        labels.update(_held("heavy", R[1:2]))
        services.append(heavy)
        tasks.append(SwarmTask("t-heavy", heavy.id, "n-b", 1, "running", "running", (),
                               cpu_milli=3500, created_at="2026-12-06T09:00:00Z"))
    nodes = [replace(sw_node("n-b", "gpu-node-2", labels), cpu_milli=4000)]
    return nodes, services, tasks


def _high(plan: PlacementPlan) -> tuple[str, str]:
    (sp,) = [sp for sp in plan.services if sp.name == "high"]
    return sp.status, sp.reason or ""


def _choose(gone: str = "") -> tuple[PlacementPlan, list[Preemption]]:
    nodes, services, tasks = _cluster(gone)
    plan = plan_placement(nodes, services, tasks, FACTS)
    return plan, choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                                    preemptible_below=100)


def test_the_victim_chosen_frees_the_cpu_its_preemptor_reserves() -> None:
    """light ranks first (the most recently started) and frees a GPU, but not the CPU
    high reserves: heavy is the victim, and placement places high once it goes (and not
    once light goes: light stopped for nothing). Before, light was chosen, the node
    given up for its CPU, and nothing was preempted: high waited for ever."""
    plan, got = _choose()
    assert _high(plan)[0] == Status.PENDING
    (p,) = got
    assert [v.service for v in p.victims] == ["heavy"] and p.held == R[1:2]
    # placement agrees: once heavy goes, high is placed on its GPU
    after = plan_placement(*_cluster(gone="heavy"), FACTS)
    assert _high(after)[0] == Status.PLACED, _high(after)[1]
    (sp,) = [sp for sp in after.services if sp.name == "high"]
    assert [x.uuids for x in sp.placements] == [R[1:2]]
    # and once light alone goes, it still waits for the CPU
    assert _high(plan_placement(*_cluster(gone="light"), FACTS))[0] == Status.PENDING


def _publishing(s: SwarmService, port: int = 8000) -> SwarmService:
    """``s`` publishing ``port`` in host mode (Swarm runs one such task per node)."""
    ports = [{"Protocol": "tcp", "TargetPort": 80, "PublishedPort": port, "PublishMode": "host"}]
    return replace(s, spec={**s.spec, "EndpointSpec": {"Ports": ports}})


def _port_cluster(gone: str = "") -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """``_cluster`` with no CPU reserved, heavy's task binding host port 8000, which high
    publishes too: high fits on n-b only once heavy goes (the port with its GPU)."""
    nodes, services, tasks = _cluster(gone)
    nodes = [replace(n, cpu_milli=64000) for n in nodes]
    services = [_publishing(s) if s.name in ("heavy", "high") else s for s in services]
    return nodes, services, tasks


def _assert_heavy_is_the_victim(nodes: list[SwarmNode], services: list[SwarmService],
                                tasks: list[SwarmTask]) -> None:
    """high is pending on the planner's own plan, and its preemption stops heavy alone
    (the planner's refused nodes and port takers handed on, as the daemon does)."""
    planner = Planner(prefix=P)
    plan = planner.plan(nodes, services, tasks, FACTS, now=1000.0)
    assert _high(plan)[0] == Status.PENDING
    (p,) = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=100, refused=planner.refused_nodes,
                              ports=planner.port_takers)
    assert [v.service for v in p.victims] == ["heavy"]


def test_the_victim_chosen_frees_the_host_port_its_preemptor_publishes() -> None:
    """light ranks first and frees a GPU, but heavy's task binds the port high publishes:
    heavy is the victim, and placement places high once it goes. Before, light was
    chosen, the node given up for the port, and nothing was preempted."""
    _assert_heavy_is_the_victim(*_port_cluster())
    after = Planner(prefix=P).plan(*_port_cluster(gone="heavy"), FACTS, now=1001.0)
    assert _high(after)[0] == Status.PLACED, _high(after)[1]
    assert _high(Planner(prefix=P).plan(*_port_cluster(gone="light"), FACTS,
                                        now=1001.0))[0] == Status.PENDING


def test_a_free_gpu_beside_the_port_binding_holder_does_not_hide_it() -> None:
    """GPU 0 is free (light gone) and heavy's task binds the port high publishes: heavy
    is the victim, its stop placing high. Before, the free GPU made the node look like
    room held back by the port alone: no victim was sought there, none was preempted,
    and high waited for ever, where with GPU 0 held too heavy was preempted."""
    _assert_heavy_is_the_victim(*_port_cluster(gone="light"))
    nodes, services, tasks = _port_cluster(gone="light")
    services = [s for s in services if s.name != "heavy"]
    tasks = [t for t in tasks if t.id != "t-heavy"]
    nodes = [replace(n, labels={k: v for k, v in n.labels.items() if "heavy" not in k})
             for n in nodes]
    assert _high(Planner(prefix=P).plan(nodes, services, tasks, FACTS,
                                        now=1001.0))[0] == Status.PLACED


def test_a_free_gpu_beside_the_cpu_holding_holder_does_not_hide_it() -> None:
    """The same with the CPU: GPU 0 free, heavy's task holding the CPU high reserves."""
    nodes, services, tasks = _cluster(gone="light")
    plan = plan_placement(nodes, services, tasks, FACTS)
    assert _high(plan)[0] == Status.PENDING
    (p,) = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=100)
    assert [v.service for v in p.victims] == ["heavy"]
