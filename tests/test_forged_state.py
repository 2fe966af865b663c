"""State the daemon trusts is state it wrote: a forged move label moves nothing.

A service's own ``deploy.labels`` are written by whoever deploys it. Here one carries
``swarmgpu.state.move`` naming another service (``victim``), direction "back": before
the move record, the mover advanced it, closed the victim's gate and ledger on its node
and wrote a ledger entry elsewhere naming a GPU a third service holds, in dry-run too.

Faked only at swarmgpu's own boundary: ``RecordingSwarm`` answers the SwarmClient
methods the daemon calls from in-memory Swarm objects and records every write.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from typing import Any

import pytest
from loguru import logger
from support.forged import (
    DGX_F,
    R4090_F,
    T_UUID,
    V_UUID,
    P,
    RecordingSwarm,
    closed_port,
    sw_svc,
    victim_cluster,
    victim_move,
)

from swarmgpu.core.config import (
    AgentsConfig,
    Config,
    PlacementConfig,
    RebalanceConfig,
    SyncConfig,
)
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.nodes.agentbook import AgentRecord
from swarmgpu.manager.placement import (
    MAX_STATE,
    MOVE_STATE,
    assign_key,
    devices_key,
    gate_key,
)
from swarmgpu.manager.rebalance.context import MOVED_AT
from swarmgpu.manager.rebalance.mover import (
    Mover,
    MoveState,
    forged_check,
    read_records,
    record_key,
    verify,
)
from swarmgpu.manager.rebalance.moves import Outcome, moves_to_dicts
from swarmgpu.swarm.client import (
    SwarmTask,
)


def _forged_move(**over: Any) -> MoveState:
    """A move record as the mover writes one, made up by a stack author: "back" means
    "open the source, close the target": the target is the victim's node."""
    st = MoveState(id="forged000001", service="victim", source="n-4090",
                   source_host="gpu-node-2", source_uuids=(T_UUID,), source_milli=(1000,),
                   target="n-dgx", target_host="gpu-node-1", target_uuids=(V_UUID,),
                   target_milli=(1000,), surge=False, replicas=1, max_replicas=0,
                   started_at=0.0, trigger="hotspot", reason="forged", direction="back")
    return replace(st, **over)


RB = RebalanceConfig(dry_run=False, move_timeout_s=120.0)


def _victim_state(sw: RecordingSwarm) -> tuple[dict[str, str], dict[str, str], Any, list[str]]:
    """What the victim has: its labels on each node, its spec, its running task ids."""
    mine = {k: v for n in sw.nodes() for k, v in n.labels.items()
            if k in (assign_key(P, "victim"), gate_key(P, "victim"))}
    third = {k: v for n in sw.nodes() for k, v in n.labels.items()
             if k in (assign_key(P, "third"), gate_key(P, "third"))}
    return mine, third, sw.service("id-victim").spec, [t.id for t in sw.tasks()
                                                       if t.service_id == "id-victim"]


# --- the mover alone --------------------------------------------------------------------


@pytest.mark.parametrize("dry_run", [True, False])
def test_forged_move_label_naming_another_service_moves_nothing(dry_run: bool) -> None:
    """The reproduction of finding 1: Mover(dry_run=...).run_cycle([], nodes, [attacker], [])."""
    forged = _forged_move()
    sw = victim_cluster({f"{P}{MOVE_STATE}": forged.to_json()})
    before = _victim_state(sw)
    attacker = sw.service("id-attacker")
    m = Mover(sw, RB, prefix=P, dry_run=dry_run)  # type: ignore[arg-type]
    for _ in range(3):
        m.run_cycle([], sw.nodes(), [attacker], [])
    assert _victim_state(sw) == before  # gate, ledger, spec and task of the victim; third's
    if dry_run:
        assert sw.calls == []
    else:
        # The only write: the forged label removed from the attacker's own spec.
        assert sw.calls == [("service", "id-attacker")]
        assert f"{P}{MOVE_STATE}" not in sw.service("id-attacker").labels
    ignored = [r for r in m.recent if r.outcome is Outcome.IGNORED]
    assert len(ignored) == 1 and ignored[0].service == "attacker"  # said once, not per cycle
    assert "naming victim" in ignored[0].detail


