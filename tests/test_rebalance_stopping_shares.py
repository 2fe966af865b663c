"""The rebalancer judges a GPU that tasks Swarm is stopping still use by their share, as
placement does (``nominated.StoppingGpus``: the held milli counted used, the rest free
to others under the usual sharing rules). Before, ``Inputs.held`` held the whole GPU
for a stopping task's share: a move of a 0.5 share onto a GPU where a stopping task used
0.25 was refused though 0.75 was free, and placement itself would have put it there. A
preemptor's hold still keeps its GPUs whole. Pure: real facts and metrics pages,
``plan_moves``, the mover over the recording Swarm stand-in."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from support.forged import RecordingSwarm, sw_node, sw_svc, victim_cluster, victim_move
from support.move_then_preempt import REBALANCE
from support.rebalance import CFG, F1, FACTS, P, cluster, feed
from support.rebalance_fragmentation import U1, two_half_used
from support.rebalance_fragmentation import plan as frag_plan

from swarmgpu.core.config import Config, PreemptionConfig, RebalanceConfig, SyncConfig
from swarmgpu.manager.cycle.preempt_step import PreemptStep
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.cycle.rebalance import Rebalancer
from swarmgpu.manager.cycle.wiring import daemon_steps
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import PlacementPlan, read_ledger
from swarmgpu.manager.placement.nominated import (
    STOPPING_PRIORITY,
    Nomination,
    held_gpus,
    held_shares,
)
from swarmgpu.manager.placement.preempt import Preemption
from swarmgpu.manager.rebalance.context import Context, Inputs
from swarmgpu.manager.rebalance.mover import Mover
from swarmgpu.manager.rebalance.moves import Move, Trigger
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.signals import Signals

WHOLE1 = [g.uuid for g in F1.gpus if not g.mig_enabled]  # gpu-node-1's whole A100s
LEFT = WHOLE1[-1]  # the one gpu-node-1 GPU not held for preemptor p
STOPPING = ("tasks stopping on n1", STOPPING_PRIORITY)


def _holds(left: tuple[str, int] | None, share: int | None,
           ) -> tuple[dict[tuple[str, str], tuple[str, int]], dict[tuple[str, str], int]]:
    """Every whole A100 of gpu-node-1 but ``LEFT`` held for preemptor p; ``LEFT`` held
    as ``left`` says (None: not), ``share`` milli of it by stopping tasks (None: whole)."""
    held = {("n1", u): ("p", 100) for u in WHOLE1 if u != LEFT}
    if left is not None:
        held[("n1", LEFT)] = left
    return held, ({("n1", LEFT): share} if share is not None else {})


def _inputs(left: tuple[str, int] | None, share: int | None) -> Inputs:
    """a and b (0.5 each) share gpu-node-2 GPU 0, hot for the whole window."""
    nodes, svcs, tasks = cluster()
    sig = Signals(CFG)
    times = [float(t) for t in range(13)]
    feed(sig, nodes, times, {t: {0: 97.0} for t in times})
    held, shares = _holds(left, share)
    return Inputs(nodes, svcs, tasks, FACTS, read_ledger(nodes, P), sig.gpus, sig.nodes, CFG,
                  times[-1], (), P, held=held, held_shares=shares)


def _hot(left: tuple[str, int] | None, share: int | None) -> list[Move]:
    return plan_moves(_inputs(left, share)).moves


def test_a_share_moves_beside_a_stopping_tasks_share_that_leaves_it_room() -> None:
    (m,) = _hot(None, None)
    assert m.trigger is Trigger.HOTSPOT and m.target_uuids == (LEFT,)
    (m,) = _hot(STOPPING, 250)  # 0.75 free: the 0.5 share fits, as placement would put it
    assert (m.target_node, m.target_uuids, m.target_milli) == ("n1", (LEFT,), (500,))


def test_a_stopping_tasks_share_that_leaves_no_room_refuses_the_move() -> None:
    assert _hot(STOPPING, 900) == []  # 0.1 free: no room for 0.5
    assert _hot(STOPPING, None) == []  # a stopping task's whole GPU


def test_a_preemptors_hold_still_keeps_the_whole_gpu() -> None:
    assert _hot(("q", 100), None) == []


def _frag(share: int) -> list[tuple[str, str, tuple[str, ...]]]:
    """a (0.5, never moved) on gpu-node-1 GPU 1, held for p whole besides; b (0.5) alone
    on gpu-node-2 GPU 0; a stopping task's ``share`` on gpu-node-1 GPU 2."""
    held = {("n1", U1[1]): ("p", 100), ("n1", U1[2]): STOPPING}
    return [(m.service, m.target_node, m.target_uuids) for m in frag_plan(
        *two_half_used({f"{P}rebalance": "never"}), held=held,
        held_shares={("n1", U1[2]): share})]


def test_a_fragmentation_move_fills_the_rest_of_a_stopping_tasks_gpu() -> None:
    """b fills gpu-node-1 GPU 2 beside the stopping task's 0.5 (gpu-node-2 emptied);
    before, that GPU was no target at all. With 0.6 stopping there, no room."""
    assert _frag(500) == [("b", "n1", (U1[2],))]
    assert _frag(600) == []


