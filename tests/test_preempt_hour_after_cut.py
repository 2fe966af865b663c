"""The preemption hour after a cycle cut part-way (its engine budget): what the leader's
memory holds beyond the hour stored is stored at the next hour write, and that is the
cautious side.

Each victim's count is stored before its writes (``HourStore.reserve``; a move's, before
its first write), so a cut leaves Swarm's hour at least what was done; a reservation
given back (a stop refused, a move that never started) is kept in ``SpentHour.given``
until a write takes it out, and the next cycle stores the hour without it, whatever
that cycle preempts. Pure, over the recording Swarm stand-in (tests/support/forged.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from support.forged import FACTS, P, snapshot, victim_cluster

from swarmgpu.core.config import Config, PreemptionConfig
from swarmgpu.manager.cycle.preempt_budget import STATE_KEY
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.engine.stop import TermEnded
from swarmgpu.manager.placement import PlacementPlan
from swarmgpu.manager.placement.preempt import Preemption

NOW = 1_800_000_000.0


def test_a_reservation_given_back_before_a_cut_is_stored_out_by_the_next_cycle(
        tmp_path: Path) -> None:
    sw = victim_cluster({})
    cfg = Config(state_dir=str(tmp_path), preemption=PreemptionConfig(dry_run=False))
    pre = Preempter(cfg, clock=lambda: 1000.0)
    p = Preemption("attacker", "id-attacker", 100, "n-dgx", "gpu-node-1", ())
    assert pre.hour.reserve(sw, p, "", ["id-a", "id-b"], NOW)  # stored before their writes
    assert sw.swarm_labels()[P + STATE_KEY].count(",") == 1  # two times
    # (and whose: tests/test_victim_record_copied.py)
    assert sw.swarm_labels()[P + "state.preempted-victims"] == f"id-a@{NOW:.0f},id-b@{NOW:.0f}"
    pre.spent.release(NOW, "", 1)  # one stop refused; the cycle is cut before its store
    snap = replace(snapshot(sw.nodes(), sw.services(), sw.tasks()),
                   swarm_labels=sw.swarm_labels())
    assert pre.cycle(sw, snap, PlacementPlan(), FACTS, now=NOW + 30) == []
    assert sw.swarm_labels()[P + STATE_KEY].count(",") == 0  # the one done, alone
    assert len(pre.spent.all) == 1 and pre.spent.given == []


def test_a_reservation_the_ended_term_refused_is_not_left_spent(tmp_path: Path) -> None:
    """The term ended in the cycle: the hour's store before the victims' writes is refused
    by the write gate (``TermEnded``), nothing stored and no victim stopped. Before: the
    two victims stayed spent in the Preempter's memory (only a failed write or the
    budget's end gave them back), so this daemon, leading again, counted and later
    stored two stops that never were, holding preemptors back for the hour."""
    sw = victim_cluster({})
    cfg = Config(state_dir=str(tmp_path), preemption=PreemptionConfig(dry_run=False))
    pre = Preempter(cfg, clock=lambda: 1000.0)
    p = Preemption("attacker", "id-attacker", 100, "n-dgx", "gpu-node-1", ())

    def gate() -> None:
        raise TermEnded()

    sw.before_write = gate  # type: ignore[attr-defined]
    with pytest.raises(TermEnded):
        pre.hour.reserve(sw, p, "", ["id-a", "id-b"], NOW)
    assert P + STATE_KEY not in sw.swarm_labels()
    assert list(pre.spent.all) == []
