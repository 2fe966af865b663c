"""A preemption cut at its cycle's engine budget part-way through its victims
(``budget.OverBudget`` before a write): the writes that landed keep their records. A
victim moved (or whose move's record landed: the record judges it next cycle) before
the cut cools down, and its preemptor holds the GPUs it counts on (its hold, as one
held back by the move budgets holds it); a victim whose stop was cut is neither, and
its hour is given back. Before, the cut ended the
cycle past ``Preempter.took``: the moved victim could be chosen again at once, and the
GPUs it freed went to another service. Pure, over the recording Swarm stand-in, its
Nth write refused as the daemon's write gate refuses one past the budget."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.forged import DGX_F, RecordingSwarm, sw_node, sw_svc
from support.move_then_preempt import REBALANCE, D, P, R, holds

from swarmgpu.core.config import Config, PreemptionConfig
from swarmgpu.manager.cycle.budget import OverBudget
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.engine.stop import BudgetEnded, StopRequest, TermEnded
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, PlacementPlan, devices_key
from swarmgpu.manager.placement.preempt import Candidate, Preemption, Relocation
from swarmgpu.manager.rebalance.mover import read_records
from swarmgpu.swarm.client import SwarmTask, VersionConflict


class CutAtWrite(RecordingSwarm):
    """The stand-in whose write gate (``before_write``) refuses its ``cut``-th write and
    every later one: the cycle's engine budget passed there."""

    cut = 0
    tried = 0
    term = False  # the cut is the leader's term ending there (``TermEnded``), not the budget

    def before_write(self) -> None:
        self.tried += 1
        if self.cut and self.tried >= self.cut:
            raise TermEnded() if self.term else OverBudget(StopRequest())


def _world(dfill: int = 5, free: int = 0) -> CutAtWrite:
    """batch and batch2 (priority 0) hold 2 RTX 4090s each, filler the rest but ``free``
    (R[4:4 + free]); dfill fills 5 A100s of the DGX, whose other 2 are free: batch can
    move there, batch2 cannot."""
    fill = R[4 + free:]
    nodes = [sw_node("n-mgr", "manager", role="manager"),
             sw_node("n-dgx", "gpu-node-1", holds("n-dgx", {"dfill": D[:dfill]})),
             sw_node("n-4090", "gpu-node-2", holds("n-4090", {
                 "batch": R[:2], "batch2": R[2:4], "filler": fill}))]
    svcs = [sw_svc("batch", {f"{P}gpus": "2", devices_key(P, "n-4090"): ",".join(R[:2])}),
            sw_svc("batch2", {f"{P}gpus": "2", devices_key(P, "n-4090"): ",".join(R[2:4])}),
            sw_svc("filler", {f"{P}gpus": str(len(fill)), f"{P}preemptible": "false",
                              devices_key(P, "n-4090"): ",".join(fill)}),
            sw_svc("dfill", {f"{P}gpus": str(dfill), f"{P}preemptible": "false",
                             devices_key(P, "n-dgx"): ",".join(D[:dfill])}),
            sw_svc("high", {f"{P}gpus": "4", f"{P}priority": "100"})]
    on = {"batch": "n-4090", "batch2": "n-4090", "filler": "n-4090", "dfill": "n-dgx"}
    tasks = [SwarmTask(f"t-{s.name}", s.id, on.get(s.name, ""), 1,
                       "running" if s.name in on else "pending", "running", ())
             for s in svcs]
    return CutAtWrite(nodes, svcs, tasks)


def _victim(name: str, uuids: tuple[str, ...]) -> Candidate:
    return Candidate(name, f"id-{name}", "n-4090", 0, "", uuids,
                     Holding(name, "n-4090", uuids, (1000,) * len(uuids)))


class ConflictOnSpec(CutAtWrite):
    """``CutAtWrite`` whose service spec writes fail as a concurrent update's: a move's
    spec write so takes its record back (``Mover._begin``), its victim left to stop."""

    def update_service_spec(self, service_id: str, compute: Any, **_: Any) -> bool:
        raise VersionConflict(f"update out of sequence: {service_id}")


