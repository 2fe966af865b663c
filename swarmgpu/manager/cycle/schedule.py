"""The daemon's repeating jobs (the cycle, the facts watch) on APScheduler.

APScheduler's interval trigger counts on wall-clock dates: each next run is the last
one plus the interval. The scheduler lists every run due up to now, one trigger step
each, so a clock set years ahead (a dead RTC put right by NTP after the start) was
millions of dates listed on its thread, under its job store's lock. ``CatchUp`` takes
one step to the clock instead. The daemon's clock check (``Daemon._clock_check``) runs
every job at once after a step either way. ``run_now`` moves a job's next run to now
(``Daemon.trigger``, the clock check): quiet once the scheduler has shut down, a wrong
call (a job id no job has, a change APScheduler refuses) logged with its traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.interval import IntervalTrigger
from loguru import logger

# The jobs' ids: one name for ``repeat`` and ``run_now`` (apscheduler is untyped).
SYNC_JOB = "sync"
WATCH_JOB = "facts-watch"


class CatchUp(IntervalTrigger):  # type: ignore[misc]  # apscheduler has no types
    """An interval trigger whose next run is never an interval or more behind ``now``:
    however far the clock moved, the run due is ``now``, the one after it an interval
    later (``coalesce`` runs a late job once anyway)."""

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        nxt: datetime | None = super().get_next_fire_time(previous_fire_time, now)
        if previous_fire_time is not None and nxt is not None and nxt < now:
            return now
        return nxt


def repeat(
    sched: BaseScheduler,
    func: Callable[[], Any],
    seconds: float,
    job_id: str,
    first: datetime | None = None,
) -> None:
    """Run ``func`` every ``seconds`` (from ``first``, else a period from now), never two
    at once; runs missed while one ran are one run. A run woken late runs however late
    (APScheduler's default grace of 1 s dropped it, saying so only under the log level:
    a clock stepped 1.5 s ahead, a paused VM, a starved thread cost a whole interval)."""
    sched.add_job(
        func,
        CatchUp(seconds=seconds),
        id=job_id,
        max_instances=1,
        coalesce=True,
        misfire_grace_time=None,
        **({} if first is None else {"next_run_time": first}),
    )


def run_now(sched: BaseScheduler, job_id: str) -> None:
    """Run ``job_id`` now. Once ``sched`` has shut down its jobs are gone: nothing to
    do. Any other failure is a wrong call of ours, said with its traceback, not raised
    (it comes from event, timer and watch threads): the run asked for waits for the
    interval. A blanket ``suppress(Exception)`` hid such a call as well."""
    try:
        sched.modify_job(job_id, next_run_time=datetime.now().astimezone())
    except JobLookupError:
        if not sched.running:
            return
        logger.exception("cannot run the scheduler's job {!r} now: no such job (a fault "
                         "of swarmgpu, please report it); it runs at its interval", job_id)
    except Exception:
        logger.exception("cannot run the scheduler's job {!r} now (a fault of swarmgpu, "
                         "please report it); it runs at its interval", job_id)
