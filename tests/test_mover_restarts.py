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

from support.forged import DGX_F, T_UUID, P, RecordingSwarm, victim_cluster, victim_move

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.core.rebalanceconfig import FragmentationConfig
from swarmgpu.manager.rebalance.mover import Mover, read_records
from swarmgpu.manager.rebalance.moves import Move, Outcome, Trigger
from swarmgpu.swarm.client import SwarmTask

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
