"""Priority and preemption: the request labels, the served order, the victim rule
(``placement.preempt``), no ping-pong, and the actuator through full daemon cycles over
the recording fake SwarmClient of tests/test_forged_state.py (dry-run writes nothing)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import pytest
from loguru import logger
from support.commands import command_json
from support.forged import (
    DGX_F,
    FACTS,
    R4090_F,
    R_UUIDS,
    RecordingSwarm,
    closed_port,
    held_labels,
    snapshot,
    sw_node,
    sw_svc,
)

from swarmgpu.core.config import (
    AgentsConfig,
    Config,
    ConfigError,
    PreemptionConfig,
    RebalanceConfig,
    SyncConfig,
    load_config,
)
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preempt_budget import SpentHour
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.engine.stop import Stopped, StopRequest
from swarmgpu.manager.nodes.agentbook import AgentRecord
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import (
    MOVE_STATE,
    Holding,
    assign_key,
    devices_key,
    gate_key,
    plan_placement,
)
from swarmgpu.manager.placement.preempt import (
    Candidate,
    choose_preemptions,
    pick_victims,
    serve_order,
)
from swarmgpu.manager.placement.preempted import PREEMPTED_STATE, preempted_state
from swarmgpu.manager.rebalance.mover import read_records
from swarmgpu.manager.rebalance.record import MoveState, record_key
from swarmgpu.manager.services.requests import GpuRequest, RequestError, parse_all, parse_request
from swarmgpu.swarm.client import (
    SwarmError,
    SwarmNode,
    SwarmService,
    SwarmTask,
    VersionConflict,
)

P = "swarmgpu."


def _made(second: str) -> str:
    """A CreatedAt ``second`` seconds into 2026 ("": none); times order by their instant."""
    return f"2026-01-01T00:00:{int(second):02}Z" if second else ""


# --- the labels ------------------------------------------------------------------------


def test_priority_is_an_integer_or_a_class_and_preemptible_a_boolean() -> None:
    r = parse_request({f"{P}gpus": "2", f"{P}priority": "100"})
    assert r is not None and r.priority == 100 and r.preemptible is None
    assert not r.is_preemptible(100) and r.is_preemptible(101)
    r = parse_request({f"{P}priority": "Inference", f"{P}preemptible": "true"})
    assert r is not None and (r.priority, r.priority_class, r.preemptible) == (100, "inference",
                                                                               True)
    assert "priority inference" in r.describe() and "preemptible" in r.describe()
    r = parse_request({f"{P}priority": "gold"}, classes={"gold": 7})
    assert r is not None and r.priority == 7
    assert parse_request({f"{P}gpus": "1"}) == GpuRequest()  # unlabelled: priority 0
    assert parse_request({f"{P}priority": "-5"}).priority == -5  # type: ignore[union-attr]


@pytest.mark.parametrize(("key", "value", "says"), [
    ("priority", "urgent", "critical (1000), inference (100), batch (0)"),
    ("priority", "1.5", "a whole number"),
    ("priority", "12345678", "a whole number"),
    ("preemptible", "maybe", "true or false"),
])
def test_bad_priority_labels_are_named_errors(key: str, value: str, says: str) -> None:
    e = parse_all({f"{P}gpus": "1", f"{P}{key}": value})
    assert isinstance(e, RequestError) and e.key == f"{P}{key}" and says in str(e)


def test_config_priority_classes_are_checked(tmp_path: Any) -> None:
    f = tmp_path / "c.yml"
    f.write_text('{"preemption": {"priority_classes": "gold=10,silver"}}')
    with pytest.raises(ConfigError, match=r"preemption\.priority_classes"):
        load_config(str(f))
    f.write_text('{"preemption": {"priority_classes": "gold=10", "dry_run": false}}')
    cfg = load_config(str(f))
    assert cfg.preemption.priority_classes == "gold=10" and not cfg.preemption.dry_run
    assert Config().preemption.dry_run  # default: decide and log only


def test_served_in_priority_order_then_age_then_as_before() -> None:
    def svc(name: str, prio: str | None, created: str) -> tuple[SwarmService, Any]:
        labels = {f"{P}gpus": "1", **({f"{P}priority": prio} if prio else {})}
        s = sw_svc(name, labels)
        object.__setattr__(s, "created_at", _made(created))
        return s, parse_all(labels)

    got = serve_order([svc("a", None, "2"), svc("b", "100", "3"), svc("c", None, "1"),
                       svc("d", "100", "1"), svc("e", "-1", "0")])
    assert [s.name for s, _ in got] == ["d", "b", "c", "a", "e"]
    same = [svc("x", None, ""), svc("a", None, ""), svc("m", None, "")]
    assert [s.name for s, _ in serve_order(same)] == ["x", "a", "m"]  # order kept


# --- the victim rule -------------------------------------------------------------------


def _c(name: str, prio: int, n: int, started: str = "", first: int = 0) -> Candidate:
    return Candidate(name, f"id-{name}", "n", prio, started,
                     tuple(f"G{i}" for i in range(first, first + n)))


def _holders(cands: list[Candidate]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for c in cands:
        for u in c.uuids:
            out.setdefault(u, set()).add(c.service)
    return out


def test_fewest_victims_first_then_lowest_priority_then_most_recent() -> None:
    big = _c("big", 50, 4, first=0)
    small1 = _c("s1", 0, 2, first=4)
    small2 = _c("s2", 0, 2, first=6)
    cands = [big, small1, small2]
    # 4 GPUs: one victim (big, priority 50) beats two of priority 0
    assert pick_victims(4, set(), cands, _holders(cands)) == (big,)
    # 2 GPUs: one victim of the lowest priority, the most recently started of the two
    s1 = _c("s1", 0, 2, "2026-01-01T10:00:00Z", first=4)
    s2 = _c("s2", 0, 2, "2026-01-01T11:00:00Z", first=6)
    assert pick_victims(2, set(), [big, s1, s2], _holders([big, s1, s2])) == (s2,)
    # never more than needed: 1 GPU free + 1 needed from a victim
    assert pick_victims(2, {"F"}, [big, s1, s2], _holders([big, s1, s2])) == (s2,)
    # enough free already: no victim; too little even with all: None
    assert pick_victims(1, {"F"}, cands, _holders(cands)) == ()
    assert pick_victims(9, set(), cands, _holders(cands)) is None


def test_a_shared_gpu_frees_only_with_all_its_holders() -> None:
    a = Candidate("a", "id-a", "n", 0, "", ("G0",))
    b = Candidate("b", "id-b", "n", 0, "", ("G0",))
    holders = {"G0": {"a", "b", "keeper"}}
    assert pick_victims(1, set(), [a, b], holders) is None


# --- the decision on a snapshot ---------------------------------------------------------


def _gpu_cluster(batch_labels: dict[str, str], high_labels: dict[str, str]
                 ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """batch holds all 8 RTX 4090s; high asks for 2 of them (the DGX is not usable)."""
    held = Holding("batch", "n-4090", R_UUIDS, tuple(1000 for _ in R_UUIDS))
    nodes = [sw_node("n-mgr", "manager", role="manager"),
             sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", {assign_key(P, "batch"): held.label_value(),
                                            gate_key(P, "batch"): "true"})]
    batch = sw_svc("batch", {f"{P}gpus": "8", devices_key(P, "n-4090"): ",".join(R_UUIDS),
                           **batch_labels})
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*", **high_labels})
    tasks = [SwarmTask("t-batch", batch.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ())]
    return nodes, [batch, high], tasks


def _decide(batch_labels: dict[str, str], high_labels: dict[str, str], **kw: Any
            ) -> list[str]:
    nodes, services, tasks = _gpu_cluster(batch_labels, high_labels)
    plan = plan_placement(nodes, services, tasks, FACTS)
    assert {sp.name: sp.status for sp in plan.services} == {"batch": "placed",
                                                            "high": "pending"}
    return [p.describe() for p in choose_preemptions(
        plan, nodes, services, tasks, FACTS, prefix=P, preemptible_below=100, **kw)]


def test_higher_priority_preempts_a_preemptible_lower_one() -> None:
    assert _decide({f"{P}priority": "0"}, {f"{P}priority": "100"}) == [
        "preempt batch (priority 0) on gpu-node-2 for high (priority 100)"]
    # rebalance: never does not protect a preemptible service
    assert _decide({f"{P}rebalance": "never"}, {f"{P}priority": "critical"}) != []


@pytest.mark.parametrize(("batch", "high", "kw"), [
    ({f"{P}priority": "100"}, {f"{P}priority": "100"}, {}),  # equal: no ping-pong
    ({f"{P}priority": "100", f"{P}preemptible": "true"}, {f"{P}priority": "100"}, {}),
    ({f"{P}priority": "0", f"{P}preemptible": "false"}, {f"{P}priority": "100"}, {}),
    ({f"{P}priority": "150"}, {f"{P}priority": "1000"}, {}),  # not preemptible by default
    ({}, {}, {}),  # no priorities: nothing changes
    ({}, {f"{P}priority": "100"}, {"cooling": {"batch"}}),
    ({}, {f"{P}priority": "100"}, {"settling": {"high"}}),
])
def test_no_preemption(batch: dict[str, str], high: dict[str, str], kw: Any) -> None:
    assert _decide(batch, high, **kw) == []


def test_no_ping_pong_the_preempted_one_cannot_preempt_back() -> None:
    """After batch was preempted and high placed, batch (pending, lower) preempts nothing,
    and high, placed, is never a victim of it."""
    nodes, services, tasks = _gpu_cluster({}, {f"{P}priority": "100"})
    held = Holding("high", "n-4090", R_UUIDS[:2], (1000, 1000))
    nodes[2] = sw_node("n-4090", "gpu-node-2", {assign_key(P, "high"): held.label_value(),
                                              gate_key(P, "high"): "true"})
    batch = sw_svc("batch", {f"{P}gpus": "8", f"{P}preemptible": "true"})
    services = [batch, services[1]]
    tasks = [SwarmTask("t-high", services[1].id, "n-4090", 1, "running", "running", ())]
    plan = plan_placement(nodes, services, tasks, FACTS)
    assert {sp.name: sp.status for sp in plan.services} == {"batch": "pending",
                                                            "high": "placed"}
    assert choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=100) == []


def test_a_preempted_service_says_why_and_its_record_goes_once_placed() -> None:
    nodes, _, _ = _gpu_cluster({}, {})
    rec = '{"at": 1.0, "by": "high", "node": "n-4090", "priority": 100}'
    waiting = sw_svc("batch", {f"{P}gpus": "8", f"{P}{PREEMPTED_STATE}": rec})
    st = preempted_state(waiting.labels, P)
    assert st is not None and st.reason() == "preempted by high (priority 100)"
    nodes[2] = sw_node("n-4090", "gpu-node-2", {assign_key(P, "x"): Holding(
        "x", "n-4090", R_UUIDS[:1], (1000,)).label_value()})
    x = sw_svc("x", {f"{P}gpus": "1"})
    plan = plan_placement(nodes, [waiting, x], [], FACTS)
    sp = {s.name: s for s in plan.services}["batch"]
    assert sp.status == "pending" and (sp.reason or "").startswith(
        "preempted by high (priority 100)")
    plan = plan_placement([*nodes[:2], sw_node("n-4090", "gpu-node-2")], [waiting], [], FACTS)
    sp = plan.services[0]
    assert sp.status == "placed" and f"{P}{PREEMPTED_STATE}" in sp.service_labels_remove


# --- the actuator, through full daemon cycles ---------------------------------------------


def _daemon(sw: RecordingSwarm, tmp: str, *, moves: bool = False,
            queues: dict[str, Any] | None = None, **pre: Any) -> Daemon:
    """The daemon with its own steps over ``sw``, the two GPU nodes' agents known (none
    answers: its port is closed); ``moves``: the rebalancer's moves live (no policy)."""
    from swarmgpu.manager.cycle.wiring import daemon_steps

    port = closed_port()
    rebalance = RebalanceConfig(dry_run=False, policies="",
                                metrics_url_template=f"http://{{addr}}:{port}/m",
                                scrape_timeout_s=0.5) if moves else RebalanceConfig()
    cfg = Config(state_dir=tmp, sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(port=port, timeout_s=0.5, identity="none"),
                 rebalance=rebalance, preemption=PreemptionConfig(**pre),
                 queues=queues or {})
    d = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]
    d.book.records["n-dgx"] = AgentRecord("gpu-node-1", last_ok=time.time(), facts=DGX_F)
    d.book.records["n-4090"] = AgentRecord("gpu-node-2", last_ok=time.time(), facts=R4090_F)
    d.use(daemon_steps(d))
    return d


