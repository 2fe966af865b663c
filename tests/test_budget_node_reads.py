"""The nodes' reads (the agents' facts, the metrics pages) within the cycle's engine
budget (``manager.cycle.budget``): each read's deadline is cut to what is left of it,
none starts once it has passed, and a read cut so is no node's failure. Before, each
took its own deadline, ``agents.parallel`` at once: slow agents answering within theirs
on many nodes held the cycle for rounds of them, past the watchdog."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from support.forged import DGX_F, RecordingSwarm, sw_node
from support.loglines import log_lines

from swarmgpu.core.config import AgentsConfig, Config, SyncConfig
from swarmgpu.manager import daemon as daemon_module
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.engine.stop import BudgetEnded
from swarmgpu.manager.nodes import boundedhttp
from swarmgpu.manager.nodes.agent_client import fetch_all
from swarmgpu.manager.rebalance.scrape import scrape_all
from swarmgpu.swarm.answerjson import CycleBudget, within_budget
from swarmgpu.swarm.client import SwarmNode

ANSWER_S = 0.5  # a slow agent's answer: within its own deadline (OWN_S)
OWN_S = 1.0
BUDGET_S = 0.8  # 12 nodes, 2 at once: six rounds of ANSWER_S, 3 s, without it


class Waits:
    """The time each reading thread was asked to wait, read after read: the work the
    reads did, counted, not timed (a loaded machine stretches wall time, not this)."""

    def __init__(self) -> None:
        self.by_thread: dict[int, float] = {}
        self._lock = threading.Lock()

    def add(self, waited_s: float) -> None:
        with self._lock:
            me = threading.get_ident()
            self.by_thread[me] = self.by_thread.get(me, 0.0) + waited_s

    def within(self, budget_s: float) -> bool:
        """Each thread's reads, one after another, waited no more than ``budget_s`` in
        all: each read's deadline was what was left of the budget (wall time since its
        start, at least the waits before it), so the reads end by it."""
        return max(self.by_thread.values(), default=0.0) <= budget_s


class SlowAgents(Waits):
    """Every agent answers after ``ANSWER_S`` (an HTTP 404: what it says is not read
    here); a deadline shorter than that is reached. Records each read's deadline."""

    def __init__(self) -> None:
        super().__init__()
        self.deadlines: list[float] = []

    def __call__(self, url: str, *, timeout_s: float, max_bytes: int,
                 tls: object = None, headers: object = None) -> boundedhttp.Fetched:
        with self._lock:
            self.deadlines.append(timeout_s)
        self.add(min(timeout_s, ANSWER_S))
        if timeout_s < ANSWER_S:
            time.sleep(timeout_s)
            raise boundedhttp.Deadline()
        time.sleep(ANSWER_S)
        return boundedhttp.Fetched(404, b"")


@pytest.fixture
def agents(monkeypatch: pytest.MonkeyPatch) -> SlowAgents:
    slow = SlowAgents()
    monkeypatch.setattr(boundedhttp, "get", slow)
    return slow


def _nodes(n: int = 12) -> list[SwarmNode]:
    return [sw_node(f"n-{i:02d}", f"gpu-{i:02d}", {"gpu": "true"}) for i in range(n)]


def _cfg() -> AgentsConfig:
    return AgentsConfig(identity="none", timeout_s=OWN_S, parallel=2, watch_s=0)


def test_agent_reads_end_within_what_is_left_of_the_budget(agents: SlowAgents) -> None:
    budget = CycleBudget(BUDGET_S)
    with within_budget(budget), pytest.raises(BudgetEnded):
        fetch_all(_nodes(), _cfg())
    assert agents.within(BUDGET_S), agents.by_thread  # not six rounds of ANSWER_S
    assert len(agents.deadlines) <= 6, agents.deadlines  # none started past it
    assert max(agents.deadlines) <= BUDGET_S < OWN_S, agents.deadlines  # cut to it
    assert budget.cut is not None and "agent" in budget.cut, budget.cut


def test_metrics_scrapes_end_within_what_is_left_of_the_budget(agents: SlowAgents) -> None:
    budget = CycleBudget(BUDGET_S)
    with within_budget(budget), pytest.raises(BudgetEnded):
        scrape_all(_nodes(), "http://{addr}:9400/metrics", OWN_S, parallel=2)
    assert agents.within(BUDGET_S), agents.by_thread
    assert len(agents.deadlines) <= 6, agents.deadlines
    assert max(agents.deadlines) <= BUDGET_S < OWN_S, agents.deadlines
    assert budget.cut is not None and "metrics" in budget.cut, budget.cut


