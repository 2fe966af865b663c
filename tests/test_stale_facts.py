"""An unreachable agent's last good facts stand in for its node with an age bound.

Placement reads a node whose agent does not answer from its last good facts (its
holdings stay held). With no bound, a node whose agent was gone for hours still took
new services onto GPUs those facts called free, though they may be gone or taken.
Facts ``health.node_lost_grace_s`` old or more (the age from which audit and the health
policy call the node failing) are stale (``agentbook.stale_nodes``): placement adds
nothing to the node, blocked as a paused node is, its holdings kept, its labels as they
are; no rebalance move lands there (it is still a source); ``swarmgpu_nodes_facts_stale``
counts them, and the cycle's errors (/healthz) say it beside the agent's. The age is the
daemon's monotonic clock's, from when the agent read the facts (its X-Swarmgpu-Facts-Age);
plan and audit say it from the daemon's record. Pure."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support.forged import held_labels, offline_daemon, victim_cluster
from support.health import F2, U2, hold, mark, setup
from support.health import plan as health_plan
from support.loglines import log_lines
from support.placement import DGX, FACTS, R4090, P, svc
from support.rebalance import U2 as U2R
from support.rebalance import node as rb_node
from support.rebalance import running as rb_running
from support.rebalance import service as rb_service
from support.rebalance_fragmentation import HALF, WHOLE, two_half_used
from support.rebalance_fragmentation import plan as frag_plan
from support.stepped_daemon import step_of, stepped_daemon

from swarmgpu.core.config import AgentsConfig
from swarmgpu.core.model import FACTS_AGE_HEADER, NodeFacts
from swarmgpu.manager.commands.plan import render_plan, silent_rows
from swarmgpu.manager.nodes.agent_client import FactsResult, facts_age, fetch_facts
from swarmgpu.manager.nodes.agentbook import AgentBook, stale_nodes
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Planner, assign_key
from swarmgpu.swarm.client import SwarmTask

HELD = FACTS["n-4090"].gpus[0].uuid
NODES = [DGX, replace(R4090, labels=hold("held", [HELD]))]
TASKS = [SwarmTask("t1", "id-held", "n-4090", 1, "running", "running", ())]
HELD_SVC = svc("held", {f"{P}gpus": "1"})
# Fits the 4090's free GPUs, and the DGX's: where the scorer puts it when both take it
SMALL = svc("small", {f"{P}gpus": "1", f"{P}gpu-memory": "20000"})


def _placed_on(stale: frozenset[str]) -> set[str]:
    """Where ``small`` goes in a second cycle, ``stale`` then (the very node and fact
    objects of the first: the allocator's fast path)."""
    planner = Planner(prefix=P)
    planner.plan(NODES, [HELD_SVC], TASKS, FACTS)
    planner.cluster.stale = stale
    plan = planner.plan(NODES, [HELD_SVC, SMALL], TASKS, FACTS)
    by = {sp.name: sp for sp in plan.services}
    assert [(p.node_id, p.uuids) for p in by["held"].placements] == [("n-4090", (HELD,))]
    return {p.node_id for p in by["small"].placements}


def test_a_node_whose_facts_are_stale_takes_no_new_placement_and_keeps_its_holding() -> None:
    assert _placed_on(frozenset()) == {"n-4090"}  # (the scorer's pick, facts fresh)
    assert _placed_on(frozenset({"n-4090"})) == {"n-dgx"}


def test_facts_are_stale_from_the_lost_grace_on_and_only_while_the_agent_is_silent() -> None:
    book = AgentBook()
    facts = NodeFacts(hostname="gpu-node-2")
    book.record(FactsResult("n-4090", "gpu-node-2", "", facts, None, 1000.0))

    def silent(at: float) -> dict[str, FactsResult]:
        return {"n-4090": FactsResult("n-4090", "gpu-node-2", "", None, "timed out", at)}

    assert stale_nodes(book, silent(1299.0), 300.0) == frozenset()
    assert stale_nodes(book, silent(1300.0), 300.0) == {"n-4090"}
    answered = {"n-4090": FactsResult("n-4090", "gpu-node-2", "", facts, None, 1400.0)}
    assert stale_nodes(book, answered, 300.0) == frozenset()
    assert stale_nodes(book, {"n-new": silent(5000.0)["n-4090"]}, 300.0) == frozenset()


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    yield from log_lines("WARNING")


def test_the_daemon_counts_and_says_a_node_whose_agent_is_silent_past_the_grace(
        tmp_path: Path, warnings: list[str]) -> None:
    sw = victim_cluster({})
    d = offline_daemon(sw, str(tmp_path))  # (no agent answers: n-dgx's facts stand in)
    d.book.records["n-dgx"].last_ok = time.time() - d.cfg.health.node_lost_grace_s - 1
    d.cycle()
    assert d.metrics.registry.get_sample_value("swarmgpu_nodes_facts_stale") == 1
    assert any("gpu-node-1: its agent's last facts" in w for w in warnings), warnings
    assert assign_key(P, "victim") in sw.node("n-dgx").labels  # its holding kept
    assert any(e.startswith("gpu-node-1: ") and "last facts are health.node_lost_grace_s "
               "old" in e for e in d.health()["errors"]), d.health()  # /healthz's


def test_a_node_whose_facts_are_stale_is_no_moves_target_but_still_its_source() -> None:
    """The health policy's holder of a failed GPU on gpu-node-2 moves to gpu-node-1 (the
    only healthy GPUs free). gpu-node-1's facts stale: no move lands there (placement adds
    nothing to it either); gpu-node-2's stale: its holder still moves off it."""
    nodes, svcs, tasks = setup({"a": [U2[0]]})
    moved = health_plan(nodes, svcs, tasks, mark(F2, failed=[0]))
    assert [(m.source_node, m.target_node) for m in moved.moves] == [("n2", "n1")]
    refused = health_plan(nodes, svcs, tasks, mark(F2, failed=[0]), stale=frozenset({"n1"}))
    assert not refused.moves, refused.moves
    source = health_plan(nodes, svcs, tasks, mark(F2, failed=[0]), stale=frozenset({"n2"}))
    assert [(m.source_node, m.target_node) for m in source.moves] == [("n2", "n1")]


def test_the_age_of_a_silent_nodes_facts_is_counted_on_the_monotonic_clock() -> None:
    """The agent answered at wall 1000 (monotonic 50). The wall clock stepped back an
    hour: 400 s later by the monotonic clock its facts are stale, though the wall clock
    says the answer is in the future. Stepped forward an hour: 10 s later they are not."""
    book = AgentBook()
    facts = NodeFacts(hostname="gpu-node-2")
    book.record(FactsResult("n-4090", "gpu-node-2", "", facts, None, 1000.0,
                            fetched_mono=50.0))

    def silent(wall: float, mono: float) -> dict[str, FactsResult]:
        return {"n-4090": FactsResult("n-4090", "gpu-node-2", "", None, "timed out", wall,
                                      fetched_mono=mono)}

    assert stale_nodes(book, silent(1000.0 - 3600 + 400, 450.0), 300.0) == {"n-4090"}
    assert stale_nodes(book, silent(1000.0 + 3600 + 10, 60.0), 300.0) == frozenset()


def test_plan_says_a_silent_nodes_facts_age_and_whether_the_daemon_places_there() -> None:
    """`plan` reads the agents itself and has no stand-in facts: a silent node's last
    good facts, dated by the daemon's saved record, are said with their age, stale from
    health.node_lost_grace_s on (the daemon places nothing new there) or not (the daemon
    places on them; this plan, with none, does not)."""
    silent = FactsResult("n-4090", "gpu-node-2", "", None, "timed out", 1000.0,
                         cause="timed out")
    answered = FactsResult("n-dgx", "gpu-node-1", "", FACTS["n-dgx"], None, 1000.0)
    snap = Snapshot(NODES, [], [], {"n-4090": silent, "n-dgx": answered}, taken_at=1000.0)
    saved = {"n-4090": {"last_ok": 600.0}, "n-dgx": {"last_ok": 990.0}}
    (row,) = silent_rows(snap, saved, 300.0)
    assert (row["node"], row["age_s"], row["stale"]) == ("n-4090", 400.0, True)
    text = render_plan([], ungranted=[], workload={}, health=[], moves=None, listen="x",
                       silent=[row])
    assert ("gpu-node-2: agent silent (timed out); its last good facts are 400s old, "
            "health.node_lost_grace_s (300s) or more: stale, the daemon places nothing new "
            "on it") in text, text
    (row,) = silent_rows(snap, saved, 500.0)
    assert not row["stale"] and row["said"].endswith("places nothing there"), row
    assert silent_rows(snap, {}, 300.0) == []  # (no record: no age to say)


def test_status_says_a_silent_nodes_facts_age_as_plan_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`status`'s text said a silent node's agent unreachable and nothing of its last good
    facts' age (only --json and the map had it, in audit's finding): it says it under
    the node now, as plan does, stale or not."""
    from click.testing import CliRunner

    from swarmgpu.cli import lastcycle, main
    from swarmgpu.cli import manager as cli_manager
    from swarmgpu.manager.cycle import grants, oneshot_plan
    from swarmgpu.manager.placement import PlacementPlan
    from swarmgpu.manager.web import cluster_view
    from swarmgpu.swarm import client

    silent = FactsResult("n-4090", "gpu-node-2", "http://10.0.0.2:9401/facts", None,
                         "timed out", 1000.0, cause="timed out")
    answered = FactsResult("n-dgx", "gpu-node-1", "", FACTS["n-dgx"], None, 1000.0)
    snap = Snapshot(NODES, [], [], {"n-4090": silent, "n-dgx": answered}, taken_at=1000.0)
    (tmp_path / "agents.json").write_text(json.dumps({"n-4090": {
        "hostname": "gpu-node-2", "last_ok": 600.0, "failing_since": 700.0}}))
    monkeypatch.setattr(cli_manager, "_snapshot", lambda cfg, _tenants, *_: snap)
    monkeypatch.setattr(client, "SwarmClient", lambda *a, **k: None)
    monkeypatch.setattr(oneshot_plan, "plan_as_daemon", lambda *a, **k: PlacementPlan())
    monkeypatch.setattr(grants, "find", lambda *a, **k: [])
    monkeypatch.setattr(cluster_view, "gpu_metrics", lambda *a, **k: {})
    monkeypatch.setattr(lastcycle, "last_cycle", lambda cfg: {})  # (no daemon asked)

    def status(grace: int) -> str:
        cfg = tmp_path / f"config-{grace}.yml"
        cfg.write_text(f"state_dir: {tmp_path}\nhealth: {{node_lost_grace_s: {grace}}}\n")
        res = CliRunner().invoke(main, ["status", "--config", str(cfg)])
        assert res.exit_code == 0, res.output
        return res.output

    assert ("\n  its last good facts are 400s old, health.node_lost_grace_s (300s) or more: "
            "stale, the daemon places nothing new on it\n") in status(300)
    assert ("\n  its last good facts are 400s old: the daemon places on them until they are "
            "health.node_lost_grace_s (500s) old; status has none of them (not saved) and "
            "places nothing there\n") in status(500)


def test_the_stale_facts_gauge_counts_without_placements_step(tmp_path: Path) -> None:
    """``placement.enabled: false`` runs no placement step: the gauge, set there, read 0
    while the cycle's errors said the node's facts stale. Label sync counts them now."""
    sw = victim_cluster({})
    d = offline_daemon(sw, str(tmp_path))
    d.use([])  # (label sync alone: no placement step)
    d.book.records["n-dgx"].last_ok = time.time() - d.cfg.health.node_lost_grace_s - 1
    d.cycle()
    assert d.metrics.registry.get_sample_value("swarmgpu_nodes_facts_stale") == 1


def test_an_answer_lifts_the_bound_in_the_same_cycle() -> None:
    """The node's facts fresh again (its agent answered: not stale), the next plan places
    on it, though its node and facts are the very objects it was blocked with."""
    planner = Planner(prefix=P)
    planner.cluster.stale = frozenset({"n-4090"})
    planner.plan(NODES, [HELD_SVC], TASKS, FACTS)
    blocked = planner.plan(NODES, [HELD_SVC, SMALL], TASKS, FACTS)
    assert {p.node_id for sp in blocked.services if sp.name == "small"
            for p in sp.placements} == {"n-dgx"}
    planner.cluster.stale = frozenset()
    back = planner.plan(NODES, [HELD_SVC, SMALL], TASKS, FACTS)
    assert {p.node_id for sp in back.services if sp.name == "small"
            for p in sp.placements} == {"n-4090"}


class _OldFacts(BaseHTTPRequestHandler):
    """An agent whose source hangs: its last read, served with its age."""

    age = "400.0"

    def do_GET(self) -> None:  # (http.server's name)
        body = json.dumps(FACTS["n-4090"].to_dict()).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header(FACTS_AGE_HEADER, self.age)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


def test_facts_an_agent_read_long_ago_are_dated_when_read_and_stale_past_the_grace(
        ) -> None:
    """An agent whose source hangs serves its last read and says its age
    (X-Swarmgpu-Facts-Age, its own monotonic clock: no skew). Taken as read at the fetch,
    facts hours old were never stale while the agent answered; now they are dated by it,
    and stale from health.node_lost_grace_s on, though the agent answers."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OldFacts)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cfg = AgentsConfig(port=server.server_address[1], identity="none", timeout_s=2.0)
        node = replace(R4090, addr="127.0.0.1")
        res = fetch_facts(node, cfg)
    finally:
        server.shutdown()
        server.server_close()
    assert res.facts is not None and res.facts_age_s == 400.0, res
    book = AgentBook()
    book.record(res)
    assert book.records["n-4090"].last_ok == res.fetched_at - 400.0
    assert stale_nodes(book, {"n-4090": res}, 300.0) == {"n-4090"}
    assert stale_nodes(book, {"n-4090": replace(res, facts_age_s=10.0)}, 300.0) == frozenset()
    for said in ("nan", "-5", "inf", "soon", ""):  # (not a finite age: read now, as before)
        assert facts_age({FACTS_AGE_HEADER.lower(): said}) == 0.0, said


