"""`plan` (``oneshot_plan.plan_as_daemon``) reads the holds its victims' records imply as the
daemon holds them: a victim's record names the GPUs of it its preemptor's hold names
(``victimstop.victim_record``), and `plan` spares only those of its stopping task for the
preemptor (``recorded.recorded_nominations``); its preview of preemption lets such a
preemptor settle, as the daemon does."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from support.forged import DGX_F, R_UUIDS, RecordingSwarm, reserving, snapshot, sw_node, sw_svc
from support.placement import FACTS

from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.oneshot_plan import plan_as_daemon
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.cycle.victimstop import close_gates
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.nodes.sync import Snapshot, facts_by_node
from swarmgpu.manager.placement import (
    Holding,
    PlacementPlan,
    Status,
    assign_key,
    gate_key,
    plan_placement,
)
from swarmgpu.manager.placement.nominated import Nomination
from swarmgpu.manager.placement.preempt import choose_preemptions
from swarmgpu.manager.placement.preempted import Preempted, preempted_state
from swarmgpu.swarm.client import SwarmTask

P = "swarmgpu."


def _cluster() -> RecordingSwarm:
    """batch (priority 0) holds all 8 RTX 4090s of gpu-node-2; high (priority 100) asks
    for 2 of them, low (priority 0) for 1."""
    held = Holding("batch", "n-4090", R_UUIDS, (1000,) * 8)
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", {assign_key(P, "batch"): held.label_value(),
                                              gate_key(P, "batch"): "true"})]
    batch = sw_svc("batch", {f"{P}gpus": "8"})
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}priority": "100",
                           f"{P}gpu-product": "*RTX 4090*"})
    low = sw_svc("low", {f"{P}gpus": "1", f"{P}gpu-product": "*RTX 4090*"})
    tasks = [SwarmTask("t-batch", batch.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ()),
             SwarmTask("t-low", low.id, "", 1, "pending", "running", ())]
    return RecordingSwarm(nodes, [batch, high, low], tasks)


def _seen(plan: PlacementPlan) -> dict[str, Any]:
    return {"spared": plan.stopping_spared, "held": plan.stopping_held, **{
        sp.name: (sp.status, sp.reason, [set(p.uuids) for p in sp.placements])
        for sp in plan.services}}


def test_plan_spares_a_stopping_victims_gpus_its_preemptors_hold_names_as_the_daemon() -> None:
    """batch is stopped for high, whose hold names 2 of its 8 GPUs; its task still stops
    on all 8. The daemon spares those 2 for high and holds the other 6 from all until the
    task stops (low waits for them). `plan` now reads the 2 from batch's record and
    plans as the daemon does. Before: the record named no GPU and `plan` spared all 8
    for high, so low read them as held for high, not as a stop it waits for."""
    sw = _cluster()
    services, nodes = list(sw.services()), list(sw.nodes())
    first = plan_placement(nodes, services, list(sw.tasks()), FACTS)
    (p,) = choose_preemptions(first, nodes, services, list(sw.tasks()), FACTS, prefix=P,
                              preemptible_below=100)
    assert [v.service for v in p.victims] == ["batch"] and len(p.held) == 2, p
    (batch,) = p.victims
    client: Any = sw  # (a RecordingSwarm answers as the client does)
    gate = Writes(client, dry_run=False, who="preemption", prefix=P)
    assert close_gates(gate, client, P, p, [batch], 1000.0, [])
    st = preempted_state(sw.service("id-batch").labels, P)
    assert st is not None and st.held is not None and set(st.held) == set(p.held), st
    line = "NVIDIA_VISIBLE_DEVICES=" + ",".join(R_UUIDS)
    stopping = SwarmTask("t-batch", "id-batch", "n-4090", 1, "running", "shutdown", (line,))
    snap = replace(snapshot(list(sw.nodes()), list(sw.services()),
                            [t for t in sw.tasks() if t.id != "t-batch"]),
                   stopping=[stopping], taken_at=1005.0,  # (the hour as the daemon stored it)
                   swarm_labels={f"{P}state.preemptions": "1000"})
    hold = Nomination("high", 100, "n-4090", p.held, victims=("id-batch",),
                      service_id="id-high")
    daemon = _seen(make_plan(snap, Config(), nominated=[hold]))
    assert daemon["high"][0] == "placed" and daemon["low"][0] == "pending", daemon
    assert _seen(make_plan(snap, Config())) == daemon


def test_a_record_too_long_with_its_gpus_is_kept_without_them() -> None:
    """A record whose GPUs would take it past the length read (``MAX_STATE_CHARS``) is
    written without them (all its task's spared, as before), not left unread: its reason
    and cooldown kept."""
    made = Preempted("high", 100, 1000.0, "n-4090", "id-high", tuple(f"GPU-{i:036}"
                                                                  for i in range(40)))
    st = preempted_state({f"{P}state.preempted": made.to_json()}, P)
    assert st == replace(made, held=None)
    short = replace(made, held=R_UUIDS[:2])
    assert preempted_state({f"{P}state.preempted": short.to_json()}, P) == short


def _job_stopping(record: bool) -> Snapshot:
    """high (priority 100: 2 GPUs, 32 CPUs) stopped job (``record``: its record says so)
    on gpu-node-1, whose task still stops there on 2 GPUs reserving 40 of its 64 CPUs:
    high waits for the CPU. keep (not preemptible) holds the DGX's other 6 GPUs, old
    (priority 0) all of gpu-node-2."""
    d = tuple(g.uuid for g in DGX_F.gpus)
    ho, hk = Holding("old", "n-4090", R_UUIDS, (1000,) * 8), Holding("keep", "n-dgx", d[2:],
                                                                       (1000,) * 6)
    nodes = [sw_node("n-mgr", "manager", role="manager"),
             sw_node("n-dgx", "gpu-node-1", {assign_key(P, "keep"): hk.label_value(),
                                             gate_key(P, "keep"): "true"}),
             sw_node("n-4090", "gpu-node-2", {assign_key(P, "old"): ho.label_value(),
                                              gate_key(P, "old"): "true"})]
    made = Preempted("high", 100, 995.0, "n-dgx", "id-high", d[:2]).to_json()
    job = sw_svc("job", {f"{P}gpus": "2", **({f"{P}state.preempted": made} if record else {})},
                 mode={"ReplicatedJob": {}})
    old, keep = sw_svc("old", {f"{P}gpus": "8"}), sw_svc("keep", {
        f"{P}gpus": "6", f"{P}preemptible": "false"})
    high = reserving(sw_svc("high", {f"{P}gpus": "2", f"{P}priority": "100"}), 32000)
    stop = SwarmTask("t-job", job.id, "n-dgx", 1, "running", "shutdown",
                     ("NVIDIA_VISIBLE_DEVICES=" + ",".join(d[:2]),), cpu_milli=40000)
    tasks = [SwarmTask("t-old", old.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-keep", keep.id, "n-dgx", 1, "running", "running", ()),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ())]
    return replace(snapshot(nodes, [job, old, keep, high], tasks), stopping=[stop],
                   taken_at=1000.0, swarm_labels={f"{P}state.preemptions": "995"})


def _would(plan: PlacementPlan) -> list[str]:
    return [w for sp in plan.services for w in sp.warnings if w.startswith("would preempt")]


def test_plan_previews_no_preemption_for_a_preemptor_the_daemon_lets_settle() -> None:
    """high waits for the CPU its job victim's stopping task holds; the daemon's hold for
    it is live, so it settles and preempts no more. `plan` now takes the hold its
    victim's record implies as the daemon's and previews none either. Before: its
    placement read that hold, but its preview of preemption did not, and said "would
    preempt old" for high. Without the record (a hold no one knows of), both would."""
    snap = _job_stopping(record=True)
    d = tuple(g.uuid for g in DGX_F.gpus)
    daemon = Preempter(Config(), clock=lambda: 50.0)
    daemon.nominated.by["high"] = (Nomination("high", 100, "n-dgx", d[:2], victims=("id-job",),
                                              service_id="id-high"), 45.0, 45.0)
    facts = facts_by_node(snap)
    plan = make_plan(snap, Config(), nominated=daemon.nominated.current())
    assert {sp.name: sp.status for sp in plan.services}["high"] == Status.PENDING
    assert daemon.decide(snap, plan, facts, None, 1000.0) == []
    assert _would(plan_as_daemon(snap, Config())) == []
    assert _would(plan_as_daemon(_job_stopping(record=False), Config())) == [
        "would preempt old (priority 0) on gpu-node-2 for high (priority 100) "
        "(preemption.dry_run)"]