def test_forged_label_on_the_victim_itself_names_no_record() -> None:
    """Even a move label on the very service it names (what a re-deploy of the victim's
    own stack could carry) is only acted on with the daemon's record."""
    forged = _forged_move(direction="forward", started_at=1e12)
    sw = victim_cluster({})
    victim = sw.service("id-victim")
    sw.update_service_spec(victim.id, lambda spec: {
        **spec, "Labels": {**spec["Labels"], f"{P}{MOVE_STATE}": forged.to_json()}})
    sw.calls.clear()
    before = _victim_state(sw)[:2]
    Mover(sw, RB, prefix=P, dry_run=True).run_cycle(  # type: ignore[arg-type]
        [], sw.nodes(), sw.services(), sw.tasks())
    assert sw.calls == [] and _victim_state(sw)[:2] == before


def test_a_record_for_another_service_id_does_not_verify_a_copied_label() -> None:
    """A genuine move in flight for the victim; the attacker copies the victim's move
    label (same move id) into its own spec: the record is keyed by the victim's id and
    names the victim, so the attacker's copy stays a forgery."""
    genuine = _forged_move(id="genuine00001", direction="forward", started_at=1e12,
                           service_id="id-victim")
    sw = victim_cluster({f"{P}{MOVE_STATE}": genuine.to_json()})
    sw._swarm_labels[record_key(P, "id-victim")] = genuine.to_json()
    v = verify(sw.services(), read_records(sw.swarm_labels(), P), P)
    assert [s.name for s, _ in v.forged] == ["attacker"]
    assert "id-attacker" not in v.verified and "id-attacker" not in v.lost
    # The victim's own spec has no move label: its record is a move that lost its label.
    assert set(v.lost) == {"id-victim"}


def test_unreadable_and_huge_move_labels_are_ignored() -> None:
    for raw in ("{not json", "[" * 4000 + "]" * 4000, '{"id": 1}', "x" * 20_000,
                '{"a": 1e999}', "[]", '"text"'):
        sw = victim_cluster({f"{P}{MOVE_STATE}": raw})
        m = Mover(sw, RB, prefix=P, dry_run=True)  # type: ignore[arg-type]
        m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
        assert sw.calls == []
        assert [r.outcome for r in m.recent] == [Outcome.IGNORED]


@pytest.mark.parametrize("field,value", [
    ("source_host", ["gpu-node-1"]), ("target_host", {"toString": 1}), ("reason", 7),
    ("trigger", None), ("started_at", "soon"), ("started_at", float("inf")),
    ("source_uuids", V_UUID), ("target_milli", ["1000"]), ("surge", "no"),
    ("replicas", 1.5), ("source_milli", [1000, 1000]),
])
def test_a_record_of_the_wrong_types_is_not_read_and_never_reaches_the_map(
        field: str, value: Any) -> None:
    # A record is anyone's JSON with the manager API: one of the right shape but a list
    # for a host or a text for a time was read, and its fields went into the mover's
    # sums and, through its recent moves, into the map's document as they were.
    good = json.loads(_forged_move(direction="forward", started_at=1e12,
                                   service_id="id-victim").to_json())
    text = json.dumps({**good, field: value})
    assert MoveState.parse(json.dumps(good)) is not None
    assert MoveState.parse(text) is None
    sw = victim_cluster({})
    sw.update_service_spec("id-victim", lambda spec: {
        **spec, "Labels": {**spec["Labels"], f"{P}{MOVE_STATE}": text}})
    sw._swarm_labels[record_key(P, "id-victim")] = text
    assert read_records(sw.swarm_labels(), P) == {}
    m = Mover(sw, RB, prefix=P, dry_run=True)  # type: ignore[arg-type]
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    for rec in moves_to_dicts([], m.recent)["recent"]:
        assert isinstance(rec["at"], float) and math.isfinite(rec["at"])
        assert all(isinstance(rec[k], str) for k in ("service", "from", "to", "reason"))


