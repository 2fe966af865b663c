"""A service whose part of a pass over every service before the visits raises (its
request read, its holdings kept, its count in the workload mix, its job's progress)
costs itself alone (``placement.isolate``): its plan is failed and names the fault, it
writes nothing, what it holds in the ledger stays held, and every other service is
placed. And a commit that raises once it counted GPUs, before its holding was recorded,
leaves no GPU counted for good: its node is built anew (or nothing was counted)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from loguru import logger
from support.isolation import BAD, FACTS, NODES, queue_count_raises, settled
from support.placement import P, apply, svc, written

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.values import Choice
from swarmgpu.core.config import load_config
from swarmgpu.core.tenants import STACK_LABEL
from swarmgpu.manager.cycle.placement import new_planner
from swarmgpu.manager.placement import PlacementPlan, Planner, ReplicaPlacement, ServicePlan
from swarmgpu.manager.placement import existing as existing_mod
from swarmgpu.manager.placement.filters import SwarmFilters
from swarmgpu.manager.services.tenants import Tenants
from swarmgpu.manager.web.cluster_view import render_status
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask


def _by_name(plan: PlacementPlan) -> dict[str, ServicePlan]:
    return {sp.name: sp for sp in plan.services}


def _failed(sp: ServicePlan, *why: str, fault: str = "swarmgpu fault") -> None:
    assert (sp.status, sp.state) == ("failed", "Failed"), sp
    assert sp.reason is not None
    for part in (sp.name, fault, *why):
        assert part in sp.reason, sp.reason
    assert not sp.writes and not sp.node_writes and not sp.placements


def _held_stays(bad: SwarmService, malformed: Callable[[SwarmService], SwarmService],
                planner: Planner | None = None) -> tuple[PlacementPlan, Planner]:
    """``bad`` settled on 4 GPUs of one node, then made ``malformed``: planned beside
    ``b-big`` (8 GPUs: only the other node) and ``c-six`` (6: only where ``bad`` holds).
    ``bad`` fails, its GPUs stay held (``c-six`` waits), ``b-big`` is placed."""
    nodes, s = settled(bad)
    (bad_node,) = [n.id for n in nodes if f"{P}assign.{BAD}" in n.labels]
    big, six = svc("b-big", {f"{P}gpus": "8"}), svc("c-six", {f"{P}gpus": "6"})
    planner = planner or Planner()
    plan = planner.plan(nodes, [malformed(s), big, six], [], FACTS)
    got = _by_name(plan)
    assert got["b-big"].status == "placed"
    assert got["b-big"].placements[0].node_id != bad_node
    assert got["c-six"].status == "pending"
    held = planner.cluster.held_at(BAD, bad_node)
    assert held is not None and held.key[0] == nodes[[n.id for n in nodes].index(
        bad_node)].labels[f"{P}assign.{BAD}"]
    assert bad_node not in plan.node_remove and BAD not in plan.released
    assert not any(BAD in k for ks in plan.node_set.values() for k in ks)
    return plan, planner


def test_a_spec_whose_read_raises_costs_its_service_alone() -> None:
    """The read pass: Resources that are not a mapping (a spec no docker CLI makes)."""
    bad = svc(BAD, {f"{P}gpus": "4"})

    def malformed(s: SwarmService) -> SwarmService:
        return replace(s, spec={"TaskTemplate": {"Resources": "lots"}}, version=s.version + 1)

    plan, planner = _held_stays(bad, malformed)
    _failed(_by_name(plan)[BAD], "TaskTemplate.Resources is str", fault="spec cannot be read")
    # read again every cycle while it raises (no spec version is taken as read)
    nodes = apply(list(NODES), plan)
    assert _by_name(planner.plan(nodes, [malformed(bad)], [], FACTS))[BAD].status == "failed"


def test_a_holding_check_that_raises_costs_its_service_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass that commits every service's kept holdings."""
    real = existing_mod.holding_fits

    def fits(h: Any, r: Any, f: Any) -> str | None:
        if h.service == BAD:
            raise RuntimeError("boom checking a-bad's holding")
        return real(h, r, f)

    monkeypatch.setattr(existing_mod, "holding_fits", fits)
    plan, _ = _held_stays(svc(BAD, {f"{P}gpus": "4"}), lambda s: s)
    _failed(_by_name(plan)[BAD], "RuntimeError", "boom checking")


