"""An over-share restart whose cool-down mark write came back cut (its outcome unknown)
is made by the next cycle, not held back for the cool-down its own mark would start.

The restart writes ``<p>state.moved-at`` first, then closes the gate
(``overshare.Restarter._bounce``). A mark write cut at the cycle's slack
(``answerjson.WriteCut``, which the client raises as unreachable) may have landed: the
gate was never closed, no restart was made, yet the next cycle read the mark and
waited ``rebalance.cooldown_s`` for it. Swarm is the truth: the next cycle reads the
service back, and a mark there that is the one whose write was cut stands for no
restart; another (a move's, written since) still cools. A daemon stop (or the cycle's
budget) that refuses the gate's close after the mark landed takes the mark back, an
undo: no restart was made, and the next leader cannot know it. Pure, over the recording
Swarm stand-in (tests/support/forged.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.forged import THIRD, P, RecordingSwarm, snapshot, victim_cluster

from swarmgpu.core.config import Config, PlacementConfig, SyncConfig
from swarmgpu.manager.cycle.budget import OverBudget
from swarmgpu.manager.cycle.overshare import OvershareStep
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.engine.stop import BudgetEnded, Stopped, StopRequest
from swarmgpu.manager.placement import gate_key
from swarmgpu.manager.rebalance.context import MOVED_AT
from swarmgpu.manager.services.overshare import Restarter
from swarmgpu.swarm.client import SwarmUnavailable

NOW = 1_000_000.0


class MarkLandsCut(RecordingSwarm):
    """The first write of third's spec lands, and its answer is cut (``WriteCut``)."""

    cut = 1

    def update_service_spec(self, service_id: str,
                            compute: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
                            **kw: Any) -> bool:
        landed = super().update_service_spec(service_id, compute, **kw)
        if service_id == "id-third" and self.cut:
            self.cut -= 1
            raise SwarmUnavailable("Docker Engine unreachable at test: the engine's answer "
                                   "to POST /services/id-third/update, a write's, was not "
                                   "read within 5.0 s")
        return landed


def _cluster() -> MarkLandsCut:
    """victim_cluster with third's task running its checked container."""
    base = victim_cluster({})
    tasks = [replace(t, container_id="c" * 64) if t.id == "t-third" else t
             for t in base.tasks()]
    return MarkLandsCut(base.nodes(), base.services(), tasks, base.swarm_labels())


def _restarter(sw: RecordingSwarm, tmp_path: Path, now: list[float]) -> Restarter:
    cfg = Config(state_dir=str(tmp_path), dry_run=False,
                 placement=PlacementConfig(overshare="restart"))
    return Restarter(sw, cfg, clock=lambda: now[0], wait_s=0.0)  # type: ignore[arg-type]


def test_a_mark_whose_write_was_cut_holds_back_no_restart_next_cycle(tmp_path: Path) -> None:
    sw, now = _cluster(), [NOW]
    r = _restarter(sw, tmp_path, now)
    with pytest.raises(SwarmUnavailable):  # (the cut ends the step, as before)
        r.run([THIRD], snapshot(sw.nodes(), sw.services(), sw.tasks()))
    assert sw.service("id-third").labels[P + MOVED_AT] == f"{NOW:.0f}"  # it landed
    assert sw.node("n-4090").labels.get(gate_key(P, "third")) == "true"  # never closed
    now[0] += 30.0
    assert r.run([THIRD], snapshot(sw.nodes(), sw.services(), sw.tasks())) == 1
    assert sw.service("id-third").labels[P + MOVED_AT] == f"{NOW + 30:.0f}"  # its own now


def test_a_mark_written_since_the_cut_one_still_cools(tmp_path: Path) -> None:
    sw, now = _cluster(), [NOW]
    r = _restarter(sw, tmp_path, now)
    with pytest.raises(SwarmUnavailable):
        r.run([THIRD], snapshot(sw.nodes(), sw.services(), sw.tasks()))
    # a move ended since (its own mark): that one is Swarm's word, and cools
    sw.update_service_spec("id-third", lambda spec: {
        **spec, "Labels": {**spec["Labels"], P + MOVED_AT: f"{NOW + 10:.0f}"}})
    now[0] += 30.0
    assert r.run([THIRD], snapshot(sw.nodes(), sw.services(), sw.tasks())) == 0
    assert sw.node("n-4090").labels.get(gate_key(P, "third")) == "true"


class StopAfterTheMark(RecordingSwarm):
    """The daemon is asked to stop (SIGTERM) as third's mark write lands: the write gate
    refuses the gate's close before it is sent (``engine.stop``)."""

    daemon: Daemon

    def update_service_spec(self, service_id: str,
                            compute: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
                            **kw: Any) -> bool:
        landed = super().update_service_spec(service_id, compute, **kw)
        self.daemon.stop_event.set()
        return landed


@pytest.mark.parametrize("before", [None, f"{NOW - 5000:.0f}"])
def test_a_stop_before_the_gate_closed_takes_its_mark_back(
        before: str | None, tmp_path: Path) -> None:
    """No gate closed, no restart made: the mark goes (the one before it, ``before``,
    put back), so the next leader holds no restart back for it. Before, it stayed, and
    the next leader waited the whole cool-down."""
    base = _cluster()
    base.cut = 0
    if before is not None:
        base.update_service_spec("id-third", lambda spec: {
            **spec, "Labels": {**spec["Labels"], P + MOVED_AT: before}})
    sw = StopAfterTheMark(base.nodes(), base.services(), base.tasks(), base.swarm_labels())
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 placement=PlacementConfig(overshare="restart"))
    sw.daemon = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]  # (its write gate)
    step = OvershareStep(sw.daemon)
    with pytest.raises(Stopped):
        step.restarter._bounce(sw.service("id-third"), THIRD, MOVED_AT)
    assert sw.service("id-third").labels.get(P + MOVED_AT) == before
    assert sw.node("n-4090").labels.get(gate_key(P, "third")) == "true"


class BudgetAfterTheMark(MarkLandsCut):
    """third's mark write lands whole; the write after it (the gate's close) is refused
    as past the cycle's engine budget, before it is sent."""

    cut = 0
    tried = 0

    def before_write(self) -> None:
        self.tried += 1
        if self.tried > 1:
            raise OverBudget(StopRequest())


def test_a_budget_end_before_the_gate_closed_holds_back_no_restart_next_cycle(
        tmp_path: Path) -> None:
    """The daemon goes on: the mark stays in Swarm (no write past the budget) and the
    next cycle reads it back as this restart's, not made."""
    base, now = _cluster(), [NOW]
    sw = BudgetAfterTheMark(base.nodes(), base.services(), base.tasks(), base.swarm_labels())
    r = _restarter(sw, tmp_path, now)
    with pytest.raises(BudgetEnded):
        r.run([THIRD], snapshot(sw.nodes(), sw.services(), sw.tasks()))
    assert sw.service("id-third").labels[P + MOVED_AT] == f"{NOW:.0f}"
    assert sw.node("n-4090").labels.get(gate_key(P, "third")) == "true"
    sw.tried = -10  # the next cycle's budget
    now[0] += 30.0
    assert r.run([THIRD], snapshot(sw.nodes(), sw.services(), sw.tasks())) == 1