def _batch_state(sw: RecordingSwarm) -> tuple[dict[str, str], Any]:
    return ({k: v for k, v in sw.node("n-4090").labels.items() if "batch" in k},
            sw.service("id-batch").spec)


def test_dry_run_decides_and_writes_nothing(tmp_path: Any) -> None:
    sw = RecordingSwarm(*_gpu_cluster({f"{P}priority": "batch"},
                                      {f"{P}priority": "inference"}))
    d = _daemon(sw, str(tmp_path))  # preemption.dry_run: true, the default
    before = _batch_state(sw)
    for _ in range(3):
        d.cycle()
    assert _batch_state(sw) == before
    assert [c for c in sw.calls if c != ("swarm", "swarm")] == []  # at most the model
    high = {sp.name: sp for sp in d.last_session.placement.services}["high"]
    assert any(w.startswith("would preempt batch (priority 0) on gpu-node-2")
               for w in high.warnings), high.warnings



def test_a_dry_run_preemption_is_said_once_while_it_is_decided() -> None:
    """In dry-run the decision is in the preemptor's plan each cycle; the log says it once
    while it is decided, again once a cycle went without it (the preemptor gone) and it
    came back."""
    sw = RecordingSwarm(*_gpu_cluster({f"{P}priority": "batch"},
                                      {f"{P}priority": "inference"}))
    cfg = Config()  # preemption.dry_run: true, the default
    pre = Preempter(cfg)
    full = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels())
    gone = replace(full, services=[s for s in full.services if s.name != "high"])
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="INFO",
                      filter=lambda r: "dry-run: would preempt" in r["message"])
    try:
        for t, snap in enumerate((full, full, full, gone, full, full)):
            pre.cycle(sw, snap, make_plan(snap, cfg), FACTS,  # type: ignore[arg-type]
                      now=5000.0 + t)
    finally:
        logger.remove(sink)
    assert lines == ["dry-run: would preempt batch (priority 0) on gpu-node-2 for high "
                     "(priority 100)"] * 2, lines


def _as_commands(sw: RecordingSwarm, cfg: str, monkeypatch: pytest.MonkeyPatch,
                 command: str) -> dict[str, list[str]]:
    """``swarmgpu <command> --json`` over ``sw``: each service's warnings."""
    doc = command_json(sw, cfg, monkeypatch, command,
                       {"n-dgx": ("gpu-node-1", DGX_F), "n-4090": ("gpu-node-2", R4090_F)})
    return {sv["name"]: sv["warnings"] for sv in doc["services"]}


@pytest.mark.parametrize(("queues", "preempts"), [
    ({}, True),
    # b holds 8 on a guarantee of 8: a's priority does not take it below it (c1273f9)
    ({"a": {"guaranteed": 8}, "b": {"guaranteed": 8}}, False),
    ({"a": {"guaranteed": 8}, "b": {"guaranteed": 0}}, True),
])
def test_plan_shows_the_preemption_a_dry_run_daemon_decides(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, queues: dict[str, Any],
        preempts: bool) -> None:
    # `plan` ran the planner alone: the request the daemon preempts for said nothing
    # of it there, where the daemon's map said "would preempt ...".
    labels = ({f"{P}priority": "0", f"{P}queue": "b"}, {f"{P}priority": "100", f"{P}queue": "a"})
    sw = RecordingSwarm(*_gpu_cluster(*labels))
    d = _daemon(sw, str(tmp_path), queues=queues)  # preemption.dry_run: true, the default
    d.cycle()
    daemon = [w for w in {sp.name: sp for sp in d.last_session.placement.services}[
        "high"].warnings if w.startswith("would preempt")]
    assert bool(daemon) == preempts, daemon
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"state_dir: {tmp_path}\nqueues: {json.dumps(queues)}\n")
    calls = list(sw.calls)
    plan = _as_commands(sw, str(cfg), monkeypatch, "plan")
    assert [w for w in plan["high"] if w.startswith("would preempt")] == daemon
    assert sw.calls == calls  # plan wrote nothing



def test_plan_says_what_a_live_daemon_preempts_and_writes_nothing(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    sw = RecordingSwarm(*_gpu_cluster({f"{P}priority": "0"}, {f"{P}priority": "100"}))
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"state_dir: {tmp_path}\npreemption: {{dry_run: false}}\n")
    plan = _as_commands(sw, str(cfg), monkeypatch, "plan")
    assert sw.calls == []  # its Writes were never made: nothing written, none tried
    assert [w for w in plan["high"] if "preempt" in w] == [
        "would preempt batch (priority 0) on gpu-node-2 for high (priority 100)"]
    _daemon(sw, str(tmp_path), dry_run=False).cycle()  # the daemon, on the same swarm
    st = preempted_state(sw.service("id-batch").labels, P)
    assert st is not None and (st.by, st.priority) == ("high", 100)



def test_status_json_shows_the_preemption_the_daemons_map_shows(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # `status --json` is the map's document: it had no "would preempt ..." of the map's.
    sw = RecordingSwarm(*_gpu_cluster({f"{P}priority": "0"}, {f"{P}priority": "100"}))
    d = _daemon(sw, str(tmp_path))  # preemption.dry_run: true, the default
    d.cycle()
    _type, body = d.http_routes["/api/v1/cluster"]()  # the map's document
    (shown,) = [sv["warnings"] for sv in json.loads(body)["services"] if sv["name"] == "high"]
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"state_dir: {tmp_path}\n")
    calls = list(sw.calls)
    status = _as_commands(sw, str(cfg), monkeypatch, "status")
    assert sw.calls == calls
    assert [w for w in status["high"] if "preempt" in w] == [
        w for w in shown if "preempt" in w] != []