def test_a_workload_count_that_raises_costs_its_service_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass that learns the workload mix."""
    planner = Planner()
    real = planner.model.observe

    def observe(key: str, *args: Any, **kw: Any) -> bool:
        if key == f"id-{BAD}":
            raise RuntimeError("boom counting a-bad")
        return real(key, *args, **kw)

    def malformed(s: SwarmService) -> SwarmService:  # a new request: counted again
        monkeypatch.setattr(planner.model, "observe", observe)
        return replace(s, labels={**s.labels, f"{P}gpu-memory": "1GiB"},
                       version=s.version + 1)

    plan, _ = _held_stays(svc(BAD, {f"{P}gpus": "4"}), malformed, planner)
    _failed(_by_name(plan)[BAD], "RuntimeError", "boom counting")


def _job(name: str, spec: dict[str, Any], **kw: Any) -> SwarmService:
    counts: dict[str, Any] = {"total_completions": 1, "max_concurrent": 1, **kw}
    return replace(svc(name, {f"{P}gpus": "4"}), mode="replicated-job", replicas=None,
                   spec=spec, **counts)


@pytest.mark.parametrize(("spec", "kw", "why"), [
    ({"TaskTemplate": {"RestartPolicy": "none"}}, {}, "AttributeError"),  # job_progress
    ({}, {"total_completions": "one"}, "TypeError"),  # its run's counts (running_jobs)
])
def test_a_job_whose_progress_raises_costs_itself_alone(
        spec: dict[str, Any], kw: dict[str, Any], why: str) -> None:
    """The passes over every job before the visits: its run's progress and counts."""
    bad, other = _job(BAD, spec, **kw), svc("b-ok", {f"{P}gpus": "4"})
    plan = Planner().plan(list(NODES), [bad, other], [], FACTS)
    got = _by_name(plan)
    _failed(got[BAD], why)
    assert got["b-ok"].status == "placed"


def _fresh_after(nodes: list[SwarmNode], services: list[SwarmService]) -> Any:
    """The allocator's free GPU milli per node after a fault-free cycle of ``services``."""
    p = Planner()
    p.plan(nodes, services, [], FACTS)
    return p.cluster.alloc.snapshot()


def _commit_raises_once(monkeypatch: pytest.MonkeyPatch, planner: Planner) -> list[str]:
    """The allocator's commit of ``planner``, which raises once it counted the first choice
    of GPUs: the node of that choice is put in the list returned."""
    real = Allocator.commit
    hit: list[str] = []

    def commit(self: Allocator, choice: Choice) -> None:
        real(self, choice)
        if not hit and self is planner.cluster.alloc and choice.gpus:
            hit.append(choice.node)
            raise RuntimeError("boom once counted")

    monkeypatch.setattr(Allocator, "commit", commit)
    return hit


