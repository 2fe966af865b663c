"""A preemption's victim whose move was counted as started (its record landed, its spec
write's answer cut) and then rolled back is not cooling down: its move preempted
nothing, it runs where it ran.

``Preempter.took`` cools every victim moved or stopped (``victim_cooldown_s``). A move
whose record landed and whose spec write came back cut is counted as started, judged
from its record next cycle (``Mover._begin``); the rebalancer's mover then rolls it
back (no move label on the spec: ``Mover.recover``), the victim holding its source all
along. It stayed cooling for the whole ``victim_cooldown_s`` all the same, where a
victim never taken was not. A move done (its source closed) still cools. Pure, over the
recording Swarm stand-in (tests/support/forged.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

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
from swarmgpu.manager.cycle.preempt_budget import SpentHour
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.placement import PlacementPlan
from swarmgpu.manager.rebalance.mover import Mover, read_records
from swarmgpu.swarm.client import SwarmUnavailable

T = 1000.0  # the Preempter's clock (monotonic) at the preemption


class SpecCut(RecordingSwarm):
    """batch's first spec write is cut before it lands (its answer lost: unknown)."""

    cut = 1

    def update_service_spec(self, service_id: str,
                            compute: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
                            **kw: Any) -> bool:
        if service_id == "id-batch" and self.cut:
            self.cut -= 1
            raise SwarmUnavailable("Docker Engine unreachable at test: the engine's answer "
                                   "to POST /services/id-batch/update, a write's, was not "
                                   "read within 5.0 s")
        return super().update_service_spec(service_id, compute, **kw)


def _world() -> SpecCut:
    """batch (priority 0) holds 2 RTX 4090s, filler the other 6; the DGX has 2 A100s free,
    where batch can move; high (priority 100) wants 2."""
    return SpecCut(*batch_world())


def _moved(sw: SpecCut, tmp_path: Path) -> Preempter:
    """high's preemption of batch, moved to the DGX's 2 free GPUs, acted on as
    ``Preempter.cycle`` acts (``_act``, then ``took``)."""
    cfg = Config(state_dir=str(tmp_path), rebalance=REBALANCE,
                 preemption=PreemptionConfig(dry_run=False, preemptible_below=100))
    pre = Preempter(cfg, clock=lambda: T)
    p = batch_to_dgx()
    got, _ = pre._act(sw, snapshot_of(sw), PlacementPlan(), p, "", 5000.0, [], T)
    pre.took(p, got, T)
    return pre


def _next_cycle(pre: Preempter, sw: SpecCut) -> None:
    """The rebalance step's mover judges the record, then the preemption step decides."""
    snap = snapshot_of(sw)
    Mover(sw, REBALANCE, prefix=P, dry_run=False).run_cycle(  # type: ignore[arg-type]
        [], snap.nodes, snap.services, snap.tasks)
    pre.decide(snapshot_of(sw), PlacementPlan(), FACTS, None, 5060.0, mono=T + 60)


def test_a_victim_whose_move_rolled_back_is_not_cooling(tmp_path: Path) -> None:
    sw = _world()
    pre = _moved(sw, tmp_path)
    assert {st.service for st in read_records(sw.swarm_labels(), P).values()} == {"batch"}
    assert set(pre.victim_at) == {"id-batch"}  # while its move may be under way
    pre.decide(snapshot_of(sw), PlacementPlan(), FACTS, None, 5030.0, mono=T + 30)
    assert set(pre.victim_at) == {"id-batch"}  # still in flight: still cooling
    _next_cycle(pre, sw)  # rolled back: batch holds its source, its record gone
    assert read_records(sw.swarm_labels(), P) == {}
    assert "swarmgpu.assign.batch" in sw.node("n-4090").labels
    pre.decide(snapshot_of(sw), PlacementPlan(), FACTS, None, 5090.0, mono=T + 90)
    assert pre.victim_at == {}


def test_a_victim_whose_move_finished_still_cools(tmp_path: Path) -> None:
    sw = _world()
    sw.cut = 0  # its spec write lands: the move goes on
    pre = _moved(sw, tmp_path)
    # the move done: its source closed and its record gone, as the mover ends it
    sw.update_node_labels("n-4090", lambda cur: {k: v for k, v in cur.items()
                                                  if not k.endswith(".batch")})
    sw.update_swarm_labels(lambda cur: {k: v for k, v in cur.items()
                                        if not k.startswith(f"{P}state.moves.")})
    for mono in (T + 30, T + 60):
        pre.decide(snapshot_of(sw), PlacementPlan(), FACTS, None, 5000.0 + mono - T,
                   mono=mono)
    assert set(pre.victim_at) == {"id-batch"}


def _hour(sw: RecordingSwarm) -> list[float]:
    """The preemption hour a new leader reads from the swarm object at 5100 s."""
    spent = SpentHour(P)
    spent.read(sw.swarm_labels(), 5100.0, ())
    return list(spent.all)


def test_a_victim_whose_move_rolled_back_before_its_task_stopped_is_not_spent(
        tmp_path: Path) -> None:
    """Its task on the node it left ran all along (the task list): no eviction happened,
    so ``max_per_hour`` gets its victim back, in memory and in the stored hour."""
    sw = _world()
    pre = _moved(sw, tmp_path)
    assert list(pre.spent.all) == [5000.0] and _hour(sw) == [5000.0]
    _next_cycle(pre, sw)  # rolled back: batch holds its source, t-batch never stopped
    pre.decide(snapshot_of(sw), PlacementPlan(), FACTS, None, 5090.0, mono=T + 90)
    assert list(pre.spent.all) == []
    pre.hour.store(sw)  # (``cycle`` stores what was given back)
    assert _hour(sw) == []
    pre.decide(snapshot_of(sw), PlacementPlan(), FACTS, None, 5120.0, mono=T + 120)
    assert list(pre.spent.all) == []  # given back once, not again


def test_a_victim_whose_task_stopped_before_its_move_rolled_back_stays_spent(
        tmp_path: Path) -> None:
    """Its task on the node it left was replaced meanwhile (the task list shows another):
    the eviction happened, and it counts for the hour."""
    sw = _world()
    pre = _moved(sw, tmp_path)
    sw._tasks = [t if t.id != "t-batch" else replace(t, id="t-batch-2") for t in sw._tasks]
    _next_cycle(pre, sw)
    pre.decide(snapshot_of(sw), PlacementPlan(), FACTS, None, 5090.0, mono=T + 90)
    assert pre.victim_at == {}  # (not cooling, as above)
    assert list(pre.spent.all) == [5000.0]
