"""The mover's budgets and its writes across a restart (a new leader) and an engine
answer that was lost: pure, over the recording Swarm stand-in (tests/support/forged.py).

- A fragmentation move in flight when the daemon restarts is this hour's move for the
  new daemon too: the budget per hour is not reset by the restart.
- A spec write of a move's first step whose answer is lost (a timeout: the engine may
  have made it) never leaves the surge (replicas + 1, MaxReplicas 1) behind with no
  record to undo it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.forged import DGX_F, T_UUID, P, RecordingSwarm, victim_cluster, victim_move

from swarmgpu.core.config import Config, RebalanceConfig
from swarmgpu.core.rebalanceconfig import FragmentationConfig
from swarmgpu.manager.cycle.rebalance import Rebalancer
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.placement import MOVE_STATE
from swarmgpu.manager.rebalance.mover import Mover, read_records
from swarmgpu.manager.rebalance.moves import Move, Outcome, Trigger
from swarmgpu.swarm.client import SwarmTask, SwarmUnavailable, VersionConflict

RB = RebalanceConfig(dry_run=False, move_timeout_s=120.0, fragmentation=FragmentationConfig(
    moves_per_hour=1, moves_per_100_placements=100.0))


def _frag(m: Move) -> Move:
    return replace(m, trigger=Trigger.FRAGMENTATION, window_s=None)


def _third_move() -> Move:
    """third (RTX 4090 GPU 0) onto the DGX's free GPU 1: another fragmentation move."""
    return Move(service="third", service_id="id-third", source_node="n-4090",
                source_host="gpu-node-2", source_uuids=(T_UUID,), source_milli=(1000,),
                target_node="n-dgx", target_host="gpu-node-1", target_gpus=(1,),
                target_uuids=(DGX_F.gpus[1].uuid,), target_milli=(1000,),
                trigger=Trigger.FRAGMENTATION, window_s=None, reason="test", gain="test")


def _mover(sw: RecordingSwarm, now: list[float]) -> Mover:
    return Mover(sw, RB, prefix=P, dry_run=False,  # type: ignore[arg-type]
                 clock=lambda: now[0])


def test_a_fragmentation_move_in_flight_at_a_restart_spends_the_new_daemons_hour() -> None:
    sw, now = victim_cluster({}), [1000.0]
    m1 = _mover(sw, now)
    m1.run_cycle([_frag(victim_move())], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in m1.recent] == [Outcome.STARTED]
    assert m1.frag_budget.left(now[0])[0] == 0  # 1 per hour: spent
    # The daemon restarts (or another manager takes the lead) while the move is in flight;
    # the new one finishes it.
    now[0] += 10.0
    sw.run_task(SwarmTask("t-victim-2", "id-victim", "n-4090", 2, "running", "running", ()))
    m2 = _mover(sw, now)
    for _ in range(3):
        m2.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
        sw.stop_tasks("id-victim", "n-dgx")  # the enforcer stops the task on the closed node
        now[0] += 10.0
    assert [r.outcome for r in m2.recent] == [Outcome.DONE]
    # Within the same hour, another fragmentation move is refused: the hour's one move
    # was the one the restart interrupted.
    m2.run_cycle([_third_move()], sw.nodes(), sw.services(), sw.tasks())
    assert Outcome.STARTED not in [r.outcome for r in m2.recent]
    assert set(read_records(sw.swarm_labels(), P)) == set()
    assert m2.frag_budget.left(now[0])[0] == 0


def test_a_daemon_elected_again_counts_the_hour_of_the_leader_between(tmp_path: Path) -> None:
    """This daemon led (its budget had looked once), another manager led meanwhile and
    made the hour's one fragmentation move; elected again, this daemon's rebalancer
    reads the hour from Swarm as a new leader does. Before, its budget kept its own
    term's count (the hour read on a first look only): a second move in the hour."""
    sw, now = victim_cluster({}), [1000.0]
    rb = Rebalancer(Daemon(Config(state_dir=str(tmp_path), rebalance=RB),  # type: ignore[arg-type]
                           swarm=sw))  # type: ignore[arg-type]
    rb.mover = _mover(sw, now)
    rb.mover.run_cycle([], sw.nodes(), sw.services(), sw.tasks())  # its term's first look
    other = _mover(sw, now)  # the leader between
    other.run_cycle([_frag(victim_move())], sw.nodes(), sw.services(), sw.tasks())
    now[0] += 10.0
    sw.run_task(SwarmTask("t-victim-2", "id-victim", "n-4090", 2, "running", "running", ()))
    for _ in range(3):
        other.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
        sw.stop_tasks("id-victim", "n-dgx")
        now[0] += 10.0
    assert [r.outcome for r in other.recent] == [Outcome.STARTED, Outcome.DONE]
    rb.stand_by()  # the daemon's cycle found it a follower, or its term lost
    rb.mover.run_cycle([_third_move()], sw.nodes(), sw.services(), sw.tasks())
    assert Outcome.STARTED not in [r.outcome for r in rb.mover.recent]
    assert rb.mover.frag_budget.left(now[0])[0] == 0


