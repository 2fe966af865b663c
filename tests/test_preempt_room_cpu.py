"""Room already, for preemption, is a node with the GPUs free AND the CPU and memory the
request's task reserves left (``preemptroom.Room`` with no victim). A node with free
GPUs but its CPU held (a ``gpus: "0"`` service there) is no room: victims are sought
on the other nodes, as Kubernetes asks per node whether the pod fits once its victims
go. Before, the first node by id with free GPUs was "room already" whatever its CPU:
nothing was preempted anywhere and the request waited for ever. Pure: the real planner
and ``choose_preemptions`` over a forged snapshot."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.forged import DGX_F, R4090_F, reserving, sw_node, sw_svc

from swarmgpu.manager.placement import (
    Holding,
    Planner,
    assign_key,
    devices_key,
    gate_key,
    plan_placement,
)
from swarmgpu.manager.placement.preempt import Preemption, choose_preemptions
from swarmgpu.manager.placement.records import PlacementPlan, Status
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
R = tuple(g.uuid for g in R4090_F.gpus)
FACTS = {"n-a": DGX_F, "n-b": R4090_F}


def _held(name: str, nid: str, uuids: tuple[str, ...]) -> dict[str, str]:
    h = Holding(name, nid, uuids, tuple(1000 for _ in uuids))
    return {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}


def _cluster(a_cpu: int, with_low: bool = True,
             ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """n-a (first by id, the DGX) has its GPUs free and ``a_cpu`` CPU milli, 1500 of it
    held by c (``gpus: "0"``, placed there by swarmgpu); on n-b low (priority 0) holds
    GPU 0 and filler (not preemptible) the other 7. high (priority 100) wants 1 GPU and
    1 CPU. ``with_low``: False once low is gone (its holding and task)."""
    b = {**_held("filler", "n-b", R[1:]), **(_held("low", "n-b", R[:1]) if with_low else {})}
    nodes = [replace(sw_node("n-a", "gpu-node-1", _held("c", "n-a", ())), cpu_milli=a_cpu),
             sw_node("n-b", "gpu-node-2", b)]
    c = reserving(sw_svc("c", {f"{P}gpus": "0"}), 1500)
    low = sw_svc("low", {f"{P}gpus": "1", devices_key(P, "n-b"): R[0]})
    filler = sw_svc("filler", {f"{P}gpus": "7", f"{P}priority": "50",
                               f"{P}preemptible": "false",
                               devices_key(P, "n-b"): ",".join(R[1:])})
    high = reserving(sw_svc("high", {f"{P}gpus": "1", f"{P}priority": "100"}), 1000)
    tasks = [SwarmTask("t-c", c.id, "n-a", 1, "running", "running", (), cpu_milli=1500),
             SwarmTask("t-filler", filler.id, "n-b", 1, "running", "running", ()),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ())]
    services = [c, filler, high]
    if with_low:
        tasks.append(SwarmTask("t-low", low.id, "n-b", 1, "running", "running", ()))
        services.append(low)
    return nodes, services, tasks


def _high(plan: PlacementPlan) -> tuple[str, str]:
    (sp,) = [sp for sp in plan.services if sp.name == "high"]
    return sp.status, sp.reason or ""


def _choose(nodes: list[SwarmNode], services: list[SwarmService], tasks: list[SwarmTask],
            ) -> tuple[PlacementPlan, list[Preemption]]:
    plan = plan_placement(nodes, services, tasks, FACTS)
    return plan, choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                                    preemptible_below=100)


def test_free_gpus_without_the_cpu_are_no_room_and_the_lower_holder_elsewhere_goes() -> None:
    """n-a has 7 free GPUs but 500 CPU milli left: placement says high pends for the
    CPU there. It preempts low on n-b, where it fits once low goes: placed there then.
    Before, n-a's free GPUs were room already and nothing was preempted anywhere."""
    plan, got = _choose(*_cluster(a_cpu=2000))
    status, reason = _high(plan)
    assert status == Status.PENDING and "CPU" in reason and "gpu-node-1" in reason, reason
    (p,) = got
    assert [v.service for v in p.victims] == ["low"] and p.node_id == "n-b"
    assert p.held == R[:1]
    # placement itself agrees: once low goes, high is placed on n-b
    plan = plan_placement(*_cluster(a_cpu=2000, with_low=False), FACTS)
    status, reason = _high(plan)
    assert status == Status.PLACED, reason
    (sp,) = [sp for sp in plan.services if sp.name == "high"]
    assert [(x.hostname, x.uuids) for x in sp.placements] == [("gpu-node-2", R[:1])]


