"""A service whose planning raises costs itself alone (``placement.isolate``): it gets a
plan that names it, the exception and the fix (report it), and writes nothing; what it
held stays held, the allocator is as it was before it was visited (a half-committed
choice given back), every other service is planned as without the fault, the traceback
is logged once while it lasts, and the daemon's cycle goes on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from loguru import logger
from support.forged import RecordingSwarm, snapshot, sw_node, sw_svc
from support.health import F1, F2, U2, mark, service, setup
from support.isolation import BAD, FACTS, NODES, settled
from support.placement import P, apply, svc

from swarmgpu.allocator.values import Choice
from swarmgpu.core.config import AgentsConfig, Config, SyncConfig
from swarmgpu.manager.cycle.grants import managed_names
from swarmgpu.manager.cycle.placement import PlacementStep, findings_of
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.placement import PlacementPlan, Planner, ServicePlan, assign_key
from swarmgpu.manager.placement import planner as planner_mod
from swarmgpu.manager.placement.ledger import parse_holding
from swarmgpu.manager.web.cluster_view import build_cluster, render_status
from swarmgpu.swarm.client import SwarmNode, SwarmService


def _raising_commit(planner: Planner, seen: list[str]) -> Callable[..., None]:
    """The allocator's commit, which raises once it committed a choice of ``a-bad``: a
    fault met half-way through the service, its new replica's GPUs taken."""
    real = planner.cluster.commit

    def commit(choice: Choice, service: str = "") -> None:
        real(choice, service)
        if service == BAD:
            seen.append(choice.node)
            raise RuntimeError("boom in the middle of a-bad")

    return commit


@pytest.fixture
def errors() -> Iterator[list[Any]]:
    got: list[Any] = []
    sink = logger.add(lambda m: got.append(m.record), level="ERROR")
    yield got
    logger.remove(sink)


def _by_name(plan: PlacementPlan) -> dict[str, ServicePlan]:
    return {sp.name: sp for sp in plan.services}


def _unscored(sp: ServicePlan) -> ServicePlan:
    """``sp`` without its placements' scores: those read the workload mix, which counts
    every replica asked, a-bad's second too (placed or not), and the price of the last
    untouched node for an 8-GPU task (stop 82) moves with the mix, not where it goes."""
    return replace(sp, placements=tuple(replace(p, score=None) for p in sp.placements))


def test_a_service_whose_planning_raises_costs_itself_alone(
        monkeypatch: pytest.MonkeyPatch, errors: list[Any]) -> None:
    nodes, bad = settled(svc(BAD, {f"{P}gpus": "4"}))
    held = {n.id: n.labels[assign_key(P, BAD)] for n in nodes
            if assign_key(P, BAD) in n.labels}
    (bad_node,) = held
    other = next(n.id for n in nodes if n.id != bad_node)
    big = svc("b-big", {f"{P}gpus": "8"})  # only a whole node: the one a-bad half took
    six = svc("c-six", {f"{P}gpus": "6"})  # fits only where a-bad's 4 GPUs are
    # What the two get beside a-bad holding its 4 GPUs and asking for nothing more.
    base = Planner().plan(nodes, [bad, big, six], [], FACTS)
    # a-bad asks for a second replica: placing it raises after its GPUs were committed.
    grown = replace(bad, replicas=2)
    planner = Planner()
    seen: list[str] = []
    monkeypatch.setattr(planner.cluster, "commit", _raising_commit(planner, seen))
    plan = planner.plan(nodes, [grown, big, six], [], FACTS)
    assert seen == [other]  # it raised with the other node's 4 GPUs committed to it
    got, want = _by_name(plan), _by_name(base)
    sp = got[BAD]
    assert (sp.status, sp.state) == ("failed", "Failed")
    assert sp.reason is not None and "Traceback" not in sp.reason
    for part in (BAD, "RuntimeError", "boom in the middle of a-bad", "swarmgpu fault",
                 "report it"):
        assert part in sp.reason, sp.reason
    assert not sp.writes and not sp.node_writes and not sp.placements
    # Every other service as without the fault: the half-taken node whole again for
    # b-big, a-bad's own GPUs still its (c-six waits, as it does beside it).
    assert _unscored(got["b-big"]) == _unscored(want["b-big"])
    assert got["c-six"] == want["c-six"]
    assert got["b-big"].placements[0].node_id == other
    assert got["c-six"].status == "pending"
    # Nothing written for a-bad: the cycle's node writes are the ones without the fault.
    assert (plan.node_set, plan.node_remove) == (base.node_set, base.node_remove)
    mine = {k: h for k, h in planner.cluster.held_items() if k[0] == BAD}
    assert [(k, h.key[0]) for k, h in mine.items()] == [((BAD, bad_node), held[bad_node])]
    assert planner.cluster.alloc.snapshot() == _allocator_after(nodes, [bad, big, six])
    # The traceback logged once, at error, while it lasts; the next cycle plans it again.
    (rec,) = errors
    assert rec["exception"] is not None and BAD in rec["message"]
    again = planner.plan(nodes, [grown, big, six], [], FACTS)
    assert _by_name(again)[BAD].status == "failed" and len(errors) == 1
    assert _unscored(_by_name(again)["b-big"]) == _unscored(want["b-big"])
    monkeypatch.undo()  # mended: planned as any service is
    mended = _by_name(planner.plan(nodes, [grown, big, six], [], FACTS))
    assert mended[BAD].status in ("placed", "pending") and len(errors) == 1


