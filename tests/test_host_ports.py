"""Swarm's HostPortFilter: a node where another service's task publishes a host-mode port
a GPU service publishes never runs that service's task, so placement does not pick it."""

from __future__ import annotations

from dataclasses import replace

from support.memo import as_written
from support.placement import apply, svc
from support.planner import two_nodes
from support.render_compose import FACTS as RENDER_FACTS
from support.render_compose import NODES

from swarmgpu.manager.commands.render import render_stack
from swarmgpu.manager.placement import Planner, plan_placement
from swarmgpu.swarm.client import SwarmService, SwarmTask, service_from_api, task_from_api


def publishing(
    s: SwarmService, port: int = 8000, mode: str = "host", protocol: str = "tcp"
) -> SwarmService:
    return replace(
        s,
        spec={
            "EndpointSpec": {
                "Ports": [
                    {
                        "Protocol": protocol,
                        "TargetPort": 80,
                        "PublishedPort": port,
                        "PublishMode": mode,
                    }
                ]
            }
        },
    )


def on(
    tid: str, s: SwarmService, node_id: str, state: str = "running", desired: str = "running"
) -> SwarmTask:
    return SwarmTask(
        id=tid, service_id=s.id, node_id=node_id, slot=1, state=state, desired_state=desired, env=()
    )


def test_a_node_where_another_service_publishes_the_host_port_is_not_picked() -> None:
    """Whichever node the scorer would pick, the one another service's task binds 8000
    on is left out (both orders, so the test does not rest on a tie-break)."""
    nodes, facts = two_nodes()
    llm = publishing(svc("llm", {"swarmgpu.gpus": "1"}))
    proxy = publishing(svc("proxy", {}, gated=False))
    for busy, free in (("n-a", "n-b"), ("n-b", "n-a")):
        plan = plan_placement(nodes, [llm, proxy], [on("tp", proxy, busy)], facts)  # type: ignore[arg-type]
        sp = next(p for p in plan.services if p.name == "llm")
        assert sp.status == "placed" and [p.node_id for p in sp.placements] == [free]


def test_no_node_free_of_the_port_leaves_it_pending_naming_port_and_service() -> None:
    nodes, facts = two_nodes()
    nodes = nodes[:1]
    llm = publishing(svc("llm", {"swarmgpu.gpus": "1"}))
    proxy = publishing(svc("proxy", {}, gated=False))
    plan = plan_placement(nodes, [llm, proxy], [on("tp", proxy, "n-a")], {"n-a": facts["n-a"]})  # type: ignore[arg-type]
    sp = next(p for p in plan.services if p.name == "llm")
    assert sp.status == "pending" and not sp.placements
    assert "8000/tcp" in (sp.reason or "") and "proxy" in (sp.reason or ""), sp.reason
    assert "node-a" in (sp.reason or ""), sp.reason


def test_only_a_live_task_of_another_service_with_the_same_host_port_refuses_a_node() -> None:
    """Ingress mode, another protocol or port, a task that stopped: the node fits. A task
    told to shut down that still runs binds the port until it stops."""
    nodes, facts = two_nodes()
    nodes = nodes[:1]
    llm = publishing(svc("llm", {"swarmgpu.gpus": "1"}))
    other = svc("proxy", {}, gated=False)
    fits = [
        (publishing(other, mode="ingress"), "running", "running"),
        (publishing(other, protocol="udp"), "running", "running"),
        (publishing(other, port=8001), "running", "running"),
        (publishing(other), "shutdown", "shutdown"),
        (publishing(other), "failed", "running"),
    ]
    for o, state, desired in fits:
        plan = plan_placement(
            nodes, [llm, o], [on("tp", o, "n-a", state, desired)], {"n-a": facts["n-a"]}
        )  # type: ignore[arg-type]
        sp = next(p for p in plan.services if p.name == "llm")
        assert sp.status == "placed", (o.spec, state, sp.reason)
    o = publishing(other)
    plan = plan_placement(
        nodes, [llm, o], [on("tp", o, "n-a", "running", "shutdown")], {"n-a": facts["n-a"]}
    )  # type: ignore[arg-type]
    assert next(p for p in plan.services if p.name == "llm").status == "pending"