def test_live_preemption_closes_the_victims_gate_and_places_the_preemptor(
        tmp_path: Any) -> None:
    sw = RecordingSwarm(*_gpu_cluster({f"{P}priority": "0"}, {f"{P}priority": "100"}))
    d = _daemon(sw, str(tmp_path), dry_run=False)
    d.cycle()
    node = sw.node("n-4090").labels
    assert assign_key(P, "batch") not in node and gate_key(P, "batch") not in node
    labels = sw.service("id-batch").labels
    assert devices_key(P, "n-4090") not in labels
    st = preempted_state(labels, P)
    assert st is not None and (st.by, st.priority) == ("high", 100)
    sw.stop_tasks("id-batch", "n-4090")  # Swarm's constraint enforcer
    d.cycle()
    node = sw.node("n-4090").labels
    # high holds 2 of the 8 (its gate opens once its task carries the devices)
    assert assign_key(P, "high") in node and assign_key(P, "batch") not in node
    by = {sp.name: sp for sp in d.last_session.placement.services}
    assert by["batch"].status == "pending"
    assert (by["batch"].reason or "").startswith("preempted by high (priority 100)")
    assert by["high"].status == "placed"
    for _ in range(2):  # the victim is not preempted again, nor re-placed over high
        d.cycle()
    node = sw.node("n-4090").labels
    assert assign_key(P, "high") in node and assign_key(P, "batch") not in node


def test_budget_zero_turns_preemption_off(tmp_path: Any) -> None:
    sw = RecordingSwarm(*_gpu_cluster({f"{P}priority": "0"}, {f"{P}priority": "100"}))
    d = _daemon(sw, str(tmp_path), dry_run=False, max_per_hour=0)
    before = _batch_state(sw)
    for _ in range(2):
        d.cycle()
    assert _batch_state(sw) == before


def test_a_spent_budget_is_logged_once_while_it_lasts() -> None:
    """The preemptor waiting on a spent hour was warned of every cycle (every 30 s for
    the hour: the before-stop reading of fix64-logonce); now once while it lasts, and
    again once it has been gone."""
    sw = StopsMidPreemption()
    sw.before_write = None
    pre, snap, plan = _live_preempter(sw)
    pre.spent.spend(4000.0, "")  # the hour's one preemption is spent
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        for t in (5000.0, 5030.0, 5060.0):
            assert pre.cycle(sw, snap, plan, FACTS, now=t) == []  # type: ignore[arg-type]
        said = [ln for ln in lines if "preemption budget spent" in ln]
        assert len(said) == 1, lines
        live, pre.cfg = pre.cfg, replace(pre.cfg, dry_run=True)
        pre.cycle(sw, snap, plan, FACTS, now=5090.0)  # type: ignore[arg-type]
        pre.cfg = live  # a cycle without the refusal: it has been gone, said again
        assert pre.cycle(sw, snap, plan, FACTS, now=5120.0) == []  # type: ignore[arg-type]
    finally:
        logger.remove(sink)
    said = [ln for ln in lines if "preemption budget spent" in ln]
    assert len(said) == 2, lines


class _StopsMidWrite(RecordingSwarm):
    """The daemon's stop is asked while the first spec write is in flight (that write
    lands, the gate refuses every later one); ``fail_hour``: the swarm object's labels
    cannot be written where ``_hour_fails`` says."""

    def __init__(self, *cluster: Any, fail_hour: bool = False) -> None:
        super().__init__(*cluster)
        self.stop = StopRequest()
        self.before_write = self.stop.check
        self.fail_hour = fail_hour

    def _hour_fails(self, compute: Any) -> bool:
        return self.fail_hour

    def update_service_spec(self, service_id: str, compute: Any, **kw: Any) -> bool:
        self.stop.set()
        return super().update_service_spec(service_id, compute, **kw)

    def update_swarm_labels(self, compute: Any, **kw: Any) -> bool:
        if self._hour_fails(compute):
            raise SwarmError("swarm update: 500 Server Error")
        return super().update_swarm_labels(compute, **kw)


class StopsMidPreemption(_StopsMidWrite):
    """The stop asked while the first victim's spec write is in flight."""

    def __init__(self, fail_hour: bool = False) -> None:
        super().__init__(*_gpu_cluster({f"{P}priority": "0"}, {f"{P}priority": "100"}),
                         fail_hour=fail_hour)


def _live_preempter(sw: RecordingSwarm) -> tuple[Preempter, Snapshot, Any]:
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels())
    cfg = Config(preemption=PreemptionConfig(dry_run=False, max_per_hour=1))
    return Preempter(cfg), snap, make_plan(snap, cfg)


def _stored_hour(sw: RecordingSwarm) -> int:
    """The victims a new leader (or this daemon started again) counts in the hour."""
    hour = SpentHour(P)
    hour.read(sw.swarm_labels(), 5000.0, ())
    return len(hour.all)


def test_a_stop_mid_preemption_leaves_the_victim_counted_in_the_stored_hour() -> None:
    """The stop came after the victim's write and before the hour was stored: the gate
    refused that store, and a restarted daemon had the whole max_per_hour left (its
    cooldown lost too: the record counts only with a stop at its time in the hour)."""
    sw = StopsMidPreemption()
    pre, snap, plan = _live_preempter(sw)
    with pytest.raises(Stopped):
        pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    assert f"{P}{PREEMPTED_STATE}" in sw.service("id-batch").labels  # the write landed
    assert _stored_hour(sw) == 1


def test_the_hour_reserved_for_a_stop_not_made_is_given_back() -> None:
    """The victim no longer holds what was decided (read again before the writes): it
    is left alone, and the hour stored before its writes is corrected."""
    sw = StopsMidPreemption()
    sw.before_write = None
    pre, snap, plan = _live_preempter(sw)
    sw._nodes["n-4090"] = sw_node("n-4090", "gpu-node-2")  # batch's entry gone meanwhile
    assert pre.cycle(sw, snap, plan, FACTS, now=5000.0) == []  # type: ignore[arg-type]
    assert f"{P}{PREEMPTED_STATE}" not in sw.service("id-batch").labels
    assert _stored_hour(sw) == 0 and not pre.spent.all


def test_a_victim_is_not_stopped_when_the_hour_cannot_be_stored() -> None:
    """Stopped with the hour unstored, a restarted daemon would stop more than the cap."""
    sw = StopsMidPreemption(fail_hour=True)
    sw.before_write = None
    pre, snap, plan = _live_preempter(sw)
    assert pre.cycle(sw, snap, plan, FACTS, now=5000.0) == []  # type: ignore[arg-type]
    assert f"{P}{PREEMPTED_STATE}" not in sw.service("id-batch").labels
    assert gate_key(P, "batch") in sw.node("n-4090").labels
    assert not pre.spent.all


# --- a victim that can run elsewhere is moved, not stopped -------------------------------


def _movable_cluster() -> RecordingSwarm:
    """small (priority 0, 2 GPUs, any product) and filler (priority 50, not preemptible,
    6 GPUs) fill n-4090; the DGX has 7 whole GPUs free; high wants 2 RTX 4090s."""
    small_h = Holding("small", "n-4090", R_UUIDS[:2], (1000, 1000))
    fill_h = Holding("filler", "n-4090", R_UUIDS[2:], tuple(1000 for _ in R_UUIDS[2:]))
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", {
                 assign_key(P, "small"): small_h.label_value(), gate_key(P, "small"): "true",
                 assign_key(P, "filler"): fill_h.label_value(), gate_key(P, "filler"): "true"})]
    small = sw_svc("small", {f"{P}gpus": "2", devices_key(P, "n-4090"): ",".join(R_UUIDS[:2])})
    filler = sw_svc("filler", {f"{P}gpus": "6", f"{P}priority": "50",
                             f"{P}preemptible": "false",
                             devices_key(P, "n-4090"): ",".join(R_UUIDS[2:])})
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*",
                         f"{P}priority": "100"})
    tasks = [SwarmTask("t-small", small.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-filler", filler.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ())]
    return RecordingSwarm(nodes, [small, filler, high], tasks)


def test_a_victim_that_fits_elsewhere_gets_a_relocation() -> None:
    sw = _movable_cluster()
    nodes, services, tasks = sw.nodes(), sw.services(), sw.tasks()
    plan = plan_placement(nodes, services, tasks, FACTS)
    (p,) = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=100)
    assert [v.service for v in p.victims] == ["small"] and p.hostname == "gpu-node-2"
    where = p.moves["small"]
    assert where.hostname == "gpu-node-1" and len(where.uuids) == 2
    assert set(where.uuids) <= {g.uuid for g in DGX_F.gpus if not g.mig_enabled}


def test_live_preemption_moves_a_movable_victim_through_the_mover(tmp_path: Any) -> None:
    from swarmgpu.manager.rebalance.mover import read_records

    sw = _movable_cluster()
    d = _daemon(sw, str(tmp_path), moves=True, dry_run=False)
    d.cycle()
    (st,) = read_records(sw.swarm_labels(), P).values()
    assert (st.service, st.source_host, st.target_host, st.trigger) == (
        "small", "gpu-node-2", "gpu-node-1", "preemption")
    small = sw.service("id-small").labels
    assert f"{P}state.move" in small and f"{P}{PREEMPTED_STATE}" not in small
    assert gate_key(P, "small") in sw.node("n-dgx").labels  # target open first
    assert gate_key(P, "small") in sw.node("n-4090").labels  # source still open (surge)
    d.cycle()  # the move in flight: high waits, nothing else is preempted
    assert assign_key(P, "filler") in sw.node("n-4090").labels


def _over_budget(cycle: int, node: int, victim: dict[str, str] | None = None,
                 trigger: str = "hotspot", started_at: float = 1000.0,
                 ) -> tuple[RecordingSwarm, Preempter, Snapshot, Any]:
    """_movable_cluster with another service's move in flight (gpu-node-2 -> gpu-node-1,
    the record and its label), under rebalance budgets ``cycle`` and ``node``."""
    sw = _movable_cluster()
    st = MoveState(id="m0000000001", service="other", source="n-4090",
                   source_host="gpu-node-2", source_uuids=(R_UUIDS[0],), source_milli=(1000,),
                   target="n-dgx", target_host="gpu-node-1", target_uuids=(DGX_F.gpus[7].uuid,),
                   target_milli=(1000,), surge=True, replicas=1, max_replicas=0,
                   started_at=started_at, trigger=trigger, reason="r", service_id="id-other")
    sw._services["id-other"] = sw_svc("other", {f"{P}gpus": "1", P + MOVE_STATE: st.to_json()})
    sw._swarm_labels[record_key(P, "id-other")] = st.to_json()
    if victim:
        small = sw._services["id-small"]
        sw._services["id-small"] = replace(small, labels={**small.labels, **victim})
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels())
    cfg = Config(rebalance=RebalanceConfig(dry_run=False, max_moves_per_cycle=cycle,
                                           max_moves_per_node=node),
                 preemption=PreemptionConfig(dry_run=False))
    return sw, Preempter(cfg), snap, make_plan(snap, cfg)