def test_a_move_whose_record_turned_unreadable_still_counts_and_keeps_its_label() -> None:
    # A forward move in flight whose record can no longer be read (a field of the wrong
    # type): it may still be under way in Swarm. Before: it left the budgets (a second
    # move started with max_moves_per_cycle=1), its own move label was called forged and
    # removed, ``start`` could start the service again over the record, and audit said
    # "remove it from the stack's deploy.labels".
    from swarmgpu.manager.nodes.sync import Snapshot

    sw, now = victim_cluster({}), [1000.0]
    _start(sw, now)
    key = record_key(P, "id-victim")
    sw._swarm_labels[key] = json.dumps({**json.loads(sw._swarm_labels[key]), "reason": 7})
    label = sw.service("id-victim").labels[f"{P}{MOVE_STATE}"]
    third = replace(victim_move(), service="third", service_id="id-third",
                    source_node="n-4090", source_host="gpu-node-2", source_uuids=(T_UUID,),
                    target_node="n-dgx", target_host="gpu-node-1",
                    target_uuids=(DGX_F.gpus[1].uuid,))
    cfg = replace(RB, max_moves_per_cycle=1, max_moves_per_node=9)
    m = Mover(sw, cfg, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    m.run_cycle([third], sw.nodes(), sw.services(), sw.tasks())
    assert sw.service("id-victim").labels[f"{P}{MOVE_STATE}"] == label
    assert f"{P}{MOVE_STATE}" not in sw.service("id-third").labels
    assert record_key(P, "id-third") not in sw.swarm_labels()
    got = m.start(victim_move(), sw.service("id-victim"))
    assert not got.ok and "move-record-unreadable" in m.recent[-1].detail
    assert json.loads(sw._swarm_labels[key])["reason"] == 7  # not overwritten
    found = forged_check(P)(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {},
                                     swarm_labels=sw.swarm_labels()))
    assert [f.kind for f in found] == ["move-record-unreadable"], found


def test_records_of_a_gone_service_are_dropped_and_of_a_renamed_one_left_alone() -> None:
    sw = victim_cluster({})
    gone = _forged_move(id="gone00000001", service="removed", service_id="id-removed")
    other = _forged_move(id="other0000001", service="not-third", service_id="id-third")
    sw._swarm_labels.update({record_key(P, "id-removed"): gone.to_json(),
                             record_key(P, "id-third"): other.to_json()})
    before = _victim_state(sw)
    v = verify(sw.services(), read_records(sw.swarm_labels(), P), P)
    assert set(v.gone) == {"id-removed"} and [sid for sid, _ in v.mismatched] == ["id-third"]
    Mover(sw, RB, prefix=P, dry_run=False).run_cycle(  # type: ignore[arg-type]
        [], sw.nodes(), sw.services(), sw.tasks())
    # Only the swarm object changed: the gone service's record went, nothing else.
    assert sw.calls == [("swarm", "swarm")]
    assert set(read_records(sw.swarm_labels(), P)) == {"id-third"}
    assert _victim_state(sw) == before


# --- a genuine move still works, across restarts ---------------------------------------


def _start(sw: RecordingSwarm, now: list[float]) -> Mover:
    m = Mover(sw, RB, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in m.recent] == [Outcome.STARTED]
    return m


