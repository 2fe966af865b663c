"""The cycle's engine budget at its edges (manager.cycle.budget): a write in flight as it
passes is not refused, but its own requests end within what is left of the budget and
its slack (before, each took its own deadline, and a slow engine held the cycle past the
watchdog); a cycle ended at its budget is counted on its own, not as an engine error,
and /healthz says so; ``run --once`` has no budget unless a watchdog waits for it. The
writes: real docker-py requests to an engine on loopback trickling its answers
(tests/support/loop_engine.py), each request's own deadline far past the cut, each
answer far past it: a loaded machine's lag flips none (a cut is read from the deadline
the code gave and the bytes sent, not timed)."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.empty_swarm import EmptySwarm

from swarmgpu.core.config import AgentsConfig, Config, HttpConfig, SyncConfig
from swarmgpu.manager import daemon as daemon_module
from swarmgpu.manager.cycle import budget as budget_module
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.nodes.sync import CycleReport
from swarmgpu.swarm import answerjson
from swarmgpu.swarm.client import SwarmClient, SwarmUnavailable
from tests.support.loop_engine import LoopEngine, Trickled, loop_engine

# Each request's own deadline is 20 s (the client's 1 s timeout, ``ANSWER_DEADLINE_
# TIMEOUTS`` 20 times); a long answer (600 bytes a 20 ms) would end 12 s in.
DEADLINE_TIMEOUTS = 20.0
LONG = Trickled(b"{" + b" " * 598 + b"}", 0.02)
NODE = json.dumps({"ID": "n1", "Version": {"Index": 3},
                   "Spec": {"Labels": {}, "Role": "worker",
                            "Availability": "active"}}).encode()


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopEngine]:
    monkeypatch.setattr(answerjson, "ANSWER_DEADLINE_TIMEOUTS", DEADLINE_TIMEOUTS)
    with loop_engine({"/nodes/n1": NODE}) as served:
        yield served


def relabel(client: SwarmClient) -> None:
    """A write of node n1's labels."""
    client.update_node_labels("n1", lambda cur: {**cur, "swarmgpu.gpus": "2"})


def client_of(engine: LoopEngine) -> SwarmClient:
    """The daemon's client (a 1 s timeout) of ``engine``, made outside any budget."""
    return SwarmClient(f"tcp://127.0.0.1:{engine.server_port}", timeout_s=1)


def cut_within(engine: LoopEngine, budget: answerjson.CycleBudget, within_s: float,
               path: str) -> None:
    """``relabel`` within ``budget`` fails as a timeout that says the write's slack
    cut it: its request at ``path`` was given ``within_s`` at most (a loaded machine's
    lag only shortens it), not refused (0 s), and its long answer there was cut short.
    The code's own deadline and the bytes sent, not timed: a wall clock lags."""
    client = client_of(engine)
    with answerjson.within_budget(budget), pytest.raises(
            SwarmUnavailable, match=r"a write's, was not read within .* kept past it "
            r"for the writes in flight") as got:
        relabel(client)
    said = str(got.value)
    given = re.search(r"was not read within ([\d.]+) s", said)
    assert given and 0 < float(given.group(1)) <= within_s, said
    assert "check the engine" in said
    waited = time.monotonic() + 10  # (a hang guard: the engine notes it as it closes)
    while not engine.sent_to.get(path):
        assert time.monotonic() < waited, engine.sent_to
        time.sleep(0.01)
    (sent,) = engine.sent_to[path]
    assert sent < len(LONG.body), sent