@pytest.mark.parametrize(("cycle", "node", "says"), [
    (1, 9, "rebalance.max_moves_per_cycle"), (9, 1, "rebalance.max_moves_per_node")])
def test_a_victims_move_waits_for_the_move_budgets_and_it_is_not_stopped(
        cycle: int, node: int, says: str) -> None:
    """The rebalancer's move in flight spends the budget: preemption starts no move past
    it (it bypassed both before), nor stops the victim instead; it waits, spends nothing
    of the hour, says why, and moves the victim once the budget frees."""
    sw, pre, snap, plan = _over_budget(cycle, node)
    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m)), level="INFO")
    try:
        assert pre.cycle(sw, snap, plan, FACTS, now=5000.0) == []  # type: ignore[arg-type]
    finally:
        logger.remove(sink)
    assert list(read_records(sw.swarm_labels(), P)) == ["id-other"]  # no move of small's
    small = sw.service("id-small").labels
    assert f"{P}{PREEMPTED_STATE}" not in small and f"{P}state.move" not in small
    assert gate_key(P, "small") in sw.node("n-4090").labels
    assert not pre.spent.all and "high" not in pre.preemptor_at
    assert any("waits" in m and says in m for m in said), said
    high = {sp.name: sp for sp in plan.services}["high"]
    assert any(says in w for w in high.warnings), high.warnings
    # The rebalancer's move done (its record gone): the victim moves the next cycle.
    del sw._swarm_labels[record_key(P, "id-other")]
    snap = replace(snap, swarm_labels=sw.swarm_labels())
    (p,) = pre.cycle(sw, snap, plan, FACTS, now=5010.0)  # type: ignore[arg-type]
    (st,) = [st for st in read_records(sw.swarm_labels(), P).values()]
    assert (st.service, st.trigger, p.service) == ("small", "preemption", "high")


def test_a_victims_move_that_waits_for_the_move_budgets_is_said_once_while_it_waits() -> None:
    """The wait is in the preemptor's plan each cycle; the log says it once while it
    lasts, again once a cycle went without it (here: one in dry-run) and it came back."""
    sw, pre, snap, plan = _over_budget(1, 9)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="WARNING",
                      filter=lambda r: "waits: moving small" in r["message"])
    try:
        for t in (5000.0, 5010.0, 5020.0):
            assert pre.cycle(sw, snap, plan, FACTS, now=t) == []  # type: ignore[arg-type]
        assert len(lines) == 1, lines
        live, pre.cfg = pre.cfg, replace(pre.cfg, dry_run=True)
        pre.cycle(sw, snap, plan, FACTS, now=5030.0)  # type: ignore[arg-type]
        pre.cfg = live
        for t in (5040.0, 5050.0):
            assert pre.cycle(sw, snap, plan, FACTS, now=t) == []  # type: ignore[arg-type]
    finally:
        logger.remove(sink)
    assert len(lines) == 2 and "rebalance.max_moves_per_cycle" in lines[1], lines
    (m,) = pre.reserved()
    assert m.service == "small"


def test_a_health_move_in_flight_spends_its_own_budget_not_the_rebalancers() -> None:
    """The health mover's evacuations have their own budget
    (``health.evacuations_per_cycle``): one in flight leaves preemption's move free."""
    sw, pre, snap, plan = _over_budget(1, 1, trigger="health")
    done = pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    assert [p.service for p in done] == ["high"]
    assert {st.service for st in read_records(sw.swarm_labels(), P).values()} == {
        "other", "small"}
    assert f"{P}{PREEMPTED_STATE}" not in sw.service("id-small").labels


class StopsMidMove(_StopsMidWrite):
    """_movable_cluster, the stop asked while the victim's move writes its spec (that
    write lands: the move is under way); ``fail_hour``: but for the move record."""

    def __init__(self, fail_hour: bool = False) -> None:
        c = _movable_cluster()
        super().__init__(c.nodes(), c.services(), c.tasks(), fail_hour=fail_hour)

    def _hour_fails(self, compute: Any) -> bool:
        return self.fail_hour and f"{P}state.preemptions" in (compute(self.swarm_labels()) or {})


def _moving_preempter(sw: RecordingSwarm) -> tuple[Preempter, Snapshot, Any]:
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels())
    cfg = Config(rebalance=RebalanceConfig(dry_run=False),
                 preemption=PreemptionConfig(dry_run=False, max_per_hour=1))
    return Preempter(cfg), snap, make_plan(snap, cfg)


def test_a_stop_mid_move_of_a_victim_leaves_it_counted_in_the_stored_hour() -> None:
    """The victim moved, not stopped: it was counted only once its move had started, and
    the hour stored after every victim; a stop inside the mover's own writes (here: its
    spec write landed, the gate refused the next) left a move under way uncounted, and a
    restarted daemon or the next leader with the whole max_per_hour."""
    sw = StopsMidMove()
    pre, snap, plan = _moving_preempter(sw)
    with pytest.raises(Stopped):
        pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    assert f"{P}{MOVE_STATE}" in sw.service("id-small").labels  # the move is under way
    assert _stored_hour(sw) == 1


def test_a_victim_is_not_moved_when_the_hour_cannot_be_stored_first() -> None:
    """Nothing of the move is written (no record, no label), the victim is not stopped
    instead either, and nothing is spent: the next cycle tries again."""
    sw = StopsMidMove(fail_hour=True)
    sw.before_write = None
    pre, snap, plan = _moving_preempter(sw)
    assert pre.cycle(sw, snap, plan, FACTS, now=5000.0) == []  # type: ignore[arg-type]
    assert not read_records(sw.swarm_labels(), P)
    small = sw.service("id-small").labels
    assert f"{P}{MOVE_STATE}" not in small and f"{P}{PREEMPTED_STATE}" not in small
    assert gate_key(P, "small") in sw.node("n-4090").labels
    assert not pre.spent.all and sw.calls == []


def test_a_moved_victim_is_counted_once_in_the_stored_hour() -> None:
    sw = StopsMidMove()
    sw.before_write = None
    pre, snap, plan = _moving_preempter(sw)
    (p,) = pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    assert [v.service for v in p.victims] == ["small"]
    assert {st.service for st in read_records(sw.swarm_labels(), P).values()} == {"small"}
    assert _stored_hour(sw) == 1 and list(pre.spent.all) == [5000.0]


def test_a_victim_whose_move_failed_after_it_was_counted_is_stopped_counted_once() -> None:
    """The move's spec write was refused (another writer changed the spec): the mover
    drops its record and the victim is stopped instead, on the count its move stored."""

    class ConflictOnce(RecordingSwarm):
        conflicted = False

        def update_service_spec(self, service_id: str, compute: Any, **kw: Any) -> bool:
            if not self.conflicted:
                self.conflicted = True
                raise VersionConflict("update out of sequence")
            return super().update_service_spec(service_id, compute, **kw)

    c = _movable_cluster()
    sw = ConflictOnce(c.nodes(), c.services(), c.tasks())
    pre, snap, plan = _moving_preempter(sw)
    (p,) = pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    assert [v.service for v in p.victims] == ["small"]
    assert not read_records(sw.swarm_labels(), P)
    assert f"{P}{PREEMPTED_STATE}" in sw.service("id-small").labels
    assert _stored_hour(sw) == 1 and list(pre.spent.all) == [5000.0]


