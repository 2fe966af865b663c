"""A victim whose planning failed this cycle (plan status failed, ``placement.isolate``)
may still be preempted, by stopping: its planning fault gives it no immunity. It is never
moved (``Preemption.moves``): a move places it again, and its placement keeps raising."""

from __future__ import annotations

from dataclasses import replace

from support.forged import DGX_F, R4090_F, RecordingSwarm, sw_node, sw_svc

from swarmgpu.core.config import Config, PreemptionConfig, RebalanceConfig
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, assign_key, devices_key, gate_key
from swarmgpu.manager.placement.preempt import choose_preemptions
from swarmgpu.manager.placement.records import PlacementPlan, State, Status
from swarmgpu.manager.rebalance.mover import read_records
from swarmgpu.swarm.client import SwarmTask

P = "swarmgpu."
R = tuple(g.uuid for g in R4090_F.gpus)  # 8 RTX 4090s on n-4090
FACTS = {"n-dgx": DGX_F, "n-4090": R4090_F}
CFG = Config(rebalance=RebalanceConfig(dry_run=False, max_moves_per_cycle=4,
                                       max_moves_per_node=4),
             preemption=PreemptionConfig(dry_run=False, victim_cooldown_s=100))


def _world() -> RecordingSwarm:
    """n-4090: a and b (priority 0, any product: movable to the DGX) and filler (not
    preemptible), 2, 2 and 4 GPUs; h (priority 100) waits for 4 RTX 4090s."""
    held = {"a": R[:2], "b": R[2:4], "filler": R[4:]}
    extra = {"filler": {f"{P}priority": "50", f"{P}preemptible": "false"}}
    labels: dict[str, str] = {}
    for name, uuids in held.items():
        h = Holding(name, "n-4090", uuids, (1000,) * len(uuids))
        labels |= {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", labels)]
    svcs = [sw_svc(n, {f"{P}gpus": str(len(u)), devices_key(P, "n-4090"): ",".join(u),
                       **extra.get(n, {})}) for n, u in held.items()]
    svcs.append(sw_svc("h", {f"{P}gpus": "4", f"{P}gpu-product": "*RTX 4090*",
                             f"{P}priority": "100"}))
    tasks = [SwarmTask(f"t-{s.name}", s.id, "" if s.name == "h" else "n-4090", 1,
                       "pending" if s.name == "h" else "running", "running", ()) for s in svcs]
    return RecordingSwarm(nodes, svcs, tasks)


def _failed(plan: PlacementPlan, name: str) -> PlacementPlan:
    """``plan`` with ``name``'s planning failed (as ``isolate.failed_plan`` says it)."""
    plan.services = [replace(sp, status=Status.FAILED, state=State.FAILED)
                     if sp.name == name else sp for sp in plan.services]
    return plan


def test_a_failed_victim_is_stopped_not_moved() -> None:
    """a's planning failed: h still preempts a and b (the same victims), b is moved to
    the DGX, a is stopped. Before, a was moved too: the mover started a move whose
    placement of a keeps raising."""
    sw = _world()
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels())
    plan = _failed(make_plan(snap, CFG), "a")
    (p,) = choose_preemptions(plan, snap.nodes, snap.services, snap.tasks, FACTS,
                              prefix=P, preemptible_below=CFG.preemption.preemptible_below)
    assert sorted(v.service for v in p.victims) == ["a", "b"]
    assert sorted(p.moves) == ["b"]


def test_the_daemon_stops_a_failed_victim_and_moves_the_other() -> None:
    """Through the actuator: no move record for a, one for b; a's gate and ledger go."""
    sw = _world()
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels())
    plan = _failed(make_plan(snap, CFG), "a")
    pre = Preempter(CFG)
    (p,) = pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    assert sorted(p.moves) == ["b"]
    assert sorted(read_records(sw.swarm_labels(), P)) == ["id-b"]
    n = {x.id: x for x in sw.nodes()}["n-4090"]
    assert assign_key(P, "a") not in n.labels and gate_key(P, "a") not in n.labels


def test_a_failed_service_is_still_a_victim() -> None:
    """Its planning fault gives it no immunity: the fewest victims, as without it."""
    sw = _world()
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels())
    plan = _failed(_failed(make_plan(snap, CFG), "a"), "b")
    (p,) = choose_preemptions(plan, snap.nodes, snap.services, snap.tasks, FACTS,
                              prefix=P, preemptible_below=CFG.preemption.preemptible_below)
    assert sorted(v.service for v in p.victims) == ["a", "b"] and p.moves == {}