def test_fragmentation_moves_nothing_onto_a_node_whose_facts_are_stale() -> None:
    """b would join a on gpu-node-1; gpu-node-1 stale: no move lands there (a may
    leave it: a source still). A global share's same-node move lands on its own node's
    GPUs: none where that node is stale."""
    nodes, svcs, tasks = two_half_used()
    assert [m.target_host for m in frag_plan(nodes, svcs, tasks)] == ["gpu-node-1"]
    moves = frag_plan(nodes, svcs, tasks, stale=frozenset({"n1"}))
    assert [(m.service, m.source_node, m.target_node) for m in moves] == [("a", "n1", "n2")]
    n2 = {**held_labels("a", "n2", U2R[0], 500), **held_labels("g", "n2", U2R[1], 500)}
    nodes = [rb_node("n1", "gpu-node-1", {}), rb_node("n2", "gpu-node-2", n2)]
    svcs = [rb_service("a", {**HALF, f"{P}rebalance": "never"}),
            rb_service("g", HALF, "global"), rb_service("w", WHOLE)]
    tasks = [rb_running("a", "n2"), rb_running("g", "n2")]
    assert [m.target_node for m in frag_plan(nodes, svcs, tasks)] == ["n2"]
    assert frag_plan(nodes, svcs, tasks, stale=frozenset({"n2"})) == []