def test_the_port_in_the_services_endpoint_counts_as_its_spec_does() -> None:
    nodes, facts = two_nodes()
    nodes = nodes[:1]
    llm = publishing(svc("llm", {"swarmgpu.gpus": "1"}))
    proxy = service_from_api(
        {
            "ID": "id-proxy",
            "Spec": {"Name": "proxy"},
            "Endpoint": {
                "Ports": [
                    {
                        "Protocol": "tcp",
                        "TargetPort": 80,
                        "PublishedPort": 8000,
                        "PublishMode": "host",
                    }
                ]
            },
        }
    )
    plan = plan_placement(nodes, [llm, proxy], [on("tp", proxy, "n-a")], {"n-a": facts["n-a"]})  # type: ignore[arg-type]
    assert next(p for p in plan.services if p.name == "llm").status == "pending"


def test_its_own_earlier_task_holding_the_port_does_not_refuse_the_node() -> None:
    """The task the replica replaces (or its replica already running there) binds the
    port for the same service: the node still fits."""
    nodes, facts = two_nodes()
    nodes = nodes[:1]
    llm = publishing(svc("llm", {"swarmgpu.gpus": "1"}))
    for state, desired in (("running", "shutdown"), ("running", "running")):
        plan = plan_placement(
            nodes, [llm], [on("old", llm, "n-a", state, desired)], {"n-a": facts["n-a"]}
        )  # type: ignore[arg-type]
        sp = plan.services[0]
        assert sp.status == "placed" and sp.placements[0].node_id == "n-a", sp.reason


def test_a_pending_service_is_planned_again_once_the_port_is_freed() -> None:
    """The long-lived planner keeps a pending plan while nothing it reads changed: the
    other service's task stopping is such a change."""
    nodes, facts = two_nodes()
    nodes = nodes[:1]
    llm = publishing(svc("llm", {"swarmgpu.gpus": "1"}))
    proxy = publishing(svc("proxy", {}, gated=False))
    planner = Planner(prefix="swarmgpu.")
    one = {"n-a": facts["n-a"]}
    plan = planner.plan(
        nodes,
        [llm, proxy],
        [on("tp", proxy, "n-a")],
        one,  # type: ignore[arg-type]
        now=0.0,
    )
    assert next(p for p in plan.services if p.name == "llm").status == "pending"
    plan = planner.plan(
        nodes, [llm, proxy], [on("tp", proxy, "n-a", "shutdown", "shutdown")], one, now=1.0
    )  # type: ignore[arg-type]
    sp = next(p for p in plan.services if p.name == "llm")
    assert sp.status == "placed", sp.reason


def test_a_held_node_where_another_service_took_the_port_is_left_for_another() -> None:
    """Its task waits where its GPUs are, another service's task binding the port there:
    the replica is re-placed (it would wait forever), the port and service named."""
    nodes, facts = two_nodes()
    llm = publishing(svc("llm", {"swarmgpu.gpus": "1"}))
    proxy = publishing(svc("proxy", {}, gated=False))
    plan = plan_placement(nodes, [llm, proxy], [], facts)  # type: ignore[arg-type]
    held = plan.services[0].placements[0].node_id
    nodes = apply(nodes, plan)
    tasks = [on("tl", llm, held, "pending"), on("tp", proxy, held)]
    sp = plan_placement(nodes, [llm, proxy], tasks, facts).services[0]  # type: ignore[arg-type]
    assert [p.node_id for p in sp.placements] != [held] and sp.placements, sp
    assert "8000/tcp is taken by a task of proxy" in sp.replaced, sp.replaced


