"""The over-share restart's closed gate is never left closed by a daemon that stops in
its wait.

The restart closes the service's gate on the node, waits for Swarm to stop the task,
and reopens the gate (``overshare.Restarter``). A SIGTERM in that wait had the write
gate refuse the reopening (``engine.stop``): the gate stayed closed until the next
daemon on that manager planned it open again, and for good if none started. The
reopening is an undo (``stop.undoing``), let through once the stop is asked, as past
the cycle's budget (tests/test_cycle_engine_budget.py). Pure, over the recording Swarm
stand-in (tests/support/forged.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import pytest
from support.forged import (
    T_UUID,
    P,
    RecordingSwarm,
    offline_daemon,
    victim_cluster,
)
from support.loglines import log_lines

from swarmgpu.core.config import Config, PlacementConfig, SyncConfig
from swarmgpu.manager.cycle.overshare import OvershareStep
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.engine.stop import Stopped
from swarmgpu.manager.placement import gate_key
from swarmgpu.manager.rebalance.context import MOVED_AT
from swarmgpu.manager.services.overshare import ServiceUse
from swarmgpu.swarm.client import SwarmTask

THIRD = ServiceUse("third", "n-4090", "gpu-node-2", 0, T_UUID, 30000, 20000, 1000,
                   ("t-third",), (), ("c" * 12,))


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    yield from log_lines("WARNING")


class StopInTheWait(RecordingSwarm):
    """The daemon is asked to stop (SIGTERM) as the restart's wait lists the tasks; the
    old task keeps running (Swarm's enforcer is slow)."""

    daemon: Daemon
    lists = 0

    def tasks(self, filters: Mapping[str, Any] | None = None, *,
              states: AbstractSet[str] | None = None, read: Any = None) -> list[SwarmTask]:
        self.lists += 1
        if self.lists > 1:
            self.daemon.stop_event.set()
        return super().tasks(filters, states=states)


def test_a_stop_in_the_restarts_wait_reopens_its_gate_before_the_step_ends(
        tmp_path: Path, warnings: list[str]) -> None:
    base = victim_cluster({})
    sw = StopInTheWait(base.nodes(), base.services(), base.tasks(), base.swarm_labels())
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 placement=PlacementConfig(overshare="restart"))
    sw.daemon = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]  # (its write gate)
    step = OvershareStep(sw.daemon)
    step.restarter.wait_s = 5.0
    start = time.monotonic()
    with pytest.raises(Stopped):  # (the step ends there, as at any write after the stop)
        step.restarter._bounce(sw.service("id-third"), THIRD, MOVED_AT)
    assert sw.node("n-4090").labels.get(gate_key(P, "third")) == "true"
    assert time.monotonic() - start < 2.0  # within the stop's grace, not the whole wait
    said = [w for w in warnings if "third" in w]
    assert len(said) == 1 and "stop" in said[0] and "gate reopened" in said[0], said


def test_the_next_daemon_reopens_a_gate_an_over_share_restart_left_closed(
        tmp_path: Path) -> None:
    """What a daemon killed in the wait (SIGKILL: no undo) leaves: third's holding and
    cooldown mark, its gate gone, its old task stopped by Swarm. The next daemon's
    placement opens the gate again."""
    base = victim_cluster({})
    sw = RecordingSwarm(base.nodes(), base.services(),
                        [t for t in base.tasks() if t.id != "t-third"], base.swarm_labels())
    sw.update_node_labels("n-4090", lambda cur: {k: v for k, v in cur.items()
                                                  if k != gate_key(P, "third")})
    assert gate_key(P, "third") not in sw.node("n-4090").labels
    offline_daemon(sw, str(tmp_path)).cycle()
    assert sw.node("n-4090").labels.get(gate_key(P, "third")) == "true"