def test_genuine_move_finishes_after_a_restart_and_its_record_goes() -> None:
    sw, now = victim_cluster({}), [1000.0]
    _start(sw, now)
    (sid, rec), = read_records(sw.swarm_labels(), P).items()
    assert sid == "id-victim" and rec.service == "victim" and rec.service_id == "id-victim"
    label = MoveState.parse(sw.service("id-victim").labels[f"{P}{MOVE_STATE}"])
    assert label is not None and label.id == rec.id
    target = R4090_F.gpus[1].uuid
    assert sw.node("n-4090").labels[gate_key(P, "victim")] == "true"
    # A new daemon (a restart, or a new leader): only what Swarm holds.
    sw.run_task(SwarmTask("t-victim-2", "id-victim", "n-4090", 2, "running", "running", ()))
    m2 = Mover(sw, RB, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    for _ in range(3):
        m2.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
        sw.stop_tasks("id-victim", "n-dgx")  # the enforcer stops the task on the closed node
    assert [r.outcome for r in m2.recent] == [Outcome.DONE]
    v = sw.service("id-victim")
    assert f"{P}{MOVE_STATE}" not in v.labels and v.labels[f"{P}{MOVED_AT}"] == "1000"
    assert v.labels[devices_key(P, "n-4090")] == target
    assert devices_key(P, "n-dgx") not in v.labels and v.replicas == 1
    assert gate_key(P, "victim") not in sw.node("n-dgx").labels
    assert read_records(sw.swarm_labels(), P) == {}
    # The third service was never touched.
    assert sw.node("n-4090").labels[assign_key(P, "third")] == T_UUID


def test_an_owners_scale_during_a_move_is_kept_when_the_surge_ends() -> None:
    """make-before-break raised replicas 1 -> 2 and set MaxReplicas 1; the owner scaled
    to 5 while the move ran (`docker service scale`). The move's end takes back only
    what the surge set: the owner's 5 stays; MaxReplicas, still the surge's, goes."""
    sw, now = victim_cluster({}), [1000.0]
    m = _start(sw, now)
    spec = sw.service("id-victim").spec
    assert spec["Mode"]["Replicated"]["Replicas"] == 2
    assert spec["TaskTemplate"]["Placement"]["MaxReplicas"] == 1
    sw.update_service_spec("id-victim", lambda cur: {
        **cur, "Mode": {"Replicated": {"Replicas": 5}}})
    sw.run_task(SwarmTask("t-victim-2", "id-victim", "n-4090", 2, "running", "running", ()))
    for _ in range(3):
        m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
        sw.stop_tasks("id-victim", "n-dgx")
    assert [r.outcome for r in m.recent][-1] == Outcome.DONE
    spec = sw.service("id-victim").spec
    assert spec["Mode"]["Replicated"]["Replicas"] == 5
    assert "MaxReplicas" not in spec["TaskTemplate"]["Placement"]


def test_genuine_move_rolls_back_after_its_timeout_under_a_new_leader() -> None:
    sw, now = victim_cluster({}), [1000.0]
    _start(sw, now)
    now[0] += RB.move_timeout_s + 1  # the new task never ran
    m2 = Mover(sw, RB, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    m2.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in m2.recent] == [Outcome.ROLLED_BACK]
    assert sw.node("n-dgx").labels[gate_key(P, "victim")] == "true"
    assert gate_key(P, "victim") not in sw.node("n-4090").labels
    v = sw.service("id-victim")
    assert f"{P}{MOVE_STATE}" not in v.labels and devices_key(P, "n-4090") not in v.labels
    assert read_records(sw.swarm_labels(), P) == {}


def test_genuine_move_whose_label_a_redeploy_removed_is_rolled_back_from_its_record() -> None:
    sw, now = victim_cluster({}), [1000.0]
    _start(sw, now)
    # `docker stack deploy` again: the spec's labels are the stack file's.
    sw.update_service_spec("id-victim", lambda spec: {
        **spec, "Labels": {f"{P}gpus": "1", devices_key(P, "n-dgx"): V_UUID}})
    m2 = Mover(sw, RB, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    m2.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in m2.recent] == [Outcome.ROLLED_BACK]
    assert sw.node("n-dgx").labels[gate_key(P, "victim")] == "true"
    assert gate_key(P, "victim") not in sw.node("n-4090").labels
    assert read_records(sw.swarm_labels(), P) == {}


def test_genuine_move_past_its_source_whose_label_went_is_finished_from_its_record() -> None:
    sw, now = victim_cluster({}), [1000.0]
    m = _start(sw, now)
    sw.run_task(SwarmTask("t-victim-2", "id-victim", "n-4090", 2, "running", "running", ()))
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())  # the source closes
    assert gate_key(P, "victim") not in sw.node("n-dgx").labels
    sw.stop_tasks("id-victim", "n-dgx")
    sw.update_service_spec("id-victim", lambda spec: {
        **spec, "Labels": {k: v for k, v in spec["Labels"].items()
                           if k != f"{P}{MOVE_STATE}"}})
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert m.recent[-1].outcome is Outcome.DONE
    assert sw.node("n-4090").labels[gate_key(P, "victim")] == "true"
    assert gate_key(P, "victim") not in sw.node("n-dgx").labels
    assert read_records(sw.swarm_labels(), P) == {}
    assert sw.service("id-victim").replicas == 1


