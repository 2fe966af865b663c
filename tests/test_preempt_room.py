"""Preemption against the cluster as it is once this cycle's placement wrote, and the CPU
and memory a victim's relocation needs on its target (``placement.preempt``): a victim
is never stopped for a preemptor that still does not fit, nor said moved to a node Swarm
would not run it on."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from support.forged import FACTS, R_UUIDS, snapshot, sw_node, sw_svc

from swarmgpu.core.config import Config, PreemptionConfig, SyncConfig
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.placement import (
    Holding,
    assign_key,
    devices_key,
    gate_key,
    plan_placement,
    preempt,
)
from swarmgpu.manager.placement.preempt import choose_preemptions
from swarmgpu.manager.placement.records import NodeWrites
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
MIB = 1 << 20


def _reserving(s: SwarmService, cpu_milli: int = 0, memory_mib: int = 0) -> SwarmService:
    """``s`` whose tasks reserve ``cpu_milli`` and ``memory_mib`` (Swarm's ResourceFilter)."""
    tt = dict(s.spec["TaskTemplate"])
    tt["Resources"] = {"Reservations": {"NanoCPUs": cpu_milli * 1_000_000,
                                        "MemoryBytes": memory_mib * MIB}}
    return replace(s, spec={**s.spec, "TaskTemplate": tt})


def _held(name: str, nid: str, uuids: tuple[str, ...]) -> dict[str, str]:
    h = Holding(name, nid, uuids, tuple(1000 for _ in uuids))
    return {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}


def _movable(dgx_cpu: int, hog_cpu: int, victim_cpu: int = 1000, victim_mem: int = 0,
             hog_mem: int = 0, dgx_mem: int = 256000,
             ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """small (priority 0, 2 GPUs, reserving ``victim_cpu``) and filler (not preemptible, 6
    GPUs) fill n-4090; the DGX has whole GPUs free and ``dgx_cpu`` CPU milli, ``hog_cpu``
    of it reserved by a running task of no GPU; high (priority 100) wants 2 RTX 4090s."""
    nodes = [sw_node("n-mgr", "manager", role="manager"),
             replace(sw_node("n-dgx", "gpu-node-1"), cpu_milli=dgx_cpu, memory_mib=dgx_mem),
             sw_node("n-4090", "gpu-node-2", {**_held("small", "n-4090", R_UUIDS[:2]),
                                            **_held("filler", "n-4090", R_UUIDS[2:])})]
    small = _reserving(sw_svc("small", {f"{P}gpus": "2",
                                        devices_key(P, "n-4090"): ",".join(R_UUIDS[:2])}),
                       victim_cpu, victim_mem)
    filler = sw_svc("filler", {f"{P}gpus": "6", f"{P}priority": "50",
                             f"{P}preemptible": "false",
                             devices_key(P, "n-4090"): ",".join(R_UUIDS[2:])})
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*",
                         f"{P}priority": "100"})
    hog = _reserving(sw_svc("hog", {}, gated=False), hog_cpu, hog_mem)
    tasks = [SwarmTask("t-small", small.id, "n-4090", 1, "running", "running", (),
                       cpu_milli=victim_cpu, memory_mib=victim_mem),
             SwarmTask("t-filler", filler.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-hog", hog.id, "n-dgx", 1, "running", "running", (),
                       cpu_milli=hog_cpu, memory_mib=hog_mem),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ())]
    return nodes, [small, filler, high, hog], tasks


def _moves(nodes: list[SwarmNode], services: list[SwarmService], tasks: list[SwarmTask],
           ) -> dict[str, str]:
    plan = plan_placement(nodes, services, tasks, FACTS)
    (p,) = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=100)
    assert [v.service for v in p.victims] == ["small"] and p.hostname == "gpu-node-2"
    return {v: m.hostname for v, m in p.moves.items()}


def test_a_victim_is_relocated_only_where_its_cpu_and_memory_are_left() -> None:
    """The DGX has GPUs free but only 500 CPU milli left (a task of no GPU reserves the
    rest): small, reserving 1000, would stay pending there. Before, the plan said it was
    moved there: its make-before-break move waited ``move_timeout_s`` for a task Swarm
    never ran, was rolled back, and high waited all that time (again after each
    cooldown). Now small is stopped, as a victim with nowhere to go."""
    assert _moves(*_movable(dgx_cpu=8000, hog_cpu=6000)) == {"small": "gpu-node-1"}
    assert _moves(*_movable(dgx_cpu=8000, hog_cpu=7500)) == {}
    # memory counts as CPU does
    assert _moves(*_movable(dgx_cpu=8000, hog_cpu=0, victim_mem=4096, hog_mem=254000)) == {}