def test_a_victim_the_mover_refuses_for_more_than_the_budget_is_stopped() -> None:
    """Only the budget makes preemption wait: a victim that cannot move anyway
    (``swarmgpu.rebalance: never``) is stopped, as before, budget spent or not."""
    sw, pre, snap, plan = _over_budget(1, 1, {f"{P}rebalance": "never"})
    (p,) = pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    assert [v.service for v in p.victims] == ["small"]
    assert f"{P}{PREEMPTED_STATE}" in sw.service("id-small").labels
    assert gate_key(P, "small") not in sw.node("n-4090").labels


@pytest.mark.parametrize("key", ["max_moves_per_cycle", "max_moves_per_node"])
def test_a_move_budget_of_zero_is_moves_off_and_the_victim_is_stopped(key: str) -> None:
    """0 turns those moves off (``rebalance.max_moves_*``): no move will ever start, so
    the victim is stopped, as with ``rebalance.enabled: false``; it never waits for good."""
    sw = _movable_cluster()
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels={})
    cfg = Config(rebalance=RebalanceConfig(dry_run=False, **{key: 0}),
                 preemption=PreemptionConfig(dry_run=False))
    (p,) = Preempter(cfg).cycle(sw, snap, make_plan(snap, cfg), FACTS,  # type: ignore[arg-type]
                                now=5000.0)
    assert [v.service for v in p.victims] == ["small"]
    assert f"{P}{PREEMPTED_STATE}" in sw.service("id-small").labels
    assert not read_records(sw.swarm_labels(), P)  # no move started


# --- queues with quotas --------------------------------------------------------------------


def test_a_queue_never_exceeds_its_max_and_status_counts_its_use() -> None:
    nodes = [sw_node("n-dgx", "gpu-node-1"), sw_node("n-4090", "gpu-node-2")]
    a = sw_svc("a", {f"{P}gpus": "4", f"{P}queue": "research"})
    b = sw_svc("b", {f"{P}gpus": "2", f"{P}queue": "research"})
    c = sw_svc("c", {f"{P}gpus": "2", f"{P}queue": "prod"})
    plan = plan_placement(nodes, [a, b, c], [], FACTS)  # no quotas: all placed
    assert {sp.name: sp.status for sp in plan.services} == dict.fromkeys("abc", "placed")
    from swarmgpu.manager.placement import Planner

    quotas = {"research": (0, 5000), "prod": (8000, None)}
    plan = Planner(queues=quotas).plan(nodes, [a, b, c], [], FACTS)
    by = {sp.name: sp for sp in plan.services}
    assert by["a"].status == "placed" and by["c"].status == "placed"
    assert by["b"].status == "pending" and by["b"].reason == (
        "queue research at its quota: max 5 GPUs, 4 used, this service needs 2")
    assert plan.queues == [
        {"queue": "prod", "used_gpus": 2.0, "guaranteed_gpus": 8.0, "max_gpus": None,
         "configured": True, "tenant": None, "blocked": [], "used_unknown": None},
        {"queue": "research", "used_gpus": 4.0, "guaranteed_gpus": 0.0, "max_gpus": 5.0,
         "configured": True, "tenant": None, "blocked": ["b"], "used_unknown": None}]
    # held at its max: it never preempts
    assert choose_preemptions(plan, nodes, [a, b, c], [], FACTS, prefix=P,
                              preemptible_below=100) == []


def test_bad_queue_config_and_label_are_named() -> None:
    from swarmgpu.core.config import queue_quotas

    assert queue_quotas({"q": {"guaranteed": 2, "max": 4.5}}) == {"q": (2000, 4500)}
    for bad in ({"q": {"guaranteed": 5, "max": 4}}, {"q": {"min": 1}}, {"q": 3}):
        with pytest.raises(ValueError, match=r"^q[.:]"):
            queue_quotas(bad)
    e = parse_all({f"{P}gpus": "1", f"{P}queue": "a b"})
    assert isinstance(e, RequestError) and e.key == f"{P}queue"


def _quota_cluster(research_prio: str, prod_prio: str
                   ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    held = Holding("research", "n-4090", R_UUIDS, tuple(1000 for _ in R_UUIDS))
    nodes = [sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", {assign_key(P, "research"): held.label_value(),
                                            gate_key(P, "research"): "true"})]
    research = sw_svc("research", {f"{P}gpus": "8", f"{P}queue": "research",
                                 f"{P}priority": research_prio,
                                 devices_key(P, "n-4090"): ",".join(R_UUIDS)})
    prod = sw_svc("prod", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*",
                         f"{P}queue": "prod", f"{P}priority": prod_prio})
    tasks = [SwarmTask("t-r", research.id, "n-4090", 1, "running", "running", ())]
    return nodes, [research, prod], tasks


def test_work_above_its_guarantee_is_reclaimed_by_a_queue_below_its_own() -> None:
    from swarmgpu.manager.placement import Planner

    quotas = {"research": (0, None), "prod": (4000, None)}
    # equal priorities: only the quota makes research a victim
    nodes, services, tasks = _quota_cluster("100", "100")
    plan = Planner(queues=quotas).plan(nodes, services, tasks, FACTS)
    got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                             preemptible_below=100)
    assert [(p.service, [v.service for v in p.victims]) for p in got] == [
        ("prod", ["research"])]
    # no quotas: equal priorities never preempt
    plan = Planner().plan(nodes, services, tasks, FACTS)
    assert choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=100) == []
    # research's guarantee covers what it holds: not reclaimable
    plan = Planner(queues={"research": (8000, None), "prod": (4000, None)}).plan(
        nodes, services, tasks, FACTS)
    assert choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=100) == []


def test_no_ping_pong_between_queues() -> None:
    """prod got its 2 GPUs back from research: research (pending, 8 GPUs, guarantee 0) can
    neither reclaim them (it would go above its guarantee) nor preempt by priority."""
    from swarmgpu.manager.placement import Planner

    held = Holding("prod", "n-4090", R_UUIDS[:2], (1000, 1000))
    nodes = [sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", {assign_key(P, "prod"): held.label_value(),
                                            gate_key(P, "prod"): "true"})]
    research = sw_svc("research", {f"{P}gpus": "8", f"{P}queue": "research",
                                 f"{P}priority": "100"})
    prod = sw_svc("prod", {f"{P}gpus": "2", f"{P}queue": "prod", f"{P}priority": "100"})
    tasks = [SwarmTask("t-p", prod.id, "n-4090", 1, "running", "running", ())]
    plan = Planner(queues={"research": (0, None), "prod": (4000, None)}).plan(
        nodes, [research, prod], tasks, FACTS)
    assert {sp.name: sp.status for sp in plan.services} == {"research": "pending",
                                                            "prod": "placed"}
    assert choose_preemptions(plan, nodes, [research, prod], tasks, FACTS, prefix=P,
                              preemptible_below=100) == []


def _scaled_up(max_milli: int
               ) -> tuple[Any, list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """``a`` (queue research) holds one replica of 2 GPUs on n-4090 and is scaled to 2."""
    from swarmgpu.manager.placement import Planner

    held = Holding("a", "n-4090", R_UUIDS[:2], (1000, 1000))
    nodes = [sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", {assign_key(P, "a"): held.label_value(),
                                            gate_key(P, "a"): "true"})]
    a = sw_svc("a", {f"{P}gpus": "2", f"{P}queue": "research",
                   devices_key(P, "n-4090"): ",".join(R_UUIDS[:2])}, replicas=2)
    tasks = [SwarmTask("t-a", a.id, "n-4090", 1, "running", "running", ())]
    planner = Planner(queues={"research": (0, max_milli)})
    return planner, nodes, [a], tasks


def test_a_scale_up_beyond_the_queue_max_stays_pending_and_keeps_its_replicas() -> None:
    planner, nodes, services, tasks = _scaled_up(3000)
    for _ in range(2):  # the second cycle (settled-plan memo) says the same
        plan = planner.plan(nodes, services, tasks, FACTS)
        (sp,) = plan.services
        assert sp.status == "pending" and sp.reason == (
            "1 of 2 replicas placed; queue research at its quota: max 3 GPUs, 2 used, "
            "1 more replica(s) need 2")
        assert [(p.node_id, p.uuids) for p in sp.placements] == [("n-4090", R_UUIDS[:2])]
        assert not plan.node_remove  # its running replica keeps its GPUs and gate
        assert sp.set_max_replicas == 1  # Swarm's second task cannot join the held node
        assert plan.queues[0]["used_gpus"] == 2.0 and plan.queues[0]["blocked"] == ["a"]
        assert choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                                  preemptible_below=100) == []
    # room for the second replica: placed as usual
    planner, nodes, services, tasks = _scaled_up(4000)
    plan = planner.plan(nodes, services, tasks, FACTS)
    (sp,) = plan.services
    assert sp.status == "placed" and len(sp.placements) == 2
    assert plan.queues[0]["used_gpus"] == 4.0 and plan.queues[0]["blocked"] == []


