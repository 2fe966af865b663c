"""A GPU node is known by Swarm's own word that it runs the agent: a task of the agents'
service (``agents.service``, the shipped stack's ``swarmgpu_agent``) assigned there.
Before, a GPU node whose agent had not answered yet, placed by a label of the operator's
other than ``gpu=true`` (docs/deploy.md allows any) and without GPU generic resources,
was taken as a CPU-only node: gpus "0" services went there first, on the CPU its GPUs
need, and label sync expected no agent there (nothing said it could not be read)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from support.forged import sw_svc
from support.gpu_nodes import RTX4090
from support.planner import cpu_node

from swarmgpu.core.config import AgentsConfig, Config, ConfigError, SyncConfig, load_config
from swarmgpu.core.tenants import TenantSpec
from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.agentbook import AgentBook
from swarmgpu.manager.nodes.sync import LabelSync, Snapshot
from swarmgpu.manager.placement import Planner
from swarmgpu.manager.placement.cpunodes import agent_nodes
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

ZERO = {"swarmgpu.gpus": "0"}
GLOBAL = {"Global": {}}


def agent_task(svc: SwarmService, node_id: str, state: str = "running",
               desired: str = "running") -> SwarmTask:
    return SwarmTask(id=f"t-{svc.name}-{node_id}-{state}", service_id=svc.id,
                     node_id=node_id, slot=None, state=state, desired_state=desired, env=())


def snapshot(n: SwarmNode, services: list[SwarmService], tasks: list[SwarmTask]) -> Snapshot:
    """node-g (its agent answered, an RTX 4090) and ``n``, whose agent has not answered."""
    g = cpu_node("n-g", "node-g")
    ok = FactsResult("n-g", "node-g", "", RTX4090.facts(), None, time.time())
    down = FactsResult(n.id, n.hostname, "https://10.0.0.9:9401/facts", None,
                       "agent at https://10.0.0.9:9401/facts: cannot connect", time.time())
    return Snapshot([g, n], services, tasks, {"n-g": ok, n.id: down})


def where_web(snap: Snapshot, cfg: Config) -> str:
    sp = next(x for x in make_plan(snap, cfg).services if x.name == "web")
    assert sp.status == "placed", sp.reason
    return sp.placements[0].node_id


def test_a_node_running_the_agents_task_is_not_cpu_only_before_its_agent_answers() -> None:
    """node-c is labelled ``accelerator=nvidia`` (the operator's own label, placing the
    agents); Swarm has assigned it the agent's task, which has not answered yet. The
    gpus "0" service goes to the GPU node that has room, not to node-c (before: node-c,
    as a CPU-only node). Without the agent's task there, node-c is a CPU-only node."""
    n = cpu_node("n-c", "node-c", 4000, labels={"accelerator": "nvidia"})
    web = sw_svc("web", ZERO, gated=False)
    agent = sw_svc("swarmgpu_agent", {}, gated=False, mode=GLOBAL)
    for state in ("assigned", "preparing", "starting", "running"):
        snap = snapshot(n, [agent, web], [agent_task(agent, "n-c", state)])
        assert where_web(snap, Config()) == "n-g", state
    assert where_web(snapshot(n, [agent, web], []), Config()) == "n-c"


def test_only_a_live_task_assigned_to_the_node_of_the_named_service_counts() -> None:
    """A task ended (failed, rejected, shut down: desired or observed), one not on a node
    yet, another service's task, or the key set to another service or "" (off): the node
    stays CPU-only, as Swarm says nothing more of it."""
    n = cpu_node("n-c", "node-c", 4000)
    web = sw_svc("web", ZERO, gated=False)
    agent = sw_svc("swarmgpu_agent", {}, gated=False, mode=GLOBAL)
    other = sw_svc("dcgm", {}, gated=False, mode=GLOBAL)
    for tasks in ([agent_task(agent, "n-c", "failed", "shutdown")],
                  [agent_task(agent, "n-c", "rejected")],
                  [agent_task(agent, "n-c", "running", "shutdown")],
                  [agent_task(agent, "", "pending")],
                  [agent_task(other, "n-c")]):
        assert agent_nodes([agent, other, web], tasks, "swarmgpu_agent") == frozenset()
        assert where_web(snapshot(n, [agent, other, web], tasks), Config()) == "n-c", tasks
    live = [agent_task(agent, "n-c")]
    assert agent_nodes([agent, web], live, "swarmgpu_agent") == {"n-c"}
    for name in ("", "gpu_agent"):
        cfg = Config(agents=AgentsConfig(service=name))
        assert where_web(snapshot(n, [agent, web], live), cfg) == "n-c", name
    # a stack deployed under another name: its agent's service, named in the config
    gpu_agent = sw_svc("gpu_agent", {}, gated=False, mode=GLOBAL)
    cfg = Config(agents=AgentsConfig(service="gpu_agent"))
    assert where_web(snapshot(n, [gpu_agent, web], [agent_task(gpu_agent, "n-c")]), cfg) == "n-g"


