"""A ``mode: global`` (and ``global-job``) service of no GPU (``swarmgpu.gpus: "0"``)
opens its gate on every node Swarm would run it on, the swarm's CPU-only nodes included
(docs/requests.md, "A service without a GPU"): those with room get a holding, a drained,
paused or down one, one without the CPU, or one its platform or constraints exclude,
does not. Before: the global path walked the GPU nodes only, and a CPU-only node never
got the service's task."""

from __future__ import annotations

from dataclasses import replace

from support.gpu_nodes import RTX4090
from support.placement import P, apply, node, written
from support.planner import cpu_node

from swarmgpu.manager.placement import (
    Planner,
    env_template,
    gate_constraint,
    gate_key,
    plan_placement,
)
from swarmgpu.manager.placement.records import ServicePlan
from swarmgpu.swarm.client import SwarmNode, SwarmService, service_from_api

ZERO = {f"{P}gpus": "0"}


def gservice(name: str, labels: dict[str, str], cpu_milli: int = 0, mode: str = "Global",
             platforms: list[dict[str, str]] | None = None,
             constraints: list[str] | None = None) -> SwarmService:
    """Gated as a deployed service is (its gate constraint and device env line)."""
    tt: dict[str, object] = {"ContainerSpec": {"Image": "x", "Env": [env_template(P)]},
                             "Resources": {"Reservations": {"NanoCPUs": cpu_milli * 1_000_000}}}
    placement: dict[str, object] = {
        "Constraints": [gate_constraint(P, name), *(constraints or [])]}
    if platforms is not None:
        placement["Platforms"] = platforms
    tt["Placement"] = placement
    spec = {"Name": name, "Labels": labels, "TaskTemplate": tt, "Mode": {mode: {}}}
    return service_from_api({"ID": f"id-{name}", "Spec": spec, "Version": {"Index": 1}})


def one(nodes: list[SwarmNode], s: SwarmService, facts: dict[str, object],
        pl: Planner | None = None) -> tuple[ServicePlan, object]:
    plan = (pl or Planner()).plan(nodes, [s], [], facts)  # type: ignore[arg-type]
    return next(sp for sp in plan.services if sp.name == s.name), plan


def on(sp: ServicePlan) -> list[str]:
    return sorted(p.node_id for p in sp.placements)


def gpu_and(*cpu: SwarmNode) -> tuple[list[SwarmNode], dict[str, object]]:
    return [cpu_node("n-g", "node-g"), *cpu], {"n-g": RTX4090.facts()}


def test_a_global_service_of_no_gpu_opens_its_gate_on_cpu_only_nodes_too() -> None:
    nodes, facts = gpu_and(cpu_node("n-c1", "node-c1", 4000), cpu_node("n-c2", "node-c2"))
    s = gservice("agent", ZERO, cpu_milli=500)
    sp, plan = one(nodes, s, facts)
    assert sp.status == "placed" and sp.mode == "global", sp.reason
    assert on(sp) == ["n-c1", "n-c2", "n-g"], sp.placements
    assert not sp.nodes_waiting and not any("wait" in w for w in sp.warnings), sp.warnings
    for p in sp.placements:
        assert p.gpus == () and p.uuids == ()
    pl = Planner()  # the device map is written first, the gates open in the next cycle
    for _ in range(3):
        sp, plan = one(nodes, s, facts, pl)
        nodes, s = apply(nodes, plan), written(s, sp)
    got = nodes
    assert sorted(n.id for n in got if n.labels.get(gate_key(P, "agent")) == "true") \
        == ["n-c1", "n-c2", "n-g"]
    assert all(n.labels.get(f"{P}assign.agent") == "" for n in got)


def test_a_global_job_of_no_gpu_holds_on_cpu_only_nodes_too() -> None:
    nodes, facts = gpu_and(cpu_node("n-c", "node-c", 4000))
    sp, _ = one(nodes, gservice("once", ZERO, 500, mode="GlobalJob"), facts)
    assert on(sp) == ["n-c", "n-g"], (sp.status, sp.reason, sp.placements)


def test_a_cpu_only_node_that_may_not_take_it_waits_or_is_left_out() -> None:
    """Drained, paused, down: waits, said; too little CPU: waits, said; another platform
    or a constraint of the owner's: Swarm would never run it there, nothing said."""
    nodes, facts = gpu_and(
        cpu_node("n-drain", "c-drain", 4000, availability="drain"),
        cpu_node("n-pause", "c-pause", 4000, availability="pause"),
        cpu_node("n-down", "c-down", 4000, state="down"),
        cpu_node("n-small", "c-small", 200),
        cpu_node("n-arm", "c-arm", 4000, os="linux", arch="aarch64"),
        replace(cpu_node("n-ok", "c-ok", 4000), labels={"tier": "batch"}),
    )
    nodes = [replace(n, os="linux", arch="x86_64") if n.id != "n-arm" else n for n in nodes]
    amd = [{"OS": "linux", "Architecture": "amd64"}]
    sp, _ = one(nodes, gservice("agent", ZERO, 500, platforms=amd), facts)
    assert on(sp) == ["n-g", "n-ok"], sp.placements
    assert sorted(sp.nodes_waiting) == ["c-down", "c-drain", "c-pause", "c-small"], \
        sp.nodes_waiting
    assert sp.nodes_waiting["c-drain"] == "node is down, paused or drained"
    assert "c-small has only 200 CPU milli free" in sp.nodes_waiting["c-small"], sp.nodes_waiting
    assert any("4 node(s) wait" in w for w in sp.warnings), sp.warnings
    only_batch = gservice("agent", ZERO, 500, constraints=["node.labels.tier==batch"])
    sp, _ = one(nodes, only_batch, facts)
    assert on(sp) == ["n-ok"], sp.placements