def test_outside_a_budget_each_read_has_its_own_deadline(agents: SlowAgents) -> None:
    got = fetch_all(_nodes(4), _cfg())
    assert len(got) == 4 and agents.deadlines == [OWN_S] * 4
    assert all(r.error is not None and "HTTP 404" in r.error for r in got.values())


@pytest.fixture
def lines() -> Iterator[list[str]]:
    yield from log_lines("DEBUG")


def test_a_cycle_whose_agent_reads_the_budget_cut_blames_no_agent(
        agents: SlowAgents, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        lines: list[str]) -> None:
    sw = RecordingSwarm(_nodes(), [], [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 agents=_cfg())
    d = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]
    monkeypatch.setattr(daemon_module, "engine_budget_s", lambda *_: BUDGET_S)
    report = d.cycle()
    assert agents.within(BUDGET_S), agents.by_thread
    assert max(agents.deadlines) <= BUDGET_S < OWN_S, agents.deadlines
    assert report.aborted and "ended at its engine budget" in report.errors[0]
    assert "reading agent" in report.errors[0], report.errors
    assert d.book.records == {}  # no agent taken for unreachable or failing
    assert not [m for m in lines if "unreachable" in m or "timed out" in m
                or "stopping" in m], lines[-10:]
    sample = d.metrics.registry.get_sample_value
    assert sample("swarmgpu_errors_total", {"kind": "budget"}) == 1
    assert sw.calls == []


class SomeSlow(Waits):
    """The agents on ``slow`` hosts answer within no deadline; the others at once, with
    facts of their host (each URL names its host: ``{hostname}``)."""

    def __init__(self, slow: set[str]) -> None:
        super().__init__()
        self.slow = slow

    def __call__(self, url: str, *, timeout_s: float, max_bytes: int,
                 tls: object = None, headers: object = None) -> boundedhttp.Fetched:
        host = urlsplit(url).hostname or ""
        if host in self.slow:
            self.add(timeout_s)
            time.sleep(timeout_s)
            raise boundedhttp.Deadline()
        return boundedhttp.Fetched(200, json.dumps(replace(DGX_F, hostname=host).to_dict())
                                   .encode())


def test_a_facts_watch_its_budget_cuts_compares_what_it_read_and_names_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[str]) -> None:
    """A cut threw every answer read away, said at debug level: with a rack's agents
    timing out no watch ended, and a change anywhere waited for the full cycle. Now the
    nodes read are compared (a change starts a cycle), and the agents that did not
    answer in time are named once per change, not every watch."""
    agents = SomeSlow({"gpu-04", "gpu-05"})  # read third of 2 at once: 6 and 7 never start
    monkeypatch.setattr(boundedhttp, "get", agents)
    sw = RecordingSwarm(_nodes(8), [], [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(identity="none", timeout_s=OWN_S, parallel=2,
                                     watch_s=BUDGET_S, url_template="http://{hostname}:{port}"))
    d = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]
    d.leader = True
    d._watch_facts()
    assert agents.within(BUDGET_S), agents.by_thread  # not a round of OWN_S
    assert d._rerun.is_set()  # the four read are new to the book: a cycle now
    assert [m for m in lines if "facts changed on gpu-00, gpu-01, gpu-02, gpu-03:" in m]
    said = [m for m in lines if "WARNING" in m and "facts watch" in m]
    assert len(said) == 1, lines[-10:]
    assert "agents on gpu-04, gpu-05 did not answer within agents.watch_s 0.8 s" in said[0]
    assert "2 node(s) after them not read before it ended (gpu-06, gpu-07)" in said[0]
    d._watch_facts()  # the same agents again: said once
    assert len([m for m in lines if "WARNING" in m and "facts watch" in m]) == 1
    agents.slow = set()
    d._watch_facts()
    assert [m for m in lines if "INFO" in m and "every agent answered within" in m]
    assert d.metrics.registry.get_sample_value("swarmgpu_errors_total",
                                               {"kind": "watch"}) in (None, 0)
    assert not [m for m in lines if "stopping" in m or "failed" in m], lines[-10:]
