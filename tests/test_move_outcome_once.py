"""A move's outcome (done, rolled back, failed) is said once, with the reason it ended:
in ``recent``, the log and ``swarmgpu_moves``. Its record's removal is the move's last
write; one that fails is retried next cycle, and the retry says nothing more. Before, a
failed removal left the outcome to the retry, which found the move label gone (the
first try removed it) and said "the service's move label was gone (re-deployed?)" -- a
health move that failed was counted done -- and a removal whose answer was lost (made,
then a timeout) left the move with no outcome at all. Pure, over the recording Swarm
stand-in (tests/support/forged.py): victim moves from gpu-node-1 to gpu-node-2."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.forged import (
    P,
    RecordDropFails,
    record_put_answer_lost,
    start_with_its_record_answer_lost,
    victim_cluster,
    victim_move,
)

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
from swarmgpu.manager.rebalance.mover import Mover, read_records
from swarmgpu.manager.rebalance.moves import MoveRecord, Outcome, Trigger

ENDED = (Outcome.DONE, Outcome.ROLLED_BACK, Outcome.FAILED)


def _timed_out(trigger: Trigger, landed: bool) -> tuple[list[MoveRecord], float]:
    """The move started, then past its timeout with no task on the target; its record's
    removal fails once. The outcomes said over four cycles, and the metric's count."""
    sw = RecordDropFails.over(victim_cluster({}), landed)
    now, metrics = [1000.0], DaemonMetrics()
    cfg = RebalanceConfig(dry_run=False, move_timeout_s=120.0)
    m = Mover(sw, cfg, prefix=P, dry_run=False, clock=lambda: now[0],  # type: ignore[arg-type]
              metrics=metrics)
    m.run_cycle([replace(victim_move(), trigger=trigger)], sw.nodes(), sw.services(),
                sw.tasks())
    now[0] += 200.0
    sw.fail = 1
    for _ in range(4):
        m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert read_records(sw.swarm_labels(), P) == {} and sw.fail == 0
    counted = sum(s.value for metric in metrics.moves.collect() for s in metric.samples
                  if s.name.endswith("_total") and s.labels["outcome"] in ENDED)
    return [r for r in m.recent if r.outcome in ENDED], counted


@pytest.mark.parametrize("landed", [False, True], ids=["failed", "answer-lost"])
def test_a_roll_back_whose_record_drop_fails_is_said_once_with_its_reason(
        landed: bool) -> None:
    ended, counted = _timed_out(Trigger.HOTSPOT, landed)
    assert [r.outcome for r in ended] == [Outcome.ROLLED_BACK] and counted == 1
    assert "no task running on gpu-node-2 within 120s" in ended[0].detail
    assert "re-deployed" not in ended[0].detail


@pytest.mark.parametrize("landed", [False, True], ids=["failed", "answer-lost"])
def test_a_health_move_kept_on_its_target_is_said_failed_once(landed: bool) -> None:
    ended, counted = _timed_out(Trigger.HEALTH, landed)
    assert [r.outcome for r in ended] == [Outcome.FAILED] and counted == 1
    assert "not rolled back onto the failed GPU" in ended[0].detail


def test_a_start_whose_record_answer_was_lost_is_said_failed_once() -> None:
    """The record write made, its answer lost: the start raised, said failed; the next
    cycle finds the record (no move label: ``recover``) and rolls it back. Before, that
    roll-back said ``rolled-back`` too: two outcomes, two counts, for one move."""
    sw, now, metrics = victim_cluster({}), [1000.0], DaemonMetrics()
    cfg = RebalanceConfig(dry_run=False, move_timeout_s=120.0)
    m = Mover(sw, cfg, prefix=P, dry_run=False, clock=lambda: now[0],  # type: ignore[arg-type]
              metrics=metrics)
    start_with_its_record_answer_lost(sw, m, victim_move(), now)
    ended = [r.outcome for r in m.recent if r.outcome in ENDED]
    counted = sum(s.value for metric in metrics.moves.collect() for s in metric.samples
                  if s.name.endswith("_total") and s.labels["outcome"] in ENDED)
    assert ended == [Outcome.FAILED] and counted == 1, ended


def test_a_daemon_restarted_after_a_failed_start_says_no_roll_back() -> None:
    """The start raised after its record landed, said failed; the daemon restarts (or
    another manager leads) before the roll-back. The new mover rolls the move back and
    says nothing: the record says its outcome was said. Before, the said-once set was
    the first daemon's memory: the new one said ``rolled-back`` too (two outcomes, two
    counts in ``swarmgpu_moves`` for one move)."""
    sw, now = victim_cluster({}), [1000.0]
    record_put_answer_lost(sw)
    cfg = RebalanceConfig(dry_run=False, move_timeout_s=120.0)
    first = Mover(sw, cfg, prefix=P, dry_run=False,  # type: ignore[arg-type]
                  clock=lambda: now[0])
    first.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in first.recent if r.outcome in ENDED] == [Outcome.FAILED]
    assert read_records(sw.swarm_labels(), P) != {}  # it landed
    metrics = DaemonMetrics()
    second = Mover(sw, cfg, prefix=P, dry_run=False, clock=lambda: now[0],  # type: ignore[arg-type]
                   metrics=metrics)
    for _ in range(3):
        now[0] += 1.0
        second.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert read_records(sw.swarm_labels(), P) == {}
    counted = sum(s.value for metric in metrics.moves.collect() for s in metric.samples
                  if s.name.endswith("_total") and s.labels["outcome"] in ENDED)
    assert [r.outcome for r in second.recent if r.outcome in ENDED] == [] and counted == 0


@pytest.mark.parametrize("trigger", [Trigger.HOTSPOT, Trigger.HEALTH])
def test_a_daemon_restarted_before_its_record_drop_says_the_end_once(trigger: Trigger) -> None:
    """The move ended (said), its record's removal failed; the daemon restarts before
    the retry. The new mover drops the record and says nothing again."""
    sw, now = RecordDropFails.over(victim_cluster({}), False), [1000.0]
    cfg = RebalanceConfig(dry_run=False, move_timeout_s=120.0)
    first = Mover(sw, cfg, prefix=P, dry_run=False,  # type: ignore[arg-type]
                  clock=lambda: now[0])
    first.run_cycle([replace(victim_move(), trigger=trigger)], sw.nodes(), sw.services(),
                    sw.tasks())
    now[0] += 200.0
    sw.fail = 1
    first.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert len([r for r in first.recent if r.outcome in ENDED]) == 1
    assert read_records(sw.swarm_labels(), P) != {} and sw.fail == 0  # its drop failed
    second = Mover(sw, cfg, prefix=P, dry_run=False,  # type: ignore[arg-type]
                   clock=lambda: now[0])
    for _ in range(3):
        now[0] += 1.0
        second.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert read_records(sw.swarm_labels(), P) == {}
    assert [r for r in second.recent if r.outcome in ENDED] == []
