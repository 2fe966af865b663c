"""The daemon's /healthz after a cycle that did not complete: an engine error other than
an unreachable engine, a stop (in the snapshot's reads or between steps), an exception
the daemon's loop catches. Before, it went on saying the last whole cycle's report (its
status ok, its errors) as if current; now it says ``"aborted": true``, the status
degraded (still HTTP 200) and, to a caller with proof, why as its errors, until a cycle
completes. Pure: an empty swarm, a step that fails as told."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.empty_swarm import EmptySwarm

from swarmgpu.core.config import AgentsConfig, Config, HttpConfig, SyncConfig
from swarmgpu.manager import daemon as daemon_module
from swarmgpu.manager.cycle.healthz import CutKind, cycle_word, health_doc
from swarmgpu.manager.cycle.session import Slot
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.engine.stop import Stopped
from swarmgpu.swarm.client import SwarmUnavailable
from swarmgpu.swarm.errors import SwarmError


class Failing:
    """A step after label sync that raises ``fail`` while it is set."""

    name = "failing"
    requires: frozenset[Any] = frozenset()
    provides: frozenset[Any] = frozenset()
    fail: BaseException | None = None

    def run(self, session: Any) -> None:
        if self.fail is not None:
            raise self.fail

    def stand_by(self) -> None:
        return None


def leader(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Daemon, Failing]:
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    cfg = Config(state_dir=str(tmp), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(timeout_s=0.5, identity="none", watch_s=0),
                 http=HttpConfig(listen="127.0.0.1:0"))
    d = Daemon(cfg, swarm=EmptySwarm())  # type: ignore[arg-type]
    step = Failing()
    d.use([step])
    return d, step


def said_cut_short(d: Daemon, why: str) -> None:
    doc = d.health()
    assert doc["status"] == "degraded" and doc["aborted"] is True, doc
    assert doc["error_count"] == 1 and why in doc["errors"][0], doc
    assert doc["leader"] is True and doc["engine"] == "reachable", doc
    assert doc["over_budget"] is False, doc
    open_doc = d.health(detail=False)  # (the line may name nodes: proof only)
    assert open_doc["aborted"] is True and open_doc["status"] == "degraded"
    assert "errors" not in open_doc and open_doc["error_count"] == 1


def completes_again(d: Daemon, step: Failing) -> None:
    step.fail = None
    d.cycle()
    doc = d.health()
    assert doc["status"] == "ok" and doc["aborted"] is False and doc["errors"] == [], doc


@pytest.mark.parametrize("where", ["engine error", "stopped between steps",
                                   "unexpected exception", "stopped in the snapshot's reads"])
def test_healthz_says_a_cycle_cut_short_until_one_completes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    d, step = leader(tmp_path, monkeypatch)
    d.cycle()
    assert d.health()["status"] == "ok"
    if where == "engine error":
        step.fail = SwarmError("Swarm API 500 on GET /tasks: rpc error")
        assert d.cycle().aborted
        said_cut_short(d, "Swarm API 500 on GET /tasks")
    elif where == "stopped between steps":
        step.fail = Stopped(d.stop_event)
        d.cycle()
        said_cut_short(d, "stopping")
    elif where == "unexpected exception":
        step.fail = RuntimeError("a bug")
        d._safe_cycle()  # the daemon's loop: counted, logged, the daemon goes on
        said_cut_short(d, "RuntimeError: a bug")
    else:
        def cut(*_: Any) -> Any:
            raise Stopped(d.stop_event, "agent read", 3)

        with monkeypatch.context() as m:
            m.setattr(daemon_module, "take_snapshot", cut)
            d.cycle()
            said_cut_short(d, "stopping")
    completes_again(d, step)


def test_an_unreachable_engine_is_said_aborted_with_its_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d, step = leader(tmp_path, monkeypatch)
    d.cycle()
    step.fail = SwarmUnavailable("Docker Engine unreachable at unix:///var/run/docker.sock")
    assert d.cycle().aborted
    doc = d.health()
    assert doc["aborted"] is True and doc["engine"] == "unreachable", doc
    assert doc["error_count"] == 1 and "docker.sock" in doc["errors"][0], doc
    completes_again(d, step)


class Deposed(Failing):
    """A step whose write finds this engine no longer the leader (raft elected another
    manager mid-cycle); ``later`` counts the runs of the step after it."""

    name = "deposed"

    def __init__(self, d: Daemon, swarm: EmptySwarm) -> None:
        self.d, self.swarm, self.later = d, swarm, 0

    def run(self, session: Any) -> None:
        if self.fail is not None:
            self.swarm.is_leader = lambda: False  # type: ignore[method-assign]
            self.d.term.check_s = 0.0  # (the write asks the engine again)
            assert self.d.swarm.may_write() is False


class Later(Failing):
    name = "later"

    def __init__(self, deposed: Deposed) -> None:
        self.deposed = deposed

    def run(self, session: Any) -> None:
        self.deposed.later += 1


def test_healthz_says_a_cycle_ended_by_leadership_lost_mid_cycle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, the cycle ended silently (no later step ran) and /healthz said ok, the
    leader true, as if the cycle had completed as leader."""
    d, _ = leader(tmp_path, monkeypatch)
    swarm = d.swarm
    step = Deposed(d, swarm)  # type: ignore[arg-type]
    d.use([step, Later(step)])
    d.cycle()
    assert d.health()["status"] == "ok" and step.later == 1
    step.fail = RuntimeError("deposed")
    report = d.cycle()
    assert report.aborted and step.later == 1  # (no step after it ran)
    doc = d.health()
    assert doc["status"] == "degraded" and doc["aborted"] is True, doc
    assert doc["leader"] is False and doc["engine"] == "reachable", doc
    assert doc["error_count"] == 1 and "no longer leads" in doc["errors"][0], doc
    assert d.metrics.is_leader._value.get() == 0
    d.cycle()  # a follower's cycle: standing by is no fault
    doc = d.health()
    assert doc["status"] == "ok" and doc["aborted"] is False and doc["leader"] is False, doc
    step.fail = None
    swarm.is_leader = lambda: True  # type: ignore[method-assign]
    d.cycle()
    assert d.health()["leader"] is True and step.later == 2