def test_a_global_service_waits_on_a_node_where_another_service_took_the_port() -> None:
    nodes, facts = two_nodes()
    llm = replace(publishing(svc("llm", {"swarmgpu.gpus": "1"})), mode="global", replicas=None)
    proxy = publishing(svc("proxy", {}, gated=False))
    sp = plan_placement(nodes, [llm, proxy], [on("tp", proxy, "n-a")], facts).services[0]  # type: ignore[arg-type]
    assert [p.node_id for p in sp.placements] == ["n-b"]
    assert "8000/tcp is taken by a task of proxy" in sp.nodes_waiting["node-a"], sp


def test_a_malformed_endpoint_publishes_nothing_and_breaks_nothing() -> None:
    nodes, facts = two_nodes()
    nodes = nodes[:1]
    llm = publishing(svc("llm", {"swarmgpu.gpus": "1"}))
    for spec, endpoint in (
        ({"EndpointSpec": "x"}, {"Ports": {"a": 1}}),
        ({"EndpointSpec": {"Ports": [1, None, {"PublishMode": "host"}]}}, []),
        ({"EndpointSpec": {"Ports": "8000"}}, {"Ports": ["host"]}),
    ):
        other = service_from_api(
            {"ID": "id-proxy", "Spec": {"Name": "proxy", **spec}, "Endpoint": endpoint}
        )
        plan = plan_placement(nodes, [llm, other], [on("tp", other, "n-a")], {"n-a": facts["n-a"]})  # type: ignore[arg-type]
        assert next(p for p in plan.services if p.name == "llm").status == "placed"


def test_two_services_publishing_one_host_port_are_not_placed_on_one_node_in_one_cycle() -> None:
    """Neither has a task yet: Swarm's task list binds nothing, but the first decision
    of the cycle takes port 8000 on its node. Before, both were placed on node-a (the
    packing choice) and Swarm ran only one of them."""
    nodes, facts = two_nodes()
    one, two = (publishing(svc(n, {"swarmgpu.gpus": "1"})) for n in ("llm1", "llm2"))
    plan = plan_placement(nodes, [one, two], [], facts)  # type: ignore[arg-type]
    where = [[p.node_id for p in sp.placements] for sp in plan.services]
    assert sorted(where) == [["n-a"], ["n-b"]], where
    plan = plan_placement(nodes[:1], [one, two], [], {"n-a": facts["n-a"]})  # type: ignore[arg-type]
    first, second = plan.services
    assert first.status == "placed" and second.status == "pending", plan.services
    assert "8000/tcp is taken by" in (second.reason or "") and first.name in (second.reason or "")


def test_a_placement_whose_task_is_not_running_yet_keeps_its_port_in_later_cycles() -> None:
    """llm1 was placed on node-a; its task has no node yet (Swarm's task list binds
    nothing there). llm2, new, is not placed on node-a: llm1's holding takes the port,
    also once llm1 is quiet (placement.quiet: not visited, its last plan kept)."""
    nodes, facts = two_nodes()
    nodes, one_node = nodes[:1], {"n-a": facts["n-a"]}
    llm1, llm2 = (publishing(svc(n, {"swarmgpu.gpus": "1"})) for n in ("llm1", "llm2"))
    for change_driven in (True, False):
        planner, at, one = Planner(prefix="swarmgpu.", change_driven=change_driven), nodes, llm1
        for t in range(3):
            tasks = [on("t1", one, "", "pending")] if t else []
            plan = planner.plan(at, [one], tasks, one_node, now=float(t))  # type: ignore[arg-type]
            at, (one,) = apply(at, plan), as_written([one], plan)
        plan = planner.plan(at, [one, llm2], tasks, one_node, now=9.0)  # type: ignore[arg-type]
        first, second = plan.services
        assert first.status == "placed" and second.status == "pending", plan.services
        assert "taken by llm1, placed there" in (second.reason or ""), second.reason


def _removed_services_task(node_id: str, ports: object) -> SwarmTask:
    """A task Swarm is stopping whose service was removed, as the engine lists it."""
    return task_from_api({"ID": "t-gone", "ServiceID": "id-gone", "NodeID": node_id, "Slot": 1,
                          "DesiredState": "remove",
                          "Status": {"State": "running", "PortStatus": {"Ports": ports}}})