def test_two_victims_moved_in_one_round_share_their_targets_cpu() -> None:
    """Two preemptors each stop one victim on n-4090; the DGX has GPUs for both victims
    but CPU for one: only one is said moved there (the other is stopped), not both onto
    CPU that holds one."""
    nodes = [sw_node("n-mgr", "manager", role="manager"),
             replace(sw_node("n-dgx", "gpu-node-1"), cpu_milli=1500),
             sw_node("n-4090", "gpu-node-2", {**_held("a", "n-4090", R_UUIDS[:2]),
                                            **_held("b", "n-4090", R_UUIDS[2:4]),
                                            **_held("filler", "n-4090", R_UUIDS[4:])})]
    a = _reserving(sw_svc("a", {f"{P}gpus": "2", devices_key(P, "n-4090"): ",".join(R_UUIDS[:2])}),
                   1000)
    b = _reserving(sw_svc("b", {f"{P}gpus": "2",
                                devices_key(P, "n-4090"): ",".join(R_UUIDS[2:4])}), 1000)
    filler = sw_svc("filler", {f"{P}gpus": "4", f"{P}priority": "50", f"{P}preemptible": "false",
                             devices_key(P, "n-4090"): ",".join(R_UUIDS[4:])})
    hi = [sw_svc(n, {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*", f"{P}priority": "100"})
          for n in ("hi1", "hi2")]
    services = [a, b, filler, *hi]
    tasks = [SwarmTask("t-a", a.id, "n-4090", 1, "running", "running", (), cpu_milli=1000),
             SwarmTask("t-b", b.id, "n-4090", 1, "running", "running", (), cpu_milli=1000),
             SwarmTask("t-f", filler.id, "n-4090", 1, "running", "running", ()),
             *(SwarmTask(f"t-{s.name}", s.id, "", 1, "pending", "running", ()) for s in hi)]
    plan = plan_placement(nodes, services, tasks, FACTS)
    chosen = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                                preemptible_below=100)
    assert sorted(v.service for p in chosen for v in p.victims) == ["a", "b"]
    assert sum(len(p.moves) for p in chosen) == 1, [p.describe() for p in chosen]


# --- the ledger as this cycle's placement left it -----------------------------------------


def _raced() -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """n-4090: batch (priority 0) holds 4 of its 8 RTX 4090s; x (priority 50, not
    preemptible) and high (priority 100, 6 RTX 4090s) wait. Placement serves high first
    (it does not fit: 4 free), then places x on the 4 free ones."""
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", _held("batch", "n-4090", R_UUIDS[:4]))]
    batch = sw_svc("batch", {f"{P}gpus": "4", devices_key(P, "n-4090"): ",".join(R_UUIDS[:4])})
    x = sw_svc("x", {f"{P}gpus": "4", f"{P}gpu-product": "*RTX 4090*", f"{P}priority": "50",
                   f"{P}preemptible": "false"})
    high = sw_svc("high", {f"{P}gpus": "6", f"{P}gpu-product": "*RTX 4090*",
                         f"{P}priority": "100"})
    tasks = [SwarmTask("t-batch", batch.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-x", x.id, "", 1, "pending", "running", ()),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ())]
    return nodes, [batch, x, high], tasks


def test_gpus_placement_gave_out_this_cycle_are_not_counted_free() -> None:
    """Before, preemption read the snapshot's ledger: x's 4 GPUs, given out by this very
    cycle's placement, looked free, so stopping batch seemed to make room for high's 6;
    batch was stopped and high still did not fit (x holds 4 of the 8): stopped for
    nothing. Read after placement's writes, nothing frees 6 GPUs there: no preemption."""
    nodes, services, tasks = _raced()
    plan = plan_placement(nodes, services, tasks, FACTS)
    st = {sp.name: sp.status for sp in plan.services}
    assert st == {"batch": "placed", "x": "placed", "high": "pending"}, st
    assert choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=100) == []


def _cfg() -> Config:
    return Config(sync=SyncConfig(prefix=P), preemption=PreemptionConfig(dry_run=True))


def test_the_daemon_decides_on_the_writes_that_landed() -> None:
    """The daemon's step reads what of placement's writes landed (``plan.landed``): x's
    ledger entry landed, so batch is not stopped; had it not landed (refused), x holds
    nothing and stopping batch does make room for high."""
    nodes, services, tasks = _raced()
    plan = plan_placement(nodes, services, tasks, FACTS)
    plan.landed = NodeWrites({nid: dict(v) for nid, v in plan.node_set.items()},
                             {nid: list(v) for nid, v in plan.node_remove.items()})
    pre = Preempter(_cfg())
    assert pre.decide(snapshot(nodes, services, tasks), plan, FACTS, None, 1000.0) == []
    plan.landed = NodeWrites()  # none landed
    (p,) = Preempter(_cfg()).decide(snapshot(nodes, services, tasks), plan, FACTS, None, 1000.0)
    assert [v.service for v in p.victims] == ["batch"]


def test_a_release_that_landed_this_cycle_frees_its_gpus_for_preemption() -> None:
    """A holding placement released this cycle (its service scaled to 0) is no victim:
    its GPUs are free already, and the preemptor is pending for another reason."""
    nodes, services, tasks = _raced()
    gone = replace(next(s for s in services if s.name == "batch"), replicas=0)
    services = [gone, *(s for s in services if s.name == "high")]
    tasks = [t for t in tasks if t.service_id != "id-x"]
    plan = plan_placement(nodes, services, tasks, FACTS)
    assert any(assign_key(P, "batch") in keys for keys in plan.node_remove.values()), \
        plan.node_remove
    chosen: Any = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                                     preemptible_below=100)
    assert chosen == []


def _cpu_node() -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """hi1 and hi2 (1200 CPU milli each) each find a 2-GPU victim (a, b: 500 each) on
    n-4090, which has 1000 CPU milli left."""
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             replace(sw_node("n-4090", "gpu-node-2", {
                 **_held("a", "n-4090", R_UUIDS[:2]), **_held("b", "n-4090", R_UUIDS[2:4]),
                 **_held("filler", "n-4090", R_UUIDS[4:])}), cpu_milli=2000)]
    a, b = (_reserving(sw_svc(n, {f"{P}gpus": "2", devices_key(P, "n-4090"): ",".join(u)}), 500)
            for n, u in (("a", R_UUIDS[:2]), ("b", R_UUIDS[2:4])))
    filler = sw_svc("filler", {f"{P}gpus": "4", f"{P}priority": "50", f"{P}preemptible": "false",
                             devices_key(P, "n-4090"): ",".join(R_UUIDS[4:])})
    hi = [_reserving(sw_svc(n, {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*",
                                f"{P}priority": "100"}), 1200) for n in ("hi1", "hi2")]
    services = [a, b, filler, *hi]
    tasks = [SwarmTask("t-a", a.id, "n-4090", 1, "running", "running", (), cpu_milli=500),
             SwarmTask("t-b", b.id, "n-4090", 1, "running", "running", (), cpu_milli=500),
             SwarmTask("t-f", filler.id, "n-4090", 1, "running", "running", ()),
             *(SwarmTask(f"t-{s.name}", s.id, "", 1, "pending", "running", ()) for s in hi)]
    return nodes, services, tasks