def test_free_gpus_and_cpu_are_room_already_and_nothing_is_preempted() -> None:
    """With the CPU on n-a too, high is placed there and low stays. And where high pends
    for a reason preemption does not see (here: the plan read n-a short of CPU, the
    snapshot preemption reads has it), n-a's free GPUs and CPU are room already:
    stopping low would not place it, so nothing is preempted."""
    plan, got = _choose(*_cluster(a_cpu=64000))
    assert _high(plan)[0] == Status.PLACED and got == []
    short = plan_placement(*_cluster(a_cpu=2000), FACTS)
    assert _high(short)[0] == Status.PENDING
    nodes, services, tasks = _cluster(a_cpu=64000)
    assert choose_preemptions(short, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=100) == []


@pytest.mark.parametrize("c_runs", [False, True])
def test_free_gpus_short_of_cpu_for_a_stopping_task_alone_wait_for_it(c_runs: bool) -> None:
    """n-a's GPUs are free, its CPU short for a task Swarm is stopping there (gone's,
    500 CPU milli, and c's 1500 unless c runs on): high waits the seconds it takes to
    stop and preempts nothing, as Swarm will start it there then. Before, n-a was no room
    and low was stopped on n-b for it. With c running on, n-a stays short once the task
    stops: low goes, as before."""
    nodes, services, tasks = _cluster(a_cpu=2000)
    gone = reserving(sw_svc("gone", {}), 500)
    (t_c,) = [t for t in tasks if t.id == "t-c"]
    leaving = [SwarmTask("t-gone", gone.id, "n-a", 1, "running", "shutdown", (), cpu_milli=500)]
    if not c_runs:  # c scaled to 0: its holding gone, its task stopping
        nodes[0] = replace(sw_node("n-a", "gpu-node-1"), cpu_milli=2000)
        tasks, leaving = [t for t in tasks if t.id != "t-c"], [
            *leaving, replace(t_c, desired_state="shutdown")]
    plan = Planner(prefix=P).plan(nodes, services, tasks, FACTS, stopping=leaving)
    assert _high(plan)[0] == Status.PENDING
    got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                             preemptible_below=100, stopping=leaving)
    assert [v.service for p in got for v in p.victims] == (["low"] if c_runs else [])


def _publishing(s: SwarmService, port: int = 8000) -> SwarmService:
    """``s`` publishing ``port``/tcp in host mode (Swarm's HostPortFilter)."""
    return replace(s, spec={**s.spec, "EndpointSpec": {"Ports": [
        {"Protocol": "tcp", "TargetPort": 80, "PublishedPort": port, "PublishMode": "host"}]}})


def _gone_binding(node_id: str, port: int = 8000) -> SwarmTask:
    """A removed service's task Swarm is stopping on ``node_id``, binding ``port``/tcp."""
    return SwarmTask("t-gone", "id-gone", node_id, 1, "running", "remove", (),
                     host_ports=(f"{port}/tcp",))


@pytest.mark.parametrize("web_binds", [False, True])
def test_free_gpus_short_of_a_host_port_for_a_stopping_task_alone_wait_for_it(
        web_binds: bool) -> None:
    """n-a has the GPUs and the CPU, but a removed service's task Swarm is stopping there
    binds 8000/tcp, which high publishes in host mode: high waits the seconds its stop
    takes, as it does for such a task's CPU, and preempts nothing. Before, n-a was no room
    (no victim frees that port) and low was stopped on n-b for nothing. With a running
    task of web (no swarmgpu service) binding it too, n-a stays refused: low goes."""
    nodes, services, tasks = _cluster(a_cpu=64000)
    services = [_publishing(s) if s.name == "high" else s for s in services]
    if web_binds:
        web = _publishing(sw_svc("web", {}))
        services.append(web)
        tasks.append(SwarmTask("t-web", web.id, "n-a", 1, "running", "running", ()))
    leaving = [_gone_binding("n-a")]
    planner = Planner(prefix=P)
    plan = planner.plan(nodes, services, tasks, FACTS, stopping=leaving)
    status, reason = _high(plan)
    assert status == Status.PENDING and "8000/tcp" in reason, reason
    got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                             preemptible_below=100, refused=planner.refused_nodes,
                             ports=planner.port_takers, stopping=leaving)
    assert [v.service for p in got for v in p.victims] == (["low"] if web_binds else [])


