"""One rule for "a move in flight" (``rebalance.record.move_of`` / ``moving``): only the
daemon's own record on the swarm object says so, as the mover has always judged. A
``swarmgpu.state.move`` label with no record behind it (a stack's ``deploy.labels``)
gives no immunity anywhere: its service is preempted, evacuated from a failed GPU and
re-placed like any other; with a genuine record the same service is left to its move.

Faked only at swarmgpu's own boundary: the recording SwarmClient of
tests/test_forged_state.py for daemon cycles.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from support.forged import DGX_F, R4090_F, RecordingSwarm, closed_port, sw_node, sw_svc
from support.health import F2, mark, setup
from support.health import plan as health_plan

from swarmgpu.core.config import AgentsConfig, Config, PreemptionConfig, SyncConfig
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.agentbook import AgentRecord
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import MOVE_STATE, Holding, assign_key, devices_key, gate_key
from swarmgpu.manager.rebalance.moves import Trigger
from swarmgpu.manager.rebalance.record import MoveState, move_of, moving, record_key
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
R_UUIDS = tuple(g.uuid for g in R4090_F.gpus)


def _state(service: str, sid: str, move_id: str = "m0000000001") -> MoveState:
    """A move as the mover records it (``MoveState.start``)."""
    return MoveState(id=move_id, service=service, source="n-4090", source_host="gpu-node-2",
                     source_uuids=(R_UUIDS[0],), source_milli=(1000,), target="n-dgx",
                     target_host="gpu-node-1", target_uuids=(DGX_F.gpus[1].uuid,),
                     target_milli=(1000,), surge=True, replicas=1, max_replicas=0,
                     started_at=1000.0, trigger="hotspot", reason="r", service_id=sid)


def _with_label(s: SwarmService, st: MoveState) -> SwarmService:
    return replace(s, labels={**s.labels, P + MOVE_STATE: st.to_json()})


def test_only_the_daemons_record_makes_a_move_in_flight() -> None:
    st = _state("a", "id-a")
    a = _with_label(sw_svc("a", {f"{P}gpus": "1"}), st)
    genuine = {record_key(P, "id-a"): st.to_json()}
    assert moving([a], genuine, P) == {"a"}
    assert move_of(a, {"id-a": st}, P) == st
    assert moving([a], {}, P) == frozenset()  # the label alone
    assert moving([sw_svc("a", {f"{P}gpus": "1"})], genuine, P) == frozenset()  # record alone
    # A record keyed by another service's id, naming another service, or another move id.
    assert moving([a], {record_key(P, "id-b"): st.to_json()}, P) == frozenset()
    assert moving([a], {record_key(P, "id-a"): replace(st, service="b").to_json()}, P) == \
        frozenset()
    assert moving([a], {record_key(P, "id-a"): replace(st, id="other").to_json()}, P) == \
        frozenset()
    assert moving([a], {record_key(P, "id-a"): replace(st, service_id="id-b").to_json()},
                  P) == frozenset()
    # A copied genuine label on another service: its record names the first one.
    b = _with_label(sw_svc("b", {f"{P}gpus": "1"}), st)
    assert moving([a, b], genuine, P) == {"a"}
    # A record that cannot be read: its move may be under way, nodes unknown.
    bad = moving([a], {record_key(P, "id-a"): "{not json"}, P)
    assert bad == {"a"} and bad.nodes == {} and "move-record-unreadable" in bad.unread["a"]


# --- preempted ----------------------------------------------------------------------------


def _preempt_cluster(batch_extra: dict[str, str]) -> RecordingSwarm:
    """batch (priority 0) holds all 8 RTX 4090s; high (priority 100) wants 2 of them."""
    held = Holding("batch", "n-4090", R_UUIDS, tuple(1000 for _ in R_UUIDS))
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", {assign_key(P, "batch"): held.label_value(),
                                            gate_key(P, "batch"): "true"})]
    batch = sw_svc("batch", {f"{P}gpus": "8", devices_key(P, "n-4090"): ",".join(R_UUIDS),
                           **batch_extra})
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*",
                         f"{P}priority": "100"})
    tasks = [SwarmTask("t-batch", batch.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ())]
    return RecordingSwarm(nodes, [batch, high], tasks)


def _daemon(sw: RecordingSwarm, tmp: Path) -> Daemon:
    from swarmgpu.manager.cycle.wiring import daemon_steps

    port = closed_port()
    cfg = Config(state_dir=str(tmp), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(port=port, timeout_s=0.5, identity="none"),
                 preemption=PreemptionConfig(dry_run=False))
    d = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]
    d.book.records["n-dgx"] = AgentRecord("gpu-node-1", last_ok=time.time(), facts=DGX_F)
    d.book.records["n-4090"] = AgentRecord("gpu-node-2", last_ok=time.time(), facts=R4090_F)
    d.use(daemon_steps(d))
    return d


def test_a_forged_move_label_is_preempted_like_any_other(tmp_path: Path) -> None:
    forged = _state("batch", "id-batch", "forged00001").to_json()
    sw = _preempt_cluster({P + MOVE_STATE: forged})
    d = _daemon(sw, tmp_path)
    d.cycle()
    node = sw.node("n-4090").labels
    assert gate_key(P, "batch") not in node and assign_key(P, "batch") not in node
    assert f"{P}state.preempted" in sw.service("id-batch").labels
    by = {sp.name: sp for sp in d.last_session.placement.services}
    assert by["batch"].state != "Rebalancing"


def test_a_genuine_move_in_flight_is_no_victim(tmp_path: Path) -> None:
    """The same service with the daemon's record behind its label: left to its move
    (placement keeps its holdings, preemption passes it by)."""
    st = _state("batch", "id-batch")
    sw = _preempt_cluster({P + MOVE_STATE: st.to_json()})
    sw._swarm_labels[record_key(P, "id-batch")] = st.to_json()
    nodes, services, tasks = sw.nodes(), sw.services(), sw.tasks()
    snap = Snapshot(nodes, services, tasks, {}, swarm_labels=sw.swarm_labels())
    cfg = Config(preemption=PreemptionConfig(dry_run=False))
    plan = make_plan(snap, cfg)
    by = {sp.name: sp for sp in plan.services}
    assert by["batch"].state == "Rebalancing" and by["high"].status == "pending"
    facts = {"n-dgx": DGX_F, "n-4090": R4090_F}
    pre = Preempter(cfg)
    assert pre.cycle(sw, snap, plan, facts, now=5000.0) == []  # type: ignore[arg-type]
    # The forged twin (no record, in the snapshot nor in Swarm) is chosen by the same code.
    del sw._swarm_labels[record_key(P, "id-batch")]
    snap2 = replace(snap, swarm_labels={})
    plan2 = make_plan(snap2, cfg)
    assert {sp.name: sp.state for sp in plan2.services}["batch"] != "Rebalancing"
    (p,) = Preempter(replace(cfg, dry_run=True)).cycle(
        sw, snap2, plan2, facts, now=5000.0)  # type: ignore[arg-type]
    assert [v.service for v in p.victims] == ["batch"]


# --- evacuated from a failed GPU ------------------------------------------------------------


def test_a_forged_move_label_is_evacuated_from_a_failed_gpu() -> None:
    nodes, svcs, tasks = setup({"a": [F2.gpus[0].uuid]})
    st = _state("a", "id-a")
    svcs = [_with_label(s, st) if s.name == "a" else s for s in svcs]
    failed = mark(F2, failed=[0])
    # No record: the holder of the failed GPU is moved off it (the health policy).
    p = health_plan(nodes, svcs, tasks, failed, moving=moving(svcs, {}, P))
    assert [(m.service, m.trigger) for m in p.moves] == [("a", Trigger.HEALTH)]
    # Its record in flight: the move under way is left to finish.
    genuine = moving(svcs, {record_key(P, "id-a"): st.to_json()}, P)
    p = health_plan(nodes, svcs, tasks, failed, moving=genuine)
    assert not p.moves and any("a move is under way" in n for n in p.notes)


def test_a_failed_gpus_holder_whose_move_record_cannot_be_read_is_said_once() -> None:
    # ``moving`` holds it too now: the plan says the record and its fix, not "a move is
    # under way" beside it.
    nodes, svcs, tasks = setup({"a": [F2.gpus[0].uuid]})
    labels = {record_key(P, "id-a"): "{not json"}
    bad = moving(svcs, labels, P)
    p = health_plan(nodes, svcs, tasks, mark(F2, failed=[0]), moving=bad,
                    unreadable=bad.unread)
    assert not p.moves
    assert [n for n in p.notes if n.startswith("a ")] == [
        f"a is not moved: {bad.unread['a']}"], p.notes


# --- re-placed ----------------------------------------------------------------------------


def _drained_holder(labels: dict[str, str]) -> Snapshot:
    """svc holds RTX 4090 GPU 0, but n-4090 is drained: Swarm cannot run its task there
    (waiting, on no node); the DGX has room."""
    held = Holding("svc", "n-4090", R_UUIDS[:1], (1000,))
    n4090 = replace(sw_node("n-4090", "gpu-node-2", {assign_key(P, "svc"): held.label_value(),
                                                   gate_key(P, "svc"): "true"}),
                    availability="drain")
    nodes: list[SwarmNode] = [sw_node("n-mgr", "manager", role="manager"),
                              sw_node("n-dgx", "gpu-node-1"), n4090]
    s = sw_svc("svc", {f"{P}gpus": "1", devices_key(P, "n-4090"): R_UUIDS[0], **labels})
    tasks = [SwarmTask("t-svc", s.id, "", 1, "pending", "running", ())]
    facts = {nid: FactsResult(nid, host, "", f, None, 1.0)
             for nid, host, f in (("n-dgx", "gpu-node-1", DGX_F),
                                  ("n-4090", "gpu-node-2", R4090_F))}
    return Snapshot(nodes, [s], tasks, facts)


def test_a_forged_move_label_is_re_placed_like_any_other() -> None:
    st = _state("svc", "id-svc")
    snap = _drained_holder({P + MOVE_STATE: st.to_json()})
    (sp,) = make_plan(snap, Config()).services
    assert sp.state != "Rebalancing", sp.warnings
    assert [p.hostname for p in sp.placements] == ["gpu-node-1"]
    assert sp.replaced.startswith("Swarm cannot run its task where its GPUs are")
    # The same service with its record: a move owns it, placement waits for it.
    genuine = replace(snap, swarm_labels={record_key(P, "id-svc"): st.to_json()})
    (sp,) = make_plan(genuine, Config()).services
    assert sp.state == "Rebalancing" and [p.hostname for p in sp.placements] == ["gpu-node-2"]
    assert not sp.needs_service_write


def test_a_drained_holder_whose_move_record_cannot_be_read_is_left_as_it_is() -> None:
    # Its move may be under way (the record turned unreadable mid-move): before, placement
    # re-placed it on the DGX under the move, whose mover refuses it all the same.
    st = _state("svc", "id-svc")
    key = record_key(P, "id-svc")
    snap = _drained_holder({P + MOVE_STATE: st.to_json()})
    snap = replace(snap, swarm_labels={key: st.to_json().replace('"r"', "7")})
    assert moving(snap.services, snap.swarm_labels, P) == {"svc"}
    (sp,) = make_plan(snap, Config()).services
    assert sp.state == "Rebalancing" and [p.hostname for p in sp.placements] == ["gpu-node-2"]
    assert not sp.needs_service_write
    assert any(key in w and "swarmgpu audit: move-record-unreadable" in w
               for w in sp.warnings), sp.warnings


def test_a_service_whose_move_record_cannot_be_read_is_no_victim(tmp_path: Path) -> None:
    # Before: chosen as a victim; the mover refused to move it (its record), so it was
    # stopped under a move that may be under way.
    sw = _preempt_cluster({})
    sw._swarm_labels[record_key(P, "id-batch")] = "{not json"
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {},
                    swarm_labels=sw.swarm_labels())
    cfg = Config(preemption=PreemptionConfig(dry_run=False))
    plan = make_plan(snap, cfg)
    by = {sp.name: sp for sp in plan.services}
    assert by["batch"].state == "Rebalancing" and by["high"].status == "pending"
    facts = {"n-dgx": DGX_F, "n-4090": R4090_F}
    assert Preempter(replace(cfg, dry_run=True)).cycle(
        sw, snap, plan, facts, now=5000.0) == []  # type: ignore[arg-type]


def test_a_move_whose_record_turns_unreadable_is_said_on_the_daemons_next_plan() -> None:
    # The daemon's planner keeps a settled plan while nothing it reads changes: the
    # record is on the swarm object, not the service.
    from swarmgpu.manager.cycle.placement import new_planner

    st = _state("svc", "id-svc")
    key = record_key(P, "id-svc")
    snap = _drained_holder({P + MOVE_STATE: st.to_json()})
    planner = new_planner(Config())
    genuine = replace(snap, swarm_labels={key: st.to_json()})
    (sp,) = make_plan(genuine, Config(), planner=planner).services
    assert sp.state == "Rebalancing" and not any(key in w for w in sp.warnings)
    garbled = replace(snap, swarm_labels={key: "{not json"})
    (sp,) = make_plan(garbled, Config(), planner=planner).services
    assert sp.state == "Rebalancing" and any(key in w for w in sp.warnings), sp.warnings
