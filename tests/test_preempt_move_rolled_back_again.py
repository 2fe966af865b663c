"""A preemption's victim whose move rolled back is stopped, not moved again, when its
preemptor preempts it again within the cooldown, whatever its labels say.

A move whose target's task never runs (a model server that loads for longer than
``move_timeout_s``, or an image that never turns healthy beside its old task) rolls back
after the timeout: the victim runs on where it ran, and the roll-back's
``<p>state.moved-at`` mark is what made the next preemption stop it (the mover refuses a
move in its cooldown). That mark is a label on the victim's own spec, which its stack
rewrites on each deploy: taken away, the next preemption moved it again, and again
after each roll-back, so it was never stopped, its preemptor never ran, and each move
held a slot of the move budget for ``move_timeout_s``. Pure, over the recording Swarm
stand-in (tests/support/forged.py)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from support.forged import RecordingSwarm
from support.move_then_preempt import (
    FACTS,
    REBALANCE,
    P,
    batch_to_dgx,
    batch_world,
    snapshot_of,
)

from swarmgpu.core.config import Config, PreemptionConfig
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.placement import PlacementPlan, gate_key
from swarmgpu.manager.rebalance.context import MOVED_AT
from swarmgpu.manager.rebalance.mover import Mover, read_records

T = 1000.0  # the Preempter's clock (monotonic) at the first preemption
WALL = 5000.0  # the wall clock's then


def _rolled_back(tmp_path: Path, cooldown_s: float | None = None,
                 ) -> tuple[RecordingSwarm, Preempter, Mover]:
    """high's preemption of batch, moved to the DGX; its task there never runs, and the
    move rolls back past ``move_timeout_s`` (batch runs on on the RTX node).
    ``cooldown_s``: the Preempter's ``rebalance.cooldown_s`` (None: REBALANCE's)."""
    sw = RecordingSwarm(*batch_world())
    rb = REBALANCE if cooldown_s is None else replace(REBALANCE, cooldown_s=cooldown_s)
    cfg = Config(state_dir=str(tmp_path), rebalance=rb,
                 preemption=PreemptionConfig(dry_run=False, preemptible_below=100))
    now = [WALL]
    pre = Preempter(cfg, clock=lambda: T)
    p = batch_to_dgx()
    got, _ = pre._act(sw, snapshot_of(sw), PlacementPlan(), p, "", WALL, [], T)
    pre.took(p, got, T)
    assert {st.service for st in read_records(sw.swarm_labels(), P).values()} == {"batch"}
    # its target's task never ran: the mover's clock (the record's: the wall clock's)
    # past ``move_timeout_s``
    mover = Mover(sw, REBALANCE, prefix=P, dry_run=False,  # type: ignore[arg-type]
                  clock=lambda: time.time() + REBALANCE.move_timeout_s + 5)
    now[0] = WALL + REBALANCE.move_timeout_s + 5
    snap = snapshot_of(sw)
    mover.run_cycle([], snap.nodes, snap.services, snap.tasks)
    assert read_records(sw.swarm_labels(), P) == {}  # rolled back
    assert gate_key(P, "batch") in sw.node("n-4090").labels
    assert P + MOVED_AT in sw.service("id-batch").labels  # the roll-back's mark, as a
    sw.update_service_spec("id-batch", lambda spec: {  # mover on the wall clock writes it
        **spec, "Labels": {**spec["Labels"], P + MOVED_AT: f"{time.time():.0f}"}})
    pre.decide(snapshot_of(sw), PlacementPlan(), FACTS, None, now[0], mono=T + 130)
    return sw, pre, mover


@pytest.mark.parametrize("mark", ["kept", "gone"])
def test_a_victim_whose_move_rolled_back_is_stopped_next_time_though_its_mark_is_gone(
        tmp_path: Path, mark: str) -> None:
    sw, pre, _ = _rolled_back(tmp_path)
    if mark == "gone":  # its stack deployed again: the labels are the file's
        sw.update_service_spec("id-batch", lambda spec: {
            **spec, "Labels": {k: v for k, v in spec["Labels"].items()
                               if k != P + MOVED_AT}})
    wall, mono = WALL + 200, T + 200  # past high's settle time
    pre.decide(snapshot_of(sw), PlacementPlan(), FACTS, None, wall, mono=mono)
    got, _ = pre._act(sw, snapshot_of(sw), PlacementPlan(), batch_to_dgx(), "", wall, [],
                      mono)
    assert [v.service for v in got] == ["batch"]
    assert read_records(sw.swarm_labels(), P) == {}  # not moved again
    assert gate_key(P, "batch") not in sw.node("n-4090").labels  # stopped


def test_with_no_cooldown_a_victim_whose_move_rolled_back_is_moved_again(
        tmp_path: Path) -> None:
    """``rebalance.cooldown_s: 0`` asks for none: the roll-back's mark cools nothing and
    the mover moves the victim again. The daemon's memory of the roll-back kept it the
    cycle it was found in (judged before its age), and the victim preempted again in
    that cycle was stopped where the docs and the mark say moved."""
    sw, pre, _ = _rolled_back(tmp_path, cooldown_s=0.0)
    wall, mono = WALL + REBALANCE.move_timeout_s + 5, T + 130  # that same cycle
    got, _ = pre._act(sw, snapshot_of(sw), PlacementPlan(), batch_to_dgx(), "", wall, [],
                      mono)
    assert [v.service for v in got] == ["batch"]
    assert {st.service for st in read_records(sw.swarm_labels(), P).values()} == {"batch"}
    assert gate_key(P, "batch") in sw.node("n-4090").labels  # moved, not stopped