def test_render_check_knows_the_configured_priority_classes(tmp_path: Any) -> None:
    """``render --check`` reads ``swarmgpu.priority`` with the config's classes, not the
    defaults: a configured class is valid, a default one the config dropped is named."""
    from click.testing import CliRunner

    from swarmgpu.cli import main
    from swarmgpu.manager.commands.render import check_stack
    from swarmgpu.manager.services.requests import request_errors

    gold = {f"{P}gpus": "1", f"{P}priority": "gold"}
    assert [e.key for e in request_errors(gold)] == [f"{P}priority"]  # not a default class
    assert request_errors(gold, classes={"gold": 10}) == []
    assert [e.key for e in request_errors({f"{P}gpus": "1", f"{P}priority": "batch"},
                                          classes={"gold": 10})] == [f"{P}priority"]
    stack = ("services:\n  app:\n    image: busybox\n    deploy:\n      labels:\n"
             f"        {P}gpus: '1'\n        {P}priority: gold\n")
    assert check_stack(stack, classes={"gold": 10}).errors == []
    assert "gold" in check_stack(stack).errors[0]
    src, cfg = tmp_path / "s.yml", tmp_path / "c.yml"
    src.write_text(stack)
    cfg.write_text('{"preemption": {"priority_classes": "gold=10"}}')
    env = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    ok = CliRunner().invoke(main, ["render", "--check", "--config", str(cfg), str(src)],
                            env=env)
    assert ok.exit_code == 0 and "1 GPU request(s)" in ok.stderr, ok.stderr
    bad = CliRunner().invoke(main, ["render", "--check", str(src)], env=env)
    assert bad.exit_code == 1 and f"{P}priority" in bad.stderr


def _two_research(prod_gpus: dict[str, str]
                  ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """research holds all 8 RTX 4090s as r1 (4) and r2 (4); prod services ask for GPUs."""
    h1 = Holding("r1", "n-4090", R_UUIDS[:4], (1000,) * 4)
    h2 = Holding("r2", "n-4090", R_UUIDS[4:], (1000,) * 4)
    nodes = [sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", {assign_key(P, "r1"): h1.label_value(),
                                            gate_key(P, "r1"): "true",
                                            assign_key(P, "r2"): h2.label_value(),
                                            gate_key(P, "r2"): "true"})]
    research = [sw_svc(n, {f"{P}gpus": "4", f"{P}queue": "research",
                         devices_key(P, "n-4090"): ",".join(u)})
                for n, u in (("r1", R_UUIDS[:4]), ("r2", R_UUIDS[4:]))]
    prod = [sw_svc(n, {f"{P}gpus": g, f"{P}gpu-product": "*RTX 4090*", f"{P}queue": "prod"})
            for n, g in prod_gpus.items()]
    tasks = [SwarmTask(f"t-{s.name}", s.id, "n-4090", 1, "running", "running", ())
             for s in research]
    return nodes, [*research, *prod], tasks


def _reclaims(prod_gpus: dict[str, str], research_guarantee: int) -> list[tuple[str, list[str]]]:
    from swarmgpu.manager.placement import Planner

    nodes, services, tasks = _two_research(prod_gpus)
    quotas = {"research": (research_guarantee, None), "prod": (8000, None)}
    plan = Planner(queues=quotas).plan(nodes, services, tasks, FACTS)
    got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                             preemptible_below=0)  # only the quotas make victims
    return [(p.service, sorted(v.service for v in p.victims)) for p in got]


def test_queue_take_back_counts_the_victims_of_one_queue_together() -> None:
    # each of r1, r2 alone leaves research at its guarantee of 4, both together do not
    assert _reclaims({"prod": "6"}, 4000) == []
    assert _reclaims({"prod": "6"}, 0) == [("prod", ["r1", "r2"])]
    # the same across two preemptors of one cycle: the second would take research below 4
    assert _reclaims({"p1": "4", "p2": "4"}, 4000) == [("p1", ["r1"])]
    assert _reclaims({"p1": "4", "p2": "4"}, 0) == [("p1", ["r1"]), ("p2", ["r2"])]


def _near_and_far(preemptors: dict[str, str], quotas: dict[str, tuple[int, int | None]],
                  far: int = 4, unlabelled: str = "") -> list[tuple[str, list[str]]]:
    """The 8 RTX 4090s are held one each: ``far`` of them by far1, far2, ... (queue far),
    the others by near1, near2, ... (queue near), started in that order (near's newest,
    which the priority rule stops first); ``preemptors`` (queue prod, name -> GPUs) ask
    for RTX 4090s; ``unlabelled``: far or near, whose holders name no queue. What the
    cycle reclaims, in order."""
    from swarmgpu.manager.placement import Planner

    names = [f"far{i}" for i in range(1, far + 1)] + [f"near{i}" for i in range(1, 9 - far)]
    labels: dict[str, str] = {}
    for name, u in zip(names, R_UUIDS, strict=True):
        labels |= held_labels(name, "n-4090", u)
    nodes = [sw_node("n-dgx", "gpu-node-1"), sw_node("n-4090", "gpu-node-2", labels)]
    held = [sw_svc(n, {f"{P}gpus": "1", devices_key(P, "n-4090"): u, **(
        {} if (q := n.rstrip("0123456789")) == unlabelled else {f"{P}queue": q})})
        for n, u in zip(names, R_UUIDS, strict=True)]
    prod = [sw_svc(n, {f"{P}gpus": g, f"{P}gpu-product": "*RTX 4090*", f"{P}queue": "prod"})
            for n, g in preemptors.items()]
    tasks = [SwarmTask(f"t-{s.name}", s.id, "n-4090", 1, "running", "running", (),
                       created_at=f"2026-01-01T10:0{i}:00Z") for i, s in enumerate(held)]
    plan = Planner(queues=quotas).plan(nodes, [*held, *prod], tasks, FACTS)
    got = choose_preemptions(plan, nodes, [*held, *prod], tasks, FACTS, prefix=P,
                             preemptible_below=0)  # only the quotas make victims
    return [(p.service, sorted(v.service for v in p.victims)) for p in got]


def test_reclaim_takes_from_the_queue_furthest_above_its_guarantee_first() -> None:
    # far holds 4 on a guarantee of 1 (4 times it), near 4 on 3 (1.33 times): far's
    # newest goes first though near's are newer, then far's next, down to its guarantee;
    # only then near, and near only down to its own
    quotas = {"far": (1000, None), "near": (3000, None), "prod": (8000, None)}
    got = _near_and_far({f"p{i}": "1" for i in range(1, 6)}, quotas)
    assert got == [("p1", ["far4"]), ("p2", ["far3"]), ("p3", ["far2"]), ("p4", ["near4"])]
    # measured relative to the guarantee (KAI's used / fair share): far holds 2 on 1 (2
    # times, 1 GPU over), near 6 on 4 (1.5 times, 2 GPUs over): far first
    quotas = {"far": (1000, None), "near": (4000, None), "prod": (8000, None)}
    assert _near_and_far({"p1": "1"}, quotas, far=2) == [("p1", ["far2"])]
    # no guarantee is furthest above it whatever it holds: far 2 on 0 before near 6 on 1
    quotas = {"far": (0, None), "near": (1000, None), "prod": (8000, None)}
    assert _near_and_far({"p1": "1"}, quotas, far=2) == [("p1", ["far2"])]


def test_work_of_no_queue_or_of_one_not_in_the_config_is_reclaimed_as_guaranteed_nothing(
        ) -> None:
    """far holds 4 of no queue, or of a queue not in the config; near 4 on a guarantee of
    1. Before, reclaim took only from a configured queue: prod got near's 3 and never
    far's, which kept GPUs prod was guaranteed. Now far is guaranteed nothing, as work in
    KAI-Scheduler's default queue (deserved 0): furthest above it, taken first, all of
    it; then near down to its guarantee."""
    quotas = {"near": (1000, None), "prod": (8000, None)}
    want = [("p1", ["far4"]), ("p2", ["far3"]), ("p3", ["far2"]), ("p4", ["far1"]),
            ("p5", ["near4"]), ("p6", ["near3"]), ("p7", ["near2"])]
    assert _near_and_far({f"p{i}": "1" for i in range(1, 9)}, quotas, unlabelled="far") == want
    assert _near_and_far({f"p{i}": "1" for i in range(1, 9)}, quotas) == want


def test_reclaim_goes_to_the_node_of_the_queue_furthest_above_its_guarantee() -> None:
    """near holds the DGX (gpu-node-1, first by hostname) as near1 and near2, 4 GPUs each,
    on a guarantee of 4; far the RTX 4090s (gpu-node-2) as far1 and far2 on 2: prod's 4
    GPUs come from far, though both nodes free them with one victim."""
    from swarmgpu.manager.placement import Planner

    d_uuids = tuple(g.uuid for g in DGX_F.gpus)
    halves = {"near1": ("n-dgx", d_uuids[:4]), "near2": ("n-dgx", d_uuids[4:]),
              "far1": ("n-4090", R_UUIDS[:4]), "far2": ("n-4090", R_UUIDS[4:])}
    labels: dict[str, dict[str, str]] = {"n-dgx": {}, "n-4090": {}}
    for name, (nid, u) in halves.items():
        labels[nid] |= {assign_key(P, name): Holding(name, nid, u, (1000,) * 4).label_value(),
                        gate_key(P, name): "true"}
    nodes = [sw_node("n-dgx", "gpu-node-1", labels["n-dgx"]),
             sw_node("n-4090", "gpu-node-2", labels["n-4090"])]
    services = [sw_svc(n, {f"{P}gpus": "4", f"{P}queue": n[:-1], devices_key(P, nid): ",".join(u)})
                for n, (nid, u) in halves.items()]
    services.append(sw_svc("prod", {f"{P}gpus": "4", f"{P}queue": "prod"}))
    tasks = [SwarmTask(f"t-{s.name}", s.id, halves[s.name][0], 1, "running", "running", ())
             for s in services[:4]]
    quotas = {"near": (4000, None), "far": (2000, None), "prod": (8000, None)}
    plan = Planner(queues=quotas).plan(nodes, services, tasks, FACTS)
    (p,) = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=0)
    assert (p.hostname, [v.service for v in p.victims]) == ("gpu-node-2", ["far1"])