def test_a_commit_that_raises_once_it_counted_has_its_node_rebuilt(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The allocator counted a-bad's GPUs, then raised (its scorer is shown the commit
    last) before the holding was recorded: the node is built anew at the next sync, not
    left with 4 GPUs counted that no ledger entry holds."""
    bad, ok = svc(BAD, {f"{P}gpus": "4"}), svc("b-ok", {f"{P}gpus": "4"})
    planner = Planner()
    hit = _commit_raises_once(monkeypatch, planner)
    plan = planner.plan(list(NODES), [bad, ok], [], FACTS)
    monkeypatch.undo()
    assert hit
    _failed(_by_name(plan)[BAD], "boom once counted")
    assert _by_name(plan)["b-ok"].status == "placed"
    nodes = apply(list(NODES), plan)
    ok = written(ok, _by_name(plan)["b-ok"])
    planner.plan(nodes, [bad, ok], [], FACTS)  # mended
    assert planner.cluster.alloc.snapshot() == _fresh_after(nodes, [bad, ok])


def test_a_record_that_raises_after_the_commit_gives_the_gpus_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Making a-bad's record raised once its choice was made: nothing of it is counted
    in that cycle already (b-ok is placed as if a-bad asked for nothing)."""
    bad, ok = svc(BAD, {f"{P}gpus": "4"}), svc("b-ok", {f"{P}gpus": "4"})
    planner = Planner()
    real = planner.cluster.to_replica
    hit: list[str] = []

    def to_replica(choice: Choice) -> ReplicaPlacement:
        if not hit:
            hit.append(choice.node)
            raise RuntimeError("boom recording")
        return real(choice)

    monkeypatch.setattr(planner.cluster, "to_replica", to_replica)
    plan = planner.plan(list(NODES), [bad, ok], [], FACTS)
    assert hit
    _failed(_by_name(plan)[BAD], "boom recording")
    assert not [k for k, _ in planner.cluster.held_items() if k[0] == BAD]
    assert planner.cluster.alloc.snapshot() == _fresh_after(list(NODES), [ok])


def test_a_service_whose_ungating_raises_costs_itself_alone() -> None:
    """The pass that releases the services that no longer ask for a GPU: a-bad's
    request labels are gone, its gate is still in its spec, its UpdateConfig is not a
    mapping. It is failed, naming that field, and keeps its ledger entry and its lines
    (nothing written)."""
    nodes, held = settled(svc(BAD, {f"{P}gpus": "4"}))
    bad = replace(held, labels={}, spec={"UpdateConfig": "fast"}, version=held.version + 1)
    ok = svc("b-ok", {f"{P}gpus": "4"})
    plan = Planner().plan(nodes, [bad, ok], [], FACTS)
    got = _by_name(plan)
    _failed(got[BAD], "Spec.UpdateConfig is str 'fast'", fault="spec cannot be read")
    assert got["b-ok"].status == "placed"
    assert BAD not in plan.released
    assert not any(BAD in k for ks in plan.node_remove.values() for k in ks)


def test_an_arrival_whose_read_raises_costs_itself_alone() -> None:
    """The arrivals' own read (``place_arrivals``, as ``simulate`` places each one): the
    other arrival is placed."""
    planner = Planner()
    planner.plan(list(NODES), [], [], FACTS)
    bad = replace(svc(BAD, {f"{P}gpus": "4"}), spec={"TaskTemplate": {"Resources": "lots"}})
    plan = planner.place_arrivals([bad, svc("b-ok", {f"{P}gpus": "4"})], [])
    got = _by_name(plan)
    _failed(got[BAD], "TaskTemplate.Resources is str", fault="spec cannot be read")
    assert got["b-ok"].status == "placed"


def test_a_service_whose_ungating_raises_keeps_its_gpus_committed() -> None:
    """Its failed plan says what it holds stays held: so its ledger GPUs stay counted
    used that cycle (c-six, 6 GPUs, fits only where a-bad holds 4: it waits)."""
    def malformed(s: SwarmService) -> SwarmService:
        return replace(s, labels={}, spec={"UpdateConfig": "fast"}, version=s.version + 1)

    plan, _ = _held_stays(svc(BAD, {f"{P}gpus": "4"}), malformed)
    _failed(_by_name(plan)[BAD], "Spec.UpdateConfig is str 'fast'", fault="spec cannot be read")