class LostAnswer(RecordingSwarm):
    """The next service spec write's answer is lost (a read timeout): the client raises
    whether or not the engine made it (``made``)."""

    lose_next = False
    made = True

    def update_service_spec(self, service_id: str, compute: Any, **kw: Any) -> bool:
        if self.lose_next:
            self.lose_next = False
            if self.made:
                super().update_service_spec(service_id, compute, **kw)
            raise SwarmUnavailable("Docker Engine unreachable: read timed out")
        return super().update_service_spec(service_id, compute, **kw)


@pytest.mark.parametrize("made", [True, False])
def test_a_first_step_whose_answer_is_lost_leaves_no_surge_behind(made: bool) -> None:
    base = victim_cluster({})
    sw, now = LostAnswer(base.nodes(), base.services(), base.tasks()), [1000.0]
    before = sw.service("id-victim").spec
    sw.lose_next, sw.made = True, made
    m = _mover(sw, now)
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    # The spec carries the move label and the surge (the engine made the write); later
    # cycles, of this daemon or the next, either finish the move or undo it.
    for _ in range(4):
        now[0] += RB.move_timeout_s + 1
        m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    spec = sw.service("id-victim").spec
    assert spec["Mode"] == before["Mode"]
    assert spec["TaskTemplate"]["Placement"] == before["TaskTemplate"]["Placement"]
    assert read_records(sw.swarm_labels(), P) == {}
    assert f"{P}{MOVE_STATE}" not in spec["Labels"]


def test_a_first_step_that_surely_did_not_land_drops_its_record() -> None:
    """An engine answer that says the write was not made (out of sequence five times):
    the record goes at once, nothing else was written, nothing is left to undo."""

    class Conflict(RecordingSwarm):
        def update_service_spec(self, service_id: str, compute: Any, **kw: Any) -> bool:
            raise VersionConflict("update out of sequence")

    base = victim_cluster({})
    sw, now = Conflict(base.nodes(), base.services(), base.tasks()), [1000.0]
    before = sw.service("id-victim").spec
    m = _mover(sw, now)
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in m.recent] == [Outcome.FAILED]
    assert read_records(sw.swarm_labels(), P) == {}
    assert sw.service("id-victim").spec == before
    assert [c for c in sw.calls if c[0] == "node"] == []


def test_a_move_whose_target_write_fails_after_its_record_is_spent() -> None:
    """Step 2 (the target's gate) fails once after the record and the spec were written:
    the move is in flight by its record and the next cycle opens the target, so it is
    this hour's fragmentation move, not a failed one."""

    class NodeDown(RecordingSwarm):
        fail_next = True

        def update_node_labels(self, node_id: str, compute: Any, **kw: Any) -> bool:
            if self.fail_next:
                self.fail_next = False
                raise SwarmUnavailable("Docker Engine unreachable: connection reset")
            return super().update_node_labels(node_id, compute, **kw)

    base = victim_cluster({})
    sw, now = NodeDown(base.nodes(), base.services(), base.tasks()), [1000.0]
    m = _mover(sw, now)
    m.run_cycle([_frag(victim_move())], sw.nodes(), sw.services(), sw.tasks())
    assert set(read_records(sw.swarm_labels(), P)) == {"id-victim"}
    sw.run_task(SwarmTask("t-victim-2", "id-victim", "n-4090", 2, "running", "running", ()))
    for _ in range(4):
        now[0] += 10.0
        m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
        sw.stop_tasks("id-victim", "n-dgx")
    assert m.recent[-1].outcome is Outcome.DONE
    m.run_cycle([_third_move()], sw.nodes(), sw.services(), sw.tasks())
    assert read_records(sw.swarm_labels(), P) == {}
    assert m.frag_budget.left(now[0])[0] == 0
