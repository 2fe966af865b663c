"""A preemptor waits while any of its victims' moves is in flight (``Preempter.moving``):
each victim it had moved is kept, not only the last one."""

from __future__ import annotations

from dataclasses import replace

from support.forged import DGX_F, R4090_F, RecordingSwarm, sw_node, sw_svc

from swarmgpu.core.config import Config, PreemptionConfig, RebalanceConfig
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, assign_key, devices_key, gate_key
from swarmgpu.manager.rebalance.mover import read_records
from swarmgpu.manager.rebalance.record import record_key
from swarmgpu.swarm.client import SwarmTask

P = "swarmgpu."
R = tuple(g.uuid for g in R4090_F.gpus)  # 8 RTX 4090s on n-4090
FACTS = {"n-dgx": DGX_F, "n-4090": R4090_F}


def _world() -> RecordingSwarm:
    """n-4090: a and b (priority 0, any product: movable to the DGX), c (priority 0,
    RTX 4090 only: stopped, not moved) and filler (not preemptible), 2 GPUs each; h
    (priority 100) waits for 4 RTX 4090s."""
    held = {"a": R[:2], "b": R[2:4], "c": R[4:6], "filler": R[6:]}
    extra = {"filler": {f"{P}priority": "50", f"{P}preemptible": "false"},
             "c": {f"{P}gpu-product": "*RTX 4090*"}}
    labels: dict[str, str] = {}
    for name, uuids in held.items():
        h = Holding(name, "n-4090", uuids, (1000, 1000))
        labels |= {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", labels)]
    svcs = [sw_svc(n, {f"{P}gpus": "2", devices_key(P, "n-4090"): ",".join(u),
                       **extra.get(n, {})}) for n, u in held.items()]
    svcs.append(sw_svc("h", {f"{P}gpus": "4", f"{P}gpu-product": "*RTX 4090*",
                             f"{P}priority": "100"}))
    tasks = [SwarmTask(f"t-{s.name}", s.id, "" if s.name == "h" else "n-4090", 1,
                       "pending" if s.name == "h" else "running", "running", ()) for s in svcs]
    return RecordingSwarm(nodes, svcs, tasks)


def test_a_preemptor_waits_while_any_of_its_victims_moves_is_in_flight() -> None:
    """h moved a and b to the DGX. b's move ended, a's is still in flight past
    ``move_timeout_s`` and ``settle_s`` (its hold lapsed; the mover rolls it back, or it
    ends, from its record). Before, only b was kept: h, no longer waiting, stopped c,
    though a's GPUs were about to free for it. Now h waits for a's move too."""
    sw = _world()
    cfg = Config(rebalance=RebalanceConfig(dry_run=False, max_moves_per_cycle=4,
                                           max_moves_per_node=4),
                 preemption=PreemptionConfig(dry_run=False, victim_cooldown_s=100))
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels())
    pre, t = Preempter(cfg), 5000.0
    (p,) = pre.cycle(sw, snap, make_plan(snap, cfg), FACTS, now=t,  # type: ignore[arg-type]
                     mono=t)
    assert sorted(p.moves) == ["a", "b"]
    # b's move ended: it runs on the DGX alone, its record gone; a's is in flight
    st = read_records(sw.swarm_labels(), P)["id-b"]
    labels = {k: v for k, v in sw.swarm_labels().items() if k != record_key(P, "id-b")}
    b = sw_svc("b", {f"{P}gpus": "2", devices_key(P, "n-dgx"): ",".join(st.target_uuids)})
    hb = Holding("b", "n-dgx", st.target_uuids, st.target_milli)
    nodes = {n.id: n for n in sw.nodes()}
    dgx, r = nodes["n-dgx"], nodes["n-4090"]
    nodes["n-dgx"] = replace(dgx, labels={**dgx.labels, assign_key(P, "b"): hb.label_value(),
                                          gate_key(P, "b"): "true"})
    nodes["n-4090"] = replace(r, labels={k: v for k, v in r.labels.items()
                                         if k not in (assign_key(P, "b"), gate_key(P, "b"))})
    svcs = [b if s.name == "b" else s for s in sw.services()]
    tasks = [SwarmTask("t-b", b.id, "n-dgx", 1, "running", "running", ())
             if x.service_id == b.id else x for x in sw.tasks()]
    snap = Snapshot(list(nodes.values()), svcs, tasks, {}, swarm_labels=labels)
    now = t + 200  # past move_timeout_s (120) and settle_s (30): the hold has lapsed
    plan = make_plan(snap, cfg)
    assert pre.nominated.current(now) == ()
    assert [c.describe() for c in pre.decide(snap, plan, FACTS, None, now,
                                             records=labels, mono=now)] == []  # (it stopped c)