@pytest.mark.parametrize("what", ["cpu", "port"])
def test_a_stopping_task_past_its_hold_end_is_waited_for_no_longer(what: str) -> None:
    """The task Swarm is stopping on n-a (its CPU, or a host port high publishes) does
    not stop: its node paused, its stop stuck. high waits for it while its hold lasts
    (first seen stopping + its stop grace period, 10 s here, + the skew, 60 s), as the
    GPUs of a stopping task are held, and preempts low on n-b once it is over. Before,
    it waited as long as the task lasted, however long that was."""
    nodes, services, tasks = _cluster(a_cpu=64000 if what == "port" else 2000)
    if what == "port":
        services = [_publishing(s) if s.name == "high" else s for s in services]
        leaving = [_gone_binding("n-a")]
    else:  # c scaled to 0: its holding gone, its task stopping
        nodes[0] = replace(sw_node("n-a", "gpu-node-1"), cpu_milli=2000)
        (t_c,) = [t for t in tasks if t.id == "t-c"]
        tasks, leaving = [t for t in tasks if t.id != "t-c"], [
            replace(t_c, desired_state="shutdown")]
    planner = Planner(prefix=P)
    t0 = 1_000_000.0
    for at, victims in ((t0, []), (t0 + 70, []), (t0 + 71, ["low"]), (t0 + 500, ["low"])):
        plan = planner.plan(nodes, services, tasks, FACTS, stopping=leaving, now=at)
        assert _high(plan)[0] == Status.PENDING
        got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                                 preemptible_below=100, refused=planner.refused_nodes,
                                 ports=planner.port_takers, stopping=leaving)
        assert [v.service for p in got for v in p.victims] == victims, at


def _waiter_and_mid(what: str) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask],
                                        list[SwarmTask]]:
    """n-b (4000 CPU milli) for high (priority 100: 2 RTX 4090s, 3000 CPU milli) and mid
    (priority 90: 4 RTX 4090s); low (priority 0) and filler (not preemptible) hold the
    rest of n-b. high waits there for a task Swarm is stopping: old's on R[:2] (``what``
    "gpus": low holds 4, mid wants 3000 CPU milli), or gone's, R[:2] free but 2000 CPU
    milli gone's (``what`` "cpu": low holds 2, mid wants 1000 CPU milli)."""
    gpus = what == "gpus"
    old = sw_svc("old", {f"{P}gpus": "2"}, replicas=0)
    r4090, cut = {f"{P}gpu-product": "*RTX 4090*"}, 6 if gpus else 4
    low = sw_svc("low", {f"{P}gpus": str(cut - 2), **r4090})
    filler = sw_svc("filler", {f"{P}gpus": str(8 - cut), f"{P}priority": "50",
                               f"{P}preemptible": "false"})
    high = reserving(sw_svc("high", {f"{P}gpus": "2", f"{P}priority": "100", **r4090}), 3000)
    mid = reserving(sw_svc("mid", {f"{P}gpus": "4", f"{P}priority": "90", **r4090}),
                     3000 if gpus else 1000)
    b = {**_held("low", "n-b", R[2:cut]), **_held("filler", "n-b", R[cut:]),
         **(_held("old", "n-b", R[:2]) if gpus else {})}
    nodes = [sw_node("n-a", "gpu-node-1"), replace(sw_node("n-b", "gpu-node-2", b),
                                                   cpu_milli=4000)]
    tasks = [SwarmTask(f"t-{s.name}", s.id, "n-b", 1, "running", "running", ())
             for s in (low, filler)]
    tasks += [SwarmTask(f"t-{s.name}", s.id, "", 1, "pending", "running", ()) for s in (high, mid)]
    leaving = [SwarmTask("t-old", old.id, "n-b", 1, "running", "shutdown", ())] if gpus else [
        SwarmTask("t-gone", "id-gone", "n-b", 1, "running", "remove", (), cpu_milli=2000)]
    return nodes, [old, low, filler, high, mid], tasks, leaving


@pytest.mark.parametrize("what", ["gpus", "cpu"])
def test_a_waiter_takes_what_it_waits_for_from_a_lower_preemptor(what: str) -> None:
    """high waits on n-b for a task Swarm is stopping there (its GPUs, or its CPU): once
    it stops, high is placed there, its GPUs and CPU taken. mid (lower) stops no victim
    on n-b for them: low stays. Before, a waiter was counted in no round: mid preempted
    low on n-b for the CPU (or the free GPUs) high takes in seconds, and stayed pending
    with low stopped for nothing."""
    nodes, services, tasks, leaving = _waiter_and_mid(what)
    planner = Planner(prefix=P)
    plan = planner.plan(nodes, services, tasks, FACTS, stopping=leaving)
    assert _high(plan)[0] == Status.PENDING
    got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                             preemptible_below=100, refused=planner.refused_nodes,
                             ports=planner.port_takers, stopping=leaving,
                             held=plan.stopping_held)
    assert [(p.service, [v.service for v in p.victims]) for p in got] == []
    # placement agrees: with the task stopped and low gone, high is placed, mid is not
    nodes[1] = replace(nodes[1], labels={k: v for k, v in nodes[1].labels.items()
                                         if not k.endswith((".low", ".old"))})
    plan = plan_placement(nodes, [s for s in services if s.name != "low"],
                          [t for t in tasks if t.id != "t-low"], FACTS)
    status = {sp.name: sp.status for sp in plan.services}
    assert (status["high"], status["mid"]) == (Status.PLACED, Status.PENDING), plan.services