def test_a_writes_slow_read_ends_within_what_is_left_of_the_budget_and_its_slack(
        engine: LoopEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    # (the gate let it through with 0.5 s left: its read is not refused, nor cut at the
    # budget, but at the slack 1 s past it; before, it took its own 20 s deadline). A
    # write's floor below the slack, as ``passed_budget``'s: at the 5 s default the floor
    # decided, and the cut came 5 s in, which a timed check let pass in its lag.
    monkeypatch.setattr(answerjson, "WRITE_FLOOR_S", 1.0)
    engine.answers["/nodes/n1"] = LONG
    cut_within(engine, answerjson.CycleBudget(0.5, slack_s=1.0), 1.5, "/nodes/n1")


def test_a_writes_slow_post_ends_within_what_is_left_of_the_budget_and_its_slack(
        engine: LoopEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answerjson, "WRITE_FLOOR_S", 1.0)  # (as above)
    engine.answers["/nodes/n1/update"] = LONG
    cut_within(engine, answerjson.CycleBudget(0.5, slack_s=1.0), 1.5, "/nodes/n1/update")
    assert engine.posts == 1


def passed_budget(monkeypatch: pytest.MonkeyPatch, started_s: float) -> answerjson.CycleBudget:
    """A budget of 0.5 s with 1 s of slack, started ``started_s`` ago; a write's floor
    of 1 s."""
    monkeypatch.setattr(answerjson, "WRITE_FLOOR_S", 1.0)
    budget = answerjson.CycleBudget(0.5, slack_s=1.0)
    budget.start -= started_s
    return budget


def test_a_write_past_the_budget_and_its_slack_still_gets_the_floor(
        engine: LoopEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    # (the over-share restart's reopened gate, made after the budget and its slack
    # passed: sent, and answered within the floor, else cut there)
    budget = passed_budget(monkeypatch, 1.5)
    client = client_of(engine)
    with answerjson.within_budget(budget), answerjson.outside_budget():
        relabel(client)
    assert engine.posts == 1
    engine.answers["/nodes/n1/update"] = LONG
    cut_within(engine, budget, 1.0, "/nodes/n1/update")


def test_no_write_request_runs_past_the_floors_line(
        engine: LoopEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    # (the budget, its slack and one floor: the watchdog's line, engine_budget_s; before,
    # each request got the floor anew, so a write's ten (read and post, five tries on a
    # conflict) could each run it past the line; one started there is not sent)
    budget = passed_budget(monkeypatch, 120)
    client = client_of(engine)
    with answerjson.within_budget(budget), pytest.raises(
            SwarmUnavailable, match=r"within 0.0 s.*: that request was not sent"):
        relabel(client)
    assert engine.posts == 0


@pytest.mark.parametrize("past_s", [0.0, 10.0, 14.0, 15.0, 16.0, 19.0, 20.0, 21.0, 120.0])
def test_a_writes_request_ends_by_the_budget_its_slack_and_one_floor(past_s: float) -> None:
    budget = answerjson.CycleBudget(60.0, slack_s=15.0)
    budget.start -= 60.0 + past_s  # (``past_s`` past the budget)
    line = 15.0 + answerjson.WRITE_FLOOR_S
    assert past_s + budget.write_left() <= line + 0.01
    if past_s < line - answerjson.WRITE_FLOOR_S:  # (the slack, then the floor, left)
        assert budget.write_left() >= min(15.0 - past_s, answerjson.WRITE_FLOOR_S) - 0.01


@pytest.mark.parametrize(("interval_s", "watchdog_s"),
                         [(30, 120), (30, None), (60, 180), (10, 60), (5, 40), (30, 61)])
def test_the_budget_its_slack_and_the_worst_floor_overrun_fit_the_watchdog(
        interval_s: float, watchdog_s: float | None) -> None:
    # (before, 75 s of budget for the unit's 120 s: a write's request started at the
    # slack's end got the 5 s floor, its ping due 5 s past the watchdog)
    dog = watchdog_s if watchdog_s is not None else 2 * interval_s + 60
    worst = (interval_s + daemon_module.engine_budget_s(interval_s, watchdog_s)
             + budget_module.BUDGET_SLACK_S + answerjson.WRITE_FLOOR_S)
    assert worst <= dog


class Noop:
    """A step after label sync: the budget is asked before it."""

    name = "noop"
    requires: frozenset[Any] = frozenset()
    provides: frozenset[Any] = frozenset()

    def run(self, session: Any) -> None:
        return None

    def stand_by(self) -> None:
        return None


def give_budget(monkeypatch: pytest.MonkeyPatch, budget_s: float) -> None:
    """The daemon's cycles get ``budget_s`` of engine budget from now on."""
    monkeypatch.setattr(daemon_module, "engine_budget_s", lambda *_: budget_s, raising=False)


def spent_daemon(monkeypatch: pytest.MonkeyPatch, tmp: Path, budget_s: float = 0.0) -> Daemon:
    """A leader's daemon of an empty swarm whose cycles each get ``budget_s`` of engine
    budget; by default none, passed as they start (a slow engine's, cut short)."""
    give_budget(monkeypatch, budget_s)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    cfg = Config(state_dir=str(tmp), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(timeout_s=0.5, identity="none", watch_s=0),
                 http=HttpConfig(listen="127.0.0.1:0"))
    d = Daemon(cfg, swarm=EmptySwarm())  # type: ignore[arg-type]
    d.use([Noop()])
    monkeypatch.setattr(d, "_install_signals", lambda: None)  # (the test's own process)
    return d


def counted(d: Daemon, metric: str, **labels: str) -> float:
    value = d.metrics.registry.get_sample_value(metric, labels)
    return 0.0 if value is None else value


def test_a_cycle_ended_at_its_budget_is_counted_on_its_own_not_as_an_engine_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    d = spent_daemon(monkeypatch, tmp_path)
    assert d.cycle().aborted
    assert counted(d, "swarmgpu_errors_total", kind="budget") == 1
    assert counted(d, "swarmgpu_errors_total", kind="swarm") == 0
    assert counted(d, "swarmgpu_cycles_total", outcome="over_budget") == 1
    assert counted(d, "swarmgpu_cycles_total", outcome="error") == 0


def test_healthz_says_the_last_cycle_ended_at_its_budget_until_one_ends_otherwise(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # (before, it said ok from the last whole cycle, its errors none)
    d = spent_daemon(monkeypatch, tmp_path, budget_s=600.0)
    d.cycle()
    doc = d.health()
    assert doc["status"] == "ok" and doc["over_budget"] is False, doc
    give_budget(monkeypatch, 0.0)
    d.cycle()
    doc = d.health()
    assert doc["status"] == "degraded" and doc["over_budget"] is True, doc
    assert doc["leader"] is True and doc["engine"] == "reachable", doc
    assert doc["error_count"] == 1 and "ended at its engine budget" in doc["errors"][0]
    open_doc = d.health(detail=False)  # (the line names what it read: proof only)
    assert open_doc["over_budget"] is True and "errors" not in open_doc
    give_budget(monkeypatch, 600.0)
    d.cycle()
    doc = d.health()
    assert doc["status"] == "ok" and doc["over_budget"] is False and doc["errors"] == []


def test_run_once_has_no_budget_unless_a_watchdog_waits_for_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # (no watchdog: no ping follows, and a one-shot on a slow engine was cut at 75 s)
    d = spent_daemon(monkeypatch, tmp_path)
    report = d.once()
    assert not report.aborted and report.leader, report.errors
    assert counted(d, "swarmgpu_errors_total", kind="budget") == 0
    monkeypatch.setenv("WATCHDOG_USEC", "120000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    assert d.once().aborted
    assert counted(d, "swarmgpu_errors_total", kind="budget") == 1


class SlowWrite:
    """A step whose one write, of node n1's labels on ``engine``, is answered so slowly
    that its slack cuts it (``WriteCut``), which the step lets through, as the over-share
    restart lets through its spec's failed write."""

    name = "slowwrite"
    requires: frozenset[Any] = frozenset()
    provides: frozenset[Any] = frozenset()

    def __init__(self, engine: LoopEngine) -> None:
        self.engine = engine

    def run(self, session: Any) -> None:
        relabel(client_of(self.engine))

    def stand_by(self) -> None:
        return None


def cut_write_cycle(engine: LoopEngine, monkeypatch: pytest.MonkeyPatch, tmp: Path,
                    step: SlowWrite) -> tuple[Daemon, CycleReport]:
    """A cycle of 1 s of engine budget, 0.5 s of slack and floor, whose one ``step``'s
    write of n1's labels the slack cuts; checked ended at its budget, counted so."""
    d = spent_daemon(monkeypatch, tmp, budget_s=1.0)
    monkeypatch.setattr(budget_module, "BUDGET_SLACK_S", 0.5)
    monkeypatch.setattr(answerjson, "WRITE_FLOOR_S", 0.5)
    d.use([step])
    engine.answers["/nodes/n1"] = LONG
    report = d.cycle()
    assert report.aborted and "ended at its engine budget" in report.errors[0], report
    assert counted(d, "swarmgpu_errors_total", kind="budget") == 1
    assert counted(d, "swarmgpu_cycles_total", outcome="over_budget") == 1
    return d, report


def test_a_cycle_whose_write_its_slack_cut_is_counted_as_ended_at_its_budget(
        engine: LoopEngine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # (before, the cut write's timeout ended the cycle as an engine error: kind="swarm",
    # /healthz's engine "unreachable" and its leader unknown, though the engine answered,
    # slowly, and only the budget cut it)
    d, report = cut_write_cycle(engine, monkeypatch, tmp_path, SlowWrite(engine))
    assert "writing" in report.errors[0], report.errors
    assert counted(d, "swarmgpu_errors_total", kind="swarm") == 0
    doc = d.health()
    assert doc["over_budget"] is True and doc["engine"] == "reachable", doc
    assert doc["leader"] is True, doc


class SwallowedWrite(SlowWrite):
    """``SlowWrite`` whose step catches its write's failure and goes on, as a step that
    records a failed write as one object's error and tries the next does."""

    name = "swallowedwrite"

    def run(self, session: Any) -> None:
        with contextlib.suppress(SwarmUnavailable):
            super().run(session)


def test_a_write_its_slack_cut_ends_the_cycle_at_its_budget_whoever_caught_it(
        engine: LoopEngine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # (before, the step that caught the cut write went on and the cycle ended "ok" or
    # "partial", /healthz ok, though the budget cut a write in it)
    d, report = cut_write_cycle(engine, monkeypatch, tmp_path, SwallowedWrite(engine))
    assert "writing (GET /" in report.errors[0], report.errors
    assert counted(d, "swarmgpu_cycles_total", outcome="ok") == 0
    assert counted(d, "swarmgpu_cycles_total", outcome="partial") == 0
    doc = d.health()
    assert doc["over_budget"] is True and doc["aborted"] is True, doc
    assert doc["engine"] == "reachable" and doc["leader"] is True, doc