def test_reclaim_never_takes_a_queue_below_its_guarantee() -> None:
    quotas = {"far": (1000, None), "near": (3000, None), "prod": (8000, None)}
    # 4 GPUs: far gives 3 (down to its 1), near 1 (down to its 3), no more; a second
    # request of the cycle finds none left above a guarantee
    assert _near_and_far({"p1": "4", "p2": "1"}, quotas) == [
        ("p1", ["far2", "far3", "far4", "near4"])]
    # at their guarantees, neither queue is reclaimed
    quotas = {"far": (4000, None), "near": (4000, None), "prod": (8000, None)}
    assert _near_and_far({"p1": "1"}, quotas) == []


def _held_by(held: dict[str, tuple[str, int, dict[str, str]]], pending: dict[str, dict[str, str]],
             quotas: dict[str, tuple[int, int | None]]) -> list[tuple[str, str, list[str]]]:
    """Each of ``held`` (name -> (node, GPUs, its labels)) holds that many whole GPUs of
    its node, the next free ones, and runs (the DGX has 7, its GPU 0 is in MIG mode);
    each of ``pending`` (name -> its labels) asks. What the cycle preempts: (preemptor,
    hostname, victims), in order."""
    from swarmgpu.manager.placement import Planner

    free = {"n-dgx": [g.uuid for g in DGX_F.gpus if not g.mig_enabled],
            "n-4090": list(R_UUIDS)}
    labels: dict[str, dict[str, str]] = {"n-dgx": {}, "n-4090": {}}
    services, tasks = [], []
    for i, (name, (nid, n, own)) in enumerate(held.items()):
        u, free[nid] = tuple(free[nid][:n]), free[nid][n:]
        labels[nid] |= {assign_key(P, name): Holding(name, nid, u, (1000,) * n).label_value(),
                        gate_key(P, name): "true"}
        s = sw_svc(name, {f"{P}gpus": str(n), devices_key(P, nid): ",".join(u), **own})
        services.append(s)
        tasks.append(SwarmTask(f"t-{name}", s.id, nid, 1, "running", "running", (),
                               created_at=f"2026-01-01T10:{i:02}:00Z"))
    services += [sw_svc(name, own) for name, own in pending.items()]
    nodes = [sw_node(nid, host, labels[nid])
             for nid, host in (("n-dgx", "gpu-node-1"), ("n-4090", "gpu-node-2"))]
    plan = Planner(queues=quotas).plan(nodes, services, tasks, FACTS)
    got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                             preemptible_below=100)
    return [(p.service, p.hostname, sorted(v.service for v in p.victims)) for p in got]


# No victim: not below the preemptors' priority, and opted out of reclaim (work of no
# queue is guaranteed nothing)
KEEP = {f"{P}priority": "100", f"{P}preemptible": "false"}
LOW = {f"{P}priority": "0"}


def test_one_reclaim_victim_goes_before_two_by_priority() -> None:
    """Fewest victims first, whichever way they are taken: big (research, above its
    guarantee of 0) frees prod's 2 GPUs alone, a and b (priority 0) only together."""
    research = {f"{P}priority": "100", f"{P}queue": "research"}
    prod = {"prod": {f"{P}gpus": "2", f"{P}priority": "100", f"{P}queue": "prod"}}
    quotas = {"research": (0, None), "prod": (8000, None)}
    held = {"a": ("n-4090", 1, LOW), "b": ("n-4090", 1, LOW), "big": ("n-4090", 2, research),
            "keep": ("n-4090", 4, KEEP), "keep1": ("n-dgx", 7, KEEP)}
    assert _held_by(held, prod, quotas) == [("prod", "gpu-node-2", ["big"])]
    # across nodes: a and b on the DGX (first by hostname), big on the RTX 4090s
    held = {"a": ("n-dgx", 1, LOW), "b": ("n-dgx", 1, LOW), "keep1": ("n-dgx", 5, KEEP),
            "big": ("n-4090", 2, research), "keep": ("n-4090", 6, KEEP)}
    assert _held_by(held, prod, quotas) == [("prod", "gpu-node-2", ["big"])]
    # on one node, the rule alone: among single victims, one by priority goes first
    big = Candidate("big", "id-big", "n", 100, "", ("G0", "G1"), quota="research")
    a, b = _c("a", 0, 1, first=2), _c("b", 0, 1, first=3)
    over = {"research": (float("inf"), 2.0)}
    assert pick_victims(2, set(), [a, b, big], _holders([a, b, big]), over=over) == (big,)
    assert pick_victims(1, set(), [a, b, big], _holders([a, b, big]), over=over) == (a,)


def test_priority_never_takes_another_queue_below_its_guarantee() -> None:
    """high (priority 100) may stop b1 (priority 0) by priority only while b1's queue,
    another queue with a guarantee, stays at or above it without b1 (KAI-Scheduler
    preempts by priority within a queue only; across queues it reclaims)."""
    low, b_keep = {f"{P}priority": "0", f"{P}queue": "b"}, {**KEEP, f"{P}queue": "b"}
    held = {"b1": ("n-4090", 2, low), "b3": ("n-4090", 6, b_keep), "keep1": ("n-dgx", 7, KEEP)}
    high = {"high": {f"{P}gpus": "2", f"{P}priority": "100", f"{P}queue": "a"}}
    # b holds 8 on a guarantee of 8: none of it goes to another queue by priority
    assert _held_by(held, high, {"a": (8000, None), "b": (8000, None)}) == []
    # a preemptor with no queue is not b's either
    assert _held_by(held, {"high": {f"{P}gpus": "2", f"{P}priority": "100"}},
                    {"b": (8000, None)}) == []
    # 8 on 6: b stays at its guarantee without b1
    assert _held_by(held, high, {"a": (8000, None), "b": (6000, None)}) == [
        ("high", "gpu-node-2", ["b1"])]
    # no guarantee (0, or b not configured): as without queues
    for quotas in ({"a": (8000, None), "b": (0, None)}, {"a": (8000, None)}):
        assert _held_by(held, high, quotas) == [("high", "gpu-node-2", ["b1"])]
    # within one queue, priority preempts as without queues, whatever its guarantee
    assert _held_by(held, {"high": {**high["high"], f"{P}queue": "b"}},
                    {"b": (8000, None)}) == [("high", "gpu-node-2", ["b1"])]
    # counted with the cycle's earlier victims: h1 takes b2 (the newest), down to 6;
    # b1 would take b below it, by priority as by reclaim (b3 is no one's victim)
    b3 = {**b_keep, f"{P}preemptible": "false"}
    held = {"b1": ("n-4090", 2, low), "b2": ("n-4090", 2, low), "b3": ("n-4090", 4, b3),
            "keep1": ("n-dgx", 7, KEEP)}
    two = {n: high["high"] for n in ("h1", "h2")}
    assert _held_by(held, two, {"a": (8000, None), "b": (6000, None)}) == [
        ("h1", "gpu-node-2", ["b2"])]
    # and with the set's: 4 GPUs are b1 and b2 together, 8 - 4 on a guarantee of 5
    four = {"high": {**high["high"], f"{P}gpus": "4"}}
    assert _held_by(held, four, {"a": (8000, None), "b": (5000, None)}) == []
    assert _held_by(held, four, {"a": (8000, None), "b": (4000, None)}) == [
        ("high", "gpu-node-2", ["b1", "b2"])]


# --- a waiting preemption holds the next move slot ---------------------------------------


def _slot_daemon(tmp: str, monkeypatch: pytest.MonkeyPatch
                 ) -> tuple[RecordingSwarm, Daemon]:
    """The wired daemon over _over_budget's cluster (other's move in flight, budgets 1 and
    1), and ``third`` (DGX GPU 6) that the rebalancer's policies propose to move to
    gpu-node-3 every cycle (``plan_moves`` stands in for them)."""
    from swarmgpu.manager.cycle import rebalance
    from swarmgpu.manager.rebalance.moves import Move, Proposal, Trigger

    sw, _pre, _snap, _plan = _over_budget(1, 1, started_at=time.time())  # not timed out
    u = DGX_F.gpus[6].uuid
    sw._nodes["n-x"] = sw_node("n-x", "gpu-node-3")
    dgx = sw._nodes["n-dgx"]
    sw._nodes["n-dgx"] = replace(dgx, labels={**dgx.labels, **held_labels("third", "n-dgx", u)})
    sw._services["id-third"] = sw_svc("third", {f"{P}gpus": "1", devices_key(P, "n-dgx"): u})
    sw.run_task(SwarmTask("t-third", "id-third", "n-dgx", 1, "running", "running", ()))
    third = Move(service="third", service_id="id-third", source_node="n-dgx",
                 source_host="gpu-node-1", source_uuids=(u,), source_milli=(1000,),
                 target_node="n-x", target_host="gpu-node-3", target_gpus=(0,),
                 target_uuids=("GPU-x0",), target_milli=(1000,), trigger=Trigger.CONSOLIDATION,
                 window_s=None, reason="consolidation", gain="a node freed")
    monkeypatch.setattr(rebalance, "plan_moves", lambda *_a: Proposal(moves=[third]))
    return sw, _daemon(sw, tmp, moves=True, dry_run=False)


