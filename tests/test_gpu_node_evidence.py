"""One answer to "is this a GPU node" before its agent answers (``cpunodes.gpu_hint``),
read alike by label sync, placement, the rebalancer, ``audit``, ``status`` and the map:
label sync's labels, ``gpu=true`` (node or engine label), a task of the agents' service
(``agents.service``) assigned there, GPU generic resources.

Before: ``audit``, ``status`` and the map left the agents' tasks out (the daemon logged
a node "agent unreachable" while ``audit`` said nothing of it); label sync left the
engine label out (no agent expected where placement kept the node off the CPU-only
ones); the rebalancer's allocator left the agents' tasks out (and the prefix and generic
resource kind); a misspelled ``agents.service`` matched nothing, silently. Pure.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from loguru import logger
from support.forged import sw_svc
from support.gpu_nodes import RTX4090
from support.planner import cpu_node
from support.rebalance import CFG

from swarmgpu.core.config import AgentsConfig, Config, SyncConfig
from swarmgpu.manager.commands.audit import audit, exit_code
from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.agentbook import AgentBook
from swarmgpu.manager.nodes.sync import LabelSync, Snapshot
from swarmgpu.manager.rebalance.context import Context, Inputs
from swarmgpu.manager.web.cluster_view import build_cluster
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

GLOBAL = {"Global": {}}
AGENT = sw_svc("swarmgpu_agent", {}, gated=False, mode=GLOBAL)


def agent_task(svc: SwarmService, node_id: str) -> SwarmTask:
    return SwarmTask(id=f"t-{svc.name}-{node_id}", service_id=svc.id, node_id=node_id,
                     slot=None, state="running", desired_state="running", env=())


def snapshot(n: SwarmNode, services: list[SwarmService], tasks: list[SwarmTask]) -> Snapshot:
    """node-g (its agent answered, an RTX 4090) and ``n``, whose agent cannot be reached."""
    ok = FactsResult("n-g", "node-g", "", RTX4090.facts(), None, time.time())
    down = FactsResult(n.id, n.hostname, "https://10.0.0.9:9401/facts", None,
                       "agent at https://10.0.0.9:9401/facts: cannot connect", time.time())
    return Snapshot([cpu_node("n-g", "node-g"), n], services, tasks, {"n-g": ok, n.id: down})


def node_c(**kw: object) -> SwarmNode:
    """A node placed by the operator's own label (not gpu=true), no GPU resources."""
    return replace(cpu_node("n-c", "node-c", 4000, labels={"accelerator": "nvidia"}),
                   **kw)  # type: ignore[arg-type]


def unreachable(snap: Snapshot, **kw: str) -> list[str]:
    return [f.node for f in audit(snap, **kw) if f.kind == "unreachable"]  # type: ignore[arg-type]


def map_agent(snap: Snapshot, **kw: str) -> tuple[str, str]:
    doc = build_cluster(snap, None, **kw)  # type: ignore[arg-type]
    n = next(x for x in doc["nodes"] if x["id"] == "n-c")
    return n["agent"]["status"], n["labels_state"]


def sync_errors(tmp: Path, snap: Snapshot, cycles: int = 1, **agents: str) -> list[str]:
    cfg = Config(state_dir=str(tmp), sync=SyncConfig(watch_events=False), dry_run=True,
                 placement=replace(Config().placement, enabled=False),
                 agents=AgentsConfig(**agents))
    sync = LabelSync(None, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]
    errors: list[str] = []
    for _ in range(cycles):
        errors = sync.cycle(snap).errors
    return [e.split(":")[0] for e in errors]


def test_audit_and_the_map_say_unreachable_where_swarm_runs_the_agents_task() -> None:
    """node-c runs the agents' task, its agent unreachable: the daemon logs it
    (tests/test_cpu_nodes_agent_tasks.py), and now audit, status and the map say it too
    (before: no finding, "No findings"; the map said no agent). With the key off, or
    without the task, nothing marks it."""
    live = snapshot(node_c(), [AGENT], [agent_task(AGENT, "n-c")])
    assert unreachable(live, agent_service="swarmgpu_agent") == ["n-c"]
    assert map_agent(live, agent_service="swarmgpu_agent") == \
        ("unreachable", "agent-unreadable")
    assert unreachable(live, agent_service="") == []
    assert map_agent(live, agent_service="") == ("none", "no-agent")
    none = snapshot(node_c(), [AGENT], [])
    assert unreachable(none, agent_service="swarmgpu_agent") == []
    assert map_agent(none, agent_service="swarmgpu_agent") == ("none", "no-agent")


