"""The GPUs a preemption freed are held for its preemptor while it settles
(``placement.nominated``, Kubernetes' nominated node): placement and the daemon's
``Preempter`` over plain snapshots, cycle after cycle, the victims stopped as the
actuator stops them (ledger entry, gate and device lists gone)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from loguru import logger
from support.forged import DGX_F, R4090_F, reserving, sw_node, sw_svc
from support.preempt_stop import relabel, stop_victims

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.values import Choice
from swarmgpu.core.config import Config, PreemptionConfig
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import (
    Holding,
    PlacementPlan,
    Planner,
    assign_key,
    devices_key,
    gate_key,
)
from swarmgpu.manager.placement import planner as planner_mod
from swarmgpu.manager.placement.nominated import Holds, Nomination, live_nominations
from swarmgpu.manager.placement.preempt import Preemption, Relocation
from swarmgpu.manager.placement.records import ServicePlan, Status
from swarmgpu.manager.rebalance.record import MoveState, record_key
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
R = tuple(g.uuid for g in R4090_F.gpus)  # 8 RTX 4090s on n-4090
FACTS = {"n-dgx": DGX_F, "n-4090": R4090_F}
ON_4090 = {f"{P}gpu-product": "*RTX 4090*"}


def _made(second: str) -> str:
    """A CreatedAt ``second`` seconds into 2026 ("": none); times order by their instant."""
    return f"2026-01-01T00:00:{int(second):02}Z" if second else ""


class World:
    """n-4090's 8 GPUs: batch and batch2 (priority 0) hold 2 each, filler (not
    preemptible) the other 4. Waiting: share (half a GPU, priority 100, which never
    preempts) since 10 s, high (2 GPUs, priority 100) since 20 s."""

    def __init__(self) -> None:
        held = {"batch": R[:2], "batch2": R[2:4], "filler": R[4:]}
        self.services: dict[str, SwarmService] = {}
        labels: dict[str, str] = {}
        for name, uuids in held.items():
            h = Holding(name, "n-4090", uuids, tuple(1000 for _ in uuids))
            labels |= {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}
            extra = {f"{P}preemptible": "false"} if name == "filler" else {}
            self.services[name] = sw_svc(name, {f"{P}gpus": str(len(uuids)), **ON_4090,
                                                devices_key(P, "n-4090"): ",".join(uuids),
                                                **extra})
        self.nodes = {"n-dgx": sw_node("n-dgx", "gpu-node-1"),
                      "n-4090": sw_node("n-4090", "gpu-node-2", labels)}
        for name, gpus, created in (("share", "1", "10"), ("high", "2", "20")):
            share = {f"{P}gpu-fraction": "0.5"} if name == "share" else {}
            s = sw_svc(name, {f"{P}gpus": gpus, f"{P}priority": "100", **ON_4090, **share})
            object.__setattr__(s, "created_at", _made(created))  # share is the older
            self.services[name] = s
        self.tasks = {n: SwarmTask(f"t-{n}", s.id, "n-4090" if n in held else "", 1,
                                   "running" if n in held else "pending", "running", ())
                      for n, s in self.services.items()}

    def snap(self) -> Snapshot:
        return Snapshot(list(self.nodes.values()), list(self.services.values()),
                        list(self.tasks.values()), {})

    def plan(self, planner: Planner, pre: Preempter, now: float) -> PlacementPlan:
        """A placement cycle, its node writes landed (gates open at once here)."""
        snap = self.snap()
        plan = planner.plan(snap.nodes, snap.services, snap.tasks, FACTS, now=now,
                            nominated=pre.nominated.current(now))
        for nid, changes in plan.node_set.items():
            n = self.nodes[nid]
            self.nodes[nid] = relabel(n, {**n.labels, **changes})
        return plan

    def stop(self, p: Preemption) -> None:
        """``p``'s victims stopped as the actuator stops them."""
        stop_victims(self.nodes, self.services, self.tasks, p)


def _held_on(plan: PlacementPlan, name: str) -> list[str]:
    sp = next(sp for sp in plan.services if sp.name == name)
    return [u for p in sp.placements for u in p.uuids]