def test_two_preemptors_on_one_node_share_its_cpu() -> None:
    """hi1 fits once a goes, and then b's 500 with what hi1 left (300) is short of
    hi2's 1200. Before, each preemptor was judged against the node's CPU as if alone: b
    was stopped too, and hi2 stayed pending for the CPU."""
    nodes, services, tasks = _cpu_node()
    plan = plan_placement(nodes, services, tasks, FACTS)
    chosen = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                                preemptible_below=100)
    assert [(p.service, [v.service for v in p.victims]) for p in chosen] == [("hi1", ["a"])]


def test_a_preemptor_that_raises_leaves_the_rounds_cpu_as_before_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """hi1's choice raises once its CPU was counted on n-4090 (its victim's relocation,
    injected): it preempts nothing, and the round is as before it, its CPU too. Before,
    the CPU it had counted stayed taken: hi2 found n-4090 short of CPU and preempted
    nothing either."""
    real = preempt.relocation
    calls: list[str] = []

    def relocation(*a: Any, **kw: Any) -> Any:
        calls.append(a[1].name)
        if len(calls) == 1:
            raise RuntimeError("injected")
        return real(*a, **kw)

    monkeypatch.setattr(preempt, "relocation", relocation)
    nodes, services, tasks = _cpu_node()
    plan = plan_placement(nodes, services, tasks, FACTS)
    raised: dict[str, Exception] = {}
    chosen = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                                preemptible_below=100, raised=raised)
    assert list(raised) == ["hi1"]
    assert [(p.service, len(p.victims)) for p in chosen] == [("hi2", 1)]