def test_the_cpu_only_node_leaves_when_the_agents_task_lands_and_the_planner_follows() -> None:
    """The daemon's long-lived planner: node-c is CPU-only until Swarm assigns it the
    agent's task; then it is a GPU node (its agent not read), and no longer chosen."""
    n = cpu_node("n-c", "node-c", 4000)
    web = sw_svc("web", ZERO, gated=False)
    agent = sw_svc("swarmgpu_agent", {}, gated=False, mode=GLOBAL)
    nodes = [cpu_node("n-g", "node-g"), n]
    facts = {"n-g": RTX4090.facts()}
    pl = Planner(agent_service="swarmgpu_agent")
    got = []
    for tasks in ([], [agent_task(agent, "n-c", "assigned")]):
        plan = pl.plan(nodes, [agent, web], tasks, facts)
        sp = next(x for x in plan.services if x.name == "web")
        got.append(sp.placements[0].node_id if sp.placements else sp.status)
    assert got == ["n-c", "n-g"], got


def test_label_sync_expects_an_agent_where_swarm_runs_the_agents_task(tmp_path: Path) -> None:
    """node-c's agent task is there but its agent cannot be reached: an agent is
    expected, so the cycle reports it unreachable (before: nothing, as for a CPU node)."""
    n = replace(cpu_node("n-c", "node-c", 4000), labels={"accelerator": "nvidia"})
    agent = sw_svc("swarmgpu_agent", {}, gated=False, mode=GLOBAL)
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 placement=replace(Config().placement, enabled=False))
    for tasks, want in (([agent_task(agent, "n-c")], ["node-c"]), ([], [])):
        sync = LabelSync(None, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]
        snap = snapshot(n, [agent], tasks)
        snap.facts.pop("n-g")
        report = sync.cycle(snap)
        assert [e.split(":")[0] for e in report.errors] == want, report.errors


@pytest.mark.parametrize("name", ["swarmgpu agent", "-agent", "agent_", "a.b", "x" * 64,
                                  "swarmgpu_agent*"])
def test_agents_service_that_no_swarm_service_can_be_named_is_refused(
        tmp_path: Path, name: str) -> None:
    path = tmp_path / "c.yml"
    path.write_text(f"agents:\n  service: '{name}'\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    msg = str(e.value)
    assert f"{path}:2: agents.service:" in msg and "is no Swarm service name" in msg, msg
    assert "swarmgpu_agent" in msg, msg


def test_agents_service_defaults_to_the_shipped_stacks_agent(tmp_path: Path) -> None:
    assert Config().agents.service == "swarmgpu_agent"
    for ok in ("", "gpu_agent", "my-stack_agent", "x" * 63):
        path = tmp_path / "c.yml"
        path.write_text(f"agents:\n  service: '{ok}'\n")
        assert load_config(str(path)).agents.service == ok


def test_an_agents_task_made_ready_before_it_starts_still_marks_its_node() -> None:
    """Swarm makes an agents' task on its node with desired state ``ready`` before it
    runs: a failed task's replacement for its restart delay (5 s by default; an agent
    that fails at start, never answered, loops so), and the new task of a rolling update
    (an upgrade of the agents) while the old one stops. Swarm still means the agent
    there; before, the node read as CPU-only then (no other sign: no swarmgpu labels,
    placed by the operator's label), and a gpus "0" service went there first."""
    n = cpu_node("n-c", "node-c", 4000, labels={"accelerator": "nvidia"})
    web = sw_svc("web", ZERO, gated=False)
    agent = sw_svc("swarmgpu_agent", {}, gated=False, mode=GLOBAL)
    for state in ("assigned", "preparing", "ready"):
        tasks = [agent_task(agent, "n-c", "failed", "shutdown"),
                 agent_task(agent, "n-c", state, "ready")]
        assert agent_nodes([agent, web], tasks, "swarmgpu_agent") == {"n-c"}, state
        assert where_web(snapshot(n, [agent, web], tasks), Config()) == "n-g", state
    update = [agent_task(agent, "n-c", "running", "shutdown"),
              agent_task(agent, "n-c", "assigned", "ready")]
    assert where_web(snapshot(n, [agent, web], update), Config()) == "n-g"


def test_a_snapshot_walks_the_agents_tasks_once_for_every_step_that_asks(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Placement, label sync, audit and the map all ask which nodes run the agents'
    service of the same snapshot: it is walked once (``Snapshot.agent_nodes``), not once
    per step, and each step sees the same answer."""
    from swarmgpu.manager.commands.audit import audit
    from swarmgpu.manager.nodes import sync
    from swarmgpu.manager.placement import planner
    from swarmgpu.manager.web.cluster_view import build_cluster

    walks: list[str] = []

    def counted(services: list[SwarmService], tasks: list[SwarmTask], name: str,
                tenants: Sequence[TenantSpec] = ()) -> frozenset[str]:
        walks.append(name)
        return agent_nodes(services, tasks, name, tenants)

    monkeypatch.setattr(sync, "agent_nodes", counted)
    monkeypatch.setattr(planner, "agent_nodes", counted)
    n = cpu_node("n-c", "node-c", 4000)
    web = sw_svc("web", ZERO, gated=False)
    agent = sw_svc("swarmgpu_agent", {}, gated=False, mode=GLOBAL)
    snap = snapshot(n, [agent, web], [agent_task(agent, "n-c")])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False))
    assert where_web(snap, cfg) == "n-g"  # placement: node-c is a GPU node
    labels = LabelSync(None, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]
    labels.cycle(snap, hold=True)  # (its writes held: none is made)
    audit(snap, agent_service="swarmgpu_agent")
    build_cluster(snap, None, agent_service="swarmgpu_agent")
    assert walks == ["swarmgpu_agent"]
