"""A move between nodes whose nodes change under it: the target or the source goes down,
is drained or leaves the swarm (``docker node rm``), or its record names nodes that are
no longer there (a record a leader before this one left). Pure, over the recording
Swarm stand-in (tests/support/forged.py): victim moves from gpu-node-1 (n-dgx) to
gpu-node-2 (n-4090).

The mover judges the record against the node list each cycle: a move never waits on a
node that cannot run its task (the budget held, the source closed with nowhere to run),
and the roll-back or the end is the one a move that failed gets.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.forged import R4090_F, V_UUID, P, RecordingSwarm, victim_cluster, victim_move

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import MOVE_STATE, assign_key, devices_key, gate_key
from swarmgpu.manager.rebalance.mover import (
    Mover,
    MoveState,
    forged_check,
    read_records,
    record_key,
)
from swarmgpu.manager.rebalance.moves import Outcome, Trigger
from swarmgpu.swarm.client import SwarmTask

NEW = R4090_F.gpus[1].uuid  # the victim's target GPU


def _mover(sw: RecordingSwarm, now: list[float], surge: bool = True) -> Mover:
    cfg = RebalanceConfig(dry_run=False, move_timeout_s=120.0, make_before_break=surge)
    return Mover(sw, cfg, prefix=P, dry_run=False,  # type: ignore[arg-type]
                 clock=lambda: now[0])


def _started(surge: bool = True, trigger: Trigger = Trigger.HOTSPOT
             ) -> tuple[RecordingSwarm, list[float], Mover]:
    """The victim's move, started: its record, its spec, the target's gate open."""
    sw, now = victim_cluster({}), [1000.0]
    m = _mover(sw, now, surge)
    m.run_cycle([replace(victim_move(), trigger=trigger)], sw.nodes(), sw.services(),
                sw.tasks())
    assert [r.outcome for r in m.recent] == [Outcome.STARTED]
    assert sw.node("n-4090").labels[gate_key(P, "victim")] == "true"
    return sw, now, m


def _set(sw: RecordingSwarm, nid: str, state: str, availability: str) -> None:
    sw._nodes[nid] = replace(sw.node(nid), state=state, availability=availability)


def _cycle(sw: RecordingSwarm, m: Mover) -> list[Outcome]:
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    return [r.outcome for r in m.recent]


def _rolled_back(sw: RecordingSwarm) -> None:
    """The victim where it was: its gate and ledger on n-dgx, none on n-4090, the spec
    without the move (label, device map of the target, surge), no record."""
    assert sw.node("n-dgx").labels[gate_key(P, "victim")] == "true"
    assert sw.node("n-dgx").labels[assign_key(P, "victim")] == V_UUID
    tgt = sw.node("n-4090").labels
    assert gate_key(P, "victim") not in tgt and assign_key(P, "victim") not in tgt
    v = sw.service("id-victim")
    assert P + MOVE_STATE not in v.labels and devices_key(P, "n-4090") not in v.labels
    assert v.replicas == 1 and "MaxReplicas" not in v.spec["TaskTemplate"]["Placement"]
    assert read_records(sw.swarm_labels(), P) == {}


# --- the target --------------------------------------------------------------------------


@pytest.mark.parametrize("surge", [True, False])
@pytest.mark.parametrize(("state", "availability"), [
    ("down", "active"), ("ready", "drain"), ("ready", "pause"), ("down", "drain")])
def test_a_move_whose_target_cannot_run_its_task_is_rolled_back_at_once(
        surge: bool, state: str, availability: str) -> None:
    """Before: nothing was judged of the target's state. Without make-before-break the
    next cycle closed the source (Swarm stopped the running task) though its replacement
    could only go to the down target: the service ran nowhere, and the move held the
    budget, until ``move_timeout_s``. Now the move is rolled back that cycle, as a move
    that timed out is, and the log names the node and its state."""
    sw, now, m = _started(surge)
    _set(sw, "n-4090", state, availability)
    now[0] += 10.0  # well within move_timeout_s
    assert _cycle(sw, m)[-1] is Outcome.ROLLED_BACK
    assert f"gpu-node-2 is {state}/{availability}" in m.recent[-1].detail
    _rolled_back(sw)
    # the budget is free again: the next move starts
    assert m.in_flight(m.records()) == []


def test_a_target_a_new_leader_does_not_know_yet_is_waited_for() -> None:
    """A new leader calls every node "unknown" until it reports again: no roll-back for
    that, the steps carry on (the timeout bounds the wait)."""
    sw, now, m = _started()
    _set(sw, "n-4090", "unknown", "active")
    now[0] += 10.0
    assert _cycle(sw, m) == [Outcome.STARTED]
    assert set(read_records(sw.swarm_labels(), P)) == {"id-victim"}
    assert sw.node("n-dgx").labels[gate_key(P, "victim")] == "true"


def test_a_paused_target_that_already_runs_the_task_lets_the_move_finish() -> None:
    """pause only stops new tasks there: the task the move started there runs on."""
    sw, now, m = _started()
    sw.run_task(SwarmTask("t-victim-2", "id-victim", "n-4090", 2, "running", "running", ()))
    _set(sw, "n-4090", "ready", "pause")
    for _ in range(3):
        now[0] += 10.0
        _cycle(sw, m)
        sw.stop_tasks("id-victim", "n-dgx")  # the enforcer stops the task on the closed node
    assert m.recent[-1].outcome is Outcome.DONE
    assert sw.service("id-victim").labels[devices_key(P, "n-4090")] == NEW
    assert read_records(sw.swarm_labels(), P) == {}


def test_a_health_move_whose_target_goes_down_ends_there_for_placement() -> None:
    """A health move is never rolled back onto its failed GPU: a target that cannot run
    its task ends it there at once, as its timeout would (placement's converge step
    re-places a holding on a node Swarm cannot run it on)."""
    sw, now, m = _started(trigger=Trigger.HEALTH)
    _set(sw, "n-4090", "down", "active")
    now[0] += 10.0
    assert _cycle(sw, m)[-1] is Outcome.FAILED
    assert "gpu-node-2 is down/active" in m.recent[-1].detail
    assert gate_key(P, "victim") not in sw.node("n-dgx").labels
    assert sw.node("n-4090").labels[gate_key(P, "victim")] == "true"
    assert read_records(sw.swarm_labels(), P) == {}


# --- the source (guards: these hold on the code before the target fix) ------------------


@pytest.mark.parametrize("availability", ["active", "drain"])
def test_a_move_whose_source_goes_down_finishes_and_releases_it(availability: str) -> None:
    """A guard. The source down (or drained): Swarm stops its task, the one on the target
    runs; the move ends there and the source's ledger entry and gate go (a label write
    to a down node is Swarm's to keep)."""
    sw, now, m = _started()
    _set(sw, "n-dgx", "down" if availability == "active" else "ready", availability)
    sw.stop_tasks("id-victim", "n-dgx")
    sw.run_task(SwarmTask("t-victim-2", "id-victim", "n-4090", 2, "running", "running", ()))
    for _ in range(3):
        now[0] += 10.0
        _cycle(sw, m)
    assert m.recent[-1].outcome is Outcome.DONE
    src = sw.node("n-dgx").labels
    assert gate_key(P, "victim") not in src and assign_key(P, "victim") not in src
    v = sw.service("id-victim")
    assert devices_key(P, "n-dgx") not in v.labels and v.replicas == 1
    assert read_records(sw.swarm_labels(), P) == {}


