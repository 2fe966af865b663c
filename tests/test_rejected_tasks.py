"""A task whose gate closed (a repin's old task, a preemption's victim, a move's source)
is rejected by swarmkit's constraint enforcer (observed ``rejected``, its own message
and error, then desired ``shutdown``): Swarm's scheduler frees its reservations at once,
but its container runs on its GPUs until the worker stops it, its stop grace period at
most. Before, ``keys.stopping`` (assigned..running) missed it and placement handed its
GPUs to another service while it still ran on them (``swarm.taskstop``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from support.forged import FACTS, R_UUIDS, RecordingSwarm, sw_node, sw_svc
from support.placement import apply

from swarmgpu.core.config import Config
from swarmgpu.manager.nodes import sync
from swarmgpu.manager.placement import (
    Holding,
    Planner,
    Status,
    assign_key,
    gate_key,
    read_ledger,
)
from swarmgpu.manager.placement.keys import rejected_running
from swarmgpu.manager.placement.nominated import STOPPING_PRIORITY, Nomination, StoppingGpus
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask, task_from_api
from swarmgpu.swarm.taskstop import rfc3339_epoch

P = "swarmgpu."
STAMP = "2026-12-06T10:00:00.123456789Z"  # the enforcer's Status.Timestamp, as the API has it
AT = datetime(2026, 12, 6, 10, tzinfo=UTC).timestamp() + 0.123456789
ENFORCER = {"Message": "task rejected by constraint enforcer",
            "Err": "assigned node no longer meets constraints"}


def _raw(tid: str, svc: SwarmService, state: str, desired: str, *, env: tuple[str, ...] = (),
         grace_ns: int | None = None, **status: Any) -> dict[str, Any]:
    cs: dict[str, Any] = {"Image": "x", "Env": list(env)}
    if grace_ns is not None:
        cs["StopGracePeriod"] = grace_ns
    return {"ID": tid, "ServiceID": svc.id, "NodeID": "n-4090", "Slot": 1,
            "DesiredState": desired, "Status": {"State": state, **status},
            "Spec": {"ContainerSpec": cs}}


def _rejected(tid: str, svc: SwarmService, **kw: Any) -> SwarmTask:
    """``svc``'s task on n-4090 the constraint enforcer rejected at STAMP, desired shutdown."""
    return task_from_api(_raw(tid, svc, "rejected", "shutdown",
                              **{"Timestamp": STAMP, **ENFORCER, **kw}))


def _holding(name: str, uuids: tuple[str, ...]) -> dict[str, str]:
    h = Holding(name, "n-4090", uuids, tuple(1000 for _ in uuids))
    return {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}


def _node(labels: dict[str, str]) -> list[SwarmNode]:
    return [sw_node("n-mgr", "manager", role="manager"), sw_node("n-4090", "gpu-node-2", labels)]


def test_the_enforcers_rejection_is_read_strictly_from_the_task() -> None:
    """The hold ends at the status time plus the stop grace period (nanoseconds, 10 s
    when none, 5 minutes at most); another message or a time that is not RFC 3339 is
    none."""
    s = sw_svc("s", {})
    assert rfc3339_epoch(STAMP) == pytest.approx(AT, abs=1e-6)
    assert rfc3339_epoch("2026-12-06T11:00:00+01:00") == AT - 0.123456789
    assert _rejected("t", s).rejected_until == pytest.approx(AT + 10)
    assert task_from_api(_raw("t", s, "rejected", "shutdown", grace_ns=30 * 10**9,
                              Timestamp=STAMP, **ENFORCER)).rejected_until == \
        pytest.approx(AT + 30)
    assert task_from_api(_raw("t", s, "rejected", "shutdown", grace_ns=10**13,
                              Timestamp=STAMP, **ENFORCER)).rejected_until == \
        pytest.approx(AT + 300)
    for bad in ("2026-12-06 10:00:00Z", "2026-13-06T10:00:00Z", "", "2026-12-06T10:00:00"):
        assert _rejected("t", s, Timestamp=bad).rejected_until is None, bad
    assert _rejected("t", s, Message="no suitable node").rejected_until is None
    assert _rejected("t", s, Err="no suitable node (host-mode port already in use)"
                     ).rejected_until is None


