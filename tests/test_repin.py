"""Repin: a share moves between GPUs of one node (``rebalance/repin.py``), the only move a
global service makes. The state machine over a fake Swarm at swarmgpu's own boundary
(``RecordingSwarm``), with a few lines standing in for Swarm's constraint enforcer and
orchestrator: every step, a restart between any two, roll-back, a stack re-deploy, forged
labels, dry-run; and the fragmentation policy proposing it.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
from support.forged import (
    NodeWritesFail,
    RecordDropFails,
    RecordingSwarm,
    held_labels,
    start_with_its_record_answer_lost,
    sw_node,
    sw_svc,
)
from support.gpu_nodes import DGX_A100, RTX4090
from support.rebalance import U2, node, running, service
from support.rebalance_fragmentation import HALF, WHOLE, plan, two_half_used

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.placement import (
    MOVE_STATE,
    Holding,
    assign_key,
    devices_key,
    gate_key,
)
from swarmgpu.manager.rebalance.admission import admit
from swarmgpu.manager.rebalance.context import MOVED_AT, why_not_movable
from swarmgpu.manager.rebalance.mover import Mover, MoveState, read_records, record_key
from swarmgpu.manager.rebalance.moves import Move, Outcome, Trigger
from swarmgpu.manager.services.sharing import node_of_key, share_labels
from swarmgpu.swarm.client import SwarmTask, SwarmUnavailable

P = "swarmgpu."
F4090, FDGX = RTX4090.facts(), DGX_A100.facts()
U = [g.uuid for g in F4090.gpus]
D1 = FDGX.gpus[1].uuid  # gpu-node-1 GPU 1 (GPU 0 runs MIG)
RB = RebalanceConfig(dry_run=False, move_timeout_s=120.0)


def _holds(service: str, nid: str, uuid: str) -> dict[str, str]:
    """Half of GPU ``uuid``: every holding here is a half-GPU share."""
    return held_labels(service, nid, uuid, milli=500)


def _shares(nid: str, uuid: str) -> dict[str, str]:
    facts = F4090 if nid == "n-4090" else FDGX
    return share_labels(P, nid, [uuid], [500], facts) or {}


def victim_cluster() -> RecordingSwarm:
    """g (global, half a GPU) runs on both GPU nodes: gpu-node-2 GPU 1, gpu-node-1 GPU 1;
    a (opted out) holds half of gpu-node-2 GPU 0."""
    nodes = [sw_node("n-mgr", "manager", role="manager"),
             sw_node("n-dgx", "gpu-node-1", _holds("g", "n-dgx", D1)),
             sw_node("n-4090", "gpu-node-2", {**_holds("g", "n-4090", U[1]),
                                            **_holds("a", "n-4090", U[0])})]
    g = sw_svc("g", {**HALF, devices_key(P, "n-4090"): U[1], devices_key(P, "n-dgx"): D1,
                   **_shares("n-4090", U[1]), **_shares("n-dgx", D1)}, mode={"Global": {}})
    a = sw_svc("a", {**HALF, devices_key(P, "n-4090"): U[0], f"{P}rebalance": "never"},
             mode={"Global": {}})
    tasks = [SwarmTask("t-g-4090", g.id, "n-4090", None, "running", "running",
                       (f"NVIDIA_VISIBLE_DEVICES={U[1]}",)),
             SwarmTask("t-g-dgx", g.id, "n-dgx", None, "running", "running",
                       (f"NVIDIA_VISIBLE_DEVICES={D1}",)),
             SwarmTask("t-a", a.id, "n-4090", None, "running", "running", ())]
    return RecordingSwarm(nodes, [g, a], tasks)


def _repin_move() -> Move:
    return Move(service="g", service_id="id-g", source_node="n-4090", source_host="gpu-node-2",
                source_uuids=(U[1],), source_milli=(500,), target_node="n-4090",
                target_host="gpu-node-2", target_gpus=(0,), target_uuids=(U[0],),
                target_milli=(500,), trigger=Trigger.HOTSPOT, window_s=None,
                reason="test", gain="test",
                target_share=tuple(sorted(_shares("n-4090", U[0]).items())))


def swarm_acts(sw: RecordingSwarm, *, new_state: str = "running") -> None:
    """What Swarm does between two cycles for global ``g``: the constraint enforcer stops
    a task on a node whose gate is closed; the orchestrator creates one on each gated node
    without one, its devices resolved from the service label now."""
    g = sw.service("id-g")
    gated = {n.id for n in sw.nodes() if n.labels.get(gate_key(P, "g")) == "true"}
    tasks = []
    for t in sw._tasks:
        if t.service_id == g.id and t.node_id not in gated and t.desired_state == "running":
            t = dataclasses.replace(t, desired_state="shutdown", state="shutdown")
        tasks.append(t)
    for nid in sorted(gated):
        if not any(t.service_id == g.id and t.node_id == nid and t.desired_state == "running"
                   for t in tasks):
            dev = g.labels.get(devices_key(P, nid), "void")
            tasks.append(SwarmTask(f"t-g-{nid}-{len(tasks)}", g.id, nid, None, new_state,
                                   "running", (f"NVIDIA_VISIBLE_DEVICES={dev}",)))
    sw._tasks = tasks


def _cycle(sw: RecordingSwarm, now: list[float], moves: list[Move] | None = None,
           dry_run: bool = False) -> Mover:
    """One daemon cycle by a fresh Mover: a restart (or a new leader) before each."""
    m = Mover(sw, RB, prefix=P, dry_run=dry_run, clock=lambda: now[0])  # type: ignore[arg-type]
    m.run_cycle(moves or [], sw.nodes(), sw.services(), sw.tasks())
    return m


def _running_on(sw: RecordingSwarm, nid: str) -> list[SwarmTask]:
    return [t for t in sw.tasks() if t.service_id == "id-g" and t.node_id == nid
            and t.desired_state == "running"]



def _ended_on(sw: Any, uuid: str) -> None:
    """The repin ended with g on ``uuid`` of gpu-node-2 (half of it): its assignment and
    open gate, its device list and shares, no move state, no record left."""
    labels = sw.node("n-4090").labels
    assert labels[assign_key(P, "g")] == f"{uuid}@500" and labels[gate_key(P, "g")] == "true"
    g = sw.service("id-g")
    assert g.labels[devices_key(P, "n-4090")] == uuid and P + MOVE_STATE not in g.labels
    assert {k: v for k, v in g.labels.items() if node_of_key(k, P) == "n-4090"} == \
        _shares("n-4090", uuid)
    assert read_records(sw.swarm_labels(), P) == {}


def _timed_out_repin() -> tuple[Any, list[float]]:
    """The victim cluster with g's repin started, its new task starting for two cycles,
    and the clock past ``move_timeout_s``."""
    sw, now = victim_cluster(), [1000.0]
    _cycle(sw, now, [_repin_move()])
    for _ in range(2):
        swarm_acts(sw, new_state="starting")
        _cycle(sw, now)
    now[0] += RB.move_timeout_s + 1
    return sw, now

def test_repin_replaces_only_that_nodes_task_with_the_new_gpu() -> None:
    sw, now = victim_cluster(), [1000.0]
    m = _cycle(sw, now, [_repin_move()])
    assert [r.outcome for r in m.recent] == [Outcome.STARTED]
    (rec,) = read_records(sw.swarm_labels(), P).values()
    assert rec.same_node and rec.source_uuids == (U[1],) and rec.target_uuids == (U[0],)
    n = sw.node("n-4090").labels
    assert gate_key(P, "g") not in n and n[assign_key(P, "g")] == f"{U[0]}@500"
    g = sw.service("id-g")
    assert g.labels[devices_key(P, "n-4090")] == U[0] and P + MOVE_STATE in g.labels
    outcomes = []
    for _ in range(4):  # Swarm acts, the daemon looks: stop, reopen, the new task runs
        swarm_acts(sw)
        now[0] += 1
        outcomes += [r.outcome for r in _cycle(sw, now).recent]
    assert outcomes == [Outcome.DONE]
    (t,) = _running_on(sw, "n-4090")
    assert t.id != "t-g-4090" and t.env == (f"NVIDIA_VISIBLE_DEVICES={U[0]}",)
    assert [t.id for t in _running_on(sw, "n-dgx")] == ["t-g-dgx"]  # untouched
    g = sw.service("id-g")
    assert P + MOVE_STATE not in g.labels and g.labels[P + MOVED_AT] == "1002"
    assert {k: v for k, v in g.labels.items() if node_of_key(k, P) == "n-4090"} == \
        _shares("n-4090", U[0])
    n = sw.node("n-4090").labels
    assert n[gate_key(P, "g")] == "true" and n[assign_key(P, "g")] == f"{U[0]}@500"
    assert n[assign_key(P, "a")] == f"{U[0]}@500"  # the other share on that GPU, untouched
    assert sw.node("n-dgx").labels == _holds("g", "n-dgx", D1)
    assert read_records(sw.swarm_labels(), P) == {}
    assert sw.swarm_labels()[f"{P}state.moves-finished"] == "1002"


def test_the_gate_reopens_only_once_swarm_let_the_old_task_go() -> None:
    sw, now = victim_cluster(), [1000.0]
    _cycle(sw, now, [_repin_move()])
    for _ in range(3):  # the enforcer has not acted yet: the gate stays closed
        _cycle(sw, now)
        assert gate_key(P, "g") not in sw.node("n-4090").labels
    swarm_acts(sw)
    _cycle(sw, now)
    assert sw.node("n-4090").labels[gate_key(P, "g")] == "true"


def test_dry_run_writes_nothing_and_says_the_move_once() -> None:
    sw, now = victim_cluster(), [1000.0]
    m = Mover(sw, RB, prefix=P, dry_run=True, clock=lambda: now[0])  # type: ignore[arg-type]
    for _ in range(3):
        m.run_cycle([_repin_move()], sw.nodes(), sw.services(), sw.tasks())
    assert sw.calls == [] and [r.outcome for r in m.recent] == [Outcome.DRY_RUN]


def test_a_repin_in_flight_is_left_alone_in_dry_run() -> None:
    sw, now = victim_cluster(), [1000.0]
    _cycle(sw, now, [_repin_move()])
    swarm_acts(sw)
    calls = len(sw.calls)
    _cycle(sw, now, dry_run=True)
    assert len(sw.calls) == calls


def test_no_task_running_within_the_timeout_rolls_back_to_the_old_gpu() -> None:
    sw, now = victim_cluster(), [1000.0]
    _cycle(sw, now, [_repin_move()])
    outcomes = []
    for _ in range(3):  # the new task never gets to run (a broken GPU, say)
        swarm_acts(sw, new_state="starting")
        _cycle(sw, now)
    now[0] += RB.move_timeout_s + 1
    for _ in range(5):
        outcomes += [r.outcome for r in _cycle(sw, now).recent]
        swarm_acts(sw)  # now it would run
    assert outcomes == [Outcome.ROLLED_BACK]
    (t,) = _running_on(sw, "n-4090")
    assert t.env == (f"NVIDIA_VISIBLE_DEVICES={U[1]}",) and t.state == "running"
    g = sw.service("id-g")
    assert g.labels[devices_key(P, "n-4090")] == U[1] and P + MOVE_STATE not in g.labels
    assert {k: v for k, v in g.labels.items() if node_of_key(k, P) == "n-4090"} == \
        _shares("n-4090", U[1])
    assert sw.node("n-4090").labels[assign_key(P, "g")] == f"{U[1]}@500"
    assert [t.id for t in _running_on(sw, "n-dgx")] == ["t-g-dgx"]
    assert read_records(sw.swarm_labels(), P) == {}


def test_a_roll_back_that_times_out_too_is_left_to_placement_gate_open() -> None:
    sw, now = victim_cluster(), [1000.0]
    _cycle(sw, now, [_repin_move()])
    outcomes = []
    for _ in range(2):
        now[0] += RB.move_timeout_s + 1
        for _ in range(3):
            swarm_acts(sw, new_state="starting")
            outcomes += [r.outcome for r in _cycle(sw, now).recent]
    assert outcomes == [Outcome.FAILED]
    assert sw.node("n-4090").labels[gate_key(P, "g")] == "true"
    assert P + MOVE_STATE not in sw.service("id-g").labels
    assert read_records(sw.swarm_labels(), P) == {}


def test_a_stop_between_the_record_and_the_label_drops_the_record_only() -> None:
    sw, now = victim_cluster(), [1000.0]
    m = _cycle(sw, now, [_repin_move()])
    (sid, rec), = read_records(sw.swarm_labels(), P).items()
    sw2 = victim_cluster()  # as if the daemon stopped right after step 0 (repin-step-0)
    key = record_key(P, sid)
    sw2.update_swarm_labels(lambda cur: {**cur, key: rec.to_json()})
    before = {n.id: dict(n.labels) for n in sw2.nodes()}
    out = [r.outcome for r in _cycle(sw2, now).recent]
    assert out == [Outcome.ROLLED_BACK] and read_records(sw2.swarm_labels(), P) == {}
    assert {n.id: dict(n.labels) for n in sw2.nodes()} == before
    assert sw2.calls[-1] == ("swarm", "swarm") and len(m.recent) == 1


@pytest.mark.parametrize("fails", ["spec-answer-lost", "node-write"])
def test_a_repin_whose_first_writes_fail_after_its_record_ends_from_the_record(
        fails: str) -> None:
    """Step 1's spec write made by the engine but its answer lost (a timeout), or step 2's
    node write failing: the repin is in flight by its record (spent, a fragmentation
    move's hour too), and later cycles end it on the new GPU: the device map, the ledger
    and the running task agree."""
    sw, now = victim_cluster(), [1000.0]
    real_spec, real_node = sw.update_service_spec, sw.update_node_labels
    once = [True]

    def spec(service_id: str, compute: Any, **kw: Any) -> bool:
        landed = real_spec(service_id, compute, **kw)
        if once[0] and fails == "spec-answer-lost":
            once[0] = False
            raise SwarmUnavailable("Docker Engine unreachable: read timed out")
        return landed

    def node_labels(node_id: str, compute: Any, **kw: Any) -> bool:
        if once[0] and fails == "node-write":
            once[0] = False
            raise SwarmUnavailable("Docker Engine unreachable: connection reset")
        return real_node(node_id, compute, **kw)

    sw.update_service_spec = spec  # type: ignore[method-assign]
    sw.update_node_labels = node_labels  # type: ignore[method-assign]
    frag = dataclasses.replace(_repin_move(), trigger=Trigger.FRAGMENTATION)
    rb = dataclasses.replace(RB, fragmentation=dataclasses.replace(
        RB.fragmentation, moves_per_100_placements=100.0))
    m = Mover(sw, rb, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    m.run_cycle([frag], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in m.recent] == [Outcome.STARTED]
    assert m.frag_budget.spent == 1
    outcomes = []
    for _ in range(5):
        swarm_acts(sw)
        now[0] += 1
        outcomes += [r.outcome for r in _cycle(sw, now).recent]
    assert outcomes == [Outcome.DONE] and read_records(sw.swarm_labels(), P) == {}
    assert sw.node("n-4090").labels[assign_key(P, "g")] == f"{U[0]}@500"
    assert sw.service("id-g").labels[devices_key(P, "n-4090")] == U[0]
    (t,) = _running_on(sw, "n-4090")
    assert t.env == (f"NVIDIA_VISIBLE_DEVICES={U[0]}",)


def test_a_redeploy_mid_repin_hands_the_service_back_to_placement() -> None:
    sw, now = victim_cluster(), [1000.0]
    _cycle(sw, now, [_repin_move()])
    sw.update_service_spec("id-g", lambda spec: {**spec, "Labels": dict(HALF)})
    out = [r.outcome for r in _cycle(sw, now).recent]
    assert out == [Outcome.DONE] and read_records(sw.swarm_labels(), P) == {}
    # The ledger names the new GPU; placement writes the device map and opens the gate.
    assert sw.node("n-4090").labels[assign_key(P, "g")] == f"{U[0]}@500"


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_forged_same_node_move_label_moves_nothing(dry_run: bool) -> None:
    sw, now = victim_cluster(), [1000.0]
    forged = MoveState(id="forged000002", service="g", source="n-4090",
                       source_host="gpu-node-2", source_uuids=(U[1],), source_milli=(500,),
                       target="n-4090", target_host="gpu-node-2", target_uuids=(U[0],),
                       target_milli=(500,), surge=False, replicas=0, max_replicas=0,
                       started_at=0.0, trigger="fragmentation", reason="forged",
                       service_id="id-g")
    sw.update_service_spec("id-g", lambda spec: {**spec, "Labels": {
        **spec["Labels"], P + MOVE_STATE: forged.to_json()}})
    sw.calls.clear()
    nodes = {n.id: dict(n.labels) for n in sw.nodes()}
    m = _cycle(sw, now, dry_run=dry_run)
    assert [r.outcome for r in m.recent] == [Outcome.IGNORED]
    assert {n.id: dict(n.labels) for n in sw.nodes()} == nodes
    assert [t.id for t in _running_on(sw, "n-4090")] == ["t-g-4090"]
    assert sw.calls == ([] if dry_run else [("service", "id-g")])  # the label removed
    if not dry_run:
        assert P + MOVE_STATE not in sw.service("id-g").labels


def test_start_refuses_a_taken_target_or_a_changed_share() -> None:
    sw, now = victim_cluster(), [1000.0]
    full = dataclasses.replace(_repin_move(), target_milli=(600,))  # 500 + 600 > 1000
    m = _cycle(sw, now, [full])
    assert [r.outcome for r in m.recent] == [Outcome.REFUSED]
    assert "no longer free" in m.recent[0].detail and sw.calls == []
    stale = dataclasses.replace(_repin_move(), source_uuids=(U[2],))
    m = _cycle(sw, now, [stale])
    assert "changed since planning" in m.recent[0].detail and sw.calls == []


def test_a_global_service_moves_only_on_its_own_node() -> None:
    sw = victim_cluster()
    g = sw.service("id-g")
    ledger = {"n-4090": Holding("g", "n-4090", (U[1],), (500,)),
              "n-dgx": Holding("g", "n-dgx", (D1,), (500,))}
    tasks = sw.tasks()
    assert why_not_movable(g, None, tasks, ledger, P, 0.0, 0.0) is not None
    assert "own node" in (why_not_movable(g, None, tasks, ledger, P, 0.0, 0.0) or "")
    cross = dataclasses.replace(_repin_move(), target_node="n-dgx", target_host="gpu-node-1",
                                target_uuids=(FDGX.gpus[2].uuid,))
    from swarmgpu.manager.placement import read_ledger
    ok, refused = admit([cross, _repin_move()], [], {"g": g}, tasks,
                        read_ledger(sw.nodes(), P), RB, P, 1000.0)
    assert ok == [_repin_move()] and "own node" in refused[0][1]


def test_a_replicated_service_repins_only_when_its_replacement_must_wait_for_the_node() -> None:
    s = service("r", HALF)
    ledger = {"n2": Holding("r", "n2", (U2[0],), (500,))}
    tasks = [running("r", "n2")]
    assert why_not_movable(s, None, tasks, ledger, P, 0.0, 0.0, same_node=True) == \
        "no valid GPU request"  # every other check passed
    many = dataclasses.replace(s, replicas=2)
    assert "MaxReplicas" in (why_not_movable(many, None, tasks, ledger, P, 0.0, 0.0,
                                             same_node=True) or "")


def test_fragmentation_proposes_a_same_node_move_for_a_global_share() -> None:
    """gpu-node-2: a (opted out) holds half of GPU 0, global g half of GPU 1; the
    workload has whole-GPU tasks: g joins a on GPU 0, on its own node."""
    n2 = {**_holds("a", "n2", U2[0]), **_holds("g", "n2", U2[1])}
    nodes = [node("n1", "gpu-node-1", {}), node("n2", "gpu-node-2", n2)]
    svcs = [service("a", {**HALF, f"{P}rebalance": "never"}), service("g", HALF, "global"),
            service("w", WHOLE)]
    moves = plan(nodes, svcs, [running("a", "n2"), running("g", "n2")])
    (m,) = moves
    assert (m.service, m.source_node, m.target_node) == ("g", "n2", "n2")
    assert m.source_uuids == (U2[1],) and m.target_uuids == (U2[0],)
    assert m.frag_gain_milli is not None and m.frag_gain_milli > 0
    assert "same node" in m.reason


def test_fragmentation_never_moves_a_global_share_to_another_node() -> None:
    nodes, svcs, tasks = two_half_used()
    g = dataclasses.replace(svcs[1], mode="global", replicas=None)
    moves = plan(nodes, [svcs[0], g, svcs[2]], tasks)
    assert all(m.source_node == m.target_node for m in moves if m.service == "b")
    # As a replicated service, b was the one to move (to a's GPU on gpu-node-1).
    assert [(m.service, m.target_host) for m in plan(nodes, svcs, tasks)] == \
        [("b", "gpu-node-1")]


class _Crash(BaseException):
    """The daemon's os._exit(137) at a test hook, as an exception here: no handler of
    the daemon's catches it (a kill is caught by none)."""


@pytest.mark.parametrize("point", ["repin-step-0", "repin-step-1", "repin-step-2",
                                   "repin-step-3"])
def test_a_daemon_killed_at_any_step_finishes_the_repin_after_a_restart(
        point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """SWARMGPU_TEST_CRASH_AFTER=<point> stops the daemon right after that step's write;
    the next daemon (a fresh Mover, only Swarm's state) carries the repin to its end:
    the move, or, when the stop came before the service's label (step 0), nothing."""
    import os

    from swarmgpu.manager.rebalance.record import CRASH_ENV

    def crash(_code: int) -> None:
        raise _Crash

    monkeypatch.setattr(os, "_exit", crash)
    monkeypatch.setenv(CRASH_ENV, point)
    sw, now = victim_cluster(), [1000.0]
    outcomes: list[Outcome] = []
    crashed = False
    for i in range(8):
        m = Mover(sw, RB, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
        try:
            m.run_cycle([_repin_move()] if i == 0 else [], sw.nodes(), sw.services(),
                        sw.tasks())
        except _Crash:
            crashed = True
            monkeypatch.delenv(CRASH_ENV)
        outcomes += [r.outcome for r in m.recent]
        swarm_acts(sw)
        now[0] += 1
    assert crashed
    assert read_records(sw.swarm_labels(), P) == {}
    assert P + MOVE_STATE not in sw.service("id-g").labels
    (t,) = _running_on(sw, "n-4090")
    assert [t.id for t in _running_on(sw, "n-dgx")] == ["t-g-dgx"]
    if point == "repin-step-0":  # record only: dropped, nothing else happened
        assert outcomes == [Outcome.ROLLED_BACK] and t.id == "t-g-4090"
    else:
        assert outcomes[-1] == Outcome.DONE and Outcome.ROLLED_BACK not in outcomes
        assert t.env == (f"NVIDIA_VISIBLE_DEVICES={U[0]}",)


def test_a_node_that_leaves_mid_repin_ends_it() -> None:
    sw, now = victim_cluster(), [1000.0]
    _cycle(sw, now, [_repin_move()])
    del sw._nodes["n-4090"]  # `docker node rm`
    assert [r.outcome for r in _cycle(sw, now).recent] == [Outcome.FAILED]
    assert read_records(sw.swarm_labels(), P) == {}
    assert P + MOVE_STATE not in sw.service("id-g").labels


# --- a move between nodes whose node leaves (mover.py) ------------------------------------


def _cross_move() -> Move:
    return dataclasses.replace(_repin_move(), service="a", service_id="id-a",
                               source_uuids=(U[0],), target_node="n-dgx",
                               target_host="gpu-node-1", target_gpus=(2,),
                               target_uuids=(FDGX.gpus[2].uuid,))


def _replicated_a(sw: RecordingSwarm) -> None:
    """a as a replicated service (a move between nodes needs one), rebalanced."""
    def edit(spec: Mapping[str, Any]) -> Mapping[str, Any]:
        labels = {k: v for k, v in spec["Labels"].items() if k != f"{P}rebalance"}
        return {**spec, "Labels": labels, "Mode": {"Replicated": {"Replicas": 1}}}
    sw.update_service_spec("id-a", edit)


@pytest.mark.parametrize("gone", ["n-dgx", "n-4090"])
def test_a_move_between_nodes_ends_when_one_of_its_nodes_leaves(gone: str) -> None:
    sw, now = victim_cluster(), [1000.0]
    _replicated_a(sw)
    m = _cycle(sw, now, [_cross_move()])
    assert [r.outcome for r in m.recent] == [Outcome.STARTED]
    del sw._nodes[gone]
    out = [r.outcome for r in _cycle(sw, now).recent]
    assert out == [Outcome.ROLLED_BACK if gone == "n-dgx" else Outcome.DONE]
    assert read_records(sw.swarm_labels(), P) == {}
    a = sw.service("id-a")
    assert P + MOVE_STATE not in a.labels and devices_key(P, gone) not in a.labels
    kept = "n-4090" if gone == "n-dgx" else "n-dgx"
    assert sw.node(kept).labels[gate_key(P, "a")] == "true"


# --- a health move is never rolled back onto its failed GPU ------------------------------


def test_a_health_repin_past_its_timeout_stays_on_the_healthy_gpu() -> None:
    """Its old GPU failed: a roll-back would restore a broken holder that the policy
    proposes again at once. Past the timeout it ends on the new GPU (gate open there,
    ledger naming it), outcome failed, and Swarm runs the new task when it can."""
    sw, now = victim_cluster(), [1000.0]
    move = dataclasses.replace(_repin_move(), trigger=Trigger.HEALTH, reason="health: x")
    _cycle(sw, now, [move])
    for _ in range(3):  # the new task does not get to run (slow start, say)
        swarm_acts(sw, new_state="starting")
        _cycle(sw, now)
    now[0] += RB.move_timeout_s + 1
    outcomes = []
    for _ in range(3):
        outcomes += [r.outcome for r in _cycle(sw, now).recent]
        swarm_acts(sw, new_state="starting")
    assert outcomes == [Outcome.FAILED]
    n = sw.node("n-4090").labels
    assert n[assign_key(P, "g")] == f"{U[0]}@500" and n[gate_key(P, "g")] == "true"
    g = sw.service("id-g")
    assert g.labels[devices_key(P, "n-4090")] == U[0] and P + MOVE_STATE not in g.labels
    (t,) = _running_on(sw, "n-4090")
    assert t.env == (f"NVIDIA_VISIBLE_DEVICES={U[0]}",)  # never back on the failed GPU
    assert read_records(sw.swarm_labels(), P) == {}
    assert sw.swarm_labels()[f"{P}state.health-spent"] == "1000"  # its start stays spent


def test_a_health_repin_past_its_timeout_waits_for_swarm_to_stop_the_old_task() -> None:
    """Before the gate reopens on the new GPU, the steps carry on (no roll-back): the
    closed gate is Swarm's to act on."""
    sw, now = victim_cluster(), [1000.0]
    move = dataclasses.replace(_repin_move(), trigger=Trigger.HEALTH, reason="health: x")
    _cycle(sw, now, [move])
    now[0] += RB.move_timeout_s + 1
    assert [r.outcome for r in _cycle(sw, now).recent] == []
    assert gate_key(P, "g") not in sw.node("n-4090").labels
    assert read_records(sw.swarm_labels(), P)["id-g"].direction == "forward"
    swarm_acts(sw)  # the enforcer stops the old task; the daemon reopens the gate
    _cycle(sw, now)
    swarm_acts(sw)  # the new task runs on the healthy GPU
    assert [r.outcome for r in _cycle(sw, now).recent] == [Outcome.DONE]


def test_a_health_move_between_nodes_past_its_timeout_ends_on_the_target() -> None:
    """Make-before-break: the target's task never ran within the timeout. Not rolled
    back onto the failed source GPU: the source closes (Swarm's enforcer stops the broken
    task), the spec is restored, and the target keeps its holding and open gate."""
    from support.forged import victim_cluster as _two_nodes
    from support.forged import victim_move

    sw, now = _two_nodes({}), [1000.0]
    move = dataclasses.replace(victim_move(), trigger=Trigger.HEALTH, window_s=None,
                               reason="health: x")
    m = Mover(sw, RB, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    m.run_cycle([move], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in m.recent] == [Outcome.STARTED]
    assert sw.service("id-victim").replicas == 2  # the surge
    now[0] += RB.move_timeout_s + 1
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in m.recent] == [Outcome.STARTED, Outcome.FAILED]
    assert "not rolled back" in m.recent[-1].detail
    assert gate_key(P, "victim") not in sw.node("n-dgx").labels
    assert assign_key(P, "victim") not in sw.node("n-dgx").labels
    tgt = sw.node("n-4090").labels
    assert tgt[gate_key(P, "victim")] == "true"
    assert tgt[assign_key(P, "victim")] == move.target_uuids[0]
    v = sw.service("id-victim")
    assert v.replicas == 1 and P + MOVE_STATE not in v.labels
    assert devices_key(P, "n-dgx") not in v.labels
    assert read_records(sw.swarm_labels(), P) == {}


@pytest.mark.parametrize("when", ["before the swap", "after the swap"])
def test_a_roll_back_never_writes_back_old_gpus_another_service_holds_now(when: str) -> None:
    """Step 2 freed g's old GPU (U[1]) in the ledger, and a placement gave it whole to b.
    Before: the roll-back wrote g's half of U[1] back beside b's whole GPU (1.5 GPUs
    held of one) and pointed g's task at it. Now the repin is not rolled back: g is left
    to placement on the GPU it holds (U[0], its device map pointed there, gate open),
    failed, the outcome naming g's old GPU and b. ``after the swap``: the roll-back's
    record and spec were written, then its node write failed; b took U[1] meanwhile."""
    sw, now = _timed_out_repin()
    if when == "after the swap":
        real = sw.update_node_labels
        sw.update_node_labels = lambda *a, **k: (_ for _ in ()).throw(  # type: ignore[method-assign]
            SwarmUnavailable("engine down"))
        _cycle(sw, now)
        sw.update_node_labels = real  # type: ignore[method-assign]
        (rec,) = read_records(sw.swarm_labels(), P).values()
        assert rec.direction == "back"
        assert sw.service("id-g").labels[devices_key(P, "n-4090")] == U[1]
    n = sw.node("n-4090")
    sw._nodes["n-4090"] = dataclasses.replace(n, labels={**n.labels, **held_labels(
        "b", "n-4090", U[1])})
    m = _cycle(sw, now)
    labels = sw.node("n-4090").labels
    assert labels[assign_key(P, "g")] == f"{U[0]}@500" and labels[gate_key(P, "g")] == "true"
    assert labels[assign_key(P, "b")] == U[1]
    g = sw.service("id-g")
    assert g.labels[devices_key(P, "n-4090")] == U[0] and P + MOVE_STATE not in g.labels
    assert read_records(sw.swarm_labels(), P) == {}
    (last,) = m.recent
    assert last.outcome is Outcome.FAILED and U[1] in last.detail and "b" in last.detail


def test_new_gpus_given_out_before_step_2_landed_are_not_written() -> None:
    """Step 2 (the ledger names the new GPU, the gate closes) failed, and a placement gave
    the new GPU (U[0], half held by a) to c before the next cycle. Before: step 2 was
    written beside c's share (1.5 GPUs held of one) and g's task pointed at it. Now g is
    left on its old GPU: its device map pointed there again, its gate open, failed."""
    sw, now = victim_cluster(), [1000.0]
    real = sw.update_node_labels
    sw.update_node_labels = lambda *a, **k: (_ for _ in ()).throw(  # type: ignore[method-assign]
        SwarmUnavailable("engine down"))
    _cycle(sw, now, [_repin_move()])
    sw.update_node_labels = real  # type: ignore[method-assign]
    assert sw.node("n-4090").labels[assign_key(P, "g")] == f"{U[1]}@500"
    n = sw.node("n-4090")
    sw._nodes["n-4090"] = dataclasses.replace(n, labels={**n.labels, **_holds("c", "n-4090",
                                                                              U[0])})
    now[0] += 1
    m = _cycle(sw, now)
    _ended_on(sw, U[1])
    (last,) = m.recent
    assert last.outcome is Outcome.FAILED and U[0] in last.detail and "c" in last.detail


@pytest.mark.parametrize("landed", [False, True], ids=["failed", "answer-lost"])
def test_a_repin_whose_record_drop_fails_is_said_done_once(landed: bool) -> None:
    # Before: the retry found the move label gone and said "the service's move label was
    # gone" (the drop failed), or nothing at all (the drop made, its answer lost).
    sw, now = RecordDropFails.over(victim_cluster(), landed), [1000.0]
    m = Mover(sw, RB, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    m.run_cycle([_repin_move()], sw.nodes(), sw.services(), sw.tasks())
    sw.fail = 1
    for _ in range(5):
        swarm_acts(sw)
        now[0] += 1
        m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert read_records(sw.swarm_labels(), P) == {} and sw.fail == 0
    ended = [r for r in m.recent if r.outcome is not Outcome.STARTED]
    assert [r.outcome for r in ended] == [Outcome.DONE]
    assert "only that node's task was replaced" in ended[0].detail


PORT = {"Protocol": "tcp", "TargetPort": 80, "PublishedPort": 8000, "PublishMode": "host"}


def _redeploy(sw: RecordingSwarm, sid: str, edit: Any) -> None:
    """The service's spec as a ``docker stack deploy`` since planning left it."""
    spec = copy.deepcopy(dict(sw.service(sid).spec))
    edit(spec)
    sw.update_service_spec(sid, lambda _cur: spec)
    sw.calls.clear()


def _start_repin(sw: RecordingSwarm) -> str | None:
    m = Mover(sw, RB, prefix=P, dry_run=False, clock=lambda: 1000.0)  # type: ignore[arg-type]
    got = m.start(_repin_move(), sw.service("id-g"))
    if got.ok:
        return None
    assert [r.outcome for r in m.recent] == [Outcome.REFUSED]
    assert sw.calls == [] and read_records(sw.swarm_labels(), P) == {}
    return got.why


def test_a_repin_start_rechecks_the_service_as_just_read() -> None:
    """As a move between nodes (``live_refusal``): a re-deploy since planning that the
    node no longer meets (a constraint, a host-mode port another service's task binds
    there) leaves the new task pending once the gate closes; refused instead, nothing
    written. Its own task's port is no clash: that task is the one replaced. Before: the
    repin started and its task stayed pending until the roll-back."""
    sw = victim_cluster()
    _redeploy(sw, "id-g", lambda spec: spec["TaskTemplate"]["Placement"][
        "Constraints"].append("node.hostname==gpu-node-1"))
    why = _start_repin(sw)
    assert why is not None and "gpu-node-2 does not satisfy g's constraints" in why, why
    sw = victim_cluster()
    _redeploy(sw, "id-g", lambda spec: spec.setdefault("EndpointSpec", {"Ports": [PORT]}))
    assert _start_repin(sw) is None  # g alone publishing it: its own task is replaced
    sw = victim_cluster()
    for sid in ("id-a", "id-g"):
        _redeploy(sw, sid, lambda spec: spec.setdefault("EndpointSpec", {"Ports": [PORT]}))
    why = _start_repin(sw)
    assert why is not None and "host-mode port 8000/tcp is taken by a task of a" in why, why


def test_a_repin_whose_record_answer_was_lost_is_said_failed_once() -> None:
    """The record write made, its answer lost: the start raised, said failed; the next
    cycle finds the record with no move label and drops it (``recover``). Before, that
    said ``rolled-back`` too: two outcomes for one repin."""
    sw, now = victim_cluster(), [1000.0]
    m = Mover(sw, RB, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    start_with_its_record_answer_lost(sw, m, _repin_move(), now)
    ended = [r.outcome for r in m.recent if r.outcome is not Outcome.STARTED]
    assert ended == [Outcome.FAILED], ended


def test_a_roll_back_whose_node_write_never_lands_says_so_and_points_the_map_back(
        ) -> None:
    """The roll-back pointed g's device map at its old GPU (U[1]), then its node write
    (the ledger back on U[1]) failed each cycle until the roll-back timed out too. Before:
    g was left to placement with its ledger on U[0] and its device map on U[1] (its task
    sees a GPU the ledger does not give it). Now the map points at U[0] again, as the
    hold-limit end does when step 2 never landed, and its outcome names that node write,
    the gate as read and the daemon's log: before, it said the roll-back's task did not
    run, sending the operator after Swarm and the task when swarmgpu's write failed."""
    sw, now = _timed_out_repin()
    real = sw.update_node_labels
    sw.update_node_labels = lambda *a, **k: (_ for _ in ()).throw(  # type: ignore[method-assign]
        SwarmUnavailable("engine down"))
    _cycle(sw, now)  # the roll-back: its record and spec written, its node write failed
    (rec,) = read_records(sw.swarm_labels(), P).values()
    assert rec.direction == "back"
    assert sw.service("id-g").labels[devices_key(P, "n-4090")] == U[1]
    now[0] += 10
    _cycle(sw, now)  # failed again
    sw.update_node_labels = real  # type: ignore[method-assign]
    now[0] += RB.move_timeout_s + 1
    (last,) = _cycle(sw, now).recent
    assert last.outcome is Outcome.FAILED
    _ended_on(sw, U[0])
    assert "task did not run" not in last.detail, last.detail
    assert f"roll-back's node write on gpu-node-2 (the ledger on {U[1]}" in last.detail
    assert "gate open as read" in last.detail and "daemon's log" in last.detail


def test_a_health_repin_whose_old_task_swarm_never_lets_go_ends_at_its_hold_limit() -> None:
    """Its gate closed, Swarm still wants the old task on the node (it never stops it):
    past twice ``move_timeout_s`` the repin ends, failed, record gone (audit's
    stuck-record finding judges it by that limit), not rolled back onto the failed GPU:
    the ledger keeps the healthy GPU and the gate stays closed (the old task carries the
    failed GPU's devices), placement carries on from there."""
    sw, now = victim_cluster(), [1000.0]
    move = dataclasses.replace(_repin_move(), trigger=Trigger.HEALTH, reason="health: x")
    _cycle(sw, now, [move])
    now[0] += RB.move_timeout_s + 1
    assert [r.outcome for r in _cycle(sw, now).recent] == []  # within the hold: carries on
    now[0] += RB.move_timeout_s
    assert [r.outcome for r in _cycle(sw, now).recent] == [Outcome.FAILED]
    assert read_records(sw.swarm_labels(), P) == {}
    n = sw.node("n-4090").labels
    assert n[assign_key(P, "g")] == f"{U[0]}@500" and gate_key(P, "g") not in n
    g = sw.service("id-g")
    assert g.labels[devices_key(P, "n-4090")] == U[0] and P + MOVE_STATE not in g.labels


def test_a_health_repin_whose_node_write_never_landed_says_so_at_its_hold_limit() -> None:
    """Its node write (ledger on the healthy GPU, gate closed) fails each cycle till the
    hold limit: the gate never closed, the ledger still names the old GPU, the device map
    is pointed back at it. Before, its outcome said the gate did not reopen because Swarm
    had not let the old task go, gate left closed: neither is so (the gate is open, the
    old task runs), and the operator was sent after Swarm instead of the failed write."""
    sw, now = victim_cluster(), [1000.0]
    real = sw.update_node_labels
    sw.update_node_labels = lambda *a, **k: (_ for _ in ()).throw(  # type: ignore[method-assign]
        SwarmUnavailable("engine down"))
    move = dataclasses.replace(_repin_move(), trigger=Trigger.HEALTH, reason="health: x")
    _cycle(sw, now, [move])
    now[0] += 2 * RB.move_timeout_s + 1
    (last,) = _cycle(sw, now).recent
    sw.update_node_labels = real  # type: ignore[method-assign]
    assert last.outcome is Outcome.FAILED
    n = sw.node("n-4090").labels
    assert n[assign_key(P, "g")] == f"{U[1]}@500" and n[gate_key(P, "g")] == "true"
    assert sw.service("id-g").labels[devices_key(P, "n-4090")] == U[1]
    assert "did not reopen" not in last.detail and "left closed" not in last.detail
    assert "node write" in last.detail and "gate open" in last.detail, last.detail


def test_the_gate_stays_closed_while_a_task_desired_ready_is_on_the_node() -> None:
    """g's task failed as its gate closed: Swarm stopped it, and its restart supervisor
    had made the replacement there already (desired ready, its restart delay), with the
    old GPU's devices. Before: only tasks desired running counted as Swarm's wish, so
    the gate reopened and that task started on the old GPU, the ledger on the new one.
    Now the gate waits until Swarm lets that one go too."""
    sw, now = victim_cluster(), [1000.0]
    _cycle(sw, now, [_repin_move()])
    assert gate_key(P, "g") not in sw.node("n-4090").labels  # step 2: closed
    sw._tasks = [dataclasses.replace(t, desired_state="shutdown", state="failed")
                 if t.id == "t-g-4090" else t for t in sw._tasks]
    sw._tasks.append(SwarmTask("t-g-again", "id-g", "n-4090", None, "assigned", "ready",
                               (f"NVIDIA_VISIBLE_DEVICES={U[1]}",)))
    now[0] += 1
    _cycle(sw, now)
    assert gate_key(P, "g") not in sw.node("n-4090").labels
    swarm_acts(sw)  # the enforcer stops it too; the gate reopens, the new task runs
    sw._tasks = [dataclasses.replace(t, desired_state="shutdown", state="rejected")
                 if t.id == "t-g-again" else t for t in sw._tasks]
    for _ in range(3):
        now[0] += 1
        _cycle(sw, now)
        swarm_acts(sw)
    _ended_on(sw, U[0])
    (t,) = _running_on(sw, "n-4090")
    assert t.env == (f"NVIDIA_VISIBLE_DEVICES={U[0]}",)


def test_a_repin_on_a_node_paused_after_its_gate_closed_is_handed_back_at_once() -> None:
    """The operator paused gpu-node-2 once g's gate had closed: Swarm's constraint
    enforcer acts on no paused node, so g's old task runs on with the old GPU. Before:
    the repin waited for its timeout, then a roll-back that waited too, the ledger
    naming the new GPU while the task used the old one. Now it ends that cycle on the
    GPU its task has (ledger, device map, gate open), saying the node is paused. A repin
    is never started there (``room_for``: the node takes no work)."""
    sw, now = victim_cluster(), [1000.0]
    _cycle(sw, now, [_repin_move()])
    assert gate_key(P, "g") not in sw.node("n-4090").labels  # step 2: closed
    sw._nodes["n-4090"] = dataclasses.replace(sw._nodes["n-4090"], availability="pause")
    now[0] += 1
    (last,) = _cycle(sw, now).recent
    assert last.outcome is Outcome.FAILED and "gpu-node-2 is paused" in last.detail, last
    _ended_on(sw, U[1])
    assert [t.id for t in _running_on(sw, "n-4090")] == ["t-g-4090"]
    fresh = victim_cluster()  # paused before: refused at its start, nothing written
    fresh._nodes["n-4090"] = dataclasses.replace(fresh._nodes["n-4090"], availability="pause")
    assert "gpu-node-2 is ready/pause" in (_start_repin(fresh) or "")


def test_a_repin_whose_node_is_paused_before_step_2_ends_without_closing_its_gate() -> None:
    """Step 2's write failed at the start (the engine's 500), then the operator paused
    gpu-node-2. Before: the next look closed g's gate (stopping nothing there), and the
    one after opened it again (``_paused``): two pointless node writes. Now that look
    ends the repin as ``_paused`` does, the gate never closed."""
    base = victim_cluster()
    sw = NodeWritesFail(list(base._nodes.values()), list(base._services.values()),
                        base._tasks)
    sw.fail_once = frozenset({"n-4090"})
    now = [1000.0]
    _cycle(sw, now, [_repin_move()])
    assert sw.node("n-4090").labels[gate_key(P, "g")] == "true"  # step 2 not made
    sw._nodes["n-4090"] = dataclasses.replace(sw._nodes["n-4090"], availability="pause")
    before = len([c for c in sw.calls if c == ("node", "n-4090")])
    now[0] += 1
    (last,) = _cycle(sw, now).recent
    assert last.outcome is Outcome.FAILED and "gpu-node-2 is paused" in last.detail, last
    assert len([c for c in sw.calls if c == ("node", "n-4090")]) == before, sw.calls
    _ended_on(sw, U[1])
    assert [t.id for t in _running_on(sw, "n-4090")] == ["t-g-4090"]
