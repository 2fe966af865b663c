"""Running the daemon's jobs now (``manager.cycle.schedule.run_now``): ``Daemon.trigger``
and the clock check move a job's next run to now. They did so under
``contextlib.suppress(Exception)`` ("the job is gone during shutdown"), which hid a
wrong call as well: a misnamed job or a change APScheduler refuses left every event,
facts change and follow-up waiting for the interval, and nothing said why.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from support.forged import RecordingSwarm, sw_node
from support.loglines import log_lines

from swarmgpu.core.config import AgentsConfig, Config, SyncConfig
from swarmgpu.manager.cycle.schedule import SYNC_JOB, repeat, run_now
from swarmgpu.manager.daemon import Daemon


@pytest.fixture
def errors() -> Iterator[list[str]]:
    yield from log_lines("ERROR")


@pytest.fixture
def sched() -> Iterator[BackgroundScheduler]:
    s = BackgroundScheduler()
    repeat(s, lambda: None, 3600, SYNC_JOB)  # (an hour off: never run by the test)
    s.start(paused=True)
    yield s
    if s.running:
        s.shutdown(wait=False)


def _daemon(tmp_path: Path) -> Daemon:
    sw = RecordingSwarm([sw_node("n-00", "gpu-00", {"gpu": "true"})], [], [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(identity="none"))
    return Daemon(cfg, swarm=sw)  # type: ignore[arg-type]


def test_a_trigger_moves_the_sync_job_to_now(
        tmp_path: Path, sched: BackgroundScheduler, errors: list[str]) -> None:
    d = _daemon(tmp_path)
    d._scheduler = sched
    d.trigger("event")
    due = sched.get_job(SYNC_JOB).next_run_time
    assert due <= datetime.now().astimezone() + timedelta(seconds=1)
    assert d._rerun.is_set() and errors == []


def test_a_trigger_after_shutdown_is_quiet(
        tmp_path: Path, sched: BackgroundScheduler, errors: list[str]) -> None:
    d = _daemon(tmp_path)
    d._scheduler = sched
    sched.shutdown(wait=False)  # (its jobs are gone: JobLookupError)
    d.trigger("event")
    assert d._rerun.is_set() and errors == []


class Refusing:
    """A scheduler that refuses the change, as APScheduler refuses a misspelled one."""

    running = True

    def modify_job(self, job_id: str, **changes: Any) -> None:
        raise AttributeError(f"The following are not modifiable attributes of Job: "
                            f"{', '.join(changes)}")


def test_a_trigger_whose_call_is_refused_says_so(tmp_path: Path, errors: list[str]) -> None:
    """Before, ``suppress(Exception)`` swallowed it: no line, the cycle at the interval."""
    d = _daemon(tmp_path)
    d._scheduler = Refusing()
    d.trigger("facts")
    assert d._rerun.is_set()  # (the ask stands: the interval's cycle serves it)
    assert len(errors) == 1 and "cannot run the scheduler's job 'sync' now" in errors[0]
    assert "AttributeError" in errors[0]  # with its traceback


def test_a_job_id_no_job_has_is_a_fault_while_the_scheduler_runs(
        sched: BackgroundScheduler, errors: list[str]) -> None:
    run_now(sched, "synk")
    assert len(errors) == 1 and "'synk'" in errors[0] and "JobLookupError" in errors[0]


def test_the_clock_check_runs_every_job_now(
        tmp_path: Path, sched: BackgroundScheduler, errors: list[str]) -> None:
    d = _daemon(tmp_path)
    d._scheduler = sched
    d._clock_check((0.0, 0.0))  # (the wall clock far ahead of the monotonic one)
    due = sched.get_job(SYNC_JOB).next_run_time
    assert due <= datetime.now().astimezone() + timedelta(seconds=1) and errors == []
