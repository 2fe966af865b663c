"""``agents.service`` is the operator's word: a service so named that a tenant of the
operator's tenancy config matches is a tenant's, and marks no node as a GPU node.

Before: any service named as ``agents.service`` did (``cpunodes.agent_nodes``). With
agents run by systemd and the key left at its default ``swarmgpu_agent``, a tenant that
deployed a stack ``swarmgpu`` with a service ``agent`` made every node its tasks ran on
a GPU node whose agent was not read: taken off the CPU-only nodes (a gpus "0" service no
longer went there), said unreachable by ``audit``. Now its tasks count for nothing, and
the daemon's log, ``audit`` and ``doctor`` name the service and the fix. Pure.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from loguru import logger
from support.forged import RecordingSwarm, sw_svc
from support.gpu_nodes import RTX4090
from support.planner import cpu_node

from swarmgpu.agent.doctor import Status, SwarmRead, check_agents_service
from swarmgpu.agent.doctor.read import read_view
from swarmgpu.core.config import AgentsConfig, Config, SyncConfig
from swarmgpu.core.tenants import STACK_LABEL
from swarmgpu.manager.commands.audit import audit, exit_code
from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.agentbook import AgentBook
from swarmgpu.manager.nodes.sync import LabelSync, Snapshot, tenant_specs
from swarmgpu.manager.placement import Planner
from swarmgpu.manager.placement.cpunodes import agent_nodes
from swarmgpu.manager.services.tenants import Tenants
from swarmgpu.swarm.client import SwarmService, SwarmTask

GLOBAL: dict[str, object] = {"Global": {}}
ZERO = {"swarmgpu.gpus": "0"}
# A tenant's stack "swarmgpu" with a service "agent": Swarm names it swarmgpu_agent
SPOOF = sw_svc("swarmgpu_agent", {STACK_LABEL: "swarmgpu"}, gated=False, mode=GLOBAL)
WEB = sw_svc("web", ZERO, gated=False)
# Every stack is team-a's (the operator's agents run by systemd, outside Swarm)
ALL_STACKS: dict[str, Any] = {"team-a": {"stacks": ["*"]}}
TEAM_STACKS: dict[str, Any] = {"team-a": {"stacks": ["team-a*"]}}
DOCTOR_ROOTS = Path(__file__).parent / "doctor_roots"


def cfg_of(tenants: dict[str, Any]) -> Config:
    return Config(tenants=tenants)


def agent_task(svc: SwarmService, node_id: str) -> SwarmTask:
    return SwarmTask(id=f"t-{svc.name}-{node_id}", service_id=svc.id, node_id=node_id,
                     slot=None, state="running", desired_state="running", env=())


def snapshot(cfg: Config, services: list[SwarmService]) -> Snapshot:
    """node-g (an RTX 4090, its agent answered) and node-c (no GPU; no agent answers
    there, nothing labels it), the services' tasks on node-c; the tenants of ``cfg``
    as ``take_snapshot`` reads them."""
    n = cpu_node("n-c", "node-c", 4000)
    ok = FactsResult("n-g", "node-g", "", RTX4090.facts(), None, time.time())
    down = FactsResult("n-c", "node-c", "https://10.0.0.9:9401/facts", None,
                       "agent at https://10.0.0.9:9401/facts: cannot connect", time.time())
    return Snapshot([cpu_node("n-g", "node-g"), n], services,
                    [agent_task(s, "n-c") for s in services if s.mode == "global"],
                    {"n-g": ok, "n-c": down}, tenants=tenant_specs(cfg))


def where_web(snap: Snapshot, cfg: Config) -> str:
    sp = next(x for x in make_plan(snap, cfg).services if x.name == "web")
    assert sp.status == "placed", sp.reason
    return sp.placements[0].node_id


def test_a_tenants_service_named_as_the_agents_marks_no_gpu_node() -> None:
    """team-a's stack ``swarmgpu`` runs its ``agent`` on node-c: node-c stays a CPU-only
    node (the gpus "0" service goes there; before: node-g, node-c taken for a GPU node
    whose agent is unread), and audit says nothing of an unreachable agent there."""
    cfg = cfg_of(ALL_STACKS)
    snap = snapshot(cfg, [SPOOF, WEB])
    assert snap.agent_nodes("swarmgpu_agent") == frozenset()
    assert where_web(snap, cfg) == "n-c"
    found = audit(snap, agent_service="swarmgpu_agent")
    assert not [f for f in found if f.kind == "unreachable"], found
    # the planner without a snapshot (its own walk) reads its tenants alike
    pl = Planner(agent_service="swarmgpu_agent", tenants=Tenants.from_config(cfg))
    plan = pl.plan(snap.nodes, [SPOOF, WEB], snap.tasks, {"n-g": RTX4090.facts()})
    sp = next(x for x in plan.services if x.name == "web")
    assert [p.node_id for p in sp.placements] == ["n-c"], sp.reason


def test_the_operators_agents_service_still_counts_beside_tenants() -> None:
    """No tenant matches the stack ``swarmgpu`` (team-a's stacks are team-a*), or no
    tenancy config at all: its tasks mark node-c as a GPU node, as before."""
    for cfg in (cfg_of(TEAM_STACKS), Config()):
        snap = snapshot(cfg, [SPOOF, WEB])
        assert snap.agent_nodes("swarmgpu_agent") == {"n-c"}, cfg.tenants
        assert where_web(snap, cfg) == "n-g", cfg.tenants
        assert not [f for f in audit(snap, agent_service="swarmgpu_agent")
                    if f.kind == "agents-service-tenant"], cfg.tenants
    # matched by service name as well (a tenant's services glob)
    named = snapshot(cfg_of({"team-a": {"services": ["*_agent"]}}), [SPOOF])
    assert named.agent_nodes("swarmgpu_agent") == frozenset()
    assert agent_nodes(named.services, named.tasks, "swarmgpu_agent") == {"n-c"}


def test_audit_names_the_tenants_service_and_the_fix() -> None:
    """An action finding (exit 1): the service, the tenant, the config key and the fix
    (agents.service: "" for systemd agents, or the tenant's globs narrowed)."""
    snap = snapshot(cfg_of(ALL_STACKS), [SPOOF])
    (f,) = [f for f in audit(snap, agent_service="swarmgpu_agent")
            if f.kind == "agents-service-tenant"]
    assert f.subject == "swarmgpu_agent" and not f.advisory
    for part in ("'swarmgpu_agent'", "tenant team-a", "tenants.team-a", "'swarmgpu'",
                 'agents.service: ""', "narrow", "fix:"):
        assert part in f.message, f.message
    assert exit_code([f]) == 1


def test_the_daemon_says_once_that_the_agents_service_is_a_tenants(tmp_path: Path) -> None:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="WARNING")
    try:
        cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                     dry_run=True, placement=replace(Config().placement, enabled=False),
                     agents=AgentsConfig(), tenants=ALL_STACKS)
        sync = LabelSync(None, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]
        snap = snapshot(cfg, [SPOOF])
        for _ in range(3):
            sync.cycle(snap)
    finally:
        logger.remove(sink)
    said = [x for x in lines if "a tenant's service" in x]
    assert len(said) == 1, lines
    assert "'swarmgpu_agent'" in said[0] and "tenant team-a" in said[0], said[0]