def _first_holds_for_older_second(
        second_gpus: str) -> tuple[list[SwarmNode], SwarmService, SwarmService, list[SwarmTask]]:
    """gpu-node-2, and two waiting services of priority 100: ``first`` (1 GPU) and
    ``second`` (``second_gpus``), older, so served first: a hold for first counts for it."""
    nodes = [sw_node("n-4090", "gpu-node-2")]
    first = sw_svc("first", {f"{P}gpus": "1", f"{P}priority": "100", **ON_4090})
    second = sw_svc("second", {f"{P}gpus": second_gpus, f"{P}priority": "100", **ON_4090})
    object.__setattr__(first, "created_at", _made("20"))
    object.__setattr__(second, "created_at", _made("10"))
    tasks = [SwarmTask(f"t-{s.name}", s.id, "", 1, "pending", "running", ())
             for s in (first, second)]
    return nodes, first, second, tasks


def _refusing_holds(real: Callable[[Allocator, Choice], None],
                    exc: Exception) -> Callable[[Allocator, Choice], None]:
    """``real`` (an allocator's commit or release), raising ``exc`` for a hold's choice
    before it changes anything."""
    def refusing(self: Allocator, choice: Choice) -> None:
        if choice.explanation.startswith("held for"):
            raise exc
        real(self, choice)
    return refusing


def _second_placed_beside_a_hold(monkeypatch: pytest.MonkeyPatch,
                                 commit: Callable[[Allocator, Choice], None]) -> Planner:
    """One cycle of first's hold beside second (8 GPUs) with ``commit`` as the allocator's:
    second is placed all the same (the planner, to read its allocator)."""
    nodes, first, second, tasks = _first_holds_for_older_second("8")
    planner = Planner(prefix=P)
    with monkeypatch.context() as m:
        m.setattr(Allocator, "commit", commit)
        plan = planner.plan(nodes, [first, second], tasks, FACTS, now=1000.0,
                            nominated=[Nomination("first", 100, "n-4090", R)])
    assert {sp.name: sp.status for sp in plan.services}["second"] == Status.PLACED, plan
    return planner

def test_the_freed_gpus_go_to_the_preemptor_not_to_an_older_share_of_its_priority() -> None:
    """Served by age within a priority, the older share was planned first and took one of
    the two GPUs batch's stop freed; high stayed pending and, its settle time passed,
    stopped batch2 too. Held for high, they are its: share waits, one victim only."""
    w, planner = World(), Planner(prefix=P)
    pre = Preempter(Config(preemption=PreemptionConfig(dry_run=False, preemptible_below=100)))
    t = 1000.0
    plan = w.plan(planner, pre, t)
    assert {sp.name for sp in plan.services if sp.status == "pending"} == {"share", "high"}
    chosen = pre.decide(w.snap(), plan, FACTS, planner.refused_nodes, t, planner.port_takers,
                        mono=t)
    assert [p.describe() for p in chosen] == [
        "preempt batch (priority 0) on gpu-node-2 for high (priority 100)"]
    assert set(chosen[0].held) == set(R[:2])  # what high is counted on
    pre.took(chosen[0], list(chosen[0].victims), t)
    w.stop(chosen[0])
    stopped, got = ["batch"], {}
    for now in (t + 1, t + 2, t + 40):  # the daemon's re-plan, and after the settle time
        plan = w.plan(planner, pre, now)
        got[now] = {n: _held_on(plan, n) for n in ("high", "share")}
        for p in pre.decide(w.snap(), plan, FACTS, planner.refused_nodes, now,
                            planner.port_takers, mono=now):
            pre.took(p, list(p.victims), now)
            w.stop(p)
            stopped += [v.service for v in p.victims]
    assert stopped == ["batch"]  # (it stopped batch2 too, 30 s later)
    assert sorted(got[t + 1]["high"]) == sorted(R[:2])
    assert not got[t + 1]["share"]  # nothing else is free on n-4090
    assert not pre.nominated.current(t + 2)  # high placed: its hold ended


def _preempted(t: float, *, moved: bool = False,
               ) -> tuple[World, Planner, Preempter, Preemption, PlacementPlan]:
    """The World planned at ``t``: high's preemption decided and taken (its GPUs held),
    with the plan it was decided on. ``moved``: batch, its victim, moved to the DGX."""
    w, planner = World(), Planner(prefix=P)
    pre = Preempter(Config(preemption=PreemptionConfig(dry_run=False, preemptible_below=100)))
    plan = w.plan(planner, pre, t)
    (p,) = pre.decide(w.snap(), plan, FACTS, planner.refused_nodes, t, planner.port_takers,
                      mono=t)
    if moved:
        p = replace(p, moves={"batch": Relocation("n-dgx", "gpu-node-1", (1, 2),
                                                   ("GPU-x", "GPU-y"))})
    pre.took(p, list(p.victims), t)
    return w, planner, pre, p, plan