def test_an_engine_labelled_node_is_a_gpu_node_for_label_sync_audit_and_the_map(
        tmp_path: Path) -> None:
    """``dockerd --label gpu=true`` (docs/deploy.md) and no agent answering: label sync
    expects an agent and reports it unreachable, as placement keeps the node off the
    CPU-only ones (before: label sync, audit and the map took it for a CPU node)."""
    engine = snapshot(node_c(engine_labels={"gpu": "TRUE"}), [], [])
    assert sync_errors(tmp_path, engine, service="") == ["node-c"]
    assert unreachable(engine) == ["n-c"]
    assert map_agent(engine) == ("unreachable", "agent-unreadable")
    plain = snapshot(node_c(engine_labels={"gpu": "false"}), [], [])
    assert sync_errors(tmp_path, plain, service="") == []
    assert unreachable(plain) == []


def inputs(nodes: list[SwarmNode], **kw: object) -> Inputs:
    return Inputs(nodes=nodes, services=[AGENT], tasks=[], facts={"n-g": RTX4090.facts()},
                  ledger={}, gpus={}, node_signals={}, cfg=CFG, now=0.0,
                  **kw)  # type: ignore[arg-type]


def test_the_rebalancers_allocator_reads_gpu_nodes_as_placement_does() -> None:
    """The rebalancer's allocator (``Context.allocator``, both kinds): node-c, running
    the agents' task, is no CPU-only node; nor is one advertising the configured generic
    kind, nor one carrying label sync's labels under the configured prefix (before: all
    three were CPU-only there, while placement kept them off)."""
    nodes = [cpu_node("n-g", "node-g"), node_c()]

    def cpu_only(inp: Inputs) -> list[list[str]]:
        ctx = Context.build(inp)
        return [sorted(ctx.allocator().cpu.nodes), sorted(ctx.allocator(moves=()).cpu.nodes)]

    assert cpu_only(inputs(nodes)) == [["n-c"], ["n-c"]]
    assert cpu_only(inputs(nodes, agents=frozenset({"n-c"}))) == [[], []]
    kinded = [nodes[0], node_c(generic_resources={"acme.com/gpu": ("GPU-1",)})]
    assert cpu_only(inputs(kinded)) == [["n-c"], ["n-c"]]
    assert cpu_only(inputs(kinded, generic_kind="acme.com/gpu")) == [[], []]
    prefixed = [nodes[0], node_c(labels={"acme.gpu.count": "1"})]
    assert cpu_only(inputs(prefixed, prefix="acme.")) == [[], []]


def test_a_misspelled_agents_service_is_said_once_naming_the_key_and_the_fix(
        tmp_path: Path) -> None:
    """``agents.service: swarmgpu-agent`` where the stack's service is swarmgpu_agent:
    the daemon says so once (not every cycle), and audit as an advisory (exit 0); not
    said where the name is found, the key is off, or no GPU node exists."""
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        snap = snapshot(node_c(), [AGENT], [])
        sync_errors(tmp_path, snap, cycles=3, service="swarmgpu-agent")
    finally:
        logger.remove(sink)
    said = [x for x in lines if "agents.service" in x]
    assert len(said) == 1, lines
    for part in ("'swarmgpu-agent'", "swarmgpu_agent", "fix:", "docker service ls"):
        assert part in said[0], said[0]
    found = [f for f in audit(snap, agent_service="swarmgpu-agent")
             if f.kind == "agents-service-missing"]
    assert len(found) == 1 and found[0].advisory and "swarmgpu_agent" in found[0].message
    assert exit_code(found) == 0
    for name, services in (("swarmgpu_agent", [AGENT]), ("", [AGENT])):
        got = audit(replace(snap, services=services), agent_service=name)
        assert not [f for f in got if f.kind == "agents-service-missing"], name
    cpu = Snapshot([node_c()], [AGENT], [], {})
    assert not [f for f in audit(cpu, agent_service="x_agent")
                if f.kind == "agents-service-missing"]


def test_a_systemd_fleet_left_at_the_default_name_is_told_to_set_the_key_empty(
        tmp_path: Path) -> None:
    """Agents run by systemd (no agents' service in Swarm), ``agents.service`` left at
    its default: the daemon says once that no service is named so, and its fix is the
    one docs/systemd.md gives, ``agents.service: ""`` in the config (before: "or to ''
    where the agents run outside Swarm", after the fix for a stack)."""
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="WARNING")
    try:
        gpu = node_c(labels={"gpu": "true"})
        sync_errors(tmp_path, snapshot(gpu, [], []), cycles=3)
    finally:
        logger.remove(sink)
    (said,) = [x for x in lines if x.startswith("agents.service")]
    assert "'swarmgpu_agent'" in said and "systemd" in said, said
    assert 'set agents.service: "" in the daemon\'s config' in said, said
    assert "docs/systemd.md" in said, said
