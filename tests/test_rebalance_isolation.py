"""A rebalance policy that raises (a bug, or input no one foresaw) is its own loss only:
what it added to the pass is taken back, the other policies still run, the plan's notes
name the policy and the error, and the daemon logs the traceback once while it lasts.
Before: the exception left ``plan_moves``, and the rebalance step with it, every cycle:
the health policy's moves and releases (holders of failed GPUs) were lost with it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from loguru import logger
from support.forged import RecordingSwarm, sw_svc
from support.health import F1, F2, U2, P, mark, plan, setup

from swarmgpu.core.config import Config, RebalanceConfig
from swarmgpu.manager.rebalance import policies
from swarmgpu.manager.rebalance.context import Context
from swarmgpu.manager.rebalance.moves import Proposal, Trigger
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask


class Boom:
    """A policy that adds to the pass (a move, a note, a reservation), then raises."""

    def __init__(self, name: str, copy_of: Callable[[Context], None] | None = None) -> None:
        self.name = name
        self.copy_of = copy_of

    def propose(self, ctx: Context) -> None:
        if self.copy_of is not None:  # the real policy's work first, then the fault
            self.copy_of(ctx)
        ctx.notes.append(f"{self.name}: half a thought")
        ctx.moved.add("a2")
        ctx.ledger.setdefault("a", {}).pop("n2", None)
        raise KeyError("gpu-node-9")


def _raising(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    real = policies.PLUGINS[name]
    monkeypatch.setitem(policies.PLUGINS, name,
                        lambda rb: Boom(name, real(rb).propose))


def _cluster() -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """a on failed GPU 0 of gpu-node-2 moves; b (opted out) on failed GPU 1 is released
    to placement, onto a healthy GPU of its node."""
    return setup({"a": [U2[0]], "b": [U2[1]]}, full_n2=False,
                 svc_labels={"b": {f"{P}rebalance": "never"}})


def _health_plan() -> Proposal:
    nodes, svcs, tasks = _cluster()
    return plan(nodes, svcs, tasks, mark(F2, failed=[0, 1]))


def test_a_later_policy_that_raises_keeps_the_health_moves_and_releases(
        monkeypatch: pytest.MonkeyPatch) -> None:
    want = _health_plan()
    assert [m.service for m in want.moves] == ["a"] and want.releases
    _raising(monkeypatch, "hotspot")
    p = _health_plan()
    assert [(m.service, m.trigger) for m in p.moves] == [("a", Trigger.HEALTH)]
    assert p.releases == want.releases and p.failed_holders == want.failed_holders
    (note,) = [n for n in p.notes if "hotspot" in n]
    assert note.startswith("rebalance policy hotspot failed this cycle: KeyError: "
                           "'gpu-node-9'"), note
    assert "taken back" in note and "Traceback" not in note
    assert "half a thought" not in " ".join(p.notes)  # its own notes are taken back
    assert p.policy_errors.keys() == {"hotspot"}
    assert "Traceback" in p.policy_errors["hotspot"]


def test_what_a_policy_that_raises_added_is_taken_back_for_the_next(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The failed policy had reserved and marked things; the next policy sees the pass as
    it was before it ran (here: a second policy reading the ledger and the marks)."""
    seen: list[tuple[bool, bool, int]] = []

    class Reader:
        name = "spread"

        def propose(self, ctx: Context) -> None:
            seen.append(("n2" in ctx.ledger.get("a", {}), "a2" in ctx.moved,
                         len(ctx.moves)))

    _raising(monkeypatch, "hotspot")
    monkeypatch.setitem(policies.PLUGINS, "spread", lambda rb: Reader())
    p = _health_plan()
    assert seen == [(True, False, 1)]  # a's holding back, no mark; health's one move
    assert [m.service for m in p.moves] == ["a"]


def test_a_health_policy_that_raises_lets_the_others_run_and_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    class Other:
        name = "hotspot"

        def propose(self, ctx: Context) -> None:
            ran.append(self.name)

    _raising(monkeypatch, "health")
    monkeypatch.setitem(policies.PLUGINS, "hotspot", lambda rb: Other())
    p = _health_plan()
    assert ran == ["hotspot"]
    assert not p.moves and not p.releases and not p.failed_holders  # all taken back
    (note,) = [n for n in p.notes if "rebalance policy health" in n]
    assert "KeyError: 'gpu-node-9'" in note
    assert "no health move or re-placement was planned this cycle" in note