def test_defrags_check_counts_a_stopping_tasks_share_used_the_rest_free() -> None:
    """``Context.count_held`` (defrag's room check for a pending request): the share is
    counted used, as placement counts it; before, a GPU held for a stopping task counted
    wholly used (or, with another share on it, not at all)."""
    ctx = Context.build(_inputs(STOPPING, 250))
    alloc = ctx.allocator(None, ())
    gpus = ctx.count_held(alloc, "n1", "pending")
    i = next(k for k, g in enumerate(F1.gpus) if g.uuid == LEFT)
    assert i in gpus and alloc.alloc.nodes["n1"].free[i] == 750
    assert all(alloc.alloc.nodes["n1"].free[k] == 0 for k in gpus if k != i)


def test_the_start_admits_a_move_into_the_rest_of_a_stopping_tasks_gpu() -> None:
    """``Mover.start`` checks the target again (``room_for``): a stopping task's 250 milli
    leaves room for 500, not for 900; a preemptor's hold refuses the GPU whole."""
    target = victim_move().target_uuids[0]
    stopping = ("tasks stopping on n-4090", STOPPING_PRIORITY)
    cfg = RebalanceConfig(dry_run=False, max_moves_per_cycle=9, max_moves_per_node=9)

    def start(milli: int, who: tuple[str, int], shares: Mapping[tuple[str, str], int]
              ) -> str:
        sw = victim_cluster({})
        mover = Mover(sw, cfg, prefix=P, dry_run=False,  # type: ignore[arg-type]
                      clock=lambda: 1000.0)
        mover.held, mover.shares = {("n-4090", target): who}, shares
        got = mover.start(replace(victim_move(), target_milli=(milli,)),
                          sw.service("id-victim"))
        return "" if got.ok else got.why

    assert start(500, stopping, {("n-4090", target): 250}) == ""
    why = start(900, stopping, {("n-4090", target): 250})
    assert f"{target} on gpu-node-2 has no room for 900 milli: 250 milli" in why, why
    why = start(500, ("q", 100), {})
    assert f"{target} on gpu-node-2 is held for q" in why, why


def test_the_rebalancer_is_handed_stopping_tasks_shares_but_not_under_a_preemptors_hold(
        tmp_path: Path) -> None:
    """The daemon's step reads the plan's stopping shares (``plan.stopping_milli``); a GPU
    a live preemptor's hold names too stays held whole for it."""
    sw = RecordingSwarm([sw_node("n-mgr", "manager", role="manager")], [], [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 rebalance=RebalanceConfig(policies=""))
    steps = daemon_steps(Daemon(cfg, swarm=sw))  # type: ignore[arg-type]
    (rb,) = [s for s in steps if isinstance(s, Rebalancer)]
    (pre,) = [s for s in steps if isinstance(s, PreemptStep)]
    pre.preempter.took(Preemption("wide", "id-wide", 100, "n1", "gpu-node-1", (),
                                  held=(WHOLE1[1],)), [], time.monotonic())
    stopping = [Nomination("tasks stopping on n1", STOPPING_PRIORITY, "n1",
                           (WHOLE1[0], WHOLE1[1]), milli=(250, 500))]
    plan = PlacementPlan(stopping_held=held_gpus(stopping),
                         stopping_milli=held_shares(stopping))
    wide, none = rb.live_holds({"wide"}), rb.live_holds(set())
    assert rb.held_shares(wide, plan) == {("n1", WHOLE1[0]): 250}
    assert rb.held_shares(none, plan) == {("n1", WHOLE1[0]): 250, ("n1", WHOLE1[1]): 500}
    assert rb.held_shares(none, None, stopping) == rb.held_shares(none, plan)


def test_two_stopping_tasks_on_one_gpu_hold_their_sum() -> None:
    two = [Nomination("tasks stopping on n1", STOPPING_PRIORITY, "n1", (LEFT,), milli=(600,)),
           Nomination("tasks stopping on n1 for p", STOPPING_PRIORITY, "n1", (LEFT,),
                      milli=(600,), owner="p")]
    assert held_shares(two) == {("n1", LEFT): 1000}



def test_the_preemption_steps_mover_is_handed_the_stopping_shares_too(tmp_path: Path) -> None:
    """A victim moved by the preemption step is checked at start as the rebalancer's moves
    are: the plan's stopping shares, less a GPU a live preemptor's hold names."""
    sw = RecordingSwarm([sw_node("n-mgr", "manager", role="manager")],
                        [sw_svc("wide", {f"{P}gpus": "1", f"{P}priority": "100"})], [])
    cfg = Config(state_dir=str(tmp_path), rebalance=REBALANCE,
                 preemption=PreemptionConfig(dry_run=False, preemptible_below=100))
    pre = Preempter(cfg, clock=lambda: 1000.0)
    pre.took(Preemption("wide", "id-wide", 100, "n1", "gpu-node-1", (), held=(WHOLE1[1],)),
             [], 1000.0)
    stopping = [Nomination("tasks stopping on n1", STOPPING_PRIORITY, "n1",
                           (WHOLE1[0], WHOLE1[1]), milli=(250, 500))]
    plan = PlacementPlan(stopping_held=held_gpus(stopping), stopping_milli=held_shares(stopping))
    high = Preemption("high", "id-high", 100, "n1", "gpu-node-1", ())
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {})
    pre._act(sw, snap, plan, high, "", 1000.0, [], 1000.0)  # type: ignore[arg-type]
    assert pre.mover is not None
    assert pre.mover.shares == pre.mover.repin.shares == {("n1", WHOLE1[0]): 250}
    assert pre.mover.held[("n1", WHOLE1[0])] == ("tasks stopping on n1", STOPPING_PRIORITY)