def test_a_removed_services_stopping_task_keeps_its_host_port_from_its_own_status() -> None:
    """Its service is gone, so no spec names the port it binds: its own status does
    (``Status.PortStatus``). Before, its node looked free of the port and llm's task
    was placed where Swarm would not start it until the old task stopped."""
    nodes, facts = two_nodes()
    llm = publishing(svc("llm", {"swarmgpu.gpus": "1"}))
    port = {"Protocol": "tcp", "TargetPort": 80, "PublishedPort": 8000, "PublishMode": "host"}
    for busy, free in (("n-a", "n-b"), ("n-b", "n-a")):
        gone = _removed_services_task(busy, [port])
        plan = Planner().plan(nodes, [llm], [], facts, stopping=[gone])  # type: ignore[arg-type]
        sp = next(p for p in plan.services if p.name == "llm")
        assert sp.status == "placed" and [p.node_id for p in sp.placements] == [free], sp
    plan = Planner().plan(nodes[:1], [llm], [], {"n-a": facts["n-a"]},  # type: ignore[arg-type]
                          stopping=[_removed_services_task("n-a", [port])])
    sp = next(p for p in plan.services if p.name == "llm")
    assert sp.status == "pending" and "8000/tcp is taken by a task of a removed service" in (
        sp.reason or ""), sp.reason


def test_a_tasks_port_status_is_read_strictly() -> None:
    """Only host-mode entries with a port and protocol Swarm makes; anything else in the
    engine's answer is ignored, never raised on."""
    good = {"Protocol": "udp", "PublishedPort": 53, "PublishMode": "host"}
    bad: list[object] = [
        None, "8000/tcp", 7, {"PublishMode": "ingress", "PublishedPort": 9000},
        {"PublishMode": "host", "PublishedPort": "9001"},
        {"PublishMode": "host", "PublishedPort": True},
        {"PublishMode": "host", "PublishedPort": 0},
        {"PublishMode": "host", "PublishedPort": 70000},
        {"PublishMode": "host", "PublishedPort": 9002, "Protocol": ["tcp"]},
        {"PublishMode": "host", "PublishedPort": 9003, "Protocol": "http"},
    ]
    assert _removed_services_task("n-a", [*bad, good, good]).host_ports == ("53/udp",)
    assert _removed_services_task("n-a", [{"PublishMode": "host", "PublishedPort": 8000}]
                                  ).host_ports == ("8000/tcp",)
    for ports in (None, {}, "x", [[]]):
        assert _removed_services_task("n-a", ports).host_ports == ()
    for status in ({}, {"PortStatus": None}, {"PortStatus": []}, {"PortStatus": "x"}):
        assert task_from_api({"ID": "t", "Status": status}).host_ports == ()


STACK_PORTS = """\
version: "3.8"
services:
  llm:
    image: vllm/vllm-openai
    ports:
{ports}
    deploy:
      labels:
        swarmgpu.gpus: "1"
"""
HOST_LONG = "      - {target: 80, published: 8000, mode: host}"


def test_render_refuses_the_node_where_a_task_binds_a_stack_services_host_port() -> None:
    """A stack service's own long-syntax ``mode: host`` port is read into the spec
    render plans with: the node where proxy's task binds 8000 is left out (both orders).
    Before, render ignored the stack's ports and could pick it; Swarm would not start the
    task there. The short syntax, ingress mode and another port refuse nothing."""
    proxy = publishing(svc("proxy", {}, gated=False))
    for busy, free in (("n-dgx", "n-4090"), ("n-4090", "n-dgx")):
        _out, plan = render_stack(STACK_PORTS.format(ports=HOST_LONG), "ai", NODES, [proxy],
                                  [on("tp", proxy, busy)], RENDER_FACTS)
        sp = next(p for p in plan.services if p.name == "ai_llm")
        assert sp.status == "placed" and [p.node_id for p in sp.placements] == [free], sp
    for ports in ('      - "8000:80"', "      - {target: 80, published: 8000, mode: ingress}",
                  "      - {target: 80, published: 8001, mode: host}",
                  "      - {target: 80, published: 8000, mode: host, protocol: udp}"):
        placed = set()
        for busy in ("n-dgx", "n-4090"):
            _out, plan = render_stack(STACK_PORTS.format(ports=ports), "ai", NODES, [proxy],
                                      [on("tp", proxy, busy)], RENDER_FACTS)
            sp = next(p for p in plan.services if p.name == "ai_llm")
            placed |= {p.node_id for p in sp.placements}
        assert len(placed) == 1, (ports, placed)  # the same node, the port taken or not