def test_a_higher_priority_service_may_take_the_held_gpus() -> None:
    """A waiting service of a priority above the preemptor's is served first and may
    take what is held for it, as a higher-priority pod may a nominated node."""
    t = 1000.0
    w, planner, pre, p, _ = _preempted(t)
    w.stop(p)
    urgent = sw_svc("urgent", {f"{P}gpus": "1", f"{P}priority": "1000", **ON_4090})
    w.services["urgent"] = urgent
    w.tasks["urgent"] = SwarmTask("t-urgent", urgent.id, "", 1, "pending", "running", ())
    plan = w.plan(planner, pre, t + 1)
    assert len(_held_on(plan, "urgent")) == 1 and set(_held_on(plan, "urgent")) <= set(R[:2])
    assert not _held_on(plan, "share")  # the other held GPU stays high's
    assert not _held_on(plan, "high")  # one GPU left of its two: it waits


def test_a_hold_ends_when_its_preemption_settles_or_its_preemptor_goes() -> None:
    """Given up (the settle time passed) or its preemptor gone, the GPUs are anyone's."""
    t = 1000.0
    w, planner, pre, p, _ = _preempted(t)
    assert [n.uuids for n in pre.nominated.current(t + 29)] == [p.held]
    assert pre.nominated.current(t + 31) == ()  # settle_s 30 s
    w.stop(p)
    free = planner.cluster.alloc.snapshot()["n-4090"]
    w.services.pop("high")
    w.tasks.pop("high")
    plan = w.plan(planner, pre, t + 1)
    assert _held_on(plan, "share") and set(_held_on(plan, "share")) <= set(R[:2])
    pre.decide(w.snap(), plan, FACTS, planner.refused_nodes, t + 1, planner.port_takers,
               mono=t + 1)
    assert pre.nominated.current(t + 2) == ()
    assert free == (0, 0, 0, 0, 0, 0, 0, 0)  # (a visit's holds are given back after it)


def _waiting(w: World, name: str, gpus: int, priority: int, created: str,
             labels: dict[str, str] | None = None) -> None:
    """A service of ``gpus`` whole GPUs and ``priority`` waits from ``created``."""
    s = sw_svc(name, {f"{P}gpus": str(gpus), f"{P}priority": str(priority),
                      **(ON_4090 if labels is None else labels)})
    object.__setattr__(s, "created_at", _made(created))
    w.services[name] = s
    w.tasks[name] = SwarmTask(f"t-{name}", s.id, "", 1, "pending", "running", ())


@pytest.mark.parametrize(("priority", "preempts"), [(100, True), (50, True), (200, False)])
def test_a_held_gpu_counts_as_used_when_another_service_weighs_preemption(
        priority: int, preempts: bool) -> None:
    """urgent (above high) took one of the two GPUs held for high, which waits for one
    more; late (1 GPU) of high's priority or lower is not given the other one by
    placement. Before, the preemption decision saw it free, took late for pending for
    another reason and preempted nowhere until high's settle time passed; now the held
    GPU is used for late, as Kubernetes counts a nominated pod of equal or higher
    priority, and late preempts batch2. One of a higher priority is placed on it."""
    t = 1000.0
    w, planner, pre, p, _ = _preempted(t)
    w.stop(p)
    _waiting(w, "urgent", 1, 1000, "30")
    _waiting(w, "late", 1, priority, "40")
    plan = w.plan(planner, pre, t + 1)
    assert len(_held_on(plan, "urgent")) == 1 and not _held_on(plan, "high")
    assert bool(_held_on(plan, "late")) is not preempts  # (placement.nominated)
    chosen = pre.decide(w.snap(), plan, FACTS, planner.refused_nodes, t + 1,
                        planner.port_takers, mono=t + 1)
    assert [c.describe() for c in chosen] == (
        [f"preempt batch2 (priority 0) on gpu-node-2 for late (priority {priority})"]
        if preempts else [])