def _repinned() -> tuple[list[SwarmService], SwarmTask, SwarmTask]:
    s = sw_svc("s", {f"{P}gpus": "1"})
    old = task_from_api(_raw("t-old", s, "running", "running"))
    return [s], old, task_from_api(_raw("t-new", s, "running", "running"))


def test_a_same_node_repins_rejected_old_task_holds_the_gpu_it_ran_on() -> None:
    """s runs on GPU 0 of n-4090; a repin writes GPU 1 into its ledger and closes the old
    task's gate: the enforcer rejects it (desired running a moment, then shutdown).
    GPU 0, where the old container still runs, is held (as learned while it ran), not
    GPU 1. Before: nothing was held."""
    services, old, new = _repinned()
    before = {"s": {"n-4090": Holding("s", "n-4090", R_UUIDS[:1], (1000,))}}
    after = {"s": {"n-4090": Holding("s", "n-4090", R_UUIDS[1:2], (1000,))}}
    g = StoppingGpus(P)
    assert g.holds([], services, before, [old], FACTS) == []
    rejected = _rejected("t-old", services[0])
    assert g.holds([], services, after, [new, replace(rejected, desired_state="running")],
                   FACTS) == []  # rejected, not yet desired shutdown: still known
    (n,) = g.holds([], services, after, [new], FACTS, [rejected])
    assert (n.node_id, n.uuids) == ("n-4090", R_UUIDS[:1])


def test_a_rejected_tasks_gpus_are_held_for_its_grace_period_and_no_longer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The old task of a service that pins GPU 0 by its own device line is rejected by
    its closed gate at STAMP (grace period 30 s): the snapshot carries it apart from the
    stopping ones (its CPU and memory Swarm freed). big (all 8 RTX 4090s) waits while
    the old container may run on GPU 0, and is placed after. Before: big was placed on
    GPU 0 at once."""
    s = sw_svc("s", {})
    big = sw_svc("big", {f"{P}gpus": "8", f"{P}gpu-product": "*RTX 4090*"})
    raw = _raw("t-old", s, "rejected", "shutdown", grace_ns=30 * 10**9, Timestamp=STAMP,
               env=(f"NVIDIA_VISIBLE_DEVICES={R_UUIDS[0]}",), **ENFORCER)
    monkeypatch.setattr(sync, "fetch_agents", lambda *_a, **_k: {})
    nodes = _node({})
    sw = RecordingSwarm(nodes, [s, big], [task_from_api(raw)])
    snap = sync.take_snapshot(sw, Config())  # type: ignore[arg-type]
    assert [t.id for t in snap.rejected] == ["t-old"] and snap.stopping == []
    waiting = [replace(task_from_api(_raw("t-big", big, "pending", "running")), node_id="")]
    planner = Planner(prefix=P)
    for now, held in ((AT + 1, True), (AT + 29.9, True), (AT + 30.2, False)):
        plan = planner.plan(nodes, [s, big], waiting, FACTS, now=now, rejected=snap.rejected)
        nodes = apply(nodes, plan)
        assert (("n-4090", R_UUIDS[0]) in plan.stopping_held) is held, now
        by = {sp.name: sp for sp in plan.services}
        assert by["big"].status == (Status.PENDING if held else Status.PLACED), (now, by)
    assert R_UUIDS[0] in read_ledger(nodes, P)["big"]["n-4090"].uuids


def test_a_task_rejected_for_another_reason_holds_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A rejected task whose message is not the enforcer's (a worker's, a scheduler's
    "no suitable node") has stopped, or never started: nothing of it is held."""
    services, old, _new = _repinned()
    planner = Planner(prefix=P)
    planner.plan(_node(_holding("s", R_UUIDS[:1])), services, [old], FACTS, now=AT - 60)
    other = _rejected("t-old", services[0], Message="no suitable node",
                      Err="no suitable node (insufficient resources on 1 node)")
    monkeypatch.setattr(sync, "fetch_agents", lambda *_a, **_k: {})
    sw = RecordingSwarm(_node({}), services, [other])
    snap = sync.take_snapshot(sw, Config())  # type: ignore[arg-type]
    assert snap.rejected == [] and snap.stopping == []
    plan = planner.plan(_node({}), services, [], FACTS, now=AT + 1, rejected=[other])
    assert plan.stopping_held == {}