# --- nodes that left the swarm ------------------------------------------------------------


@pytest.mark.parametrize("label", [True, False])
def test_a_record_naming_no_node_of_the_swarm_ends_and_frees_its_budget(label: bool) -> None:
    """A guard. A record a leader before this one left, both of whose nodes were removed
    since (``docker node rm``), its service's move label there or lost: the move ends
    that cycle (nothing to open or close), never a step error every cycle."""
    sw, now, _m = _started()
    st = read_records(sw.swarm_labels(), P)["id-victim"]
    old = replace(st, source="n-gone-a", source_host="old-1", target="n-gone-b",
                  target_host="old-2")
    sw._swarm_labels[record_key(P, "id-victim")] = old.to_json()
    sw.update_service_spec("id-victim", lambda spec: {**spec, "Labels": {
        **{k: v for k, v in spec["Labels"].items() if k != P + MOVE_STATE},
        **({P + MOVE_STATE: old.to_json()} if label else {})}})
    m2 = _mover(sw, now)
    assert _cycle(sw, m2) == [Outcome.ROLLED_BACK]
    assert "old-2 left the swarm" in m2.recent[-1].detail
    assert read_records(sw.swarm_labels(), P) == {}
    assert P + MOVE_STATE not in sw.service("id-victim").labels
    assert m2.in_flight(m2.records()) == []


@pytest.mark.parametrize("gone", ["source", "target"])
def test_audit_names_a_move_record_whose_node_left_the_swarm(gone: str) -> None:
    """Before: a record naming a removed node said nothing in audit (exit 0) while the
    daemon was stopped or in dry-run, which leave it as it is. Now it is a finding that
    needs action, naming the node, what the daemon does with it and the fix."""
    sw, _now, _m = _started()
    nid = "n-dgx" if gone == "source" else "n-4090"
    del sw._nodes[nid]  # `docker node rm`
    found = forged_check(P)(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {},
                                     swarm_labels=sw.swarm_labels()))
    assert [(f.kind, f.subject, f.key, f.advisory) for f in found] == [
        ("move-record-node-gone", "victim", record_key(P, "id-victim"), False)]
    msg = found[0].message
    host = "gpu-node-1" if gone == "source" else "gpu-node-2"
    assert f"{host} ({nid})" in msg and "left the swarm" in msg
    assert ("rolled back" if gone == "target" else "finished") in msg
    assert msg.endswith("run it with writes on (docs/rebalancing.md)") and len(msg) < 600


def test_audit_says_nothing_of_a_move_record_whose_nodes_are_there() -> None:
    sw, _now, _m = _started()
    st = MoveState.parse(sw.swarm_labels()[record_key(P, "id-victim")])
    assert st is not None and st.target == "n-4090"
    assert forged_check(P)(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {},
                                    swarm_labels=sw.swarm_labels())) == []
