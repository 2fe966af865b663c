"""Preemption decides on the cycle's snapshot, taken before the rebalancer's moves of
that cycle. A GPU such a move took (its target) looked free there: beside a victim's
GPUs it was counted for the preemptor, and the victim was stopped for a preemptor that
still could not run. Now the GPUs of every move recorded in Swarm (read after the movers
ran) are counted used in the decision: the target's at once, the source's until the
move ends (its service is no victim, so they never looked freed).

Built as the daemon's steps run: a snapshot, a mover's ``run_cycle`` on it (the
rebalance step), then ``Preempter.cycle`` on that same snapshot (the preemption step)."""

from __future__ import annotations

from support.forged import RecordingSwarm, sw_node, sw_svc
from support.move_then_preempt import D, P, R, holds, move_then_preempt

from swarmgpu.core.config import Config, PreemptionConfig
from swarmgpu.manager.placement import devices_key, gate_key
from swarmgpu.manager.placement.preempted import PREEMPTED_STATE
from swarmgpu.manager.rebalance.moves import Move, Trigger
from swarmgpu.swarm.client import SwarmTask


def _cluster() -> RecordingSwarm:
    """n-4090: small (priority 0, 1 GPU) and filler (not preemptible, 6) hold 7 of its
    8 GPUs; one is free. mover (not preemptible, 1 GPU) runs on the DGX. high (priority
    100) wants 2 RTX 4090s: small's GPU and the free one would do."""
    nodes = [
        sw_node("n-mgr", "manager", role="manager"),
        sw_node("n-dgx", "gpu-node-1", holds("n-dgx", {"mover": D[:1]})),
        sw_node("n-4090", "gpu-node-2", holds("n-4090", {"small": R[:1], "filler": R[2:]})),
    ]
    small = sw_svc("small", {f"{P}gpus": "1", devices_key(P, "n-4090"): R[0]})
    keep = {f"{P}priority": "50", f"{P}preemptible": "false"}
    filler = sw_svc("filler", {f"{P}gpus": "6", **keep, devices_key(P, "n-4090"): ",".join(R[2:])})
    mover = sw_svc("mover", {f"{P}gpus": "1", **keep, devices_key(P, "n-dgx"): D[0]})
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*", f"{P}priority": "100"})
    tasks = [
        SwarmTask("t-small", small.id, "n-4090", 1, "running", "running", ()),
        SwarmTask("t-filler", filler.id, "n-4090", 1, "running", "running", ()),
        SwarmTask("t-mover", mover.id, "n-dgx", 1, "running", "running", ()),
        SwarmTask("t-high", high.id, "", 1, "pending", "running", ()),
    ]
    return RecordingSwarm(nodes, [small, filler, mover, high], tasks)


def _mover_to_4090() -> Move:
    """The rebalancer's move of mover onto n-4090's free GPU."""
    return Move(service="mover", service_id="id-mover", source_node="n-dgx",
                source_host="gpu-node-1", source_uuids=D[:1], source_milli=(1000,),
                target_node="n-4090", target_host="gpu-node-2", target_gpus=(1,),
                target_uuids=R[1:2], target_milli=(1000,), trigger=Trigger.CONSOLIDATION,
                window_s=None, reason="test", gain="test")


def _cycle(sw: RecordingSwarm, move: bool) -> list[tuple[str, list[str], str]]:
    """One daemon cycle's rebalance then preemption steps, on one snapshot: what was
    preempted: (preemptor, victims, node)."""
    cfg = Config(preemption=PreemptionConfig(dry_run=False))  # victims stopped, not moved
    moving, done = move_then_preempt(sw, cfg, [_mover_to_4090()] if move else [])
    if move:
        assert moving == {"mover"}
    return [(p.service, [v.service for v in p.victims], p.hostname) for p in done]


def test_a_gpu_a_move_took_this_cycle_is_not_counted_free_for_the_preemptor() -> None:
    """The free GPU is the move's target now: small's one GPU alone is not enough, so
    small is not stopped (before: stopped for a preemptor that still could not run)."""
    sw = _cluster()
    assert _cycle(sw, move=True) == []
    assert f"{P}{PREEMPTED_STATE}" not in sw.service("id-small").labels
    assert gate_key(P, "small") in sw.node("n-4090").labels


def test_without_the_move_the_same_preemption_is_made() -> None:
    """The control: with no move, small's GPU and the free one place high."""
    sw = _cluster()
    assert _cycle(sw, move=False) == [("high", ["small"], "gpu-node-2")]
    assert f"{P}{PREEMPTED_STATE}" in sw.service("id-small").labels