def _allocator_after(nodes: list[SwarmNode], services: list[SwarmService]) -> Any:
    """The allocator's free GPU milli per node after a fault-free cycle of ``services``."""
    p = Planner()
    p.plan(nodes, services, [], FACTS)
    return p.cluster.alloc.snapshot()


def test_a_new_service_that_raises_between_cycles_costs_itself_alone(
        monkeypatch: pytest.MonkeyPatch, errors: list[Any]) -> None:
    """``place_arrivals`` (simulate's arrivals) isolates each arrival as a cycle does."""
    planner = Planner()
    planner.plan(list(NODES), [], [], FACTS)
    seen: list[str] = []
    monkeypatch.setattr(planner.cluster, "commit", _raising_commit(planner, seen))
    bad, big = svc(BAD, {f"{P}gpus": "4"}), svc("b-big", {f"{P}gpus": "8"})
    plan = planner.place_arrivals([bad, big], [])
    got = _by_name(plan)
    assert got[BAD].status == "failed" and not got[BAD].node_writes
    assert got["b-big"].status == "placed"
    assert not any(assign_key(P, BAD) in labels for labels in plan.node_set.values())
    assert not [k for k, _ in planner.cluster.held_items() if k[0] == BAD]
    assert len(errors) == 1


def _bad_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planning BAD raises (a KeyError); every other service is planned as it is."""
    real = planner_mod.plan_service

    def plan_service(s: SwarmService, *a: Any, **kw: Any) -> ServicePlan:
        if s.name == BAD:
            raise KeyError("no such thing")
        return real(s, *a, **kw)

    monkeypatch.setattr(planner_mod, "plan_service", plan_service)


def test_the_daemons_cycle_shows_the_failed_service_and_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, errors: list[Any]) -> None:
    _bad_raises(monkeypatch)
    sw = RecordingSwarm([sw_node("n-dgx", "gpu-node-1"), sw_node("n-4090", "gpu-node-2")],
                        [sw_svc(BAD, {f"{P}gpus": "1"}), sw_svc("b-one", {f"{P}gpus": "1"})],
                        [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(timeout_s=0.5, identity="none"))
    d = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]
    d.use([PlacementStep(d)])
    for _ in range(2):  # cycle after cycle
        snap = snapshot(sw.nodes(), sw.services(), [])
        d.run_steps(snap)
        plan = d.last_session.placement
        assert plan is not None
        got = _by_name(plan)
        assert got[BAD].status == "failed" and "KeyError" in (got[BAD].reason or "")
        assert got["b-one"].status == "placed"
        doc = build_cluster(snap, plan)
        shown = {s["name"]: s for s in doc["services"]}[BAD]
        assert (shown["status"], shown["state"]) == ("failed", "Failed")
        assert "report it" in shown["reason"]
        text = render_status(doc)  # `status` names it, as it names a pending request
        assert "planning failed (a swarmgpu fault" in text
        assert f"  {BAD}: planning {BAD} failed unexpectedly (KeyError" in text
        (fault,) = [f for f in findings_of(plan) if f.subject == BAD]
        assert fault.kind == "placement-fault"
        # its running tasks use what it was granted: no ungranted GPU access (grants)
        assert BAD in managed_names(plan)
        for status, n in (("failed", 1), ("placed", 1), ("pending", 0)):
            got_n = d.metrics.registry.get_sample_value(
                "swarmgpu_planned_services", {"status": status})
            assert got_n == n, status
    assert ("service", "id-b-one") in sw.calls
    assert ("service", f"id-{BAD}") not in sw.calls
    assert not any(assign_key(P, BAD) in n.labels for n in sw.nodes())
    assert len([e for e in errors if BAD in e["message"]]) == 1


def test_a_probe_that_raises_gives_back_what_it_took(
        monkeypatch: pytest.MonkeyPatch, errors: list[Any]) -> None:
    """Replicas packed on one node are probed there, each committed on the core
    allocator till all fit; one that raises mid-probe leaves none of them taken."""
    one = [NODES[0]]
    planner = Planner()
    planner.plan(one, [], [], FACTS)  # the allocator of this node set, kept from now on

    def place_on(*_: Any) -> None:  # the probe's next replica, its first one committed
        raise RuntimeError("probe")

    monkeypatch.setattr(planner.cluster.alloc, "place_on", place_on)
    bad = svc(BAD, {f"{P}gpus": "4"}, replicas=2)  # two replicas, one node: packed
    big = svc("b-big", {f"{P}gpus": "8"})
    got = _by_name(planner.plan(one, [bad, big], [], FACTS))
    assert got[BAD].status == "failed" and "probe" in (got[BAD].reason or "")
    assert got["b-big"].status == "placed"


def test_a_holding_kept_whole_on_a_failed_gpu_stays_committed_when_its_planning_raises(
        monkeypatch: pytest.MonkeyPatch, errors: list[Any]) -> None:
    """With the health policy on, a holding on a failed GPU is kept whole but committed
    without that GPU (``existing._strip_failed``). Before: the restore committed the
    whole one, which the allocator refuses (no room on a failed GPU), so the service's
    healthy GPU, its task running there, was left free and the next service given it."""
    nodes, svcs, tasks = setup({BAD: [U2[0], U2[1]]}, full_n2=False,
                               svc_labels={BAD: {f"{P}gpus": "2"}})
    svcs = [s for s in svcs if s.name == BAD]
    seven = service("z-seven", {f"{P}gpus": "7"}, constraints=["node.hostname==gpu-node-2"])
    facts = {"n1": F1, "n2": mark(F2, failed=[0])}

    def planned(fault: bool) -> tuple[dict[str, ServicePlan], Any]:
        planner = Planner()
        planner.keep_failed_holdings(lambda _svc, _nid: True)
        real = planner_mod.plan_service

        def plan_service(s: SwarmService, *a: Any, **kw: Any) -> ServicePlan:
            if fault and s.name == BAD:
                raise RuntimeError("boom")
            return real(s, *a, **kw)

        monkeypatch.setattr(planner_mod, "plan_service", plan_service)
        got = _by_name(planner.plan(nodes, [*svcs, seven], tasks, facts))
        monkeypatch.undo()
        return got, planner.cluster.alloc.snapshot()

    base, alloc = planned(False)
    got, after = planned(True)
    assert got[BAD].status == "failed" and base[BAD].status == "placed"
    assert got["z-seven"] == base["z-seven"] and got["z-seven"].status == "pending"
    assert after == alloc  # U2[1] still counted used: a-bad's task runs on it


def test_apply_names_a_service_whose_planning_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, errors: list[Any]) -> None:
    """`swarmgpu apply --service` of a service whose planning raised says so (exit 1),
    not "nothing held back" as if its plan had nothing to let through."""
    from swarmgpu.manager.services.release import release_held

    _bad_raises(monkeypatch)
    sw = RecordingSwarm([sw_node("n-dgx", "gpu-node-1")],
                        [sw_svc(BAD, {f"{P}gpus": "1"})], [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False))
    snap = snapshot(sw.nodes(), sw.services(), [])
    (r,) = release_held(sw, snap, cfg, [BAD], dry_run=True)  # type: ignore[arg-type]
    assert r.error is not None and f"planning {BAD} failed unexpectedly" in r.error, r
    assert not r.changes and not r.written


@pytest.mark.parametrize("counted", [True, False])
def test_a_restore_that_raises_costs_its_service_alone_and_its_nodes_are_rebuilt(
        monkeypatch: pytest.MonkeyPatch, errors: list[Any], counted: bool) -> None:
    """Putting back what a failed service held raises too (its commit raised after it
    counted the GPUs and before it recorded them, or before it counted them: they are
    free under its running task): the visit goes on, the two other services are
    planned away from what it held, the fault is said once, and the next cycle's
    allocator is the one a fresh planner builds from the ledger (``isolate.unsure``)."""
    nodes, bad = settled(svc(BAD, {f"{P}gpus": "4"}))
    (bad_node,) = [n.id for n in nodes if assign_key(P, BAD) in n.labels]
    two, three = svc("b-two", {f"{P}gpus": "2"}), svc("c-three", {f"{P}gpus": "3"})
    planner = Planner()
    cluster, real_plan = planner.cluster, planner_mod.plan_service

    def plan_service(s: SwarmService, *a: Any, **kw: Any) -> ServicePlan:
        if s.name != BAD:
            return real_plan(s, *a, **kw)
        cluster.release_holding(BAD, bad_node)  # what a move gives up first
        real_commit = cluster.alloc.commit

        def commit(choice: Choice) -> None:  # restore's commit: counted, then it raises
            if counted or choice.explanation != f"held by {BAD}":
                real_commit(choice)
            if choice.explanation == f"held by {BAD}":
                raise RuntimeError("boom putting a-bad back")

        monkeypatch.setattr(cluster.alloc, "commit", commit)
        raise KeyError("no such thing")

    monkeypatch.setattr(planner_mod, "plan_service", plan_service)
    got = _by_name(planner.plan(nodes, [bad, two, three], [], FACTS))
    monkeypatch.undo()
    assert (got[BAD].status, got[BAD].state) == ("failed", "Failed")
    assert "KeyError" in (got[BAD].reason or "") and not got[BAD].node_writes
    value = next(n for n in nodes if n.id == bad_node).labels[assign_key(P, BAD)]
    h = parse_holding(BAD, bad_node, value)
    assert h is not None
    held = set(h.uuids)
    for name in ("b-two", "c-three"):
        assert got[name].status == "placed", got[name]
        for p in got[name].placements:  # none of a-bad's GPUs, its task running there
            assert p.node_id != bad_node or not held & set(p.uuids), p
    (rec,) = [e for e in errors if BAD in e["message"]]
    assert rec["exception"] is not None and "boom putting a-bad back" in rec["message"]
    plan = planner.plan(nodes, [bad, two, three], [], FACTS)
    nodes = apply(nodes, plan)
    planner.plan(nodes, [bad, two, three], [], FACTS)
    fresh = Planner()
    fresh.plan(nodes, [bad, two, three], [], FACTS)
    assert cluster.alloc.snapshot() == fresh.cluster.alloc.snapshot()
    assert ({k: h.key for k, h in cluster.held_items()}
            == {k: h.key for k, h in fresh.cluster.held_items()})