def test_a_global_gpu_request_still_skips_cpu_only_nodes() -> None:
    nodes, facts = gpu_and(cpu_node("n-c", "node-c", 4000))
    sp, _ = one(nodes, gservice("infer", {f"{P}gpus": "1"}), facts)
    assert on(sp) == ["n-g"] and not sp.nodes_waiting, (sp.placements, sp.nodes_waiting)


def test_a_cpu_only_node_joining_or_leaving_is_followed_within_a_cycle() -> None:
    """A long-lived planner: a CPU-only node that joins gets its holding in the next
    cycle (and no other node's holding changes), one that leaves takes its holding with
    it, one drained keeps its holding while its task runs (as a GPU node's does)."""
    nodes, facts = gpu_and(cpu_node("n-c1", "node-c1", 4000))
    s = gservice("agent", ZERO, 500)
    pl = Planner()
    sp, plan = one(nodes, s, facts, pl)
    nodes = apply(nodes, plan)
    s = written(s, sp)
    assert on(sp) == ["n-c1", "n-g"]
    nodes = [*nodes, cpu_node("n-c2", "node-c2", 4000)]
    sp, plan = one(nodes, s, facts, pl)
    assert on(sp) == ["n-c1", "n-c2", "n-g"], sp.placements
    assert set(plan.node_set) == {"n-c2"}, plan.node_set  # type: ignore[attr-defined]
    nodes = apply(nodes, plan)
    nodes = [n for n in nodes if n.id != "n-c1"]
    sp, plan = one(nodes, s, facts, pl)
    assert on(sp) == ["n-c2", "n-g"], sp.placements
    # a quiet cycle after: nothing to write
    nodes = apply(nodes, plan)
    sp, plan = one(nodes, s, facts, pl)
    assert on(sp) == ["n-c2", "n-g"] and not plan.node_set, plan.node_set  # type: ignore[attr-defined]
    # a drained CPU-only node waits; made active again, it is placed in the next cycle
    nodes = [*nodes, cpu_node("n-c3", "node-c3", 4000, availability="drain")]
    sp, plan = one(nodes, s, facts, pl)
    assert on(sp) == ["n-c2", "n-g"] and list(sp.nodes_waiting) == ["node-c3"], sp
    nodes = [replace(n, availability="active", version=n.version + 1) for n in nodes]
    sp, plan = one(nodes, s, facts, pl)
    assert on(sp) == ["n-c2", "n-c3", "n-g"], sp.placements


def test_a_global_service_of_no_gpu_on_cpu_only_nodes_alone() -> None:
    """No GPU node at all: it still goes to every CPU-only node; none with room says
    nodes, not GPU nodes."""
    nodes = [cpu_node("n-c1", "node-c1", 4000), cpu_node("n-c2", "node-c2", 4000)]
    sp, _ = one(nodes, gservice("agent", ZERO, 500), {})
    assert on(sp) == ["n-c1", "n-c2"], (sp.status, sp.reason)
    sp, _ = one(nodes, gservice("big", ZERO, 8000), {})
    assert sp.status == "pending" and not sp.placements
    assert sp.reason is not None and sp.reason.startswith("no node has room: "), sp.reason
    assert "GPU" not in sp.reason.split(":", 1)[0], sp.reason


def test_plan_placement_is_the_same_as_a_fresh_planner() -> None:
    nodes, facts = gpu_and(cpu_node("n-c", "node-c", 4000))
    plan = plan_placement(nodes, [gservice("agent", ZERO, 500)], [], facts)  # type: ignore[arg-type]
    assert on(plan.services[0]) == ["n-c", "n-g"]


def test_a_plain_node_helper_without_resources_is_not_cpu_only() -> None:
    """support.placement.node reports no CPU or memory: never a CPU-only node."""
    nodes, facts = gpu_and(node("n-x", "node-x"))
    sp, _ = one(nodes, gservice("agent", ZERO, 500), facts)
    assert on(sp) == ["n-g"], sp.placements


def _settle(pl: Planner, nodes: list[SwarmNode], s: SwarmService,
            facts: dict[str, object]) -> tuple[list[SwarmNode], SwarmService, ServicePlan]:
    for _ in range(3):
        sp, plan = one(nodes, s, facts, pl)
        nodes, s = apply(nodes, plan), written(s, sp)
    return nodes, s, sp


