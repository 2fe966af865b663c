"""The daemon's life around its cycles, without a swarm: the wall clock stepping, the
schedule, signals, the systemd watchdog."""

from __future__ import annotations

import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from swarmgpu.core.config import AgentsConfig, Config, HttpConfig, SyncConfig
from swarmgpu.manager.daemon import Daemon
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask


class EmptySwarm:
    """A swarm with no nodes and no services, at swarmgpu's client boundary."""

    on_write: Any = None
    may_write: Any = None

    def is_leader(self) -> bool:
        return True

    def swarm_labels(self) -> dict[str, str]:
        return {}

    def nodes(self) -> list[SwarmNode]:
        return []

    def services(self) -> list[SwarmService]:
        return []

    def tasks(self, filters: Any = None) -> list[SwarmTask]:
        return []


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
    d.cycle()
    step_wall_clock(monkeypatch, by_s)
    doc = d.health()
    assert doc["status"] == "ok"
    assert 0 <= doc["last_cycle_age_s"] < 5