def test_the_doctor_fails_a_tenants_agents_service_naming_it_and_the_fix() -> None:
    """The doctor, given the daemon's config (its tenants in ``SwarmRead``): fail,
    naming the service and the tenant; without tenants, as before (ok)."""
    snap = snapshot(cfg_of(ALL_STACKS), [SPOOF])
    gpu = replace(snap.nodes[1], labels={"gpu": "true"})
    view = read_view(str(DOCTOR_ROOTS / "healthy"))
    for tenants, want in ((snap.tenants, Status.FAIL), ((), Status.OK)):
        read = SwarmRead([gpu], [SPOOF], snap.tasks, tenants=tenants)
        c = check_agents_service(replace(view, agents_service="swarmgpu_agent", swarm=read))
        assert c.status is want, c
    read = SwarmRead([gpu], [SPOOF], snap.tasks, tenants=snap.tenants)
    c = check_agents_service(replace(view, agents_service="swarmgpu_agent", swarm=read))
    assert "'swarmgpu_agent'" in c.found and "tenant team-a" in c.found, c.found
    assert 'agents.service: ""' in c.fix and "narrow" in c.fix, c.fix


def test_the_daemons_snapshot_reads_the_tenants_of_its_config(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``take_snapshot`` (the daemon's and the CLI's read) carries the config's tenants,
    so every reader of its ``agent_nodes`` refuses the tenant's service alike."""
    from swarmgpu.manager.nodes import sync

    monkeypatch.setattr(sync, "fetch_agents", lambda *_a, **_k: {})
    n = cpu_node("n-c", "node-c", 4000)
    sw = RecordingSwarm([n], [SPOOF], [agent_task(SPOOF, "n-c")])
    got = sync.take_snapshot(sw, cfg_of(ALL_STACKS))  # type: ignore[arg-type]
    assert [t.name for t in got.tenants] == ["team-a", "default"]
    assert got.agent_nodes("swarmgpu_agent") == frozenset()
    assert sync.take_snapshot(sw, Config()).agent_nodes(  # type: ignore[arg-type]
        "swarmgpu_agent") == {"n-c"}


# The operator's agents, made by `docker service create` (no stack): no tenant of
# ALL_STACKS (stacks ["*"]) matches a service of no stack, so node-c is a GPU node.
AGENTS = sw_svc("swarmgpu_agent", {}, gated=False, mode=GLOBAL)
# A stack "swarmgpu" with the agents' service in it, and a service of no GPU
AGENT_STACK = ('version: "3.8"\nservices:\n  agent:\n    image: x\n    deploy: {mode: global}\n'
               '  web:\n    image: x\n    deploy:\n      labels: {swarmgpu.gpus: "0"}\n')


def test_render_reads_the_agents_nodes_as_the_daemon_whatever_the_stack_renames(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rendered stack carries the agents' service (stack ``swarmgpu``): render's
    planner takes the agents' nodes of the live services, as the daemon's snapshot
    does (``Snapshot.agent_nodes``), so web keeps off node-c, whose agent is unread.
    Before: its planner walked the rendered stack's services instead, whose stack label
    made the agents' service team-a's; node-c was taken for a CPU-only node and web
    was written onto it, where the daemon would not place it."""
    from click.testing import CliRunner

    from swarmgpu.cli import main
    from swarmgpu.manager.nodes import sync
    from swarmgpu.swarm import client

    cfg = cfg_of(ALL_STACKS)
    snap = snapshot(cfg, [AGENTS])
    assert snap.agent_nodes("swarmgpu_agent") == {"n-c"}  # the daemon's reading
    monkeypatch.setattr(client, "SwarmClient",
                        lambda *_a, **_k: RecordingSwarm(snap.nodes, [AGENTS], snap.tasks))
    monkeypatch.setattr(sync, "fetch_agents", lambda *_a, **_k: snap.facts)
    (tmp_path / "config.yml").write_text(
        f"state_dir: {tmp_path}\nagents: {{service: swarmgpu_agent}}\n"
        "tenants: {team-a: {stacks: ['*']}}\n")
    (tmp_path / "swarmgpu.yml").write_text(AGENT_STACK)
    res = CliRunner().invoke(main, ["render", str(tmp_path / "swarmgpu.yml"), "--config",
                                    str(tmp_path / "config.yml")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "swarmgpu.devices.n-g:" in res.output and "devices.n-c" not in res.output, res.output