def test_a_preemptor_still_gets_its_victims_gpus_while_the_victim_stops() -> None:
    """victim (pinned to GPUs 0 and 1 of n-4090) was preempted for high: its gate closed,
    the enforcer rejected it, its GPUs are nominated for high. high is placed on them
    within the victim's grace period, as before; a hold of the victim's GPUs against
    high too would keep it pending past its settle time, and it would preempt again."""
    victim = sw_svc("victim", {})
    line = f"NVIDIA_VISIBLE_DEVICES={R_UUIDS[0]},{R_UUIDS[1]}"
    t_victim = _rejected("t-victim", victim, env=(line,))
    filler = sw_svc("filler", {f"{P}gpus": "6"})
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*",
                           f"{P}priority": "100"})
    nodes = _node(_holding("filler", R_UUIDS[2:]))
    tasks = [task_from_api(_raw("t-filler", filler, "running", "running")),
             replace(task_from_api(_raw("t-high", high, "pending", "running")), node_id="")]
    held = Nomination("high", 100, "n-4090", R_UUIDS[:2], victims=(victim.id,))
    plan = Planner(prefix=P).plan(nodes, [victim, filler, high], tasks, FACTS, now=AT + 1,
                                  nominated=[held], rejected=[t_victim])
    sp = {sp.name: sp for sp in plan.services}["high"]
    assert sp.status != Status.PENDING and set(sp.placements[0].uuids) == set(R_UUIDS[:2]), sp
    assert plan.stopping_held[("n-4090", R_UUIDS[0])] == ("high", STOPPING_PRIORITY)  # its own
    plan = Planner(prefix=P).plan(nodes, [victim, filler, high], tasks, FACTS, now=AT + 1,
                                  rejected=[t_victim])  # no nomination: held from all
    assert {("n-4090", u) for u in R_UUIDS[:2]} <= plan.stopping_held.keys()
    assert {sp.name: sp for sp in plan.services}["high"].status == Status.PENDING


def test_a_status_time_at_the_edge_of_the_calendar_is_read_not_raised() -> None:
    """Go writes years 1..9999 with any offset: one whose UTC instant falls outside
    Python's datetime range (year 10000, year 0) is read as the epoch seconds it names,
    never an OverflowError out of the task list (the whole snapshot failed, every cycle
    Swarm keeps the task). Before: raised."""
    s = sw_svc("s", {})
    end = rfc3339_epoch("9999-12-31T23:00:00Z")
    start = rfc3339_epoch("0001-01-01T00:00:00Z")
    assert end is not None and start is not None
    assert rfc3339_epoch("9999-12-31T23:00:00-05:00") == end + 5 * 3600
    assert rfc3339_epoch("0001-01-01T00:00:00+05:00") == start - 5 * 3600
    assert _rejected("t", s, Timestamp="9999-12-31T23:00:00-05:00").rejected_until == \
        end + 5 * 3600 + 10
    assert rfc3339_epoch("2026-12-06T05:00:00-05:00") == rfc3339_epoch("2026-12-06T10:00:00Z")


def test_a_status_time_ahead_of_the_clock_holds_no_longer_than_the_cap() -> None:
    """A rejected task whose status time is ahead of the daemon's clock (the leader's
    clock skewed, or a forged time years ahead): its GPUs are held while at most the cap
    (5 minutes) and a minute of skew of its hold are left, never for the whole skew.
    Before: a time a day ahead held them for a day (as long as Swarm keeps the task)."""
    s = sw_svc("s", {})
    t = _rejected("t", s)  # rejected at AT, 10 s grace
    assert rejected_running(t, AT + 5) and not rejected_running(t, AT + 10.5)
    assert rejected_running(t, AT - 60)  # a minute of skew: held as ever
    longest = _rejected("t", s, grace_ns=10**13)  # the 5-minute cap, a minute of skew
    assert rejected_running(longest, AT - 59) and not rejected_running(longest, AT - 61)
    assert not rejected_running(t, AT - 86400)  # a day ahead: not held now
    assert not rejected_running(_rejected("t", s, Timestamp="9999-01-01T00:00:00Z"), AT)