def test_one_shot_plans_place_nothing_where_the_agent_answered_facts_read_long_ago(
        ) -> None:
    """`plan`, `status` and `audit` plan as the daemon does: a node whose agent answers
    with facts it read health.node_lost_grace_s ago (X-Swarmgpu-Facts-Age) takes nothing
    new there. They made a fresh planner with no stale set: they placed on the node the
    daemon blocks."""
    from swarmgpu.core.config import Config
    from swarmgpu.manager.cycle.oneshot_plan import plan_as_daemon
    from swarmgpu.manager.cycle.placement import make_plan

    def snap(age_s: float) -> Snapshot:
        facts = {nid: FactsResult(nid, f.hostname, "", f, None, 1000.0,
                                  facts_age_s=age_s if nid == "n-4090" else 0.0)
                 for nid, f in FACTS.items()}
        return Snapshot(NODES, [HELD_SVC, SMALL], TASKS, facts, taken_at=1000.0)

    cfg = Config()
    for made in (lambda s: make_plan(s, cfg, tenants=None),
                 lambda s: plan_as_daemon(s, cfg, tenants=None)):
        for age_s, where in ((10.0, {"n-4090"}), (400.0, {"n-dgx"})):
            plan = made(snap(age_s))
            assert {p.node_id for sp in plan.services if sp.name == "small"
                    for p in sp.placements} == where, age_s