def test_render_reads_a_stack_ports_mode_and_protocol_as_the_engine_does() -> None:
    """The engine reads a port's publish mode and protocol by their upper-cased name (an
    unknown protocol is tcp: daemon/cluster/convert ``ServiceSpecToGRPC``) and answers
    them lower-cased: ``mode: HOST`` publishes in host mode and ``protocol: TCP`` is
    8000/tcp, so proxy's node (8000/tcp bound) is refused. Before: both were read as
    spelled, and render picked that node; Swarm would not start the task there."""
    proxy = publishing(svc("proxy", {}, gated=False))
    for ports in ("      - {target: 80, published: 8000, mode: HOST}",
                  "      - {target: 80, published: 8000, mode: host, protocol: TCP}",
                  "      - {target: 80, published: 8000, mode: Host, protocol: Tcp}"):
        for busy, free in (("n-dgx", "n-4090"), ("n-4090", "n-dgx")):
            _out, plan = render_stack(STACK_PORTS.format(ports=ports), "ai", NODES, [proxy],
                                      [on("tp", proxy, busy)], RENDER_FACTS)
            sp = next(p for p in plan.services if p.name == "ai_llm")
            assert sp.status == "placed" and [p.node_id for p in sp.placements] == [free], \
                (ports, sp)


def test_a_live_services_stopping_task_binds_the_port_its_own_status_reports() -> None:
    """proxy was updated from 8000 to 9000; its old task, still stopping on n-a, binds
    8000 (its ``PortStatus``), not the spec's 9000 its replacement will. Before, it was
    counted with the service's current ports: n-a refused new9000, a service publishing
    9000, and took old8000, which Swarm would not start there until the old task stopped."""
    nodes, facts = two_nodes()
    one, one_facts = nodes[:1], {"n-a": facts["n-a"]}
    proxy = publishing(svc("proxy", {}, gated=False), port=9000)
    new9000 = publishing(svc("new9000", {"swarmgpu.gpus": "1"}), port=9000)
    old8000 = publishing(svc("old8000", {"swarmgpu.gpus": "1"}), port=8000)
    old = task_from_api({"ID": "t-old", "ServiceID": proxy.id, "NodeID": "n-a", "Slot": 1,
                         "DesiredState": "shutdown", "Status": {"State": "running", "PortStatus": {
                             "Ports": [{"Protocol": "tcp", "TargetPort": 80,
                                        "PublishedPort": 8000, "PublishMode": "host"}]}}})
    for s, status in ((new9000, "placed"), (old8000, "pending")):
        plan = Planner().plan(one, [proxy, s], [], one_facts,  # type: ignore[arg-type]
                              stopping=[old])
        sp = next(p for p in plan.services if p.name == s.name)
        assert sp.status == status, sp
    sp = next(p for p in Planner().plan(one, [proxy, old8000], [], one_facts,  # type: ignore[arg-type]
                                        stopping=[old]).services if p.name == "old8000")
    assert "8000/tcp is taken by a task of proxy" in (sp.reason or ""), sp.reason
    # an update that removed the port: the old task binds it all the same (before, a
    # service publishing nothing was not read at all)
    bare = svc("proxy", {}, gated=False)
    sp = next(p for p in Planner().plan(one, [bare, old8000], [], one_facts,  # type: ignore[arg-type]
                                        stopping=[old]).services if p.name == "old8000")
    assert sp.status == "pending" and "8000/tcp is taken by a task of proxy" in (
        sp.reason or ""), sp.reason