def test_the_actuators_gate_refuses_a_mover_write_in_dry_run() -> None:
    """The backstop: a write that reaches the gate in dry-run is refused, not made."""
    sw = victim_cluster({})
    m = Mover(sw, RB, prefix=P, dry_run=True)  # type: ignore[arg-type]
    m._close("n-dgx", "victim")
    assert m._put_record("id-victim", _forged_move()) is False
    assert sw.calls == [] and m.writes.refused == 2


def test_genuine_move_in_dry_run_is_left_as_it_is() -> None:
    """rebalance.dry_run turned on while a move is in flight: no write, the move waits."""
    sw, now = victim_cluster({}), [1000.0]
    _start(sw, now)
    sw.calls.clear()
    now[0] += RB.move_timeout_s + 1
    m2 = Mover(sw, RB, prefix=P, dry_run=True, clock=lambda: now[0])  # type: ignore[arg-type]
    m2.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    assert sw.calls == []
    assert set(read_records(sw.swarm_labels(), P)) == {"id-victim"}


def test_a_move_left_in_flight_by_a_dry_run_mover_is_said_once_while_it_is() -> None:
    """Its "left as it is" is said once while the move is in flight, again once its
    record was gone for a cycle and came back."""
    sw, now = victim_cluster({}), [1000.0]
    _start(sw, now)
    key = record_key(P, "id-victim")
    record = sw._swarm_labels[key]
    m2 = Mover(sw, RB, prefix=P, dry_run=True, clock=lambda: now[0])  # type: ignore[arg-type]
    said: list[int] = []
    at = [0]
    sink = logger.add(lambda m: said.append(at[0]), level="WARNING",
                      filter=lambda r: "in flight is left as it is" in r["message"])
    try:
        for at[0], there in enumerate((True, True, False, True, True)):
            if there:
                sw._swarm_labels[key] = record
            else:
                del sw._swarm_labels[key]
            m2.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    finally:
        logger.remove(sink)
    assert said == [0, 3]


# --- the full daemon -------------------------------------------------------------------


def _daemon(sw: RecordingSwarm, *, dry_run: bool, rebalance_dry_run: bool, tmp: str
            ) -> Daemon:
    """The daemon as `swarmgpu run` builds it (every step attached), over the recording
    swarm; agents do not answer (a closed loopback port), their last facts stand in."""
    from swarmgpu.manager.cycle.wiring import daemon_steps

    port = closed_port()
    cfg = Config(dry_run=dry_run, state_dir=tmp,
                 sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(port=port, timeout_s=0.5, identity="none"),
                 placement=PlacementConfig(overshare="restart"),
                 rebalance=RebalanceConfig(dry_run=rebalance_dry_run, move_timeout_s=0.0,
                                           metrics_url_template=f"http://{{addr}}:{port}/m",
                                           scrape_timeout_s=0.5))
    d = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]
    d.book.records["n-dgx"] = AgentRecord("gpu-node-1", last_ok=time.time(), facts=DGX_F)
    d.book.records["n-4090"] = AgentRecord("gpu-node-2", last_ok=time.time(), facts=R4090_F)
    d.use(daemon_steps(d))
    return d


HOSTILE = {
    f"{P}gpus": "1",
    f"{P}{MOVE_STATE}": _forged_move().to_json(),
    f"{P}{MOVED_AT}": "99999999999",
    f"{P}{MAX_STATE}": "1",
    devices_key(P, "n-dgx"): V_UUID,  # the victim's GPU, named in the attacker's spec
    devices_key(P, "n-4090"): T_UUID,
    f"{P}state.workload": "{}",
    f"{P}state.devices-gen": "7",
}