def test_a_victim_is_never_moved_onto_gpus_held_for_another_preemptor() -> None:
    """The DGX's two free GPUs are held for wide (3 A100s, waiting: the others are
    not preemptible). high preempts batch on n-4090; batch could run on those two GPUs.
    Before, it was to be moved there, taking them from wide; now it is stopped."""
    d = tuple(g.uuid for g in DGX_F.gpus if not g.mig_enabled)  # 7 whole A100s
    w, planner = World(), Planner(prefix=P)
    pre = Preempter(Config(preemption=PreemptionConfig(dry_run=False, preemptible_below=100)))
    batch = w.services["batch"]  # it may run on any product
    w.services["batch"] = sw_svc("batch", {k: v for k, v in batch.labels.items()
                                           if k != f"{P}gpu-product"})
    h = Holding("dfill", "n-dgx", d[:5], tuple(1000 for _ in d[:5]))
    w.nodes["n-dgx"] = sw_node("n-dgx", "gpu-node-1", {
        assign_key(P, "dfill"): h.label_value(), gate_key(P, "dfill"): "true"})
    w.services["dfill"] = sw_svc("dfill", {f"{P}gpus": "5", f"{P}preemptible": "false",
                                           devices_key(P, "n-dgx"): ",".join(d[:5])})
    w.tasks["dfill"] = SwarmTask("t-dfill", w.services["dfill"].id, "n-dgx", 1, "running",
                                 "running", ())
    w.services.pop("share")
    w.tasks.pop("share")
    _waiting(w, "wide", 3, 100, "5", {f"{P}gpu-product": "*A100*"})
    t = 1000.0
    wide = Preemption("wide", "id-wide", 100, "n-dgx", "gpu-node-1", (), held=d[5:])
    pre.took(wide, [], t - 5)  # its preemption still settles: d[5:] are held for it
    plan = w.plan(planner, pre, t)
    assert {sp.name for sp in plan.services if sp.status == "pending"} == {"wide", "high"}
    (p,) = pre.decide(w.snap(), plan, FACTS, planner.refused_nodes, t, planner.port_takers,
                      mono=t)
    assert p.describe() == "preempt batch (priority 0) on gpu-node-2 for high (priority 100)"
    assert not p.moves  # (it was "-> moved to gpu-node-1", onto d[5:])


def _move_record(victim: SwarmService, at: float) -> dict[str, str]:
    """The swarm object's labels while the daemon moves ``victim`` off n-4090 (its record)."""
    st = MoveState(id="m-1", service=victim.name, source="n-4090", source_host="gpu-node-2",
                   source_uuids=R[:2], source_milli=(1000, 1000), target="n-dgx",
                   target_host="gpu-node-1", target_uuids=("GPU-x", "GPU-y"),
                   target_milli=(1000, 1000), surge=True, replicas=1, max_replicas=0,
                   started_at=at, trigger="preemption", reason="room for high",
                   service_id=victim.id)
    return {record_key(P, victim.id): st.to_json()}


def test_a_hold_lasts_while_its_victims_move_is_in_flight_then_settles() -> None:
    """batch is moved, not stopped, for high, and its move takes longer than settle_s.
    Before, the hold lapsed after settle_s: when the move ended, the older share took one
    of the GPUs it freed and high, still pending, stopped batch2 too. Now the hold lasts
    while the move is in flight (the daemon's move record) and settle_s after it."""
    t = 1000.0
    w, planner, pre, p, plan = _preempted(t, moved=True)
    pre.moving[p.service] = {"batch"}  # as ``Preempter._move`` keeps it once started
    records = _move_record(w.services["batch"], t)
    stopped: list[str] = []
    for now in (t + 20, t + 40):  # the move in flight, past settle_s (30 s)
        plan = w.plan(planner, pre, now)
        for c in pre.decide(w.snap(), plan, FACTS, planner.refused_nodes, now,
                            planner.port_takers, records=records, mono=now):
            stopped += [v.service for v in c.victims]
        assert [n.uuids for n in pre.nominated.current(now + 1)] == [p.held]
    before = w.snap()  # the cycle's snapshot: the rebalancer ends the move after it
    w.stop(p)  # its source closed: batch runs on n-dgx now (not modelled here)
    for c in pre.decide(before, plan, FACTS, planner.refused_nodes, t + 50,
                        planner.port_takers, records={}, mono=t + 50):
        stopped += [v.service for v in c.victims]
    assert stopped == []  # (high stopped batch2 as its hold lapsed)
    plan = w.plan(planner, pre, t + 51)
    assert sorted(_held_on(plan, "high")) == sorted(R[:2]) and not _held_on(plan, "share")


