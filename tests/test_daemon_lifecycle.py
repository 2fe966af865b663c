"""The daemon's life around its cycles, without a swarm: the wall clock stepping, the
schedule, signals, the systemd watchdog."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from loguru import logger
from support.empty_swarm import EmptySwarm

from swarmgpu.core.config import AgentsConfig, Config, HttpConfig, SyncConfig
from swarmgpu.manager.cycle.wiring import daemon_steps
from swarmgpu.manager.daemon import Daemon
from swarmgpu.swarm.client import SwarmUnavailable


def daemon(tmp: Path, interval_s: float = 30.0) -> Daemon:
    cfg = Config(
        state_dir=str(tmp),
        sync=SyncConfig(watch_events=False, interval_s=interval_s),
        agents=AgentsConfig(timeout_s=0.5, identity="none", watch_s=0),
        http=HttpConfig(listen="127.0.0.1:0"),
    )
    return Daemon(cfg, swarm=EmptySwarm())  # type: ignore[arg-type]


def step_wall_clock(monkeypatch: pytest.MonkeyPatch, by_s: float) -> None:
    """The wall clock (time.time, datetime.now) steps by ``by_s`` (NTP, a hand
    `date -s`), in every module that reads it; the monotonic clock does not."""
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + by_s)

    class Stepped(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.fromtimestamp(real() + by_s, tz)

    for name, mod in list(sys.modules.items()):
        if (
            name.startswith(("swarmgpu", "apscheduler"))
            and getattr(mod, "datetime", None) is datetime
        ):
            monkeypatch.setattr(mod, "datetime", Stepped)


@pytest.mark.parametrize("by_s", [3600.0, -3600.0])
def test_healthz_age_ignores_a_wall_clock_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by_s: float
) -> None:
    """A cycle just ran: /healthz says so after the wall clock stepped an hour either
    way (forward, it said degraded; back, its age was -3600 s and a daemon whose cycles
    had stopped stayed "ok" for the hour)."""
    d = daemon(tmp_path)
    before = time.monotonic()
    d.cycle()
    step_wall_clock(monkeypatch, by_s)
    doc = d.health()
    assert doc["status"] == "ok"
    # No older than the cycle it reports (the monotonic clock: the hour's step not in it),
    # an order of clock readings rather than a bound a loaded machine could pass.
    assert 0 <= doc["last_cycle_age_s"] <= time.monotonic() - before


def test_cycles_go_on_after_the_wall_clock_steps_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The schedule counts on the monotonic clock: a step back of an hour after the first
    cycle does not hold the next one for an hour (nor stop the watchdog's pings)."""
    d = daemon(tmp_path, interval_s=0.2)
    runs: list[float] = []
    real_cycle = d.cycle

    def cycle() -> Any:
        runs.append(time.monotonic())
        if len(runs) == 1:
            step_wall_clock(monkeypatch, -3600.0)
        return real_cycle()

    d.cycle = cycle  # type: ignore[method-assign]
    t = threading.Thread(target=d.run_forever, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 10
        while len(runs) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(runs) >= 3, f"{len(runs)} cycle(s) in 10 s at a 0.2 s interval"
    finally:
        d.stop_event.set()
        t.join(10)
    assert not t.is_alive()


def wait_for(cond: Any, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_sighup_keeps_the_daemon_and_its_config_and_says_why(tmp_path: Path) -> None:
    """SIGHUP (`kill -HUP`, a closed terminal) is not a reload: the config is read at
    start only. It killed the daemon at once, in the middle of a cycle's writes; now it
    is logged, naming what to do, and the daemon goes on with the config it has."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    d = daemon(tmp_path)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        d._install_signals()
        handler = signal.getsignal(signal.SIGHUP)
        assert callable(handler), "SIGHUP ends the process (the default)"
        handler(signal.SIGHUP, None)
        assert wait_for(lambda: any("SIGHUP" in m and "restart" in m for m in lines)), lines
        assert not d.stop_event.is_set()
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # type: ignore[operator,misc]
        assert wait_for(d.stop_event.is_set)
    finally:
        logger.remove(sink)
        for s, h in saved.items():
            signal.signal(s, h)


def test_a_watchdog_shorter_than_the_interval_allows_is_named_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sync.interval_s raised to 120 s under the unit's WatchdogSec=120s: systemd would
    kill the daemon between two pings, every few minutes, with nothing in its log to
    say why. It says so at start, naming both settings and the value to use."""
    monkeypatch.setenv("WATCHDOG_USEC", "120000000")
    d = daemon(tmp_path, interval_s=120.0)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    t = threading.Thread(target=d.run_forever, daemon=True)
    try:
        t.start()
        assert wait_for(lambda: any("WatchdogSec" in m for m in lines)), lines
    finally:
        d.stop_event.set()
        t.join(10)
        logger.remove(sink)
    said = next(m for m in lines if "WatchdogSec" in m)
    assert "sync.interval_s" in said and "300" in said, said
    lines.clear()
    monkeypatch.setenv("WATCHDOG_USEC", "300000000")  # 2 x 120 s + 60 s: enough
    d = daemon(tmp_path, interval_s=120.0)
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    t = threading.Thread(target=d.run_forever, daemon=True)
    try:
        t.start()
        time.sleep(0.3)
    finally:
        d.stop_event.set()
        t.join(10)
        logger.remove(sink)
    assert not any("WatchdogSec" in m for m in lines), lines


def running(d: Daemon) -> threading.Thread:
    """``d.run_forever`` on a thread, once its scheduler has started."""
    t = threading.Thread(target=d.run_forever, daemon=True)
    t.start()
    assert wait_for(lambda: d._scheduler is not None and d._scheduler.running)
    return t


@pytest.mark.parametrize("years", [1, 30])
def test_a_wall_clock_years_ahead_costs_the_schedule_one_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, years: int
) -> None:
    """A host that booted with a dead RTC, its clock set years ahead by NTP after the
    daemon started: the scheduler listed every run missed since, one trigger step each,
    holding its job store's lock (30 years at a 5 s facts watch: 190 million dates, more
    memory than the host has; events and the clock check waited behind it). Each job now
    takes one step to reach the clock, wherever it is."""
    cfg = Config(
        state_dir=str(tmp_path),
        sync=SyncConfig(watch_events=False, interval_s=30.0),
        agents=AgentsConfig(timeout_s=0.5, identity="none", watch_s=5.0),
        http=HttpConfig(listen="127.0.0.1:0"),
    )
    d = Daemon(cfg, swarm=EmptySwarm())  # type: ignore[arg-type]
    t = running(d)
    try:
        assert d._scheduler is not None
        jobs = d._scheduler.get_jobs()
        assert {j.id for j in jobs} == {"sync", "facts-watch"}
        ahead = datetime.now().astimezone() + timedelta(days=365 * years)
        kind = type(jobs[0].trigger)
        assert all(type(j.trigger) is kind for j in jobs)
        step = kind.get_next_fire_time
        steps = [0]

        def counted(self: Any, prev: Any, now: Any) -> Any:
            steps[0] += 1
            if steps[0] > 100:
                raise RuntimeError(f"over 100 trigger steps to reach {now}")
            return step(self, prev, now)

        monkeypatch.setattr(kind, "get_next_fire_time", counted)
        for job in jobs:
            steps[0] = 0
            times = job._get_run_times(ahead)  # what the scheduler's thread asks
            assert times and times[-1] <= ahead, (job.id, times)
            assert steps[0] <= 2, (job.id, steps[0])
            assert job.trigger.get_next_fire_time(times[-1], ahead) > ahead
    finally:
        d.stop_event.set()
        t.join(10)
    assert not t.is_alive()


def test_a_cycle_due_while_the_clock_stepped_a_second_ahead_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler sleeps on the monotonic clock until the next run's wall-clock date:
    a step forward of 1.5 s meanwhile (ntpd steps from 128 ms; below the 2 s the clock
    check acts on), a paused VM or a starved thread wakes it that late. APScheduler's
    default grace of 1 s dropped such a run, its warning under the log level: the next
    cycle, and the watchdog's ping, came an interval later. A late run now runs."""
    d = daemon(tmp_path, interval_s=3.0)
    runs: list[float] = []
    real_cycle = d.cycle

    def cycle() -> Any:
        runs.append(time.monotonic())
        return real_cycle()

    d.cycle = cycle  # type: ignore[method-assign]
    t = running(d)
    try:
        assert wait_for(lambda: len(runs) == 1)
        time.sleep(0.3)  # the scheduler sleeps until the next run's date
        step_wall_clock(monkeypatch, 1.5)
        assert wait_for(lambda: len(runs) == 2, 8.0)
    finally:
        d.stop_event.set()
        t.join(10)
    assert not t.is_alive()
    assert runs[1] - runs[0] < 4.0, (
        f"the second cycle came {runs[1] - runs[0]:.1f} s after the first"
    )


def test_a_facts_watch_that_raises_is_logged_as_the_daemon_logs_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected error in the facts watch went up to APScheduler, whose stdlib
    logger has no handler: a bare traceback on stderr (raw text under --log-format
    json), not in swarmgpu_errors_total. It is now logged as a cycle's is, counted as
    kind "watch", and the next round runs as before."""
    d = daemon(tmp_path)
    d.leader = True

    def broken(*_args: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr("swarmgpu.manager.daemon.fetch_agents", broken)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="ERROR")
    try:
        d._watch_facts()
        d._watch_facts()
    finally:
        logger.remove(sink)
    said = [m for m in lines if "facts watch" in m]
    assert len(said) == 2 and "boom" in said[0], lines
    assert d.metrics.errors.labels(kind="watch")._value.get() == 2


def test_cycles_longer_than_the_interval_are_said_once_with_the_setting_to_raise(
    tmp_path: Path,
) -> None:
    """A cycle longer than sync.interval_s: the run due meanwhile is skipped (one cycle
    at a time) and the next waits for the next interval, so cycles come half as often
    and the watchdog's pings with them. APScheduler's "skipped" warning is under the
    log level (events meet running cycles on purpose): nothing said it. It is said once
    per run of slow cycles, naming the setting."""
    d = daemon(tmp_path, interval_s=1.0)
    real_cycle = d.cycle
    slow = [True, True, False, True]

    def cycle() -> Any:
        if slow.pop(0) if slow else False:
            time.sleep(1.2)
        return real_cycle()

    d.cycle = cycle  # type: ignore[method-assign]
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        for _ in range(4):
            d._safe_cycle()
    finally:
        logger.remove(sink)
    said = [m for m in lines if "longer than sync.interval_s" in m]
    assert len(said) == 2, lines
    # The cycle's own time, at least the 1.2 s slept (more on a loaded machine: 1.3 s).
    took = re.search(r"a cycle took ([0-9.]+)s", said[0])
    assert took and float(took.group(1)) >= 1.2 and "WatchdogSec" in said[0], said[0]


def test_a_signal_during_a_log_line_is_logged_and_acted_on(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Python runs a handler in the main thread between two bytecodes, so a signal can
    come while that thread is inside a log call, holding loguru's handler lock. The
    handler logged itself: loguru refused the re-entry ('deadlock avoided'), printed a
    'Logging error' traceback, and SIGHUP's and SIGTERM's lines were lost. Now the
    handlers only note the signal; the logging happens outside them."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    d = daemon(tmp_path)
    lines: list[str] = []
    pending = [signal.SIGHUP, signal.SIGTERM]

    def sink(m: Any) -> None:  # the signals land while this log call holds the lock
        lines.append(str(m))
        while pending:
            s = pending.pop(0)
            signal.getsignal(s)(s, None)  # type: ignore[operator,misc]

    sink_id = logger.add(sink, level="INFO")
    try:
        d._install_signals()
        logger.info("a line the main thread was writing")
        assert wait_for(d.stop_event.is_set)
        assert wait_for(lambda: any("SIGTERM received" in m for m in lines)), lines
        assert any("SIGHUP" in m and "restart" in m for m in lines), lines
        assert "Logging error" not in capfd.readouterr().err
    finally:
        logger.remove(sink_id)
        for s, h in saved.items():
            signal.signal(s, h)


def test_a_second_signal_during_a_log_line_still_ends_the_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The second SIGTERM, come while the main thread logged (its 'stopping' line): the
    handler's logger.complete() raised loguru's RuntimeError before its os.kill, back
    into the log call, which printed it: the daemon went on, the operator's 'now' lost."""
    killed: list[int] = []
    monkeypatch.setattr(os, "kill", lambda _pid, sig: killed.append(sig))
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    d = daemon(tmp_path)
    lines: list[str] = []
    pending = [signal.SIGINT]

    def sink(m: Any) -> None:
        lines.append(str(m))
        if "stopping:" in str(m) and pending:
            s = pending.pop()
            signal.getsignal(s)(s, None)  # type: ignore[operator,misc]

    sink_id = logger.add(sink, level="INFO")
    try:
        d._install_signals()
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # type: ignore[operator,misc]
        assert wait_for(d.stop_event.is_set)
        logger.info("stopping: the step in progress ends after its writes")
        assert wait_for(lambda: killed == [signal.SIGINT]), (killed, lines)
        assert any("SIGINT received while stopping" in m for m in lines), lines
        assert "Logging error" not in capfd.readouterr().err
    finally:
        logger.remove(sink_id)
        for s, h in saved.items():
            signal.signal(s, h)


def test_a_full_state_directory_leaves_no_temp_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state directory that is full (ENOSPC mid-write) keeps only what it held: each
    cycle left a half-written temp file of agents.json and of gpu-health.json behind
    (an inode and its blocks every cycle, while the disk was full)."""
    real_dump = json.dump

    def full(obj: Any, fh: Any, **kw: Any) -> None:
        fh.write("{")
        fh.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    d = daemon(tmp_path)
    monkeypatch.setattr(json, "dump", full)
    d.cycle()
    d.cycle()
    monkeypatch.setattr(json, "dump", real_dump)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_full_state_directory_is_said_once_while_it_lasts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save that fails (a full or read-only state directory) is warned of once per
    file while it lasts, and again once it was mended and fails anew: it was warned of
    every cycle (two lines each 30 s, for as long as the disk stayed full)."""
    real_dump = json.dump

    def full(obj: Any, fh: Any, **kw: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    d = daemon(tmp_path)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        monkeypatch.setattr(json, "dump", full)
        for _ in range(3):
            d.cycle()
        said = [m for m in lines if "cannot save" in m]
        assert len(said) == 2, lines
        assert any("agent state" in m for m in said) and any("GPU health" in m for m in said)
        monkeypatch.setattr(json, "dump", real_dump)
        d.cycle()  # saved: the problem went away
        monkeypatch.setattr(json, "dump", full)
        d.cycle()
    finally:
        logger.remove(sink)
    said = [m for m in lines if "cannot save" in m]
    assert len([m for m in said if "agent state" in m]) == 2, said


class EngineGone(EmptySwarm):
    """A leader's engine that stops answering (dockerd stopped, its socket proxy gone):
    every ask raises as the client does on a refused connection."""

    gone = False

    def is_leader(self) -> bool:
        if self.gone:
            raise SwarmUnavailable("Docker Engine unreachable at unix:///var/run/docker.sock")
        return True


def test_healthz_says_leader_unknown_while_the_engine_cannot_be_asked(tmp_path: Path) -> None:
    """/healthz said ``leader: true`` (and ``ok``) for the whole time the engine could not
    be asked, while every write was blocked (the term ended): a monitor read a working
    leader. Now the engine is said unreachable, leadership unknown, status degraded,
    and the is-leader gauge drops; the next cycle that reaches the engine says it again."""
    d = daemon(tmp_path)
    swarm = EngineGone()
    d.swarm = swarm  # type: ignore[assignment]
    d.cycle()
    doc = d.health()
    assert doc["leader"] is True and doc["status"] == "ok"
    swarm.gone = True
    assert d.cycle().aborted
    doc = d.health()
    assert doc["leader"] is None, doc
    assert doc["engine"] == "unreachable" and doc["status"] == "degraded", doc
    assert "unix:///var/run/docker.sock" in doc["engine_error"]
    assert "engine_error" not in d.health(detail=False)  # an open answer names no path
    assert d.metrics.is_leader._value.get() == 0
    swarm.gone = False
    d.cycle()
    doc = d.health()
    assert doc["leader"] is True and doc["engine"] == "reachable" and doc["status"] == "ok"
    assert "engine_error" not in doc and d.metrics.is_leader._value.get() == 1


def test_the_map_says_leadership_unknown_while_the_engine_cannot_be_asked(
        tmp_path: Path) -> None:
    """The cluster document (the map, /api/v1/cluster) went on with the daemon's last
    word, ``leader: false`` once the ask failed, which the map shows as "follower"
    while /healthz said unknown. It now says ``engine: unreachable`` too (a field
    added; ``leader`` stays a boolean, false: no write goes out), and ``reachable``
    again once the engine answers."""
    d = daemon(tmp_path)
    swarm = EngineGone()
    d.swarm = swarm  # type: ignore[assignment]
    d.use(daemon_steps(d))  # as `swarmgpu run` wires it: the map's routes

    def cluster() -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(d.http_routes["/api/v1/cluster"]()[1])
        return doc

    d.cycle()
    assert cluster()["leader"] is True and cluster()["engine"] == "reachable"
    swarm.gone = True
    assert d.cycle().aborted
    doc = cluster()
    assert doc["engine"] == "unreachable" and doc["leader"] is False, doc
    swarm.gone = False
    d.cycle()
    assert cluster()["leader"] is True and cluster()["engine"] == "reachable"