def _preempt(cut: int, tmp_path: Path, held: tuple[str, ...] = R[:4],
             sw: CutAtWrite | None = None, both: bool = False,
             term: bool = False) -> tuple[Preempter, CutAtWrite]:
    """high's preemption of batch (moved to the DGX's 2 free GPUs) and batch2 (stopped;
    ``both``: moved to 2 more, which ``sw`` frees) on n-4090, its hold naming ``held``
    (their 4 GPUs), the ``cut``-th write refused (0: none; ``term``: by the term's end);
    over ``sw`` (None: ``_world``'s)."""
    sw, t = sw or _world(), 1000.0
    sw.cut, sw.term = cut, term
    cfg = Config(state_dir=str(tmp_path), rebalance=REBALANCE,
                 preemption=PreemptionConfig(dry_run=False, preemptible_below=100))
    pre = Preempter(cfg, clock=lambda: t)
    def to(uuids: tuple[str, ...]) -> Relocation:
        idx = tuple(next(g.index for g in DGX_F.gpus if g.uuid == u) for u in uuids)
        return Relocation("n-dgx", "gpu-node-1", idx, uuids)

    p = Preemption("high", "id-high", 100, "n-4090", "gpu-node-2",
                   (_victim("batch", R[:2]), _victim("batch2", R[2:4])),
                   moves={"batch": to(D[5:7]), **({"batch2": to(D[3:5])} if both else {})},
                   held=held)
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {})
    plan = PlacementPlan()
    if not cut:
        pre._act(sw, snap, plan, p, "", 5000.0, [], t)  # type: ignore[arg-type]
        return pre, sw
    with pytest.raises(TermEnded if term else BudgetEnded):
        pre._act(sw, snap, plan, p, "", 5000.0, [], t)  # type: ignore[arg-type]
    return pre, sw


# The writes, in order: batch's move (its record's gate check, the hour stored just
# before the record, the record, its spec, the target opened), then batch2's stop (the
# hour stored, its spec, the gate closed).
MOVE_RECORDED, WRITES = 3, 7


# A term lost part-way (``TermEnded`` before a write: another manager elected) is cut
# the same way: what landed is taken, what was counted and not done given back. Before,
# only the budget's end was: a term's end left the moved victim free to be chosen again
# and the stop it refused counted for the hour, when this daemon led again.
TERM = pytest.mark.parametrize("term", [False, True], ids=["budget", "term"])


@TERM
@pytest.mark.parametrize("cut", range(MOVE_RECORDED, WRITES + 1))
def test_a_victim_moved_before_the_cut_cools_and_its_gpus_are_held(
        cut: int, term: bool, tmp_path: Path) -> None:
    pre, sw = _preempt(cut, tmp_path, term=term)
    assert {st.service for st in read_records(sw.swarm_labels(), P).values()} == {"batch"}
    assert set(pre.victim_at) == {"id-batch"}  # batch2 not stopped: not cooling
    (hold,) = pre.nominated.current(1000.0)
    assert (hold.service, hold.node_id, hold.uuids) == ("high", "n-4090", R[:4])
    assert "high" in pre.preemptor_at and pre.moving.get("high") == {"batch"}
    assert len(pre.spent.all) == 1, list(pre.spent.all)  # batch's alone


@TERM
@pytest.mark.parametrize("cut", range(1, MOVE_RECORDED))
def test_a_preemption_cut_before_any_record_landed_holds_and_spends_nothing(
        cut: int, term: bool, tmp_path: Path) -> None:
    pre, sw = _preempt(cut, tmp_path, term=term)
    assert read_records(sw.swarm_labels(), P) == {}
    assert (pre.victim_at, pre.nominated.current(1000.0), pre.preemptor_at) == ({}, (), {})
    assert list(pre.spent.all) == []


def test_a_preemption_not_cut_makes_the_writes_counted_above(tmp_path: Path) -> None:
    pre, sw = _preempt(0, tmp_path)
    assert sw.tried == WRITES and len(pre.spent.all) == 2