def test_a_hold_under_a_move_ends_with_the_moves_timeout() -> None:
    """A move that never ends holds the GPUs no longer than ``rebalance.move_timeout_s``
    (the mover rolls it back then) and settle_s after it."""
    t = 1000.0
    w, planner, pre, _, plan = _preempted(t, moved=True)
    records = _move_record(w.services["batch"], t)
    for now in (t + 60, t + 119, t + 140, t + 151):  # move_timeout_s 120, settle_s 30
        pre.decide(w.snap(), plan, FACTS, planner.refused_nodes, now, planner.port_takers,
                   records=records, mono=now)
    assert pre.nominated.current(t + 152) == ()


@pytest.mark.parametrize("counted", [False, True])
def test_a_hold_that_raises_costs_that_hold_alone(
    monkeypatch: pytest.MonkeyPatch, counted: bool
) -> None:
    """``Holds.visit`` ran outside the per-service guard (``placement.isolate``): a hold
    that raised stopped the whole cycle, every service unplanned. Now the hold alone is
    dropped for the rest of the visit (its GPUs given back where it had counted them:
    the service it was counted for gets one), said once while it lasts, and both are
    planned."""
    real = Holds._hold

    def boom(self: Holds, n: Nomination) -> None:
        if counted:  # its GPUs counted used, then the fault
            real(self, n)
        raise RuntimeError("hold boom")

    monkeypatch.setattr(Holds, "_hold", boom)
    nodes, first, second, tasks = _first_holds_for_older_second("1")
    held = [Nomination("first", 100, "n-4090", R)]  # every GPU held for first
    errors: list[str] = []
    sink = logger.add(lambda m: errors.append(str(m.record["message"])), level="ERROR")
    try:
        planner = Planner(prefix=P)
        for now in (1000.0, 1001.0):
            plan = planner.plan(nodes, [first, second], tasks, FACTS, now=now,
                                nominated=held)
            assert {sp.name: sp.status for sp in plan.services} == {
                "first": Status.PLACED, "second": Status.PLACED}, plan.services
    finally:
        logger.remove(sink)
    said = [e for e in errors if "first" in e and "RuntimeError: hold boom" in e]
    assert len(said) == 1 and len(errors) == 1, errors


def test_a_faulty_hold_whose_give_back_raises_leaves_no_gpu_counted_next_cycle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hold that raised once its GPUs were counted, and whose give-back raised too:
    they stayed counted used on the planner's allocator, which lives across cycles, so
    a later service found them taken with no holder. Now that node is built anew from
    the ledger at the next cycle: the GPUs are free again."""
    real_hold, real_release = Holds._hold, Allocator.release

    def boom(self: Holds, n: Nomination) -> None:
        real_hold(self, n)
        raise RuntimeError("hold boom")

    release = _refusing_holds(real_release, ValueError("release boom"))

    nodes, first, second, tasks = _first_holds_for_older_second("1")
    planner = Planner(prefix=P)
    with monkeypatch.context() as m:
        m.setattr(Holds, "_hold", boom)
        m.setattr(Allocator, "release", release)
        planner.plan(nodes, [first, second], tasks, FACTS, now=1000.0,
                     nominated=[Nomination("first", 100, "n-4090", R)])
    big = sw_svc("big", {f"{P}gpus": "8", **ON_4090})
    plan = planner.plan(nodes, [big], [SwarmTask("t-big", big.id, "", 1, "pending",
                                                 "running", ())], FACTS, now=1001.0)
    assert {sp.name: sp.status for sp in plan.services} == {"big": Status.PLACED}, plan


def test_a_hold_whose_commit_raises_after_counting_leaves_no_gpu_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Allocator.commit`` can raise once it has counted the GPUs used: the scorer's
    ``observe_cluster`` runs last, after the node's counts change. The hold was recorded
    only once commit returned, so nothing gave them back: counted used with no holder,
    on an allocator that lives across cycles. Now it is recorded first, and its fault
    gives them back at once: the service served next gets them in the same cycle."""
    real_commit = Allocator.commit

    def commit(self: Allocator, choice: Choice) -> None:
        real_commit(self, choice)
        if choice.explanation.startswith("held for"):
            raise RuntimeError("observe boom")

    _second_placed_beside_a_hold(monkeypatch, commit)


