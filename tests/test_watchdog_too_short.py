"""A systemd watchdog too short for the daemon's cycles is refused at start.

The daemon pings the watchdog after each cycle (``Daemon._safe_cycle``), so two pings can
be the interval and a whole cycle apart, and a cycle may take its engine budget, at
least ``MIN_BUDGET_S``, and the writes' slack and floor past it. Under a WatchdogSec=
shorter than that, systemd killed the daemon in a slow cycle's writes: before, this was
only a warning at start (``WatchdogSec= is short``), and the daemon ran into its
restarts. It now exits 78 (a config error: the unit does not restart it) at start,
naming WatchdogSec= and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.gpu_nodes import run_cli, swarmgpu_env

from swarmgpu.cli.exitcodes import CONFIG_ERROR
from swarmgpu.manager.cycle import budget
from swarmgpu.swarm import answerjson


def test_run_refuses_a_watchdog_shorter_than_its_cycles_can_take(tmp_path: Path) -> None:
    env = swarmgpu_env(DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock",
                       SWARMGPU_STATE_DIR=str(tmp_path / "state"),
                       WATCHDOG_USEC="40000000")  # 40 s; the default interval is 30 s
    env.pop("WATCHDOG_PID", None)
    res = run_cli("run", env=env, timeout=90)
    assert res.returncode == CONFIG_ERROR, res.stderr  # the unit's: not restarted
    assert "WatchdogSec=40s" in res.stderr and "sync.interval_s 30s" in res.stderr, res.stderr
    assert "at least 60s" in res.stderr and "systemctl edit" in res.stderr, res.stderr
    assert "waiting for the engine" not in res.stderr, res.stderr  # (refused first)


@pytest.mark.parametrize(("interval_s", "watchdog_s"),
                         [(30, 59.9), (30, 30), (30, 10), (1, 30), (5, 34)])
def test_a_watchdog_a_budget_at_its_floor_outlasts_is_refused(
        interval_s: float, watchdog_s: float) -> None:
    said = budget.watchdog_problem(interval_s, watchdog_s)
    assert said is not None and f"WatchdogSec={watchdog_s:g}s" in said, said
    assert "docs/systemd.md" in said


@pytest.mark.parametrize(("interval_s", "watchdog_s"),
                         [(30, None), (30, 120), (30, 60), (1, 31), (60, 180), (10, 40)])
def test_every_watchdog_accepted_holds_the_worst_cycle(
        interval_s: float, watchdog_s: float | None) -> None:
    assert budget.watchdog_problem(interval_s, watchdog_s) is None
    dog = watchdog_s if watchdog_s is not None else 2 * interval_s + 60
    worst = (interval_s + budget.engine_budget_s(interval_s, watchdog_s)
             + budget.BUDGET_SLACK_S + answerjson.WRITE_FLOOR_S)
    assert worst <= dog


def test_a_watchdog_given_to_the_microsecond_is_named_as_given() -> None:
    """systemd passes WatchdogSec= in µs ($WATCHDOG_USEC): 59999999 µs, rounded to six
    digits, was said "WatchdogSec=60s is too short ... set it to at least 60s"."""
    said = budget.watchdog_problem(30, 59.999999)
    assert said is not None and "WatchdogSec=59.999999s is too short" in said, said
    assert "at least 60s" in said


@pytest.mark.parametrize(("interval_s", "watchdog_s", "most", "least"),
                         [(30, 59.999999, "29.999999", "60"),
                          (12.3456789, 40, "10", "42.345679")])
def test_the_fixes_a_short_watchdog_is_told_hold_a_cycle(
        interval_s: float, watchdog_s: float, most: str, least: str) -> None:
    """The interval to lower to and the watchdog to raise to, each a value that passes:
    rounded to six digits, 29.999999 s was said "lower sync.interval_s to 30s or less",
    the interval already refused, and 42.3456789 s "at least 42.3457s", short of it."""
    said = budget.watchdog_problem(interval_s, watchdog_s)
    assert said is not None and f"lower sync.interval_s to {most}s or less" in said, said
    assert f"at least {least}s" in said, said
    assert budget.watchdog_problem(float(most), watchdog_s) is None
    assert budget.watchdog_problem(interval_s, float(least)) is None