def test_the_health_policy_counts_a_loss_from_the_agents_last_answer_not_its_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Facts an agent read 400 s before it answered are stale, but the agent answered:
    missing the next answer, 30 s later, it is not lost past the grace (the health
    policy drained the node as 'not answered for 430s'). The record saves the answer."""
    from support.empty_swarm import EmptySwarm

    from swarmgpu.manager.cycle.rebalance import Rebalancer

    d = stepped_daemon(monkeypatch, EmptySwarm())
    rebalance = step_of(d, Rebalancer)
    node = NODES[1]
    mono = [500.0]
    rebalance.clock = lambda: mono[0]  # (the loss is counted on the monotonic clock)
    rebalance.health_inputs(Snapshot([node], [], [], {}, taken_at=500.0))  # (the term's)
    old = FactsResult(node.id, node.hostname, "", FACTS[node.id], None, 1000.0,
                      facts_age_s=400.0, fetched_mono=1000.0)
    d.book.record(old)
    assert d.book.records[node.id].to_dict()["answered_at"] == 1000.0
    mono[0] = 1030.0
    down = {node.id: FactsResult(node.id, node.hostname, "", None, "timed out", 1030.0,
                                 fetched_mono=1030.0)}
    lost = rebalance.health_inputs(Snapshot([node], [], [], down, taken_at=1030.0)).lost
    assert lost == {node.id: 30.0}


def test_a_saved_record_whose_times_are_no_finite_numbers_has_none(tmp_path: Path) -> None:
    """agents.json read back (Python's JSON takes NaN and Infinity): a time that is no
    finite number is none. NaN was plan --json's last_ok (no JSON), a silent node's
    facts 0 s old, and audit's traceback (int() of NaN)."""
    from swarmgpu.manager.commands.audit import audit
    from swarmgpu.manager.nodes.agentbook import STATE_FILE, load_saved

    (tmp_path / STATE_FILE).write_text(
        '{"n-4090": {"hostname": "gpu-node-2", "last_ok": NaN, "failing_since": "soon", '
        '"answered_at": Infinity}, "n-dgx": {"last_ok": true, "failing_since": 5.0}}')
    saved = load_saved(str(tmp_path))
    assert [saved["n-4090"][k] for k in ("last_ok", "failing_since", "answered_at")] == [
        None, None, None]
    assert saved["n-dgx"]["last_ok"] is None and saved["n-dgx"]["failing_since"] == 5.0
    silent = FactsResult("n-4090", "gpu-node-2", "", None, "timed out", 1000.0)
    snap = Snapshot(NODES, [], [], {"n-4090": silent}, taken_at=1000.0)
    assert silent_rows(snap, saved, 300.0) == []
    assert "agent-lost" not in {f.kind for f in audit(snap, saved_agents=saved)}
