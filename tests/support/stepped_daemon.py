"""A daemon with its real steps over a test's swarm, its cycles run by the test
(tests/test_follower_metrics.py, tests/test_follower_map.py, tests/test_stale_facts.py)."""

from __future__ import annotations

import tempfile
from typing import Any, TypeVar

import pytest

from swarmgpu.core.config import AgentsConfig, Config, HttpConfig, RebalanceConfig, SyncConfig
from swarmgpu.manager.cycle.wiring import daemon_steps
from swarmgpu.manager.daemon import Daemon

S = TypeVar("S")


def stepped_daemon(monkeypatch: pytest.MonkeyPatch, swarm: Any, *,
                   timeout_s: float = 0.5) -> Daemon:
    """A daemon over ``swarm`` with ``daemon_steps``: no events watched, agents asked
    without identity or watch (``timeout_s``), its HTTP on a free port, its state in a
    new temporary directory, rebalancing on; ``$WATCHDOG_USEC`` unset (a watchdog in
    the test's environment would bound its cycles' engine time)."""
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    cfg = Config(state_dir=tempfile.mkdtemp(), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(timeout_s=timeout_s, identity="none", watch_s=0),
                 http=HttpConfig(listen="127.0.0.1:0"),
                 rebalance=RebalanceConfig(enabled=True))
    d = Daemon(cfg, swarm=swarm)
    d.use(daemon_steps(d))
    return d


def step_of(d: Daemon, kind: type[S]) -> S:
    """``d``'s pipeline step of class ``kind``."""
    return next(s for s in d.pipeline.steps if isinstance(s, kind))
