"""A node whose swarmgpu agent is lost is *agent lost*, not *failing*, and a node Swarm
moves tasks off says which of its GPU services Swarm does not move.

Before, an agent's loss past ``health.node_lost_grace_s`` made the node "failing" in the
health policy's note, `plan`'s line and `audit`'s ``node-failing``, read as "its GPUs are
broken", though the daemon only reports it (its GPUs and tasks are not known bad). And a
node Swarm reports down or that is drained was said "Swarm moves its tasks itself",
though Swarm re-creates no global service's task elsewhere, no job's, and none pinned to
the node. Pure."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from support.forged import RecordingSwarm, offline_daemon, sw_svc, victim_cluster
from support.gpu_nodes import RTX4090
from support.health import F2, U2, mark, plan, setup
from support.stepped_daemon import step_of

from swarmgpu.core.config import Config, RebalanceConfig
from swarmgpu.manager.commands.audit import audit
from swarmgpu.manager.commands.plan import render_plan
from swarmgpu.manager.cycle.observe import ObserveStep
from swarmgpu.manager.cycle.rebalance import Rebalancer
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.engine.stop import read_cut
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.rebalance.moves import HealthInputs, Proposal
from swarmgpu.swarm.labels import desired_labels

LOST = "its agent has not answered for 400s"


def test_an_agents_loss_is_agent_lost_in_the_policy_not_failing() -> None:
    nodes, svcs, tasks = setup({"a": [U2[0]]}, full_n2=False)
    p = plan(nodes, svcs, tasks, F2, HealthInputs(left=5, lost={"n2": 400.0}))
    assert p.agent_lost_nodes == {"gpu-node-2": LOST}
    # (the failing nodes keep counting it: the gauge's and the API's meaning unchanged)
    assert p.failing_nodes == {"gpu-node-2": LOST}
    assert not any("is failing" in n for n in p.notes), p.notes
    assert any(n.startswith(f"health: node gpu-node-2: agent lost ({LOST}): reported only")
               for n in p.notes), p.notes
    # two failed GPUs and the agent lost: failing, by its GPUs
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0, 1]),
             HealthInputs(left=5, lost={"n2": 400.0}))
    assert p.agent_lost_nodes == {} and p.failing_nodes == {"gpu-node-2": "2 of 8 GPUs failed"}


def test_plan_says_agent_lost_where_the_daemon_says_so() -> None:
    moves = {"health": {"failing_nodes": {"gpu-1": "2 of 8 GPUs failed", "gpu-2": LOST},
                        "agent_lost_nodes": {"gpu-2": LOST}}}
    lines = render_plan([], ungranted=[], workload={}, moves=moves, listen="x",
                        health=[]).splitlines()
    assert "node failing: gpu-1: 2 of 8 GPUs failed" in lines, lines
    assert f"node agent lost: gpu-2: {LOST}" in lines, lines
    assert not any(ln.startswith("node failing: gpu-2") for ln in lines), lines


def test_audit_says_agent_lost_not_node_failing() -> None:
    facts = RTX4090.facts()
    n = replace(setup({}, full_n2=False)[0][1], labels=desired_labels(facts))
    res = FactsResult(n.id, n.hostname, "http://x/facts", None, "timed out", 0.0)
    s = Snapshot([n], [], [], {n.id: res}, taken_at=1400.0)
    saved = {n.id: {"failing_since": 1000.0, "last_ok": 1000.0, "answered_at": 1000.0}}
    found = audit(s, saved_agents=saved, node_lost_grace_s=300.0)
    assert {f.kind for f in found} == {"unreachable", "agent-lost"}, found
    (lost,) = [f for f in found if f.kind == "agent-lost"]
    assert lost.message.startswith(f"{LOST}; the daemon moves nothing off it"), lost.message


def test_the_agent_lost_gauge_counts_them_beside_the_failing_one(tmp_path: Path) -> None:
    nodes, svcs, tasks = setup({}, full_n2=False)
    sw = RecordingSwarm(nodes, [sw_svc(s.name, s.labels) for s in svcs], tasks)
    cfg = Config(state_dir=str(tmp_path), rebalance=RebalanceConfig(dry_run=True))
    rb = Rebalancer(Daemon(cfg, swarm=sw), placement=False)  # type: ignore[arg-type]
    prop = Proposal(failing_nodes={"gpu-1": "2 of 8 GPUs failed", "gpu-2": LOST},
                    agent_lost_nodes={"gpu-2": LOST})
    rb.health_step(prop, [], Snapshot(nodes, [], [], {}, taken_at=1000.0))
    reg = rb.host.metrics.registry
    assert reg.get_sample_value("swarmgpu_health_failing_nodes") == 2
    assert reg.get_sample_value("swarmgpu_health_agent_lost_nodes") == 1


def test_a_down_nodes_note_names_the_gpu_services_swarm_does_not_move() -> None:
    """gpu-node-2 is down, its agent lost: 'a' (replicated) is re-created elsewhere by
    Swarm, 'g' (global) and 'j' (a job) never are, nor 'p' (pinned to the node)."""
    nodes, svcs, tasks = setup(
        {"a": [U2[0]], "g": [U2[1]], "j": [U2[2]], "p": [U2[3]]}, full_n2=False,
        modes={"g": "global", "j": "replicated-job"},
        constraints={"p": ["node.hostname==gpu-node-2"]})
    nodes = [replace(n, state="down") if n.id == "n2" else n for n in nodes]
    p = plan(nodes, svcs, tasks, F2, HealthInputs(left=5, lost={"n2": 400.0}))
    (note,) = [n for n in p.notes if n.startswith("health: node gpu-node-2")]
    assert "Swarm moves its tasks itself (Swarm reports gpu-node-2 down)" in note, note
    assert ("not these GPU services, which Swarm re-creates nowhere else (they wait for "
            "the node): g (global service: its task is its node's), j (replicated-job: its "
            "orchestrator acts on no node's state), p (its constraints allow no other "
            "node)") in note, note
    assert "a (" not in note, note
    # audit's finding for that node says the same
    n2 = next(n for n in nodes if n.id == "n2")
    res = FactsResult("n2", n2.hostname, "http://x/facts", None, "timed out", 0.0)
    s = Snapshot(nodes, svcs, tasks, {"n2": res}, taken_at=1400.0)
    saved = {"n2": {"failing_since": 1000.0, "last_ok": 1000.0, "answered_at": 1000.0}}
    (lost,) = [f for f in audit(s, saved_agents=saved, node_lost_grace_s=300.0)
               if f.kind == "agent-lost"]
    assert "g (global service" in lost.message and "a (" not in lost.message, lost.message


def _map_kinds(d: Daemon, node_id: str) -> set[str]:
    """The kinds of the audit's findings the daemon's GPU map marks ``node_id`` with."""
    doc = step_of(d, ObserveStep).current()
    (node,) = [n for n in doc["nodes"] if n["id"] == node_id]
    return {f["kind"] for f in node["findings"]}


@pytest.mark.parametrize("how", ["new-term", "clock-step"])
def test_the_map_says_agent_lost_as_the_health_policy_counts_the_loss(
        tmp_path: Path, how: str) -> None:
    """The map's audit counted an agent's loss from its record's wall-clock answer, the
    health policy (and its gauge) on the monotonic clock from the later of that answer
    and the node's first look in the term. ``new-term``: heard two hours ago, in the
    last term (a follower reads no agent), the agent missed the new term's first read:
    agent-lost on the map at once, 0 s lost to the policy. ``clock-step``: heard 10 s
    ago, the wall clock stepped two hours ahead since: agent-lost on the map, 10 s to
    the policy. Now the map counts it as the policy does, and says it once past the
    grace."""
    d = offline_daemon(victim_cluster({}), str(tmp_path))  # (no agent answers)
    rec = d.book.records["n-dgx"]
    rec.last_ok = rec.answered_at = time.time() - 7200.0
    rec.ok_mono = rec.answered_mono = time.monotonic() - (7200.0 if how == "new-term" else 10.0)
    d.cycle()
    reg = d.metrics.registry
    assert "unreachable" in _map_kinds(d, "n-dgx")
    assert "agent-lost" not in _map_kinds(d, "n-dgx")
    assert reg.get_sample_value("swarmgpu_health_agent_lost_nodes") == 0
    # past the grace by the monotonic clock, in the same term: said by both
    later = time.monotonic() + d.cfg.health.node_lost_grace_s + 1.0
    step_of(d, Rebalancer).clock = step_of(d, ObserveStep).clock = lambda: later
    d.cycle()
    assert "agent-lost" in _map_kinds(d, "n-dgx")
    assert reg.get_sample_value("swarmgpu_health_agent_lost_nodes") == 1


def test_a_cycle_cut_before_the_map_leaves_map_and_gauge_one_first_look(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new term's first cycle cut at its budget after the rebalancer looked at the
    nodes, before the map's step: the map and the health policy count a loss from the
    same first look. Before, each step kept its own: the map's began a cycle later, so
    past the grace the gauge counted the lost agent while the map did not say it."""
    d = offline_daemon(victim_cluster({}), str(tmp_path))  # (no agent answers)
    rec = d.book.records["n-dgx"]
    rec.last_ok = rec.answered_at = time.time() - 7200.0
    rec.ok_mono = rec.answered_mono = time.monotonic() - 7200.0  # (heard last term)
    now = [time.monotonic()]
    observe = step_of(d, ObserveStep)
    step_of(d, Rebalancer).clock = observe.clock = lambda: now[0]

    def cut(_session: object) -> None:
        raise read_cut()  # (as a read past the cycle's budget ends it)

    monkeypatch.setattr(observe, "run", cut)
    assert d.cycle().aborted  # (the rebalancer ran, the map's step did not)
    monkeypatch.undo()
    now[0] += d.cfg.health.node_lost_grace_s + 1.0
    d.cycle()
    assert d.metrics.registry.get_sample_value("swarmgpu_health_agent_lost_nodes") == 1
    assert "agent-lost" in _map_kinds(d, "n-dgx")
