"""A repin's start checks its target GPUs against the GPUs held though the ledger shows
them free (``Inputs.held``: a task Swarm is stopping or its constraint enforcer rejected
still runs on them, or a preemptor's nomination), as its proposal did and as a move
between nodes does (``room_for``). Before, ``Repin.start`` was not given them: a hold
arising between a repin's proposal and its start let it pin its task onto GPUs a
stopping task still used. Pure, over the recording Swarm stand-in (support/forged.py)."""

from __future__ import annotations

import copy
from pathlib import Path

from support.forged import R_UUIDS, P, RecordingSwarm, repin_move, sw_node, victim_cluster

from swarmgpu.core.config import Config, RebalanceConfig, SyncConfig
from swarmgpu.manager.cycle.rebalance import Rebalancer
from swarmgpu.manager.cycle.session import CycleSession
from swarmgpu.manager.cycle.wiring import daemon_steps
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import PlacementPlan
from swarmgpu.manager.placement.nominated import STOPPING_PRIORITY
from swarmgpu.manager.placement.planner import Planner
from swarmgpu.manager.rebalance.mover import Mover, read_records

CFG = RebalanceConfig(dry_run=False, max_moves_per_cycle=9, max_moves_per_node=9)


def test_a_target_gpu_a_stopping_task_still_uses_refuses_a_repin_s_start() -> None:
    target = repin_move().target_uuids[0]
    sw = victim_cluster({})
    mover = Mover(sw, CFG, prefix=P, dry_run=False,  # type: ignore[arg-type]
                  clock=lambda: 1000.0)
    mover.held = mover.repin.held = {
        ("n-4090", target): ("tasks stopping on n-4090", STOPPING_PRIORITY)}
    before = copy.deepcopy(dict(sw.service("id-third").spec))
    labels = dict(sw.node("n-4090").labels)
    got = mover.start(repin_move(), sw.service("id-third"))
    assert not got.ok and f"{target} on gpu-node-2 is held for tasks stopping" in got.why, \
        got.why
    assert read_records(sw.swarm_labels(), P) == {}
    assert dict(sw.service("id-third").spec) == before
    assert dict(sw.node("n-4090").labels) == labels
    # a GPU held for the repinned service itself refuses nothing
    sw = victim_cluster({})
    mover = Mover(sw, CFG, prefix=P, dry_run=False,  # type: ignore[arg-type]
                  clock=lambda: 1000.0)
    mover.held = mover.repin.held = {("n-4090", target): ("third", 5)}
    assert mover.start(repin_move(), sw.service("id-third")).ok


def test_the_rebalance_step_hands_the_held_gpus_to_its_repins(tmp_path: Path) -> None:
    s = victim_cluster({}).service("id-third")
    sw = RecordingSwarm([sw_node("n-mgr", "manager", role="manager")], [s], [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 rebalance=RebalanceConfig(policies="hotspot"))
    (step,) = [x for x in daemon_steps(Daemon(cfg, swarm=sw))  # type: ignore[arg-type]
               if isinstance(x, Rebalancer)]
    held = {("n-4090", R_UUIDS[2]): ("tasks stopping on n-4090", STOPPING_PRIORITY)}
    session = CycleSession(Snapshot(sw.nodes(), sw.services(), [], {}, taken_at=1000.0))
    session.facts, session.scrapes = {}, {}
    session.placement = PlacementPlan(stopping_held=held)
    session.planner = Planner(prefix=P)
    step.run(session)
    assert step.mover.repin.held == held and step.health_mover.repin.held == held
