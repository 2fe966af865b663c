"""A daemon restarted mid-repin: the repin wrote its new GPUs into the ledger (step 2,
the gate closed) before Swarm stopped the old task, which runs with swarmgpu's device
template (its GPUs not readable from the task). The restarted daemon's ``StoppingGpus``
learned nothing while that task ran. Before: it read the old task's GPUs from the
ledger, the repin's new ones: those were held from the new task, and the old task's
real GPUs were free to any service while its container ran. Now the repin's own record
of its GPU sets (the service's move label) says which the old task has."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.forged import FACTS, R_UUIDS, sw_svc

from swarmgpu.manager.placement import MOVE_STATE, Holding, env_template, repinned
from swarmgpu.manager.placement.nominated import StoppingGpus
from swarmgpu.manager.rebalance.record import MoveState
from swarmgpu.swarm.client import SwarmService, SwarmTask
from swarmgpu.swarm.taskstop import rfc3339_epoch

P = "swarmgpu."
START = 1_700_000_000.0  # the repin's start (epoch s)


def _repin(direction: str = "forward") -> MoveState:
    """s's repin on n-4090 from GPU 0 to GPU 1 (a roll-back: from GPU 1 to GPU 0)."""
    a, b = (R_UUIDS[0],), (R_UUIDS[1],)
    if direction == "back":
        a, b = b, a
    return MoveState("m", "s", "n-4090", "gpu-node-2", a, (1000,), "n-4090", "gpu-node-2",
                     b, (1000,), False, 1, 0, START, "fragmentation", "", direction, "id-s")


def _moving(st: MoveState) -> SwarmService:
    return replace(sw_svc("s", {}), id="id-s", labels={P + MOVE_STATE: st.to_json()})


def _task(tid: str, created: str, desired: str = "shutdown") -> SwarmTask:
    return SwarmTask(tid, "id-s", "n-4090", 1, "running", desired, (env_template(P),),
                     created_at=created)


def _ledger(uuid: str) -> dict[str, dict[str, Holding]]:
    return {"s": {"n-4090": Holding("s", "n-4090", (uuid,), (1000,))}}


def _held(st: MoveState, t: SwarmTask, ledger_uuid: str) -> set[str]:
    """The GPUs a fresh daemon holds for ``t`` (rejected by its closed gate)."""
    t = replace(t, rejected_until=START + 600)
    noms = StoppingGpus(P).holds([], [_moving(st)], _ledger(ledger_uuid), [], FACTS,
                                 rejected=[t], now=START + 5)
    return {u for n in noms for u in n.uuids}


def test_a_restarted_daemon_holds_the_old_gpus_for_a_repins_rejected_old_task() -> None:
    old = _task("t-old", "2023-11-14T20:00:00Z")  # made before the repin began
    assert _held(_repin(), old, R_UUIDS[1]) == {R_UUIDS[0]}


def test_a_task_made_after_the_repins_spec_write_is_held_on_the_new_gpus() -> None:
    # a restart between its steps: Swarm made it with the repin's device map
    fresh = _task("t-fresh", "2023-11-14T22:20:00Z")
    assert _held(_repin(), fresh, R_UUIDS[0]) == {R_UUIDS[1]}


def test_a_roll_backs_rejected_task_is_held_on_the_roll_backs_source() -> None:
    # the forward's new task (GPU 1), rejected once the roll-back closed the gate
    made = _task("t-new", "2023-11-14T22:00:00Z")
    assert _held(_repin("back"), made, R_UUIDS[0]) == {R_UUIDS[1]}


def test_a_restarted_daemon_learns_a_running_old_tasks_gpus_from_the_repin() -> None:
    """Seen running first (the gate not yet acted on), then stopping: still the old GPUs."""
    g = StoppingGpus(P)
    old = _task("t-old", "2023-11-14T20:00:00Z", desired="running")
    g.holds([], [_moving(_repin())], _ledger(R_UUIDS[1]), [old], FACTS, now=START + 5)
    (n,) = g.holds([replace(old, desired_state="shutdown")], [_moving(_repin())],
                   _ledger(R_UUIDS[1]), [], FACTS, now=START + 6)
    assert n.uuids == (R_UUIDS[0],)


def test_a_move_label_of_another_node_or_unreadable_leaves_the_ledger_read() -> None:
    other = replace(_repin(), source="n-dgx", target="n-dgx")
    old = _task("t-old", "2023-11-14T20:00:00Z")
    assert _held(other, old, R_UUIDS[1]) == {R_UUIDS[1]}
    t = replace(old, rejected_until=START + 600)
    svc = replace(_moving(_repin()), labels={P + MOVE_STATE: "{not json"})
    noms = StoppingGpus(P).holds([], [svc], _ledger(R_UUIDS[1]), [], FACTS, rejected=[t],
                                 now=START + 5)
    assert {u for n in noms for u in n.uuids} == {R_UUIDS[1]}


def test_a_repins_task_age_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``repin_uses`` parses the task's creation time once (it was parsed twice, the
    second time by ``made_after``), and still holds a fresh task on the new GPUs."""
    read: list[str | None] = []

    def counted(text: str | None) -> float | None:
        read.append(text)
        return rfc3339_epoch(text)

    monkeypatch.setattr(repinned, "rfc3339_epoch", counted)
    fresh = _task("t-fresh", "2023-11-14T22:20:00Z")
    uses = repinned.repin_uses(fresh, _moving(_repin()), P)
    assert uses == ((R_UUIDS[1], 1000),) and read == ["2023-11-14T22:20:00Z"]
