"""A move rolled back onto a source whose GPUs another service holds now: a move without
make-before-break (or past its source's closing) frees the source GPUs in the ledger,
and a placement in between may give them out. The roll-back then does not reopen the
source (it would hand the GPUs to two services): the target is closed and the record
ends as any roll-back's, the outcome names the service, the GPU and its holder once,
and placement places the replica anew. Pure, over the recording Swarm stand-in
(tests/support/forged.py): victim moves from gpu-node-1 (n-dgx) to gpu-node-2 (n-4090).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from support.forged import (
    V_UUID,
    P,
    RecordingSwarm,
    held_labels,
    sw_svc,
    victim_cluster,
    victim_move,
    victim_source_closed,
)
from support.loglines import log_lines

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.placement import MOVE_STATE, assign_key, devices_key, gate_key
from swarmgpu.manager.rebalance.mover import Mover, read_records
from swarmgpu.manager.rebalance.moves import Outcome
from swarmgpu.swarm.client import SwarmTask


@pytest.fixture
def lines() -> Iterator[list[str]]:
    yield from log_lines("INFO")


def _placed_on_source(sw: RecordingSwarm, milli: int = 1000) -> None:
    """A placement in between gives the source GPU to ``other``."""
    n = sw.node("n-dgx")
    sw._nodes["n-dgx"] = replace(n, labels={**n.labels, **held_labels("other", "n-dgx",
                                                                       V_UUID, milli)})
    share = {f"{P}gpu-fraction": "0.5"} if milli < 1000 else {f"{P}gpus": "1"}
    other = sw_svc("other", {**share, devices_key(P, "n-dgx"): V_UUID})
    sw._services[other.id] = other
    sw.run_task(SwarmTask("t-other", other.id, "n-dgx", 1, "running", "running", ()))


@pytest.mark.parametrize("why", ["timeout", "target down", "target left"])
def test_a_roll_back_never_reopens_a_source_another_service_holds_now(
        why: str, lines: list[str]) -> None:
    """Before: the roll-back wrote the victim's ledger entry and gate back on n-dgx
    beside other's: one GPU held by two services, both tasks started on it."""
    sw, now, m = victim_source_closed()
    _placed_on_source(sw)
    if why == "timeout":
        now[0] += 200.0
    elif why == "target down":
        sw._nodes["n-4090"] = replace(sw.node("n-4090"), state="down")
    else:  # docker node rm: the move ends on the source
        del sw._nodes["n-4090"]
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    src = sw.node("n-dgx").labels
    assert src[assign_key(P, "other")] == V_UUID and src[gate_key(P, "other")] == "true"
    assert assign_key(P, "victim") not in src and gate_key(P, "victim") not in src
    if why != "target left":
        dst = sw.node("n-4090").labels
        assert assign_key(P, "victim") not in dst and gate_key(P, "victim") not in dst
    assert read_records(sw.swarm_labels(), P) == {}
    v = sw.service("id-victim")
    assert P + MOVE_STATE not in v.labels and devices_key(P, "n-4090") not in v.labels
    last = m.recent[-1]
    assert last.outcome is Outcome.FAILED
    assert "victim" in last.detail and V_UUID in last.detail and "other" in last.detail
    said = [ln for ln in lines if "not reopened" in ln]
    assert len(said) == 1 and V_UUID in said[0] and "other" in said[0], said
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())  # nothing more to say
    assert len([ln for ln in lines if "not reopened" in ln]) == 1


def test_a_source_gpu_shared_with_room_left_is_reopened() -> None:
    """other took half the GPU: the victim's whole GPU no longer fits (taken); a share
    that fits beside another's is the source as it was (reopened)."""
    sw, now, m = victim_source_closed()
    _placed_on_source(sw, milli=500)
    now[0] += 200.0
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert assign_key(P, "victim") not in sw.node("n-dgx").labels
    assert m.recent[-1].outcome is Outcome.FAILED


def test_a_source_nobody_took_is_reopened_as_before() -> None:
    sw, now, m = victim_source_closed()
    now[0] += 200.0
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert sw.node("n-dgx").labels[assign_key(P, "victim")] == V_UUID
    assert sw.node("n-dgx").labels[gate_key(P, "victim")] == "true"
    assert m.recent[-1].outcome is Outcome.ROLLED_BACK


def test_placement_places_the_replica_anew_after_a_roll_back_not_reopened() -> None:
    """What the roll-back leaves is placement's as any replica without a holding: placed
    on free GPUs, never on the GPU other holds now."""
    from support.forged import DGX_F, R4090_F

    from swarmgpu.manager.placement import plan_placement

    sw, now, m = victim_source_closed()
    _placed_on_source(sw)
    now[0] += 200.0
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    plan = plan_placement(sw.nodes(), sw.services(), sw.tasks(),
                          {"n-dgx": DGX_F, "n-4090": R4090_F})
    v = next(sp for sp in plan.services if sp.name == "victim")
    assert v.status == "placed" and len(v.placements) == 1, v.reason
    assert V_UUID not in v.placements[0].uuids


def test_a_target_given_out_before_its_gate_opened_is_not_opened() -> None:
    """The move's first write on its target (ledger and gate) failed, and before the next
    cycle a placement gave the target GPU to other (the ledger did not hold it yet).
    Before: the next cycle opened the target beside other's holding, one GPU held by
    two services. Now the target is left to other and the move rolled back: the victim
    stays where it runs, the outcome names the GPU and its holder."""
    from support.forged import R4090_F

    from swarmgpu.swarm.client import SwarmUnavailable

    target = R4090_F.gpus[1].uuid
    sw, now = victim_cluster({}), [1000.0]
    m = Mover(sw, RebalanceConfig(dry_run=False, move_timeout_s=120.0), prefix=P,
              dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    real = sw.update_node_labels

    def fails(node_id: str, compute: Any, **kw: Any) -> bool:
        raise SwarmUnavailable("engine timed out")

    sw.update_node_labels = fails  # type: ignore[method-assign]
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    sw.update_node_labels = real  # type: ignore[method-assign]
    assert gate_key(P, "victim") not in sw.node("n-4090").labels
    n = sw.node("n-4090")
    sw._nodes["n-4090"] = replace(n, labels={**n.labels, **held_labels("other", "n-4090",
                                                                       target)})
    now[0] += 5.0
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    dst = sw.node("n-4090").labels
    assert assign_key(P, "victim") not in dst and gate_key(P, "victim") not in dst
    assert dst[assign_key(P, "other")] == target
    assert sw.node("n-dgx").labels[gate_key(P, "victim")] == "true"
    assert read_records(sw.swarm_labels(), P) == {}
    v = sw.service("id-victim")
    assert P + MOVE_STATE not in v.labels and v.replicas == 1
    assert target in m.recent[-1].detail and "other" in m.recent[-1].detail