class AskStop(Failing):
    """A step that asks the daemon to stop as SIGTERM does (the flag only, nothing
    raised), while ``ask`` is set; ``later`` counts the runs of the step after it."""

    name = "askstop"
    ask = False

    def __init__(self, d: Daemon) -> None:
        self.d, self.later = d, 0

    def run(self, session: Any) -> None:
        if self.ask:
            self.d.stop_event.set()


class AfterStop(Failing):
    name = "afterstop"

    def __init__(self, asker: AskStop) -> None:
        self.asker = asker

    def run(self, session: Any) -> None:
        self.asker.later += 1


def test_a_stop_between_two_steps_with_nothing_raised_says_the_cycle_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, the cycle ended quietly: the steps after the stop skipped, /healthz ok,
    the cycle counted "ok", as if it had completed."""
    d, _ = leader(tmp_path, monkeypatch)
    step = AskStop(d)
    d.use([step, AfterStop(step)])
    d.cycle()
    assert d.health()["status"] == "ok" and step.later == 1
    step.ask = True
    d.cycle()
    assert step.later == 1  # (no step after the stop ran)
    said_cut_short(d, "stopping: step afterstop and later ones not run")
    value = d.metrics.registry.get_sample_value("swarmgpu_cycles_total",
                                                {"outcome": "stopped"})
    assert value == 1, value
    assert d.health()["last_cycle"] == "stopped"


def test_a_stop_asked_in_the_last_step_skips_nothing_and_the_cycle_completed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d, _ = leader(tmp_path, monkeypatch)
    step = AskStop(d)
    step.ask = True
    d.use([step])
    d.cycle()
    doc = d.health()
    assert doc["status"] == "ok" and doc["aborted"] is False, doc
    assert doc["last_cycle"] == "ok", doc


def test_the_last_cycle_word_is_the_kind_passed_with_the_line_not_read_from_it() -> None:
    """``last_cycle`` came from the line's "stopping: " start: a line reworded, or
    another cut's line that happened to start so, changed the word. Now it is the kind
    the daemon passes with the line."""
    def word(line: str | None, kind: CutKind | None) -> object:
        return health_doc(leader=True, engine_error=None, cut_short=line, cut_kind=kind,
                          budget_ended=None, errors=[], age=1.0, stale=False,
                          ended_at=1.0, detail=False)["last_cycle"]

    assert word("stopping: a step's line", "aborted") == "aborted"
    assert word("a stop's line, reworded", "stopped") == "stopped"
    assert word("cut at the budget", "over_budget") == "over_budget"
    assert word(None, None) == "ok"
    assert cycle_word(None, "stopped") is None  # before the first cycle


class Erring(Failing):
    """A step that adds ``said`` to the cycle's report (an agent unreachable, say)."""

    name = "erring"
    requires = frozenset({Slot.REPORT})
    said = "gpu-node-1: agent at http://10.0.0.1:9401/facts timed out"

    def run(self, session: Any) -> None:
        session.report.errors.append(self.said)


def test_healthz_of_a_follower_says_no_errors_of_its_last_term_as_leader(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower runs no step: its /healthz went on saying the errors of the last cycle
    it ran as leader (hours ago, of a cluster another manager now runs), counted in
    error_count, as if current."""
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(timeout_s=0.5, identity="none", watch_s=0),
                 http=HttpConfig(listen="127.0.0.1:0"))
    swarm = EmptySwarm()
    d = Daemon(cfg, swarm=swarm)  # type: ignore[arg-type]
    d.use([Erring()])
    d.cycle()
    doc = d.health()
    assert doc["leader"] is True and doc["errors"] == [Erring.said], doc
    swarm.is_leader = lambda: False  # type: ignore[method-assign]
    d.cycle()
    doc = d.health()
    assert doc["leader"] is False and doc["status"] == "ok", doc
    assert doc["errors"] == [] and doc["error_count"] == 0, doc
    assert d.health(detail=False)["error_count"] == 0