def test_a_hold_cut_after_a_move_keeps_none_of_the_gpus_its_preemptor_was_not_counted_on(
        tmp_path: Path) -> None:
    """high counted on batch2's GPUs alone (batch a victim for its CPU, say); cut after
    batch's move landed, its hold names batch2's (its own while it runs) and none of
    batch's, as the whole preemption's would not."""
    pre, _sw = _preempt(MOVE_RECORDED, tmp_path, held=R[2:4])
    assert set(pre.victim_at) == {"id-batch"} and "high" in pre.preemptor_at
    assert [n.uuids for n in pre.nominated.current(1000.0)] == [R[2:4]]


@TERM
@pytest.mark.parametrize("both", [False, True])
def test_a_victim_counted_for_a_move_taken_back_is_given_back_when_the_cut_stops_none(
        both: bool, term: bool, tmp_path: Path) -> None:
    """batch's move counts it (the hour stored before its record), then its spec write
    conflicts and the record goes: batch is left to stop. The cut refuses the hour's
    store for batch2 (its stop's, or ``both``: its move's): neither is stopped, so
    batch's count is given back too, as a stop the cut refused gives its own. Before,
    batch stayed counted for the hour."""
    w = _world(3 if both else 5)
    # (batch's record, its spec, the record's drop, then batch2's first write: the hour)
    pre, sw = _preempt(6 if both else 5, tmp_path,
                       sw=ConflictOnSpec(w.nodes(), w.services(), w.tasks()), both=both,
                       term=term)
    assert read_records(sw.swarm_labels(), P) == {}
    assert (pre.victim_at, pre.preemptor_at) == ({}, {})
    assert list(pre.spent.all) == [] and len(pre.spent.given) == 2


@pytest.mark.parametrize("way", ["cut", "waits"])
def test_a_preemption_stopped_part_way_holds_every_gpu_its_preemptor_counts_on(
        way: str, tmp_path: Path) -> None:
    """high counts on batch's and batch2's GPUs and the free R[4] (its hold, R[:5]).
    batch's move lands; batch2's is cut at the cycle's budget, or ``waits`` for the move
    budget (one move a cycle). Either way high holds R[:5] while batch2 runs on: what it
    will use once batch2 goes, no GPU beside (R[2:4] is batch2's meanwhile, no one
    else's to take). Before, the cut held batch's freed GPUs alone: R[4], free, went to
    a lower service and high lacked it once batch2 went."""
    w, held = _world(3, free=1), R[:5]
    if way == "cut":
        pre, _sw = _preempt(MOVE_RECORDED, tmp_path, held=held, sw=w, both=True)
    else:
        pre = _held_back(w, held, tmp_path)
    assert set(pre.victim_at) == {"id-batch"} and pre.moving.get("high") == {"batch"}
    assert [n.uuids for n in pre.nominated.current(1000.0)] == [held]


def _held_back(sw: CutAtWrite, held: tuple[str, ...], tmp_path: Path) -> Preempter:
    """``_preempt``'s preemption (``both``: batch2 moved too) acted on by a cycle whose
    move budget (one a cycle) makes batch2's move wait: held back, batch moved."""
    rebalance = replace(REBALANCE, max_moves_per_cycle=1)
    cfg = Config(state_dir=str(tmp_path), rebalance=rebalance,
                 preemption=PreemptionConfig(dry_run=False, preemptible_below=100))
    pre = Preempter(cfg, clock=lambda: 1000.0)
    def to(uuids: tuple[str, ...]) -> Relocation:
        idx = tuple(next(g.index for g in DGX_F.gpus if g.uuid == u) for u in uuids)
        return Relocation("n-dgx", "gpu-node-1", idx, uuids)

    p = Preemption("high", "id-high", 100, "n-4090", "gpu-node-2",
                   (_victim("batch", R[:2]), _victim("batch2", R[2:4])),
                   moves={"batch": to(D[5:7]), "batch2": to(D[3:5])}, held=held)
    pre.decide = lambda *_a, **_k: [p]  # type: ignore[method-assign]
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {})
    done = pre.cycle(sw, snap, PlacementPlan(), {}, now=5000.0, mono=1000.0)  # type: ignore[arg-type]
    assert done == [p]
    return pre