def test_an_error_text_over_lines_is_one_line_in_the_note(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Long:
        name = "hotspot"

        def propose(self, ctx: Context) -> None:
            raise ValueError("first\nsecond " + "x" * 2000)

    monkeypatch.setitem(policies.PLUGINS, "hotspot", lambda rb: Long())
    (note,) = [n for n in _health_plan().notes if "hotspot" in n]
    assert "\n" not in note and "ValueError: first second x" in note and len(note) < 800


def test_the_daemon_logs_a_failed_policy_with_its_traceback_once_while_it_lasts(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each cycle the plan's notes say it (``swarmgpu plan``); the log says it once, at
    error, with the traceback, and again once it comes back after a cycle without it.
    The health policy's work goes on meanwhile."""
    from swarmgpu.manager.cycle.rebalance import Rebalancer
    from swarmgpu.manager.cycle.session import CycleSession
    from swarmgpu.manager.daemon import Daemon
    from swarmgpu.manager.nodes.sync import Snapshot

    nodes, svcs, tasks = _cluster()
    sw = RecordingSwarm(nodes, [sw_svc(s.name, s.labels) for s in svcs], tasks)
    cfg = Config(state_dir=str(tmp_path), rebalance=RebalanceConfig(dry_run=True))
    rb = Rebalancer(Daemon(cfg, swarm=sw), placement=False)  # type: ignore[arg-type]
    said: list[tuple[str, str]] = []
    sink = logger.add(lambda m: said.append((m.record["level"].name, str(m))), level="INFO")

    def cycle(at: float) -> None:
        session = CycleSession(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {},
                                        swarm_labels=sw.swarm_labels(), taken_at=at))
        session.facts = {"n1": F1, "n2": mark(F2, failed=[0, 1])}
        session.scrapes = {}
        rb.run(session)

    try:
        _raising(monkeypatch, "hotspot")
        for at in (1000.0, 1001.0):
            cycle(at)
            assert rb.last is not None and "hotspot" in rb.last.policy_errors
            if at == 1000.0:  # health's move and release still made
                assert [m.service for m in rb.last.moves] == ["a"] and rb.last.releases
            assert any("rebalance policy hotspot failed" in n for n in rb.to_dict()["notes"])
        monkeypatch.undo()
        cycle(1002.0)
        _raising(monkeypatch, "hotspot")
        cycle(1003.0)
    finally:
        logger.remove(sink)
    errors = [m for level, m in said if "rebalance policy hotspot failed" in m]
    assert len(errors) == 2, said  # once, and once more when it came back
    assert all(level == "ERROR" for level, m in said if m in errors)
    assert all("Traceback" in m and "KeyError: 'gpu-node-9'" in m for m in errors)


def test_a_health_policy_that_raises_keeps_what_it_left_to_placement(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """b was released to placement; a cycle whose health policy raised knows no failed
    holder. The release stands (else placement would keep b on its failed GPU again and
    the next health pass release it once more, out of the hour's budget)."""
    from swarmgpu.manager.cycle.rebalance import Rebalancer
    from swarmgpu.manager.cycle.session import CycleSession
    from swarmgpu.manager.daemon import Daemon
    from swarmgpu.manager.nodes.sync import Snapshot

    nodes, svcs, tasks = _cluster()
    sw = RecordingSwarm(nodes, [sw_svc(s.name, s.labels) for s in svcs], tasks)
    cfg = Config(state_dir=str(tmp_path), dry_run=False,
                 rebalance=RebalanceConfig(dry_run=True))
    rb = Rebalancer(Daemon(cfg, swarm=sw), placement=False)  # type: ignore[arg-type]
    for at in (1000.0, 1001.0):
        session = CycleSession(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {},
                                        swarm_labels=sw.swarm_labels(), taken_at=at))
        session.facts = {"n1": F1, "n2": mark(F2, failed=[0, 1])}
        session.scrapes = {}
        rb.run(session)
        assert ("b", "n2") in rb.released
        assert rb.host.metrics.registry.get_sample_value(
            "swarmgpu_health_failing_nodes") == 1
        _raising(monkeypatch, "health")


def test_a_node_without_usable_metrics_is_said_once_while_it_lasts(tmp_path: Path) -> None:
    """The rebalancer's warning of a node's metrics: said once while it lasts, again once
    another reason took its place for a cycle and it came back."""
    from swarmgpu.manager.cycle.rebalance import Rebalancer
    from swarmgpu.manager.cycle.session import CycleSession
    from swarmgpu.manager.daemon import Daemon
    from swarmgpu.manager.nodes.sync import Snapshot
    from swarmgpu.manager.rebalance.scrape import NodeScrape

    nodes, svcs, tasks = setup({"a": [U2[0]]})
    sw = RecordingSwarm(nodes, [sw_svc(s.name, s.labels) for s in svcs], tasks)
    rb = Rebalancer(Daemon(Config(state_dir=str(tmp_path)), swarm=sw),  # type: ignore[arg-type]
                    placement=False)
    refused = NodeScrape("n2", "gpu-node-2", "https://gpu-node-2:9400/metrics", 0.0, None,
                         "connection refused", authenticated=True)
    said: list[tuple[int, str]] = []
    at = 0
    sink = logger.add(lambda m: said.append((at, str(m.record["message"]))), level="WARNING",
                      filter=lambda r: "no metrics scraped" in r["message"])
    try:
        for at, n2 in enumerate((None, None, refused, None, None)):
            session = CycleSession(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {},
                                            swarm_labels=sw.swarm_labels(),
                                            taken_at=1000.0 + at))
            session.facts = {"n1": F1, "n2": F2}
            session.scrapes = {} if n2 is None else {"n2": n2}
            rb.run(session)
    finally:
        logger.remove(sink)
    assert [(at, m.split(": ")[1]) for at, m in said] == [
        (0, "gpu-node-1"), (0, "gpu-node-2"), (3, "gpu-node-2")], said


def test_a_holder_whose_spec_read_raises_costs_no_policy() -> None:
    """bad holds GPU 2 of gpu-node-2, its Resources not a mapping (a spec no docker CLI
    makes: placement fails it alone), no task of it there yet. Counting the CPU its
    holding reserves (``SwarmTargets.reserve``) read that spec for every policy's
    allocator and raised: the health policy failed every cycle, a on its failed GPU
    never moved. Now its reservation counts its node's whole (no CPU known there: no
    limit; tests/test_unread_answers.py), and a moves."""
    nodes, svcs, tasks = setup({"a": [U2[0]], "bad": [U2[2]]}, full_n2=False)
    svcs = [replace(s, spec={"TaskTemplate": {"Resources": "lots"}}) if s.name == "bad"
            else s for s in svcs]
    tasks = [t for t in tasks if t.id != "t-bad"]
    p = plan(nodes, svcs, tasks, mark(F2, failed=[0]))
    assert not p.policy_errors, p.policy_errors
    assert [(m.service, m.trigger) for m in p.moves] == [("a", Trigger.HEALTH)]