@pytest.mark.parametrize("global_dry", [True, False])
def test_daemon_cycles_in_dry_run_with_hostile_labels_write_nothing(global_dry: bool,
                                                                     tmp_path: Any) -> None:
    """Full cycles (label sync, placement, rebalancing, observe, over-share restarts) with
    forged state.move / moved-at / max-replicas and forged device labels: zero writes,
    with the global dry_run, and with rebalance.dry_run (the default) for the mover."""
    sw = victim_cluster(HOSTILE)
    # A second attacker, gated like a GPU service, with a forged move of its own.
    att2 = sw_svc("attacker2", {**HOSTILE, f"{P}{MOVE_STATE}": _forged_move(
        direction="forward").to_json()})
    sw._services[att2.id] = att2
    d = _daemon(sw, dry_run=global_dry, rebalance_dry_run=True, tmp=str(tmp_path))
    before = _victim_state(sw)
    errors: list[str] = []
    sink = logger.add(lambda m: errors.append(str(m)), level="ERROR")
    try:
        for _ in range(3):
            d.cycle()
    finally:
        logger.remove(sink)
    # Every step checked dry-run itself: the actuator's gate (Writes) never had to refuse.
    assert not [e for e in errors if "dry-run refused" in e], errors
    if global_dry:
        assert sw.calls == []
    else:
        # Placement's learned workload model (its own swarm label), and placement of the
        # attackers like any GPU service: a move label with no record gives no move in
        # flight, so it neither freezes them nor protects them (record.move_of). The
        # mover, in its dry-run, neither repairs the forged labels nor records a move;
        # nothing is written to the victim or the third service.
        assert set(sw.calls) <= {("swarm", "swarm"), ("service", "id-attacker"),
                                 ("service", "id-attacker2"), ("node", "n-dgx"),
                                 ("node", "n-4090")}, sw.calls
        assert read_records(sw.swarm_labels(), P) == {}
        assert f"{P}{MOVE_STATE}" in sw.service("id-attacker").labels
    assert _victim_state(sw) == before
    assert d.last_report is not None


def test_daemon_cycles_with_writes_on_never_touch_the_victim(tmp_path: Any) -> None:
    """dry_run off everywhere: the forged labels are removed from their carriers' own
    specs; the victim's and the third service's gates, ledger, spec and task stay."""
    sw = victim_cluster(HOSTILE)
    d = _daemon(sw, dry_run=False, rebalance_dry_run=False, tmp=str(tmp_path))
    before = _victim_state(sw)
    for _ in range(4):
        d.cycle()
    assert _victim_state(sw) == before
    assert ("service", "id-victim") not in sw.calls and ("service", "id-third") not in sw.calls
    assert f"{P}{MOVE_STATE}" not in sw.service("id-attacker").labels
    assert read_records(sw.swarm_labels(), P) == {}


def test_audit_names_a_forged_move_label_and_not_a_genuine_one() -> None:
    from swarmgpu.manager.nodes.sync import Snapshot

    sw, now = victim_cluster({}), [1000.0]
    _start(sw, now)  # a genuine move of the victim, recorded by the daemon
    forger = replace(sw.service("id-attacker"),
                     labels={f"{P}{MOVE_STATE}": _forged_move().to_json()})
    services = [forger if s.id == forger.id else s for s in sw.services()]
    found = forged_check(P)(Snapshot(sw.nodes(), services, sw.tasks(), {},
                                     swarm_labels=sw.swarm_labels()))
    assert [(f.kind, f.subject, f.advisory) for f in found] == [
        ("forged-move-label", "attacker", False)]
    assert "naming victim" in found[0].message and len(found[0].message) < 400


def test_audit_judges_move_labels_by_the_snapshots_own_record_reads() -> None:
    """The snapshot reads the move records just before and just after the services, so
    a genuine move's label always has its record there (``take_snapshot``). Before: the
    CLI read the records a third time, after: a move that ended in between had lost
    its record, and its genuine label was named forged (needs action, exit 1)."""
    from swarmgpu.manager.nodes.sync import Snapshot

    sw, now = victim_cluster({}), [1000.0]
    _start(sw, now)  # a genuine move of the victim, recorded by the daemon
    seen = sw.swarm_labels()  # what the snapshot's reads saw
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=seen)
    assert read_records(seen, P) and forged_check(P)(snap) == []