def test_a_holding_on_a_node_whose_agent_answers_later_is_kept_and_counted_once() -> None:
    """node-x has no agent yet: a replicated gpus "0" service goes there as to a CPU-only
    node. Its agent then answers (a GPU node after all): the holding stays, its
    reservation counted once, on the GPU nodes' allocator; its facts gone again, the
    same on the CPU-only nodes' allocator."""
    nodes = [cpu_node("n-g", "node-g"), cpu_node("n-x", "node-x", 4000)]
    facts: dict[str, object] = {"n-g": RTX4090.facts()}
    tt: dict[str, object] = {"ContainerSpec": {"Image": "x", "Env": [env_template(P)]},
                             "Resources": {"Reservations": {"NanoCPUs": 1_000_000_000}},
                             "Placement": {"Constraints": [gate_constraint(P, "web")]}}
    spec = {"Name": "web", "Labels": ZERO, "TaskTemplate": tt,
            "Mode": {"Replicated": {"Replicas": 1}}}
    s = service_from_api({"ID": "id-web", "Version": {"Index": 1}, "Spec": spec})
    pl = Planner()
    nodes, s, sp = _settle(pl, nodes, s, facts)
    assert on(sp) == ["n-x"] and pl.cluster.cpu.nodes["n-x"].cpu_left == 3000
    for now in ({**facts, "n-x": RTX4090.facts()}, facts):
        sp, plan = one(nodes, s, now, pl)
        assert on(sp) == ["n-x"], sp
        assert not plan.node_remove, plan.node_remove  # type: ignore[attr-defined]
        state = pl.cluster.node_state("n-x")
        assert state is not None and state.cpu_left == 3000, now.keys()
        nodes = apply(nodes, plan)


def test_a_settled_holding_on_a_cpu_only_node_is_not_released_and_committed_each_cycle() -> None:
    """A cycle over the same cluster leaves the CPU-only nodes' allocator as it is (its
    capacity generation, which every memo of an unplaceable demand is keyed on)."""
    nodes, facts = gpu_and(cpu_node("n-c", "node-c", 4000))
    pl = Planner()
    nodes, s, sp = _settle(pl, nodes, gservice("agent", ZERO, 500), facts)
    assert on(sp) == ["n-c", "n-g"]
    before = (pl.cluster.cpu.capacity_gen, pl.cluster.alloc.capacity_gen)
    one(nodes, s, facts, pl)
    assert (pl.cluster.cpu.capacity_gen, pl.cluster.alloc.capacity_gen) == before


def test_a_cpu_only_node_that_changes_platform_or_loses_its_resources() -> None:
    """Its platform no longer the service's: its holding goes (gate and ledger entry),
    the others stay. Swarm no longer says its CPU and memory: nothing new is placed
    there, and the holding it has stays (as an unread GPU node's does)."""
    amd = [{"OS": "linux", "Architecture": "amd64"}]
    nodes, facts = gpu_and(cpu_node("n-c1", "node-c1", 4000), cpu_node("n-c2", "node-c2", 4000))
    nodes = [replace(n, os="linux", arch="x86_64") for n in nodes]
    pl = Planner()
    nodes, s, sp = _settle(pl, nodes, gservice("agent", ZERO, 500, platforms=amd), facts)
    assert on(sp) == ["n-c1", "n-c2", "n-g"]
    nodes = [replace(n, arch="aarch64", version=n.version + 1) if n.id == "n-c1" else
             replace(n, cpu_milli=None, version=n.version + 1) if n.id == "n-c2" else n
             for n in nodes]
    sp, plan = one(nodes, s, facts, pl)
    assert on(sp) == ["n-c2", "n-g"], sp.placements
    removed = plan.node_remove  # type: ignore[attr-defined]
    assert set(removed) == {"n-c1"} and gate_key(P, "agent") in removed["n-c1"], removed


def test_a_holding_of_no_gpu_stays_where_an_agent_starts_answering_with_no_gpu() -> None:
    """An agent starts answering on node-x, a CPU-only node holding a gpus "0" service,
    with no GPU (no error): the node leaves the CPU-only nodes (an agent's node is not
    taken anew), but nothing says the holding is gone: it stays, and with it the gate
    its running task needs (before: released, the gate closed under its task, which
    Swarm's constraint enforcer then stops)."""
    nodes = [cpu_node("n-g", "node-g"), cpu_node("n-x", "node-x", 4000)]
    facts: dict[str, object] = {"n-g": RTX4090.facts()}
    s = gservice("agent", ZERO, 500)
    pl = Planner()
    nodes, s, sp = _settle(pl, nodes, s, facts)
    assert on(sp) == ["n-g", "n-x"]
    none = replace(RTX4090.facts(), gpus=(), links=())
    sp, plan = one(nodes, s, {**facts, "n-x": none}, pl)
    assert on(sp) == ["n-g", "n-x"], sp
    assert not plan.node_remove, plan.node_remove  # type: ignore[attr-defined]
