"""A repin whose task restarted between its steps: Swarm made the new task after the
repin's spec write (step 1), so it runs with the repin's new GPUs, before the node write
(step 2) landed or before Swarm acted on the closed gate. Then the node was paused by the
operator, or Swarm still wanted that task there at the repin's timeout. Before: the repin
was handed back on its old GPUs (``_paused``, ``_late``'s kept branch): the ledger named
them while the running task used the new ones, which the ledger then called free (placement
could give them out). Now it ends on the GPUs that task has: the repin's new ones. Over the
recording Swarm stand-in (tests/support/forged.py): g's half-GPU share on gpu-node-2 moves
from GPU 1 to GPU 0."""

from __future__ import annotations

import dataclasses

import pytest
from support.forged import NodeWritesFail, held_labels, sw_node, sw_svc
from support.gpu_nodes import RTX4090
from support.rebalance_fragmentation import HALF

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.placement import MOVE_STATE, assign_key, devices_key, gate_key
from swarmgpu.manager.rebalance.mover import Mover, read_records
from swarmgpu.manager.rebalance.moves import Move, Outcome, Trigger
from swarmgpu.manager.services.sharing import share_labels
from swarmgpu.swarm.client import SwarmTask

P = "swarmgpu."
F4090 = RTX4090.facts()
U = [g.uuid for g in F4090.gpus]
RB = RebalanceConfig(dry_run=False, move_timeout_s=120.0)
START = 1000.0  # the repin's start, epoch s (1970-01-01T00:16:40Z)


def _shares(uuid: str) -> dict[str, str]:
    return share_labels(P, "n-4090", [uuid], [500], F4090) or {}


def _cluster() -> NodeWritesFail:
    """g (global, half a GPU) on gpu-node-2 GPU 1; its task made before the repin."""
    nodes = [sw_node("n-mgr", "manager", role="manager"),
             sw_node("n-4090", "gpu-node-2", held_labels("g", "n-4090", U[1], milli=500))]
    g = sw_svc("g", {**HALF, devices_key(P, "n-4090"): U[1], **_shares(U[1])},
               mode={"Global": {}})
    old = SwarmTask("t-old", g.id, "n-4090", None, "running", "running",
                    (f"NVIDIA_VISIBLE_DEVICES={U[1]}",), created_at="1970-01-01T00:00:00Z")
    return NodeWritesFail(nodes, [g], [old])


def _move() -> Move:
    return Move(service="g", service_id="id-g", source_node="n-4090", source_host="gpu-node-2",
                source_uuids=(U[1],), source_milli=(500,), target_node="n-4090",
                target_host="gpu-node-2", target_gpus=(0,), target_uuids=(U[0],),
                target_milli=(500,), trigger=Trigger.HOTSPOT, window_s=None,
                reason="test", gain="test", target_share=tuple(sorted(_shares(U[0]).items())))


def _cycle(sw: NodeWritesFail, now: float, moves: list[Move] | None = None) -> list[Outcome]:
    m = Mover(sw, RB, prefix=P, dry_run=False, clock=lambda: now)  # type: ignore[arg-type]
    m.run_cycle(moves or [], sw.nodes(), sw.services(), sw.tasks())
    return [r.outcome for r in m.recent]


def _restarted(sw: NodeWritesFail) -> None:
    """t-old failed; Swarm's restart policy made t-new, its devices from the label now."""
    dev = sw.service("id-g").labels[devices_key(P, "n-4090")]
    sw._tasks = [dataclasses.replace(sw._tasks[0], state="failed", desired_state="shutdown"),
                 SwarmTask("t-new", "id-g", "n-4090", None, "running", "running",
                           (f"NVIDIA_VISIBLE_DEVICES={dev}",),
                           created_at="1970-01-01T00:18:00Z")]


@pytest.mark.parametrize("then", ["paused", "not-let-go"])
def test_a_repin_whose_task_restarted_between_its_steps_ends_on_the_gpus_it_runs_with(
        then: str) -> None:
    sw = _cluster()
    sw.fail_once = frozenset({"n-4090"})  # step 2's node write fails at the start
    assert _cycle(sw, START, [_move()]) == [Outcome.STARTED]
    assert sw.node("n-4090").labels[assign_key(P, "g")] == f"{U[1]}@500"
    _restarted(sw)
    (new,) = [t for t in sw.tasks() if t.desired_state == "running"]
    assert new.env == (f"NVIDIA_VISIBLE_DEVICES={U[0]}",)
    now = START + 100
    if then == "paused":
        sw._nodes["n-4090"] = dataclasses.replace(sw._nodes["n-4090"], availability="pause")
    else:  # step 2 lands; Swarm's enforcer does not act on t-new by the timeout
        _cycle(sw, now)
        assert gate_key(P, "g") not in sw.node("n-4090").labels
        now += RB.move_timeout_s
    said = _cycle(sw, now) + _cycle(sw, now + 1)
    labels = sw.node("n-4090").labels
    assert labels[assign_key(P, "g")] == f"{U[0]}@500", labels  # the GPU t-new uses
    assert labels[gate_key(P, "g")] == "true"
    svc = sw.service("id-g").labels
    assert svc[devices_key(P, "n-4090")] == U[0] and P + MOVE_STATE not in svc
    assert read_records(sw.swarm_labels(), P) == {}
    assert said == [Outcome.DONE]
