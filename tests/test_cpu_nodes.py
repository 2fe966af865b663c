"""A service of no GPU (``swarmgpu.gpus: "0"``) on the swarm's CPU-only nodes: nodes
without an agent, known by what Swarm says of them alone (its CPU and memory, status,
availability, platform), taken before a GPU node; never for a GPU request
(docs/requests.md, "A service without a GPU"). Before: such nodes were never chosen,
the service went to a GPU node even where a CPU node had room."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from support.forged import RecordingSwarm, offline_daemon, sw_node, sw_svc
from support.gpu_nodes import RTX4090
from support.placement import P, apply
from support.planner import cpu_node

from swarmgpu.manager.placement import Planner, gate_key, plan_placement
from swarmgpu.manager.placement.records import ServicePlan
from swarmgpu.manager.placement.specwrite import service_compute
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask, service_from_api

GIB = 1024 * 1024 * 1024
ZERO = {f"{P}gpus": "0"}


def service(name: str, labels: dict[str, str], cpu_milli: int = 0,
            platforms: list[dict[str, str]] | None = None) -> SwarmService:
    tt: dict[str, object] = {"ContainerSpec": {"Image": "x"},
                             "Resources": {"Reservations": {"NanoCPUs": cpu_milli * 1_000_000}}}
    if platforms is not None:
        tt["Placement"] = {"Platforms": platforms}
    spec = {"Name": name, "Labels": labels, "TaskTemplate": tt,
            "Mode": {"Replicated": {"Replicas": 1}}}
    return service_from_api({"ID": f"id-{name}", "Spec": spec, "Version": {"Index": 1}})


def running(s: SwarmService, node_id: str, cpu_milli: int) -> SwarmTask:
    return SwarmTask(id=f"t-{s.name}", service_id=s.id, node_id=node_id, slot=1,
                     state="running", desired_state="running", env=(), cpu_milli=cpu_milli,
                     memory_mib=0)


def cluster(*cpu: SwarmNode) -> tuple[list[SwarmNode], dict[str, object]]:
    """One GPU node (node-g, 2 CPUs, its agent's facts) and the CPU-only nodes given."""
    return [cpu_node("n-g", "node-g"), *cpu], {"n-g": RTX4090.facts()}


def plan_of(nodes: list[SwarmNode], services: list[SwarmService], tasks: list[SwarmTask],
            facts: dict[str, object], name: str) -> ServicePlan:
    plan = plan_placement(nodes, services, tasks, facts)  # type: ignore[arg-type]
    return next(sp for sp in plan.services if sp.name == name)


def where(sp: ServicePlan) -> str:
    assert sp.status == "placed", sp.reason
    return sp.placements[0].node_id


def test_a_service_of_no_gpu_goes_to_a_cpu_only_node_behind_its_gate() -> None:
    """node-c has no agent and room: the service goes there (before: to node-g, the
    only node placement knew), its gate opens there, and a fresh planner reads the
    holding back on node-c."""
    nodes, facts = cluster(cpu_node("n-c", "node-c", 4000))
    web = service("web", ZERO, cpu_milli=1000)
    pl = Planner()
    for _ in range(3):
        plan = pl.plan(nodes, [web], [], facts)  # type: ignore[arg-type]
        sp = next(x for x in plan.services if x.name == "web")
        assert where(sp) == "n-c"
        assert sp.placements[0].gpus == () and sp.placements[0].uuids == ()
        nodes = apply(nodes, plan)
        new = service_compute(sp.writes)(web.spec)
        if new is not None:
            web = service_from_api({"ID": web.id, "Spec": new,
                                    "Version": {"Index": web.version + 1}})
    assert [n.id for n in nodes if n.labels.get(gate_key(P, "web")) == "true"] == ["n-c"]
    assert where(plan_of(nodes, [web], [], facts, "web")) == "n-c"


def test_cpu_other_services_reserve_on_a_cpu_only_node_is_counted() -> None:
    """node-c1's CPU is taken by another service's task (as Swarm reports it) and by a
    holding placed this cycle: each placement goes where the CPU is left, and once no
    CPU-only node has room, to the GPU node."""
    nodes, facts = cluster(cpu_node("n-c1", "node-c1"), cpu_node("n-c2", "node-c2"))
    other = service("other", {}, cpu_milli=1500)
    a = service("a", ZERO, cpu_milli=1000)
    b = service("b", ZERO, cpu_milli=1500)
    c = service("c", ZERO, cpu_milli=1000)
    plan = plan_placement(nodes, [other, a, b, c], [running(other, "n-c1", 1500)], facts)  # type: ignore[arg-type]
    got = {sp.name: where(sp) for sp in plan.services if sp.name in "abc"}
    # a (1 CPU) fills node-c2 best (node-c1 has 0.5 left); b (1.5) then fits no CPU-only
    # node (node-c2 has 1 left); c (1) fills node-c2
    assert got == {"a": "n-c2", "b": "n-g", "c": "n-c2"}, got


def test_a_drained_paused_or_down_cpu_only_node_is_not_chosen() -> None:
    for kw in ({"availability": "drain"}, {"availability": "pause"}, {"state": "down"}):
        nodes, facts = cluster(cpu_node("n-c", "node-c", 4000, **kw))
        sp = plan_of(nodes, [service("web", ZERO, 1000)], [], facts, "web")
        assert where(sp) == "n-g", kw


def test_a_cpu_only_node_of_another_platform_is_not_chosen() -> None:
    nodes, facts = cluster(cpu_node("n-c", "node-c", 4000, os="linux", arch="aarch64"))
    nodes[0] = replace(nodes[0], os="linux", arch="x86_64")
    amd = service("web", ZERO, 1000, platforms=[{"OS": "linux", "Architecture": "amd64"}])
    assert where(plan_of(nodes, [amd], [], facts, "web")) == "n-g"
    arm = service("web", ZERO, 1000, platforms=[{"OS": "linux", "Architecture": "arm64"}])
    assert where(plan_of(nodes, [arm], [], facts, "web")) == "n-c"


def test_a_gpu_request_never_goes_to_a_cpu_only_node() -> None:
    """A GPU request with no GPU free waits; its holding of no GPU on a CPU-only node
    (its request changed from "0" to "1") is not kept there."""
    nodes, facts = cluster(cpu_node("n-c", "node-c", 4000))
    gpu = service("gpu", {f"{P}gpus": "1"}, 1000)
    assert where(plan_of(nodes, [gpu], [], facts, "gpu")) == "n-g"
    nodes[0] = replace(nodes[0], availability="drain")
    sp = plan_of(nodes, [gpu], [], facts, "gpu")
    assert sp.status == "pending" and not sp.placements, sp
    assert "node-c" not in (sp.reason or ""), sp.reason
    nodes = [replace(n, availability="active") for n in nodes]
    held = {f"{P}assign.gpu": "", f"{P}service.gpu": "true"}
    nodes[1] = replace(nodes[1], labels=held)
    assert where(plan_of(nodes, [gpu], [], facts, "gpu")) == "n-g"


def test_what_swarm_does_not_say_keeps_a_node_off() -> None:
    """No node is taken on another's word: a node whose engine advertises GPUs, or that
    carries label sync's labels (its agent answered once), is a GPU node whose agent is
    not read now; a node Swarm reports no CPU or memory for has nothing to place against;
    a node whose agent answers (no GPU) stays on the agents' path."""
    base = cpu_node("n-c", "node-c", 4000)
    for n in (replace(base, discrete_resources={"NVIDIA-GPU": 1}),
              replace(base, labels={f"{P}gpu.count": "1"}),
              replace(base, cpu_milli=None), replace(base, memory_mib=None)):
        nodes, facts = cluster(n)
        sp = plan_of(nodes, [service("web", ZERO, 1000)], [], facts, "web")
        assert where(sp) == "n-g", n
    nodes, facts = cluster(base)
    facts["n-c"] = replace(RTX4090.facts(), gpus=(), links=())
    assert where(plan_of(nodes, [service("web", ZERO, 1000)], [], facts, "web")) == "n-g"


def test_no_room_anywhere_leaves_it_pending_naming_both_kinds_of_node() -> None:
    nodes, facts = cluster(cpu_node("n-c", "node-c", 1000))
    sp = plan_of(nodes, [service("big", ZERO, 3000)], [], facts, "big")
    assert sp.status == "pending" and not sp.placements and sp.reason
    assert "best node node-g has only 2000 CPU milli free" in sp.reason, sp.reason
    assert "of the nodes without GPUs, best node node-c has only 1000 CPU milli free" \
        in sp.reason, sp.reason


@pytest.mark.parametrize("dry_run", [True, False])
def test_the_daemon_opens_its_gate_on_the_cpu_only_node_and_dry_run_writes_nothing(
        dry_run: bool, tmp_path: Path) -> None:
    """The daemon's own cycles (agents read, none answering: gpu-node-1's last facts
    stand in, mgr-1 has none): the service's gate opens on mgr-1, the node without an
    agent; in dry-run nothing at all is written."""
    sw = RecordingSwarm([sw_node("n-dgx", "gpu-node-1"),
                         sw_node("n-mgr", "mgr-1", role="manager")],
                        [sw_svc("web", ZERO)], [])
    d = offline_daemon(sw, str(tmp_path), dry_run)
    for _ in range(3):
        d.cycle()
    if dry_run:
        assert sw.calls == []
        return
    labels = {nid: sw.node(nid).labels for nid in ("n-dgx", "n-mgr")}
    assert labels["n-mgr"].get(gate_key(P, "web")) == "true", labels
    assert labels["n-mgr"].get(f"{P}assign.web") == "", labels
    assert gate_key(P, "web") not in labels["n-dgx"], labels


def test_a_gpu_node_labelled_for_the_agent_is_not_cpu_only_before_its_agent_answers() -> None:
    """The operator's ``gpu=true`` label (node or engine label, docs/deploy.md: where the
    shipped stack runs agents) says a GPU node whose agent has not answered yet (a new
    node, its agent starting or refused): before, with no generic resources and no label
    sync labels yet, it was taken as a CPU-only node, and gpus "0" services went there
    first, on the CPU its GPUs need."""
    base = cpu_node("n-c", "node-c", 4000)
    for n in (replace(base, labels={"gpu": "true"}), replace(base, engine_labels={"gpu": "true"})):
        nodes, facts = cluster(n)
        sp = plan_of(nodes, [service("web", ZERO, 1000)], [], facts, "web")
        assert where(sp) == "n-g", n


def test_the_agents_gpu_label_is_read_in_any_case_as_swarm_matches_it() -> None:
    """Swarm matches ``node.labels.gpu==true`` case-insensitively (EqualFold), so agents
    run on a node labelled ``gpu=True`` too: before, only ``true`` kept it off, and such a
    GPU node whose agent had not answered was taken first for gpus "0" services."""
    base = cpu_node("n-c", "node-c", 4000)
    for v in ("True", "TRUE"):
        for n in (replace(base, labels={"gpu": v}), replace(base, engine_labels={"gpu": v})):
            nodes, facts = cluster(n)
            sp = plan_of(nodes, [service("web", ZERO, 1000)], [], facts, "web")
            assert where(sp) == "n-g", n


def test_a_node_advertising_the_configured_generic_kind_is_not_cpu_only() -> None:
    """``placement.generic_resource_kind`` names the kind the GPU nodes advertise (doctor
    asks for it): a node whose engine advertises it, its agent not answered yet, is a
    GPU node. Before, only the usual kinds (NVIDIA-GPU, GPU...) kept it off, and a node
    advertising ``A100`` was taken first for gpus "0" services."""
    base = cpu_node("n-c", "node-c", 4000)
    for n in (replace(base, discrete_resources={"A100": 2}),
              replace(base, generic_resources={"A100": ("GPU-1",)})):
        nodes, facts = cluster(n)
        plan = Planner(generic_kind="A100").plan(
            nodes, [service("web", ZERO, 1000)], [], facts)  # type: ignore[arg-type]
        (sp,) = plan.services
        assert where(sp) == "n-g", n


def test_a_cpu_only_node_marked_for_rebuild_is_built_anew_from_its_holdings() -> None:
    """``ClusterAllocator.rebuild_node`` (a give-back or a restore that raised: the count
    may be lost) rebuilt a GPU node at the next sync, never a CPU-only one: its key
    stayed, so a CPU count gone wrong there stayed wrong for good."""
    from swarmgpu.allocator.values import Choice

    nodes, facts = cluster(cpu_node("n-c", "node-c", cpu_milli=4000))
    s = service("web", ZERO, cpu_milli=1000)
    planner, fresh = Planner(), Planner()
    for p in (planner, fresh):
        plan = p.plan(nodes, [s], [running(s, "n-c", 1000)], facts)  # type: ignore[arg-type]
    cpu = planner.cluster.cpu
    lost = Choice(node="n-c", gpus=(), milli=(), score=0.0, explanation="lost count",
                  cpu_milli=2000, memory_mib=0)
    cpu.commit(lost)  # counted used with no holder: what a raise mid-release leaves
    assert cpu.nodes["n-c"].cpu_left != fresh.cluster.cpu.nodes["n-c"].cpu_left
    planner.cluster.rebuild_node("n-c")
    t = [running(s, "n-c", 1000)]
    planner.plan(nodes, [s], t, facts)  # type: ignore[arg-type]
    fresh.plan(nodes, [s], t, facts)  # type: ignore[arg-type]
    assert (planner.cluster.cpu.nodes["n-c"].cpu_left
            == fresh.cluster.cpu.nodes["n-c"].cpu_left), plan