def _moving(sw: RecordingSwarm) -> set[str]:
    return {st.service for st in read_records(sw.swarm_labels(), P).values()}


def _finish_other(sw: RecordingSwarm) -> None:
    """other's move ends: its record, service and labels go (the slot frees)."""
    del sw._swarm_labels[record_key(P, "id-other")]
    del sw._services["id-other"]
    for nid, n in list(sw._nodes.items()):
        sw._nodes[nid] = replace(n, labels={k: v for k, v in n.labels.items()
                                            if not k.endswith(".other")})


def test_a_waiting_preemption_keeps_the_freed_move_slot_from_the_rebalancer(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rebalancer runs before preemption each cycle: when other's move ended, its
    pack move took the freed slot and high's preemption waited again (and again, while
    the policies found a move). Now the preemption that waited holds that slot: the pack
    move is not started, the victim's move is."""
    sw, d = _slot_daemon(str(tmp_path), monkeypatch)
    d.cycle()
    assert _moving(sw) == {"other"}  # the pack move and the victim's both wait
    _finish_other(sw)
    d.cycle()
    assert _moving(sw) == {"small"}
    (st,) = read_records(sw.swarm_labels(), P).values()
    assert (st.trigger, st.target_host) == ("preemption", "gpu-node-1")


def test_the_slot_is_free_again_once_the_preemption_no_longer_waits(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The preemptor gone (or placed, or its victim refused for another reason): the
    cycle's preemption step waits no more, and the rebalancer's next cycle moves."""
    sw, d = _slot_daemon(str(tmp_path), monkeypatch)
    d.cycle()
    _finish_other(sw)
    del sw._services["id-high"]
    sw.stop_tasks("id-high", "")
    d.cycle()  # the rebalancer held the slot; preemption found nothing to wait for
    assert _moving(sw) == set()
    d.cycle()
    assert _moving(sw) == {"third"}


def test_a_preempter_reserves_exactly_the_moves_that_waited_last_cycle() -> None:
    """``Preempter.reserved``: the victim's move while it waits for the budgets; nothing
    once it started, nor when the victim is refused for another reason (then stopped)."""
    sw, pre, snap, plan = _over_budget(1, 1)
    pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    (m,) = pre.reserved()
    assert (m.service, m.source_host, m.target_host, m.trigger) == (
        "small", "gpu-node-2", "gpu-node-1", "preemption")
    del sw._swarm_labels[record_key(P, "id-other")]  # the budget frees: the move starts
    pre.cycle(sw, replace(snap, swarm_labels=sw.swarm_labels()), plan,
              FACTS, now=5010.0)  # type: ignore[arg-type]
    assert pre.reserved() == () and _moving(sw) == {"small"}
    sw, pre, snap, plan = _over_budget(1, 1, {f"{P}rebalance": "never"})
    pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    assert pre.reserved() == ()  # stopped, not waiting


@pytest.mark.parametrize(("reserved_on", "started"), [
    (("n-4090", "n-dgx"), False),  # it shares n-dgx: max_moves_per_node holds it
    (("n-y", "n-x"), True),  # other nodes, and a slot of max_moves_per_cycle left
])
def test_a_reserved_move_holds_its_slots_of_the_budgets_not_every_move(
        reserved_on: tuple[str, str], started: bool) -> None:
    """The mover counts the reserved moves as admitted before its own (``admit``): with
    max_moves_per_cycle 2 and max_moves_per_node 1, a move that needs a node the
    reserved one needs waits, and says for whom; one elsewhere starts."""
    from support.forged import victim_cluster, victim_move

    from swarmgpu.manager.rebalance.mover import Mover
    from swarmgpu.manager.rebalance.moves import Trigger

    sw = victim_cluster({})
    held = replace(victim_move(), service="small", source_node=reserved_on[0],
                   target_node=reserved_on[1], source_host=reserved_on[0][2:],
                   target_host=reserved_on[1][2:], trigger=Trigger.PREEMPTION,
                   reason="room for high (priority 100)")
    mover = Mover(sw, RebalanceConfig(dry_run=False, max_moves_per_cycle=2,  # type: ignore[arg-type]
                                      max_moves_per_node=1), prefix=P, dry_run=False)
    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m)), level="INFO")
    try:
        mover.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks(), [held])
    finally:
        logger.remove(sink)
    assert (_moving(sw) == {"victim"}) is started
    if not started:
        assert any("not started: budget: 1 move(s) per node per cycle, held for preemption "
                   "of small 4090 -> dgx (room for high (priority 100)), which waits" in m
                   for m in said), said


def _publishing(s: SwarmService, port: int = 8000) -> SwarmService:
    """``s`` publishing ``port`` in host mode (Swarm runs one such task per node)."""
    ports = [{"Protocol": "tcp", "TargetPort": 80, "PublishedPort": port, "PublishMode": "host"}]
    return replace(s, spec={**s.spec, "EndpointSpec": {"Ports": ports}})


@pytest.mark.parametrize(("victim_port", "preempts"), [(8000, True), (9000, True)])
def test_a_victim_binding_the_preemptors_host_port_is_preempted_as_any_other(
        victim_port: int, preempts: bool) -> None:
    """batch holds the 4090s and its task binds host port 8000 there, which high publishes
    too: stopping batch frees the port with the GPUs. Before: the node was refused to
    high by the port (``hostports``) and high stayed pending for good."""
    from swarmgpu.manager.cycle.oneshot_plan import plan_as_daemon

    nodes, (batch, high), tasks = _gpu_cluster({f"{P}priority": "0"}, {f"{P}priority": "100"})
    services = [_publishing(batch, victim_port), _publishing(high)]
    plan = plan_as_daemon(snapshot(nodes, services, tasks),
                          Config(preemption=PreemptionConfig(dry_run=False)))
    sp = next(sp for sp in plan.services if sp.name == "high")
    assert sp.status == "pending"
    said = [w for w in sp.warnings if "preempt batch" in w]
    assert bool(said) is preempts, sp.warnings


def test_a_node_another_services_task_binds_the_port_on_is_no_preemption_target() -> None:
    """The port is bound by a task of a service that is no victim (a proxy holding no
    GPU): preempting batch there would free GPUs high still cannot run on."""
    from swarmgpu.manager.cycle.oneshot_plan import plan_as_daemon

    nodes, (batch, high), tasks = _gpu_cluster({f"{P}priority": "0"}, {f"{P}priority": "100"})
    proxy = _publishing(sw_svc("proxy", {}, gated=False))
    services = [batch, _publishing(high), proxy]
    tasks = [*tasks, SwarmTask("t-proxy", proxy.id, "n-4090", 1, "running", "running", ())]
    plan = plan_as_daemon(snapshot(nodes, services, tasks),
                          Config(preemption=PreemptionConfig(dry_run=False)))
    sp = next(sp for sp in plan.services if sp.name == "high")
    assert sp.status == "pending" and not [w for w in sp.warnings if "preempt" in w]


def test_no_victim_is_stopped_on_a_node_whose_facts_are_stale(tmp_path: Any) -> None:
    # Placement adds nothing to a node whose agent is silent past health.node_lost_grace_s
    # (agentbook.stale_nodes): a victim stopped there freed GPUs its preemptor never got.
    sw = RecordingSwarm(*_gpu_cluster({f"{P}priority": "0"}, {f"{P}priority": "100"}))
    d = _daemon(sw, str(tmp_path), dry_run=False)
    d.book.records["n-4090"].last_ok = time.time() - d.cfg.health.node_lost_grace_s - 1
    d.cycle()
    assert preempted_state(sw.service("id-batch").labels, P) is None
    assert assign_key(P, "batch") in sw.node("n-4090").labels


def test_plan_previews_no_victim_on_a_node_whose_agent_answered_stale_facts() -> None:
    # The daemon's step leaves a stale node's facts out of preemption (preempt_step);
    # plan's preview read them all, and named a victim the daemon never stops.
    from swarmgpu.manager.cycle.oneshot_plan import plan_as_daemon

    nodes, services, tasks = _gpu_cluster({f"{P}priority": "0"}, {f"{P}priority": "100"})
    snap = snapshot(nodes, services, tasks)
    cfg = Config(preemption=PreemptionConfig(dry_run=False))

    def said() -> list[str]:
        sp = next(sp for sp in plan_as_daemon(snap, cfg).services if sp.name == "high")
        assert sp.status == "pending"
        return [w for w in sp.warnings if "preempt batch" in w]

    assert said()  # (its facts fresh)
    snap.facts["n-4090"] = replace(snap.facts["n-4090"], facts_age_s=400.0)
    assert not said()