def test_a_plugin_check_that_raises_costs_its_service_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The last pass, which notes on each plan the nodes that do not say if they have
    its plugins: a-bad's check raises; its plan (placed) says the check failed, and
    b-ok's is made and noted as ever."""
    bad, ok = svc(BAD, {f"{P}gpus": "4"}), svc("b-ok", {f"{P}gpus": "4"})
    planner = Planner()

    def plugins_unknown(self: SwarmFilters, s: SwarmService) -> str:
        if s.name == BAD:
            raise RuntimeError("boom checking plugins")
        return "b-ok's plugins: unknown on gpu-a"

    monkeypatch.setattr(SwarmFilters, "plugins_unknown", plugins_unknown)
    got = _by_name(planner.plan(list(NODES), [bad, ok], [], FACTS))
    assert got[BAD].status == "placed" and got["b-ok"].status == "placed"
    assert any("boom checking plugins" in w and "swarmgpu fault" in w
               for w in got[BAD].warnings), got[BAD].warnings
    assert "b-ok's plugins: unknown on gpu-a" in got["b-ok"].warnings


def _queue_count_raises(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, dict[str, str]]:
    """a-bad settled with 4 GPUs of queue q, and counting its queue use raising: the
    nodes, a-bad and the queue label."""
    q = {f"{P}queue": "q"}
    nodes, bad = settled(svc(BAD, {f"{P}gpus": "4", **q}))
    queue_count_raises(monkeypatch)
    return nodes, bad, q


