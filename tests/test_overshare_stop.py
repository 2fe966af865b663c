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

from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import pytest
from support.forged import (
    THIRD,
    P,
    RecordingSwarm,
    offline_daemon,
    victim_cluster,
)
from support.loglines import log_lines

from swarmgpu.core.config import Config, PlacementConfig, SyncConfig
from swarmgpu.manager.cycle.overshare import OvershareStep
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.engine.stop import BudgetEnded, Stopped
from swarmgpu.manager.placement import gate_key
from swarmgpu.manager.rebalance.context import MOVED_AT
from swarmgpu.swarm.client import BudgetCut, SwarmTask, SwarmUnavailable


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


def restart_step(tmp_path: Path, kind: type[StopInTheWait]
                 ) -> tuple[StopInTheWait, OvershareStep]:
    """``victim_cluster``'s swarm as ``kind`` reads it, and the over-share restart step
    of the daemon it stops."""
    base = victim_cluster({})
    sw = kind(base.nodes(), base.services(), base.tasks(), base.swarm_labels())
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 placement=PlacementConfig(overshare="restart"))
    sw.daemon = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]  # (its write gate)
    return sw, OvershareStep(sw.daemon)


def test_a_stop_in_the_restarts_wait_reopens_its_gate_before_the_step_ends(
        tmp_path: Path, warnings: list[str]) -> None:
    sw, step = restart_step(tmp_path, StopInTheWait)
    step.restarter.wait_s = 5.0
    with pytest.raises(Stopped):  # (the step ends there, as at any write after the stop)
        step.restarter._bounce(sw.service("id-third"), THIRD, MOVED_AT)
    assert sw.node("n-4090").labels.get(gate_key(P, "third")) == "true"
    # The wait ended at the look that saw the stop, not after one every 0.2 s of
    # wait_s (25): counted, not timed.
    assert sw.lists <= 3, sw.lists
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


class StopThenSlowUndo(StopInTheWait):
    """As ``StopInTheWait``, and the reopening's write is cut at the cycle's slack (the
    engine too slow for the 5 s it gets: ``answerjson.WriteCut``, which the client
    raises as unreachable); the gate stays closed."""

    def update_node_labels(self, node_id: str, compute: Any, **kw: Any) -> bool:
        if compute(dict(self.node(node_id).labels)).get(gate_key(P, "third")) == "true":
            raise SwarmUnavailable("Docker Engine unreachable at test: the engine's "
                                   "answer to POST /nodes/n-4090/update, a write's, was "
                                   "not read within 5.0 s")
        return super().update_node_labels(node_id, compute, **kw)


def test_a_stop_whose_undo_is_cut_still_ends_the_step_as_a_stop_saying_the_gate_shut(
        tmp_path: Path, warnings: list[str]) -> None:
    # (before, the undo's error replaced the stop: the stopping daemon's cycle ended as
    # the engine's fault, "will retry next interval", and no line said the gate was shut)
    sw, step = restart_step(tmp_path, StopThenSlowUndo)
    step.restarter.wait_s = 5.0
    with pytest.raises(Stopped):
        step.restarter._bounce(sw.service("id-third"), THIRD, MOVED_AT)
    assert gate_key(P, "third") not in sw.node("n-4090").labels
    said = [w for w in warnings if "third" in w]
    assert any("not reopened" in w and "placement reopens it" in w for w in said), said
    assert any("stop" in w and "gate left closed" in w for w in said), said


class BudgetInTheWaitThenSlowUndo(StopThenSlowUndo):
    """The restart's wait reads its task list past the cycle's budget (cut), and the
    reopening is cut at the slack, as in ``StopThenSlowUndo``."""

    def tasks(self, filters: Mapping[str, Any] | None = None, *,
              states: AbstractSet[str] | None = None, read: Any = None) -> list[SwarmTask]:
        self.lists += 1
        if self.lists > 1:
            raise BudgetCut("the cycle's engine budget has passed (test)")
        return RecordingSwarm.tasks(self, filters, states=states)


def test_a_budget_end_in_the_wait_whose_undo_is_cut_still_ends_the_cycle_at_its_budget(
        tmp_path: Path, warnings: list[str]) -> None:
    # (before, the undo's error replaced the budget's end: an engine error, the gate's
    # state said by none)
    sw, step = restart_step(tmp_path, BudgetInTheWaitThenSlowUndo)
    with pytest.raises(BudgetEnded):
        step.restarter._bounce(sw.service("id-third"), THIRD, MOVED_AT)
    assert any("not reopened" in w for w in warnings if "third" in w), warnings


class GateGoneBeforeTheClose(StopInTheWait):
    """No stop: the gate of third on its node is gone by the time the restart closes it
    (placement released its holding there earlier in the cycle, or an operator removed
    it); its task still runs (Swarm does not evict for a label)."""

    def tasks(self, filters: Mapping[str, Any] | None = None, *,
              states: AbstractSet[str] | None = None, read: Any = None) -> list[SwarmTask]:
        return RecordingSwarm.tasks(self, filters, states=states)


def test_a_restart_whose_gate_was_already_gone_opens_none(tmp_path: Path) -> None:
    # The reopening undoes the restart's own close: with nothing closed (the gate gone
    # already), it wrote a gate placement had released, and Swarm could start the
    # service's task on a node whose GPUs the ledger no longer holds for it.
    sw, step = restart_step(tmp_path, GateGoneBeforeTheClose)
    sw.update_node_labels("n-4090", lambda cur: {k: v for k, v in cur.items()
                                                  if k != gate_key(P, "third")})
    step.restarter.wait_s = 0.3
    step.restarter._bounce(sw.service("id-third"), THIRD, MOVED_AT)
    assert gate_key(P, "third") not in sw.node("n-4090").labels


def test_a_restart_whose_gate_was_already_gone_is_not_said_made_nor_cools(
        tmp_path: Path, warnings: list[str]) -> None:
    # No gate closed, no task restarted: the restart was said made ("restarted third's
    # task"), counted (its window forgotten), and its cool-down mark stayed, holding the
    # next restart back rebalance.cooldown_s for one never made.
    sw, step = restart_step(tmp_path, GateGoneBeforeTheClose)
    before = sw.service("id-third").labels.get(P + MOVED_AT)
    sw.update_node_labels("n-4090", lambda cur: {k: v for k, v in cur.items()
                                                  if k != gate_key(P, "third")})
    assert step.restarter._bounce(sw.service("id-third"), THIRD, MOVED_AT) is False
    assert sw.service("id-third").labels.get(P + MOVED_AT) == before
    assert not any("restarted third" in w for w in warnings), warnings
    assert any("no gate" in w and "third" in w for w in warnings), warnings