def test_a_hold_whose_commit_raises_before_counting_frees_nothing_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The other side of recording first: a commit that raised before counting anything
    is not given back as if it had (the give-back refuses it: that node is rebuilt from
    the ledger instead), and the GPUs stay free to the service served next."""
    commit = _refusing_holds(Allocator.commit, RuntimeError("commit boom"))

    planner = _second_placed_beside_a_hold(monkeypatch, commit)
    alloc = planner.cluster.alloc
    node = alloc.nodes["n-4090"]
    assert all(0 <= f <= g.capacity_milli for f, g in zip(node.free, node.spec.gpus, strict=True))


def test_a_preemptor_whose_planning_fails_keeps_its_hold_until_it_settles(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """high's planning raises (plan status failed, ``placement.isolate``) once its victim
    is stopped. Before, its hold ended in that visit and ``keep`` dropped it: late (of
    high's priority, served after it) took a GPU batch's stop freed for high. Now the
    hold lasts while its planning fails, settle_s at most, and high is placed on it."""
    t = 1000.0
    w, planner, pre, p, _ = _preempted(t)
    w.stop(p)
    _waiting(w, "late", 1, 100, "30")
    real = planner_mod.plan_service

    def plan_service(s: SwarmService, *a: Any, **kw: Any) -> ServicePlan:
        if s.name == "high":
            raise KeyError("a swarmgpu fault")
        return real(s, *a, **kw)

    monkeypatch.setattr(planner_mod, "plan_service", plan_service)
    for now in (t + 1, t + 2):
        plan = w.plan(planner, pre, now)
        assert {sp.name: sp.status for sp in plan.services}["high"] == Status.FAILED
        assert not _held_on(plan, "late") and not _held_on(plan, "share")
        pre.decide(w.snap(), plan, FACTS, planner.refused_nodes, now, planner.port_takers,
                   mono=now)
        assert [n.uuids for n in pre.nominated.current(now + 1)] == [p.held]
    assert pre.nominated.current(t + 31) == ()  # settle_s 30 s: no longer than that
    monkeypatch.setattr(planner_mod, "plan_service", real)
    plan = w.plan(planner, pre, t + 3)
    assert sorted(_held_on(plan, "high")) == sorted(p.held)


def test_a_removed_preemptors_hold_ends_by_one_rule_for_each_reader() -> None:
    """Placement's visit and the rebalancer's ``Inputs.held`` read the holds through
    one filter (``nominated.live_nominations``): a preemptor Swarm no longer has holds
    nothing for either, and the others keep their order (placement's ``Holds`` takes
    them as given; the rebalancer's ``held_gpus`` ranks them by priority itself)."""
    noms = [Nomination("tall", 100, "n-dgx", ("G1",)), Nomination("gone", 90, "n-dgx", ("G2",)),
            Nomination("wide", 80, "n-4090", ("G3",))]
    assert live_nominations(noms, {"wide", "tall", "other"}) == [noms[0], noms[2]]
    assert live_nominations(noms, set()) == []


def test_a_service_a_hold_keeps_pending_is_told_of_the_hold() -> None:
    """second (older, 8 GPUs) is visited first and finds first's held GPUs taken, while
    the ledger shows them free: its reason names them and whom they are held for, not
    only the free count."""
    nodes, first, second, tasks = _first_holds_for_older_second("8")
    plan = Planner(prefix=P).plan(nodes, [first, second], tasks, FACTS, now=1000.0,
                                  nominated=[Nomination("first", 100, "n-4090", R)])
    sp = next(sp for sp in plan.services if sp.name == "second")
    assert sp.status == Status.PENDING, sp
    assert sp.reason is not None and sp.reason.endswith(
        "; 8 GPUs of gpu-node-2 held for first (its preemption)"), sp.reason
    placed = next(sp for sp in plan.services if sp.name == "first")
    assert placed.status == Status.PLACED and "held for" not in (placed.reason or "")


def _victim_stopping(w: World, p: Preemption, cpu_milli: int = 0) -> list[SwarmTask]:
    """``p``'s victims stopped, their old tasks still running as Swarm stops them
    (desired shutdown, ``keys.stopping``: a job victim's after its spec write)."""
    old = [replace(w.tasks[v.service], desired_state="shutdown", cpu_milli=cpu_milli)
           for v in p.victims]
    w.stop(p)
    return old


def _on_dgx(w: World) -> None:
    """n-dgx: dfill (not preemptible) holds 6 A100s, dv (priority 0, any product) the
    7th; qa (1 A100, priority 50) waits."""
    d = tuple(g.uuid for g in DGX_F.gpus if not g.mig_enabled)
    labels: dict[str, str] = {}
    for name, uuids, extra in (("dfill", d[:6], {f"{P}preemptible": "false"}),
                               ("dv", d[6:], {})):
        h = Holding(name, "n-dgx", uuids, tuple(1000 for _ in uuids))
        labels |= {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}
        s = w.services[name] = sw_svc(name, {f"{P}gpus": str(len(uuids)), **extra,
                                             devices_key(P, "n-dgx"): ",".join(uuids)})
        w.tasks[name] = SwarmTask(f"t-{name}", s.id, "n-dgx", 1, "running", "running", ())
    w.nodes["n-dgx"] = sw_node("n-dgx", "gpu-node-1", labels)
    _waiting(w, "qa", 1, 50, "40", {f"{P}gpu-product": "*A100*"})


def _cpu_full(w: World) -> None:
    """n-4090's CPU (3 cores) all reserved: filler, batch and batch2 one core each; high
    asks one."""
    w.nodes["n-4090"] = replace(w.nodes["n-4090"], cpu_milli=3000)
    for name in ("filler", "batch", "batch2", "high"):
        w.services[name] = reserving(w.services[name], 1000)
        if w.tasks[name].node_id:
            w.tasks[name] = replace(w.tasks[name], cpu_milli=1000)


def _cpu_full_preempting(t: float) -> tuple[World, Planner, Preempter, Preemption]:
    """``_cpu_full``'s world, planned and its one preemption (for high) decided at ``t``,
    not yet taken."""
    w, planner, pre = World(), Planner(prefix=P), Preempter(
        Config(preemption=PreemptionConfig(dry_run=False, preemptible_below=100)))
    _cpu_full(w)
    plan = w.plan(planner, pre, t)
    (p,) = pre.decide(w.snap(), plan, FACTS, planner.refused_nodes, t, planner.port_takers,
                      mono=t)
    return w, planner, pre, p


def _rejected_victims(w: World, p: Preemption, until: float) -> list[SwarmTask]:
    """``p``'s victims stopped by their closed gate: the constraint enforcer rejected
    their tasks (their CPU freed), whose containers run on their GPUs until ``until``."""
    out = [replace(w.tasks[v.service], state="rejected", desired_state="shutdown",
                   cpu_milli=0, rejected_until=until) for v in p.victims]
    w.stop(p)
    return out


def test_a_higher_priority_service_is_not_placed_on_a_victims_running_gpus() -> None:
    """batch, high's victim, was rejected (its gate closed); its container runs on R[:2]
    for its grace period. urgent (above high) waits for one GPU: those GPUs are high's
    own (spared for it, its victim's), not urgent's, who waits. Before, urgent took
    R[0] as a hold's GPU, while batch's task still ran on it."""
    t = 1000.0
    w, planner, pre, p, _ = _preempted(t)
    rejected = _rejected_victims(w, p, t + 100)
    _waiting(w, "urgent", 1, 1000, "30")
    plan = planner.plan(*_parts(w), FACTS, now=t + 1, nominated=pre.nominated.current(t + 1),
                        rejected=rejected)
    assert not _held_on(plan, "urgent") and sorted(_held_on(plan, "high")) == sorted(R[:2])


def _parts(w: World) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    snap = w.snap()
    return snap.nodes, snap.services, snap.tasks


def test_a_hold_ending_after_placement_leaves_its_victims_gpus_held_as_stopping() -> None:
    """batch, high's victim, was rejected; its container runs on R[:2] (its grace
    period), and high waits for a core (hog took batch's). Placement (t+29) spared R[:2]
    for high's live hold; the preemption step (t+31) finds that hold settled. Before,
    R[:2] were counted nowhere in that step: qa's victim dv was to be moved onto one
    while batch's task still ran there. Now a GPU spared for a hold the step no longer
    keeps is held as a stopping task's (``nominated.stopping_held``)."""
    t = 1000.0
    w, planner, pre, p = _cpu_full_preempting(t)
    pre.took(p, list(p.victims), t)
    rejected = _rejected_victims(w, p, t + 100)
    hog = w.services["hog"] = sw_svc("hog", {}, gated=False)
    w.tasks["hog"] = SwarmTask("t-hog", hog.id, "n-4090", 1, "running", "running", (),
                               cpu_milli=1000)
    _on_dgx(w)
    snap = replace(w.snap(), rejected=rejected)
    plan = planner.plan(snap.nodes, snap.services, snap.tasks, FACTS, now=t + 29,
                        nominated=pre.nominated.current(t + 29), rejected=rejected)
    assert not _held_on(plan, "high") and not _held_on(plan, "qa")
    chosen = pre.decide(snap, plan, FACTS, planner.refused_nodes, t + 31,
                        planner.port_takers, mono=t + 31)
    onto = {u for c in chosen for m in c.moves.values() for u in m.uuids}
    assert "dv" in {v.service for c in chosen for v in c.victims}
    assert not onto & set(R[:2]), [c.describe() for c in chosen]
    # nor does high count on them (its hold over): it is held batch2's, which it stops
    assert [set(c.held) for c in chosen if c.service == "high"] == [set(R[2:4])]


def test_a_preemptor_waits_for_its_victims_cpu_while_their_tasks_stop() -> None:
    """n-4090's CPU is all reserved (``_cpu_full``). batch is stopped for high, its task
    stopping far longer than settle_s (a job victim's grace period): Swarm counts its
    core until it stops, so high waits (pending for the CPU). Before, high's hold settled
    after settle_s and high stopped batch2 too, for nothing; now the hold lasts while a
    victim's task stops there (as while its move is in flight) and settle_s after, the
    stop cap at most."""
    t = 1000.0
    w, planner, pre, p = _cpu_full_preempting(t)
    assert [v.service for v in p.victims] == ["batch"]
    pre.took(p, list(p.victims), t)
    stopping = _victim_stopping(w, p, cpu_milli=1000)
    victims = []
    for now in (t + 31, t + 200, t + 350):
        snap = replace(w.snap(), stopping=stopping)
        plan = planner.plan(snap.nodes, snap.services, snap.tasks, FACTS, now=now,
                            nominated=pre.nominated.current(now), stopping=stopping)
        assert {sp.name: sp.status for sp in plan.services}["high"] == Status.PENDING
        victims += [v.service for c in pre.decide(snap, plan, FACTS, planner.refused_nodes,
                                                  now, planner.port_takers, mono=now)
                    for v in c.victims]
    assert victims == []  # (batch2 at t+31: its core freed, batch's still counted)
    assert [n.uuids for n in pre.nominated.current(t + 351)] == [p.held]
    snap = replace(w.snap(), stopping=stopping)  # past the stop cap: settled as ever
    plan = planner.plan(snap.nodes, snap.services, snap.tasks, FACTS, now=t + 400,
                        nominated=pre.nominated.current(t + 400), stopping=stopping)
    assert {sp.name: sp.status for sp in plan.services}["high"] == Status.PENDING
    pre.decide(snap, plan, FACTS, planner.refused_nodes, t + 400, planner.port_takers,
               mono=t + 400)
    assert pre.nominated.current(t + 400) == ()


@pytest.mark.parametrize("node", [{"state": "down"}, {"availability": "pause"}])
def test_a_preemptor_waits_no_stop_on_a_node_it_can_no_longer_run_on(node: dict[str, str],
                                                                     ) -> None:
    """As above, batch is stopped for high and its task still stops; then n-4090 goes
    down (the task's stop never reported) or is paused (Swarm starts nothing there): high
    could not run there whatever stops, so its hold settles after settle_s as ever. Before:
    it lasted while the task was seen stopping, the stop cap (6 minutes): high neither
    preempted elsewhere nor was its nomination given up meanwhile."""
    t = 1000.0
    w, planner, pre, p = _cpu_full_preempting(t)
    pre.took(p, list(p.victims), t)
    stopping = _victim_stopping(w, p, cpu_milli=1000)
    w.nodes["n-4090"] = replace(w.nodes["n-4090"], **node)
    for now in (t + 10, t + 31):
        snap = replace(w.snap(), stopping=stopping)
        plan = planner.plan(snap.nodes, snap.services, snap.tasks, FACTS, now=now,
                            nominated=pre.nominated.current(now), stopping=stopping)
        pre.decide(snap, plan, FACTS, planner.refused_nodes, now, planner.port_takers,
                   mono=now)
    assert pre.nominated.current(t + 31) == ()