def test_a_queue_count_that_raises_refuses_new_work_to_its_queue(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass that counts each queue's use: a-bad's holdings (4 GPUs of queue q, max
    8) cannot be counted. a-bad is failed, its GPUs held; its queue is not undercounted:
    b-new (6 GPUs of q: 10 with a-bad's) is refused this cycle, its plan naming why;
    c-free (no queue) is placed."""
    nodes, bad, q = _queue_count_raises(monkeypatch)
    new, free = svc("b-new", {f"{P}gpus": "6", **q}), svc("c-free", {f"{P}gpus": "2"})
    got = _by_name(Planner(queues={"q": (0, 8000)}).plan(nodes, [bad, new, free], [], FACTS))
    _failed(got[BAD], "boom counting a-bad's queue")
    assert got["c-free"].status == "placed"
    assert got["b-new"].status == "pending" and not got["b-new"].placements
    assert "queue q" in (got["b-new"].reason or "") and BAD in (got["b-new"].reason or "")


def test_a_queue_whose_count_raised_shows_its_use_unknown_not_the_undercount(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``status`` (text and JSON) said q used 0 GPUs while a-bad held 4 of it uncounted:
    its row says the use is unknown this cycle and why, never the lower figure alone."""
    nodes, bad, _q = _queue_count_raises(monkeypatch)
    plan = Planner(queues={"q": (0, 8000)}).plan(nodes, [bad], [], FACTS)
    (row,) = plan.queues
    assert row["used_unknown"] and BAD in row["used_unknown"], row
    assert "boom counting" in row["used_unknown"]
    text = render_status({"nodes": [], "pending": [], "queues": plan.queues})
    (line,) = [x for x in text.splitlines() if x.startswith("  q:")]
    assert line.startswith("  q: used unknown this cycle (counting the use of a-bad raised")
    assert ": 0 /" not in line, line


def test_a_broken_request_whose_queue_lookup_raises_closes_its_queue(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """a-bad (tenant t, queue q, max 8) holds 4 GPUs and its labels turn invalid; finding
    its queue raises. Its 4 GPUs counted in no queue, so b-new (6 GPUs of q: 10 with
    a-bad's) was placed past the max; now q is unknown this cycle and b-new waits."""
    f = tmp_path / "config.yml"
    f.write_text(textwrap.dedent("""\
        tenants:
          t: {stacks: ["t*"], guaranteed: 0, max: 8}
        """))
    cfg = load_config(f, env={})
    stack = {STACK_LABEL: "t"}
    nodes, bad = settled(svc(BAD, {f"{P}gpus": "4", **stack}))
    bad = replace(bad, labels={**bad.labels, f"{P}topology": "bogus"})
    real = Tenants.queue_of

    def queue_of(self: Tenants, s: SwarmService, asked: str) -> str:
        if s.name == BAD:
            raise RuntimeError("boom finding a-bad's queue")
        return real(self, s, asked)

    monkeypatch.setattr(Tenants, "queue_of", queue_of)
    new = svc("b-new", {f"{P}gpus": "6", **stack})
    plan = new_planner(cfg).plan(nodes, [bad, new], [], FACTS)
    got = _by_name(plan)
    _failed(got[BAD], "boom finding a-bad's queue")
    assert got["b-new"].status == "pending" and not got["b-new"].placements
    assert "queue t" in (got["b-new"].reason or "") and BAD in (got["b-new"].reason or "")
    (row,) = [r for r in plan.queues if r["queue"] == "t"]
    assert "finding the queue of a-bad raised" in (row["used_unknown"] or "")


def test_gpus_a_raising_commit_counted_stay_used_till_the_next_cycle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Not rebuilt in the same cycle (``isolate.unrecorded`` says why): the 4 GPUs a-bad's
    commit counted before it raised are given to no one else that cycle (c-six, 6 GPUs,
    waits; b-big takes the other node), and c-six is placed there the next cycle."""
    bad, big, six = (svc(BAD, {f"{P}gpus": "4"}), svc("b-big", {f"{P}gpus": "8"}),
                     svc("c-six", {f"{P}gpus": "6"}))
    planner = Planner()
    hit = _commit_raises_once(monkeypatch, planner)
    plan = planner.plan(list(NODES), [bad, big, six], [], FACTS)
    monkeypatch.undo()
    got = _by_name(plan)
    _failed(got[BAD], "boom once counted")
    assert got["b-big"].status == "placed" and got["b-big"].placements[0].node_id != hit[0]
    assert got["c-six"].status == "pending"
    nodes = apply(list(NODES), plan)
    big = written(big, got["b-big"])
    again = _by_name(planner.plan(nodes, [big, six], [], FACTS))
    assert again["c-six"].status == "placed"
    assert again["c-six"].placements[0].node_id == hit[0]


def _counting_raises(monkeypatch: pytest.MonkeyPatch, planner: Planner, sid: str) -> None:
    """Counting service ``sid`` in ``planner``'s workload mix raises."""
    real = planner.model.observe

    def observe(key: str, *args: Any, **kw: Any) -> bool:
        if key == sid:
            raise RuntimeError("boom counting a-bad")
        return real(key, *args, **kw)

    monkeypatch.setattr(planner.model, "observe", observe)


def test_a_released_service_whose_workload_count_raises_frees_its_gpus(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """a-bad's request labels are gone (released this cycle, its ledger entries
    removed); it reserves CPU and runs on its GPU node, and counting it in the workload
    mix raises. Its GPUs are released as its plan says, not committed again as a
    service's whose ungating raised: b-big (8 GPUs) and c-six (6) are both placed in
    the same cycle (a-bad's 4 held, one of them waited)."""
    nodes, s = settled(svc(BAD, {f"{P}gpus": "4"}))
    (bad_node,) = [n.id for n in nodes if f"{P}assign.{BAD}" in n.labels]
    cpu = {"TaskTemplate": {"Resources": {"Reservations": {"NanoCPUs": 500_000_000}}}}
    bad = replace(s, labels={}, spec=cpu, version=s.version + 1)
    task = SwarmTask(id="t-bad", service_id=bad.id, node_id=bad_node, slot=1,
                     state="running", desired_state="running", env=(), cpu_milli=500)
    planner = Planner()
    _counting_raises(monkeypatch, planner, bad.id)
    big, six = svc("b-big", {f"{P}gpus": "8"}), svc("c-six", {f"{P}gpus": "6"})
    logs: list[Any] = []
    sink = logger.add(lambda m: logs.append(m.record), level="ERROR")
    try:
        plan = planner.plan(nodes, [bad, big, six], [task], FACTS)
    finally:
        logger.remove(sink)
    got = _by_name(plan)
    assert BAD in plan.released
    # its fault is logged, with its traceback, though its plan is not failed
    (rec,) = [r for r in logs if BAD in r["message"]]
    assert "boom counting a-bad" in rec["message"] and rec["exception"] is not None
    assert "released all the same" in rec["message"]
    assert got.get(BAD) is None or got[BAD].status != "failed"
    assert got["c-six"].status == "placed", got["c-six"].reason
    assert got["b-big"].status == "placed", got["b-big"].reason
    assert planner.cluster.held_at(BAD, bad_node) is None


def test_a_kept_holding_whose_commit_raises_once_counted_leaves_no_gpu_counted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A new planner (a new leader) commits a-bad's ledger holding; the allocator
    counted its GPUs, then raised, in the pass that commits every kept holding (not a
    service's visit: the cycle fails). The next cycle counts that node as the ledger
    says, not with a-bad's 4 GPUs counted twice (its holding, then the stray count)."""
    nodes, bad = settled(svc(BAD, {f"{P}gpus": "4"}))
    planner = Planner()
    _commit_raises_once(monkeypatch, planner)
    with pytest.raises(RuntimeError, match="boom once counted"):
        planner.plan(nodes, [bad], [], FACTS)
    monkeypatch.undo()
    planner.plan(nodes, [bad], [], FACTS)  # the daemon's next cycle
    assert planner.cluster.alloc.snapshot() == _fresh_after(nodes, [bad])


def _bad_logs(logs: list[Any]) -> list[Any]:
    return [r for r in logs if BAD in r["message"]]


def test_an_arrival_that_keeps_raising_is_logged_once_while_it_lasts() -> None:
    """``place_arrivals`` (simulate's arrivals) says a failing arrival's traceback as a
    cycle does: once while it lasts, the next cycle's fault of it included. Before, it
    said it outside any round of ``Faults``: on every arrival, and again next cycle."""
    planner = Planner()
    planner.plan(list(NODES), [], [], FACTS)
    bad = replace(svc(BAD, {f"{P}gpus": "4"}), spec={"TaskTemplate": {"Resources": "lots"}})
    logs: list[Any] = []
    sink = logger.add(lambda m: logs.append(m.record), level="ERROR")
    try:
        for _ in range(2):
            _failed(_by_name(planner.place_arrivals([bad], []))[BAD],
                    "TaskTemplate.Resources is str", fault="spec cannot be read")
        _failed(_by_name(planner.plan(list(NODES), [bad], [], FACTS))[BAD],
                fault="spec cannot be read")
        assert len(_bad_logs(logs)) == 1, logs
        planner.plan(list(NODES), [], [], FACTS)  # gone a cycle: said again when back
        planner.place_arrivals([bad], [])
    finally:
        logger.remove(sink)
    assert len(_bad_logs(logs)) == 2, logs


def test_an_arrival_whose_workload_count_raises_gets_a_failed_plan(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU-only arrival whose task runs on a GPU node is counted in the workload mix;
    counting it raises. Its plan says so, as a cycle's does (``failed_unvisited``);
    before, ``place_arrivals`` gave it no plan at all, and its fault went unsaid."""
    planner = Planner()
    planner.plan(list(NODES), [], [], FACTS)
    cpu = {"TaskTemplate": {"Resources": {"Reservations": {"NanoCPUs": 500_000_000}}}}
    bad = replace(svc(BAD, {}), spec=cpu)
    task = SwarmTask(id="t-bad", service_id=bad.id, node_id=NODES[0].id, slot=1,
                     state="running", desired_state="running", env=(), cpu_milli=500)
    _counting_raises(monkeypatch, planner, bad.id)
    plan = planner.place_arrivals([bad, svc("b-ok", {f"{P}gpus": "4"})], [task])
    got = _by_name(plan)
    _failed(got[BAD], "RuntimeError", "boom counting")
    assert got["b-ok"].status == "placed"