def test_audit_names_the_move_records_the_daemon_leaves_for_a_human() -> None:
    """A record whose service id now carries another name, and one that cannot be read,
    are left alone by the daemon with "remove it by hand" in its log. Before: audit
    said nothing of either (exit 0)."""
    from swarmgpu.manager.nodes.sync import Snapshot
    from swarmgpu.manager.rebalance.mover import record_key

    sw, now = victim_cluster({}), [1000.0]
    _start(sw, now)
    labels = dict(sw.swarm_labels())
    (key,) = [k for k in labels if k.startswith(record_key(P, ""))]
    renamed = [replace(s, name="renamed") if s.name == "victim" else s
               for s in sw.services()]
    labels[record_key(P, "id-gone-garbled")] = "{not json"
    found = forged_check(P)(Snapshot(sw.nodes(), renamed, sw.tasks(), {},
                                     swarm_labels=labels))
    got = sorted((f.kind, f.key) for f in found if f.kind != "forged-move-label")
    assert got == [("move-record-mismatch", key),
                   ("move-record-unreadable", record_key(P, "id-gone-garbled"))], found
    assert all(not f.advisory and "remove it by hand" in f.message for f in found
               if f.kind.startswith("move-record"))


def test_an_unreadable_move_record_is_logged_once_while_it_lasts(tmp_path: Any) -> None:
    # Before: every read of the records (the movers', the over-share watch's, each move
    # started) logged it as an error, several times a cycle, every cycle.
    sw = victim_cluster({})
    key = record_key(P, "id-victim")
    sw._swarm_labels[key] = "{not json"
    d = _daemon(sw, dry_run=False, rebalance_dry_run=False, tmp=str(tmp_path))
    errors: list[str] = []
    sink = logger.add(lambda m: errors.append(str(m.record["message"])), level="ERROR")
    try:
        for _ in range(3):
            d.cycle()
        said = [e for e in errors if key in e]
        assert len(said) == 1 and "move-record-unreadable" in said[0], errors
        del sw._swarm_labels[key]  # removed by hand, then garbled again: said again
        d.cycle()
        sw._swarm_labels[key] = "{not json either"
        d.cycle()
    finally:
        logger.remove(sink)
    assert len([e for e in errors if key in e]) == 2, errors


def test_a_forged_move_label_is_said_once_and_remembered_by_id_and_hash(
        tmp_path: Any) -> None:
    """A tenant's 1 MB move label, left in place by the mover's dry-run: said once over
    two cycles, and what the movers keep to know it was said is its service id and a
    hash of the value. Before: the whole value, a fresh 1 MB copy per cycle."""
    sw = victim_cluster({f"{P}gpus": "1", f"{P}{MOVE_STATE}": "x" * 1_000_000})
    d = _daemon(sw, dry_run=False, rebalance_dry_run=True, tmp=str(tmp_path))
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="WARNING")
    try:
        d.cycle()
        d.cycle()
    finally:
        logger.remove(sink)
    said = [x for x in lines if "a move label the daemon did not write" in x]
    assert len(said) == 1 and "attacker" in said[0], lines
    movers = [m for s in d.pipeline.steps for m in (getattr(s, "mover", None),
                                                   getattr(s, "health_mover", None)) if m]
    keys = [k for m in movers for k in m._said]
    assert keys and all(len(str(k)) < 200 for k in keys), [str(k)[:80] for k in keys]


@pytest.mark.parametrize("mode", [{"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 1}},
                                  {"GlobalJob": {}}])
def test_a_forged_move_label_on_a_job_is_left_on_its_spec(mode: dict[str, Any]) -> None:
    # Swarm runs a job again from the start (a new JobIteration) on any update of its
    # spec, a label's too: removing the label would restart the run its owner's deploy
    # started. It is reported and ignored, and left where it is. Before: removed, and
    # the job's running task replaced by a new run's.
    job = sw_svc("batch", {f"{P}gpus": "1", f"{P}{MOVE_STATE}": "{}"}, mode=mode)
    base = victim_cluster({})
    sw = RecordingSwarm(base.nodes(), [*base.services(), job], base.tasks())
    m = Mover(sw, RB, prefix=P, dry_run=False)  # type: ignore[arg-type]
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert ("service", job.id) not in sw.calls
    assert sw.service(job.id).labels[f"{P}{MOVE_STATE}"] == "{}"
    (rec,) = [r for r in m.recent if r.service == "batch"]
    assert rec.outcome is Outcome.IGNORED and "left on its spec" in rec.detail