# --- services of no GPU --------------------------------------------------------------------


def test_services_of_no_gpu_never_crowd_the_gpu_holders_out_of_the_candidates() -> None:
    """12 services of ``gpus: "0"`` (priority 0) hold n-4090 beside batch (priority 10),
    which holds its 8 GPUs. Before, they were candidates (freeing no GPU), ranked first by
    their lower priority, and filled the 12 candidates a node keeps: batch was cut off
    and high never preempted it. A service of no GPU is never a victim."""
    cpu = [f"c{i:02d}" for i in range(12)]
    held = Holding("batch", "n-4090", R_UUIDS, tuple(1000 for _ in R_UUIDS))
    labels = {assign_key(P, "batch"): held.label_value(), gate_key(P, "batch"): "true"}
    for c in cpu:
        labels |= {assign_key(P, c): "", gate_key(P, c): "true"}
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", labels)]
    batch = sw_svc("batch", {f"{P}gpus": "8", f"{P}priority": "10",
                           devices_key(P, "n-4090"): ",".join(R_UUIDS)})
    cs = [_reserving(sw_svc(c, {f"{P}gpus": "0"}), 100) for c in cpu]
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*",
                         f"{P}priority": "100"})
    tasks = [SwarmTask("t-batch", batch.id, "n-4090", 1, "running", "running", ()),
             *(SwarmTask(f"t-{c.name}", c.id, "n-4090", 1, "running", "running", (),
                         cpu_milli=100) for c in cs),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ())]
    services = [batch, *cs, high]
    plan = plan_placement(nodes, services, tasks, FACTS)
    st = {sp.name: sp.status for sp in plan.services}
    assert st["high"] == "pending" and st["batch"] == "placed", st
    chosen = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                                preemptible_below=100)
    assert [[v.service for v in p.victims] for p in chosen] == [["batch"]]


def test_a_free_gpu_one_preemptor_counts_on_is_not_counted_again_for_the_next() -> None:
    """n-4090: one RTX 4090 free, v1 and v2 (priority 0) one each, filler (not
    preemptible) the other 5; hi1 and hi2 (priority 100) want 2 each. hi1 takes the free
    one and v1's. Before, hi2 counted the same free GPU again and stopped v2 for it: 3
    GPUs for 4, and v2 was stopped for a preemptor that still did not fit."""
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", {
                 **_held("v1", "n-4090", R_UUIDS[1:2]), **_held("v2", "n-4090", R_UUIDS[2:3]),
                 **_held("filler", "n-4090", R_UUIDS[3:])})]
    vs = [sw_svc(n, {f"{P}gpus": "1", devices_key(P, "n-4090"): u})
          for n, u in (("v1", R_UUIDS[1]), ("v2", R_UUIDS[2]))]
    filler = sw_svc("filler", {f"{P}gpus": "5", f"{P}priority": "50", f"{P}preemptible": "false",
                             devices_key(P, "n-4090"): ",".join(R_UUIDS[3:])})
    hi = [sw_svc(n, {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*", f"{P}priority": "100"})
          for n in ("hi1", "hi2")]
    services = [*vs, filler, *hi]
    tasks = [*(SwarmTask(f"t-{s.name}", s.id, "n-4090", 1, "running", "running", ())
               for s in [*vs, filler]),
             *(SwarmTask(f"t-{s.name}", s.id, "", 1, "pending", "running", ()) for s in hi)]
    plan = plan_placement(nodes, services, tasks, FACTS)
    assert {sp.name: sp.status for sp in plan.services if sp.name in ("hi1", "hi2")} == {
        "hi1": "pending", "hi2": "pending"}
    chosen = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                                preemptible_below=100)
    assert [(p.service, len(p.victims)) for p in chosen] == [("hi1", 1)], \
        [p.describe() for p in chosen]
