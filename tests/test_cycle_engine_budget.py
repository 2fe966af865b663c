"""The daemon's cycle has one engine budget (manager.cycle.budget): each request ends
within its own deadline (twice the client's timeout), but a cycle of several slow ones
outlasted the 90 s the watchdog allows a cycle, and systemd restarted the daemon. Past
the budget the cycle ends: the read in flight is cut (each read's deadline is what is
left of the budget), no write starts (one in flight is made whole), no further step runs
(none on a snapshot whose read was cut), one line says what it was reading, the time and
the fix, and the next cycle reads afresh (nothing read past the budget kept for it). Real
docker-py reads of an engine on loopback trickling its answers
(tests/support/loop_engine.py), the budget cut short for the test and each read's own
deadline far past it, each read far within the budget or far past it: a loaded
machine's lag flips none."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.empty_swarm import EmptySwarm
from support.engine_stub import Engine, start_engine
from support.forged import (
    T_UUID,
    V_UUID,
    P,
    RecordingSwarm,
    snapshot,
    sw_node,
    sw_svc,
    victim_cluster,
    victim_move,
)
from support.loglines import log_lines

from swarmgpu.core.config import (
    AgentsConfig,
    Config,
    HttpConfig,
    PlacementConfig,
    PreemptionConfig,
    RebalanceConfig,
    SyncConfig,
)
from swarmgpu.manager import daemon as daemon_module
from swarmgpu.manager.cycle.budget import BudgetGate, OverBudget, engine_budget_s
from swarmgpu.manager.cycle.grants import ImageEnvs
from swarmgpu.manager.cycle.placement import gates_ready_now
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.cycle.rebalance import Rebalancer
from swarmgpu.manager.cycle.releases import hold_stale_releases
from swarmgpu.manager.cycle.session import CycleSession
from swarmgpu.manager.cycle.victimstop import close_gates
from swarmgpu.manager.cycle.workloadstore import load_workload
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.engine.stop import Stopped
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, PlacementPlan, assign_key, gate_key
from swarmgpu.manager.placement.preempt import Candidate, Preemption
from swarmgpu.manager.placement.victimmoves import Relocation
from swarmgpu.manager.rebalance.mover import Mover
from swarmgpu.manager.rebalance.moves import Outcome
from swarmgpu.manager.services.overshare import Restarter, ServiceUse
from swarmgpu.swarm import answerjson, identity
from swarmgpu.swarm.client import (
    SwarmClient,
    SwarmError,
    SwarmNode,
    SwarmService,
    SwarmTask,
    SwarmUnavailable,
)
from tests.support.loop_engine import VERSION, Answer, LoopEngine, Trickled, loop_engine

BUDGET_S = 2.5
# Each read's own deadline is 20 s (the client's 1 s timeout, ``ANSWER_DEADLINE_TIMEOUTS``
# 20 times), far past the budget: only the budget can cut a read here. A quick read
# (10 bytes a 20 ms: 0.2 s) ends far within the budget, a long one (600 bytes: 12 s)
# far past it, so a loaded machine's lag flips neither; a long read cut is counted by
# the bytes of it sent (``cut_short``), not timed.
DEADLINE_TIMEOUTS = 20.0
QUICK = Trickled(b"[" + b" " * 8 + b"]", 0.02)
QUICK_INFO = Trickled(b"{" + b" " * 8 + b"}", 0.02)
LONG = Trickled(b"[" + b" " * 598 + b"]", 0.02)
LONG_INFO = Trickled(b"{" + b" " * 598 + b"}", 0.02)


@pytest.fixture
def errors() -> Iterator[list[str]]:
    yield from log_lines("ERROR")


class SlowEngine(EmptySwarm):
    """The leader's engine, its nodes, services and tasks read by swarmgpu's own client
    at ``url``; its writes recorded (when each was let through the daemon's gate)."""

    def __init__(self, url: str) -> None:
        self.client = SwarmClient(url, timeout_s=1)
        self.written: list[float] = []

    def nodes(self) -> Any:
        return self.client.nodes()

    def services(self) -> Any:
        return self.client.services()

    def tasks(self, filters: Any = None, *, states: Any = None, read: Any = None) -> Any:
        return self.client.tasks(filters)

    def write(self) -> None:
        self.before_write()  # (the write gate's ask: actuator.Writes)
        self.written.append(time.monotonic())


class ReadWrite:
    """A step that reads ``docker info`` and writes after each read, three times, the
    engine answering each read as ``answers`` says, in turn; a read that fails is its own
    loss (as the daemon's readers take one), the write goes on."""

    name = "read-write"
    requires: frozenset[Any] = frozenset()
    provides: frozenset[Any] = frozenset()

    def __init__(self, swarm: SlowEngine, engine: LoopEngine, answers: list[Answer]) -> None:
        self.swarm, self.engine, self.answers = swarm, engine, answers

    def run(self, session: CycleSession) -> None:
        for answer in self.answers:
            self.engine.answers["/info"] = answer
            with contextlib.suppress(SwarmError):
                self.swarm.client.info()
            self.swarm.write()

    def stand_by(self) -> None:
        return None


def budgeted(monkeypatch: pytest.MonkeyPatch, tmp: Path, swarm: SlowEngine,
             identity: str = "none", watch_s: float = 0) -> Daemon:
    monkeypatch.setattr(answerjson, "ANSWER_DEADLINE_TIMEOUTS", DEADLINE_TIMEOUTS)
    monkeypatch.setattr(daemon_module, "engine_budget_s", lambda *_: BUDGET_S,
                        raising=False)
    cfg = Config(state_dir=str(tmp), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(timeout_s=0.5, identity=identity, watch_s=watch_s),
                 http=HttpConfig(listen="127.0.0.1:0"))
    return Daemon(cfg, swarm=swarm)  # type: ignore[arg-type]


def cut_short(engine: LoopEngine, path: str, nth: int = 1) -> None:
    """``engine``'s ``nth`` answer at ``path``, a long one, was cut: its connection
    closed with less of it sent than the whole, which would have taken 12 s (its
    deadline 20 s). Counted, not timed: a loaded machine's lag stretches the wall time,
    not this (the line said is what cut it: the budget)."""
    waited = time.monotonic() + 10  # (a hang guard: the engine notes it as it closes)
    while len(engine.sent_to.get(path, ())) < nth:
        assert time.monotonic() < waited, engine.sent_to
        time.sleep(0.01)
    assert engine.sent_to[path][nth - 1] < len(LONG.body), engine.sent_to


def aborted_at_budget(d: Daemon, engine: LoopEngine, path: str) -> None:
    """``d``'s cycle ends aborted, its long read of ``path`` cut (the line it said names
    the budget: each caller reads it)."""
    assert d.cycle().aborted
    cut_short(engine, path)


def test_a_steps_slow_reads_end_the_cycle_at_its_budget_no_write_after_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, errors: list[str]) -> None:
    with loop_engine({"/nodes": b"[]", "/services": b"[]", "/tasks": b"[]"}) as engine:
        swarm = SlowEngine(f"tcp://127.0.0.1:{engine.server_port}")
        d = budgeted(monkeypatch, tmp_path, swarm)
        step = ReadWrite(swarm, engine, [QUICK_INFO, QUICK_INFO, LONG_INFO])
        d.use([step])
        report = d.cycle()
        assert report.aborted
        cut_short(engine, "/info", 3)
        # (the third read cut, its write not made: the gate let none through past it)
        assert len(swarm.written) == 2, swarm.written
        (said,) = errors
        assert "cycle ended at its engine budget" in said and "reading GET /info" in said
        assert "1 write(s) not made" in said and "docker info" in said, said
        step.answers = [b"{}"] * 3  # (the engine sound again)
        swarm.written.clear()
        report = d.cycle()
        assert not report.aborted and len(swarm.written) == 3
        assert len(errors) == 1, errors


def test_slow_snapshot_reads_end_the_cycle_at_its_budget_the_next_reads_afresh(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, errors: list[str]) -> None:
    answers: dict[str, Answer] = {"/nodes": QUICK, "/services": QUICK, "/tasks": LONG}
    with loop_engine(dict(answers)) as engine:
        d = budgeted(monkeypatch, tmp_path, SlowEngine(f"tcp://127.0.0.1:{engine.server_port}"))
        aborted_at_budget(d, engine, "/tasks")
        (said,) = errors
        assert "cycle ended at its engine budget" in said, said
        assert "while reading GET /tasks" in said, said  # (nodes, services read)
        assert d.last_report is None  # (nothing acted on)
        engine.answers.update(dict.fromkeys(answers, b"[]"))
        assert not d.cycle().aborted and len(errors) == 1, errors
        assert d.last_report is not None


class PkiEngine(SlowEngine):
    """``SlowEngine`` whose swarm root CA (agents.identity swarm-pki) is read too."""

    def trust_root(self) -> str:
        return self.client.trust_root()


@contextlib.contextmanager
def pki_budgeted(monkeypatch: pytest.MonkeyPatch,
                 tmp_path: Path) -> Iterator[tuple[Daemon, LoopEngine]]:
    """A budgeted daemon reading the swarm root CA of an empty swarm whose GET /swarm
    answers past the budget (``LONG_INFO``)."""
    monkeypatch.setattr(identity, "_SOURCES", {})  # (no identity another test built)
    with loop_engine({"/nodes": b"[]", "/services": b"[]", "/tasks": b"[]",
                      "/swarm": LONG_INFO}) as engine:
        yield budgeted(monkeypatch, tmp_path, PkiEngine(f"tcp://127.0.0.1:{engine.server_port}"),
                       identity="swarm-pki"), engine


def test_a_snapshot_whose_read_was_cut_at_the_budget_is_not_planned_from(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, errors: list[str]) -> None:
    # The agents' identity (the swarm root CA, GET /swarm) is read within the snapshot,
    # and its failure taken as every agent's (fetch_agents): cut at the budget, the
    # snapshot said every agent unreadable, and label sync (the first step, which a stop
    # never skips) ran on it.
    with pki_budgeted(monkeypatch, tmp_path) as (d, engine):
        (label_sync,) = d.pipeline.steps
        runs: list[CycleSession] = []
        sync = label_sync.run

        def counted(session: CycleSession) -> None:
            runs.append(session)
            sync(session)

        monkeypatch.setattr(label_sync, "run", counted)
        aborted_at_budget(d, engine, "/swarm")
        (said,) = errors
        assert "cycle ended at its engine budget" in said, said
        assert "while reading GET /swarm" in said, said
        assert runs == [] and d.last_report is None


class SlowFirstList(SlowEngine):
    """``SlowEngine`` whose first node list alone is read of the engine (its answer at
    ``/nodes``); the others list none at once."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.lists = 0

    def nodes(self) -> Any:
        self.lists += 1
        return self.client.nodes() if self.lists == 1 else []


def test_the_facts_watch_beside_a_cycle_holds_it_no_longer_than_its_own_interval(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The facts watch (every agents.watch_s) reads the nodes through the daemon's cache
    # while the event stream is up, under the lock the cycle's read takes too (and the
    # agents' identity's): its reads had no budget, so a slow list of its held the
    # cycle, waiting on that lock, past its own budget.
    with loop_engine({"/nodes": LONG, "/services": b"[]", "/tasks": b"[]"}) as engine:
        swarm = SlowFirstList(f"tcp://127.0.0.1:{engine.server_port}")
        d = budgeted(monkeypatch, tmp_path, swarm, watch_s=1.0)
        d.leader = True
        d.cache.opened()  # (the stream up: the watch reads through the cache)
        watch = threading.Thread(target=d._watch_facts)
        watch.start()
        begun = time.monotonic()
        while swarm.lists == 0 and time.monotonic() - begun < 10:
            time.sleep(0.01)
        assert swarm.lists == 1  # (its slow list under way, the cache's lock held)
        report = d.cycle()
        watch.join(30)
        # The watch's list was cut at its own interval (counted: its answer not sent
        # whole) and the cycle, waiting on the lock, was not held past its budget: held
        # so, its own reads after the wait were refused and it ended aborted.
        cut_short(engine, "/nodes")
        assert not report.aborted


def test_a_cycles_budget_bounds_its_own_reads_not_another_threads_nor_after_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (the events thread, the facts watch and the HTTP server's handlers read beside the
    # cycle; plan, status and audit have no cycle: each request keeps its own deadline)
    monkeypatch.setattr(answerjson, "ANSWER_DEADLINE_TIMEOUTS", DEADLINE_TIMEOUTS)
    with loop_engine({"/tasks": QUICK}) as engine:
        client = SwarmClient(f"tcp://127.0.0.1:{engine.server_port}", timeout_s=1)
        beside: list[object] = []
        with answerjson.within_budget(answerjson.CycleBudget(0.0)):  # (passed)
            with pytest.raises(SwarmUnavailable, match="the cycle's engine budget"):
                client.tasks()
            reader = threading.Thread(target=lambda: beside.append(client.tasks()))
            reader.start()
            reader.join(30)
        assert beside == [[]]
        for _ in range(3):
            assert client.tasks() == []


def test_the_budget_leaves_the_watchdogs_ping_in_time() -> None:
    assert engine_budget_s(30, 120) == 70  # (the unit's WatchdogSec=120s)
    assert engine_budget_s(30, None) == 70  # (none: the 2 x interval + 60 s asked for)
    assert engine_budget_s(60, 180) == 100
    assert engine_budget_s(30, 40) == 10  # (too short a watchdog: warned at start)


def posts(engine: Engine) -> int:
    """The service updates ``engine`` was sent."""
    return sum(b"POST " in seen and b"/services/svc1/update" in seen for seen in engine.seen)


def test_a_write_the_gate_let_through_is_made_whole_its_read_not_cut(tmp_path: Path) -> None:
    # A write is a read of its object and a post (read-modify-write): the gate asks the
    # budget before it, and a write in flight is never cut. Here the budget passes as
    # the first write of an operation lands (preemption's hour stored just before its
    # victim's move: Writes.before_first); before, the victim's read was refused, the
    # hour spent and the move not made.
    engine = start_engine(str(tmp_path / "engine.sock"))
    engine.raw[b"/version"] = VERSION
    engine.raw[b"/nodes"] = b"[]"  # (listed before a spec write: swarm.engineskew)
    try:
        client = SwarmClient(f"unix://{tmp_path}/engine.sock", timeout_s=5)
        gate = BudgetGate(60.0)
        client.before_write = gate.check
        writes = Writes(client, dry_run=False, who="test")

        def relabel(spec: Any) -> Any:
            return {**spec, "Labels": {**spec["Labels"], "swarmgpu.gpus": "2"}}

        def budget_passes() -> None:  # (within its slack: past that, no request is sent)
            gate.budget.start -= 61

        with answerjson.within_budget(gate.budget):
            with writes.before_first(budget_passes):
                assert writes.service_spec("svc1", relabel)
            assert posts(engine) == 1
            with pytest.raises(OverBudget):  # (the next write: refused at the gate)
                writes.service_spec("svc1", relabel)
        assert gate.writes.left == 1 and posts(engine) == 1
    finally:
        engine.shutdown()


def test_an_image_read_cut_at_the_budget_is_not_kept_the_next_cycle_reads_it() -> None:
    # The grants step keeps each image's env, an engine error too, for its TTL (5 min):
    # a read cut at the budget (or not sent past it) says nothing of the image, and kept,
    # it made the next cycles take that image as unknown, "treated as CUDA images
    # behave", its services ungranted (voided with placement.ungranted: void). Nor is it
    # unknown this cycle (its services warned ungranted): the step ends there.
    env = ["NVIDIA_VISIBLE_DEVICES=none"]
    with loop_engine({"/images/json": b'[{"Id": "sha256:ab"}]',
                      "/images/ab/json": json.dumps({"Id": "sha256:ab",
                                                     "Config": {"Env": env}}).encode()
                      }) as engine:
        images = ImageEnvs(SwarmClient(f"tcp://127.0.0.1:{engine.server_port}"))
        with answerjson.within_budget(answerjson.CycleBudget(0.0)), \
                pytest.raises(Stopped, match="the cycle's engine budget"):  # (passed)
            images.lookup(["app:1"])
        (read,) = images.lookup(["app:1"]).values()  # (the next cycle)
        assert read.env == tuple(env)


# --- a read cut at the budget is no object's failure ---------------------------------
# Past the budget every read is refused at once: a reader that takes one object's
# failure for its own logged one error per object (a move step, a move start, counted
# failed, an image's services taken for ungranted), beside the budget's one line.


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    yield from log_lines("WARNING")


def a_cut_read() -> SwarmError:
    """What swarmgpu's client raises for a read past its cycle's budget (refused before
    it is sent: no timing)."""
    with loop_engine({}) as engine:
        client = SwarmClient(f"tcp://127.0.0.1:{engine.server_port}", timeout_s=1)
        with answerjson.within_budget(answerjson.CycleBudget(0.0)):  # (passed)
            try:
                client.info()
            except SwarmError as exc:
                return exc
    raise AssertionError("a read past the budget was sent")


def test_a_read_cut_at_the_budget_is_not_said_an_unreachable_engine() -> None:
    said = str(a_cut_read())
    assert "the cycle's engine budget" in said and "unreachable" not in said, said


class CutReads(RecordingSwarm):
    """The stand-in, whose reads named in ``cut`` are refused at the cycle's budget."""

    cut: frozenset[str] = frozenset()

    def node(self, node_id: str) -> SwarmNode:
        if "node" in self.cut:
            raise a_cut_read()
        return super().node(node_id)

    def service(self, service_id: str) -> SwarmService:
        if "service" in self.cut:
            raise a_cut_read()
        return super().service(service_id)


def mover_of(sw: RecordingSwarm) -> Mover:
    cfg = RebalanceConfig(dry_run=False, max_moves_per_cycle=9, max_moves_per_node=9,
                          move_timeout_s=120.0)
    return Mover(sw, cfg, prefix=P, dry_run=False,  # type: ignore[arg-type]
                 clock=lambda: 1000.0)


def test_a_move_start_whose_read_is_cut_at_the_budget_is_not_a_failed_move(
        warnings: list[str]) -> None:
    base = victim_cluster({})
    sw = CutReads(base.nodes(), base.services(), base.tasks())
    sw.cut = frozenset({"service"})
    m = mover_of(sw)
    with pytest.raises(Stopped):  # (the step ends, and the cycle: ``Daemon.cycle``)
        m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    assert list(m.recent) == [] and warnings == [], (m.recent, warnings)
    sw.cut = frozenset()  # (the next cycle, within its budget: the move starts)
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in m.recent] == [Outcome.STARTED]


def test_a_move_step_whose_read_is_cut_at_the_budget_is_no_failed_step(
        warnings: list[str]) -> None:
    base = victim_cluster({})
    sw = CutReads(base.nodes(), base.services(), base.tasks())
    assert mover_of(sw).start(victim_move(), sw.service("id-victim")).ok
    sw.cut = frozenset({"node"})  # (a move in flight reads its nodes)
    with pytest.raises(Stopped):
        mover_of(sw).run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert warnings == [], warnings


class WebAuthSeen:
    """The daemon's HTTPS identity, recording what it was told."""

    required = True

    def __init__(self) -> None:
        self.failed_with: list[str] = []

    def update(self, auth: Any) -> None:
        return None

    def failed(self, why: str) -> None:
        self.failed_with.append(why)


def test_an_identity_read_cut_at_the_budget_leaves_the_https_identity_as_it_was(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, warnings: list[str]) -> None:
    # The HTTPS identity is read before the snapshot (the swarm root CA, GET /swarm):
    # cut at the budget, it warned "no HTTPS for manager certificates" beside the line.
    with pki_budgeted(monkeypatch, tmp_path) as (d, engine):
        d.web_auth = WebAuthSeen()  # type: ignore[assignment]
        aborted_at_budget(d, engine, "/swarm")
        assert d.web_auth.failed_with == []  # type: ignore[attr-defined]
        (said,) = warnings
        assert "cycle ended at its engine budget" in said, said


class CutLabels:
    """A swarm whose swarm object's labels (the move records, the workload model, the
    budget hours) are read past the cycle's budget."""

    def swarm_labels(self) -> Any:
        raise a_cut_read()


def test_the_workload_models_read_cut_at_the_budget_is_not_warned_of(
        tmp_path: Path, warnings: list[str]) -> None:
    # (it warned "cannot read the stored workload model" and planned from the prior)
    with pytest.raises(Stopped):
        load_workload(Config(state_dir=str(tmp_path)), CutLabels())
    assert warnings == [], warnings


def test_preemptions_move_records_read_cut_at_the_budget_is_not_warned_of(
        tmp_path: Path, warnings: list[str]) -> None:
    # (it said the records unreadable, "nothing is preempted", once while it lasted)
    preempter = Preempter(Config(state_dir=str(tmp_path)))
    with pytest.raises(Stopped):
        preempter._records(CutLabels(), per_hour=1)  # type: ignore[arg-type]
    assert warnings == [], warnings


class NoWrites:
    """The actuator's gate, its writes recorded (none should come)."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def service_spec(self, sid: str, *_: Any) -> None:
        self.writes.append(sid)

    def node_labels(self, nid: str, *_: Any) -> None:
        self.writes.append(nid)


@pytest.mark.parametrize("read", ["node", "service"])
def test_a_victim_stops_read_cut_at_the_budget_is_no_error(
        read: str, warnings: list[str]) -> None:
    # (the victims' node, then each victim, read again before the stop's first write:
    # cut, it said "cannot read node" or the stop not made, an error each)
    h = Holding("a", "n1", ("GPU-a",), (1000,))
    labels = {assign_key(P, "a"): h.label_value(), gate_key(P, "a"): "true"}
    sw = CutReads([sw_node("n1", "gpu-1", labels)], [sw_svc("a", {f"{P}gpus": "1"})], [])
    sw.cut = frozenset({read})
    victim = Candidate("a", "id-a", "n1", 0, "", ("GPU-a",), h)
    p = Preemption("h", "id-h", 100, "n1", "gpu-1", (victim,))
    gate, closing = NoWrites(), []
    with pytest.raises(Stopped):
        close_gates(gate, sw, P, p, [victim], 5000.0, closing)  # type: ignore[arg-type]
    assert (gate.writes, closing, warnings) == ([], [], [])


class CutRecords(RecordingSwarm):
    """The stand-in, whose swarm object's labels (the move records) are read past the
    cycle's budget."""

    def swarm_labels(self) -> Any:
        raise a_cut_read()


def test_over_shares_move_records_read_cut_at_the_budget_is_not_warned_of(
        tmp_path: Path, warnings: list[str]) -> None:
    # (it warned "over-share restarts wait: cannot read the move records")
    base = victim_cluster({})
    sw = CutRecords(base.nodes(), base.services(), base.tasks())
    cfg = Config(state_dir=str(tmp_path), placement=PlacementConfig(overshare="restart"))
    use = ServiceUse("third", "n-4090", "gpu-node-2", 0, T_UUID, 30000, 20000, 1000,
                     ("t-third",), (), ())
    with pytest.raises(Stopped):
        Restarter(sw, cfg).run([use], snapshot(sw.nodes(), sw.services(),  # type: ignore[arg-type]
                                               sw.tasks()))
    assert warnings == [], warnings


def test_a_release_checks_read_cut_at_the_budget_is_not_warned_of(
        warnings: list[str]) -> None:
    # (a release is checked against its service read again: cut, it warned "cannot read
    # a to check its release" and held that service's plan back)
    sw = CutReads([], [sw_svc("a", {f"{P}gpus": "1"})], [])
    sw.cut = frozenset({"service"})
    plan = PlacementPlan()
    plan.node_remove["n1"] = [assign_key(P, "a")]
    with pytest.raises(Stopped):
        hold_stale_releases(sw, NoWrites(), plan, sw.services(), P)  # type: ignore[arg-type]
    assert warnings == [], warnings


def test_the_health_hours_read_cut_at_the_budget_is_not_taken_for_an_unknown_spend(
        tmp_path: Path) -> None:
    # (it said "cannot read the health budget from the swarm object", no evacuation left)
    base = victim_cluster({})
    sw = CutRecords(base.nodes(), base.services(), base.tasks())
    rebalancer = Rebalancer(Daemon(Config(state_dir=str(tmp_path)), swarm=sw))  # type: ignore[arg-type]
    with pytest.raises(Stopped):
        rebalancer.health_inputs(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}))


def test_the_movers_records_read_cut_at_the_budget_is_no_error(warnings: list[str]) -> None:
    # (it said "rebalance: cannot read the move records, no move this cycle")
    base = victim_cluster({})
    sw = CutRecords(base.nodes(), base.services(), base.tasks())
    with pytest.raises(Stopped):
        mover_of(sw).run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    assert warnings == [], warnings


class CutTasks(RecordingSwarm):
    """The stand-in, whose task lists are read past the cycle's budget."""

    def tasks(self, *_: Any, **__: Any) -> list[SwarmTask]:
        raise a_cut_read()


def test_placements_task_list_for_its_gates_cut_at_the_budget_is_not_warned_of(
        warnings: list[str]) -> None:
    # (it warned "placement: cannot list tasks, gates open next cycle")
    with pytest.raises(Stopped):
        gates_ready_now(CutTasks([], [], []), PlacementPlan(), {}, P)  # type: ignore[arg-type]
    assert warnings == [], warnings


def test_an_over_share_restarts_task_recheck_cut_at_the_budget_is_no_reason_said(
        tmp_path: Path) -> None:
    # (it gave "cannot re-read its tasks from Swarm" as the restart's reason not to)
    base = victim_cluster({})
    sw = CutTasks(base.nodes(), base.services(), [])
    cfg = Config(state_dir=str(tmp_path), placement=PlacementConfig(overshare="restart"))
    use = ServiceUse("third", "n-4090", "gpu-node-2", 0, T_UUID, 30000, 20000, 1000,
                     ("t-third",), (), ("abc123def456",))
    with pytest.raises(Stopped):
        Restarter(sw, cfg)._recheck(sw.service("id-third"), use)  # type: ignore[arg-type]


def test_a_victims_move_start_cut_at_the_budget_is_no_failed_start(
        tmp_path: Path, warnings: list[str]) -> None:
    # (it said "preemption: move failed to start" and stopped the victim instead)
    base = victim_cluster({})
    sw = CutReads(base.nodes(), base.services(), base.tasks())
    sw.cut = frozenset({"service"})
    cfg = Config(state_dir=str(tmp_path), rebalance=RebalanceConfig(dry_run=False))
    holding = Holding("victim", "n-dgx", (V_UUID,), (1000,))
    victim = Candidate("victim", "id-victim", "n-dgx", 0, "", (V_UUID,), holding)
    p = Preemption("h", "id-h", 100, "n-dgx", "gpu-node-1", (victim,),
                   {"victim": Relocation("n-4090", "gpu-node-2", (1,), ("GPU-x",))})
    snap = snapshot(sw.nodes(), sw.services(), sw.tasks())
    with pytest.raises(Stopped):
        Preempter(cfg)._move(sw, snap, p, victim, [], lambda: None,  # type: ignore[arg-type]
                             frozenset())
    assert warnings == [], warnings


def test_a_victims_stop_cut_at_the_budget_gives_its_reserved_hour_back(
        tmp_path: Path) -> None:
    # (the hour was reserved and stored before the stop's reads; the cut ended the cycle
    # past the give-back: victims never stopped stayed spent, in memory and in Swarm, for
    # the hour, and a slow engine's cuts spent the whole budget with none stopped)
    h = Holding("a", "n1", ("GPU-a",), (1000,))
    labels = {assign_key(P, "a"): h.label_value(), gate_key(P, "a"): "true"}
    sw = CutReads([sw_node("n1", "gpu-1", labels)], [sw_svc("a", {f"{P}gpus": "1"})], [])
    sw.cut = frozenset({"node"})
    cfg = Config(state_dir=str(tmp_path),
                 preemption=PreemptionConfig(dry_run=False, max_per_hour=1))
    victim = Candidate("a", "id-a", "n1", 0, "", ("GPU-a",), h)
    p = Preemption("h", "id-h", 100, "n1", "gpu-1", (victim,))
    pre = Preempter(cfg)
    with pytest.raises(Stopped):
        pre._stop_all(sw, p, "", 5000.0, [victim], set(), [])  # type: ignore[arg-type]
    assert list(pre.spent.all) == []
    # the next cycle (within its budget) reads the hour as stored: none spent, and it
    # stores the hour given back
    pre.spent.read(sw.swarm_labels(), 5030.0, ())
    assert pre.over_budget(p, "") is None, list(pre.spent.all)
    sw.cut = frozenset()
    snap = snapshot(sw.nodes(), sw.services(), sw.tasks())
    pre.cycle(sw, snap, PlacementPlan(), {}, now=5030.0, mono=30.0)  # type: ignore[arg-type]
    assert sw.swarm_labels().get(pre.spent.key) in (None, "", "[]"), sw.swarm_labels()


class BudgetEndsInTheWait(RecordingSwarm):
    """The stand-in whose writes pass ``gate`` (the daemon's write gate) and whose task
    lists after the first (the over-share restart's wait for its old task) come past the
    cycle's budget: cut."""

    gate: BudgetGate
    cut: SwarmError  # (made before the test's budget: its client's own read is cut too)
    lists = 0

    def tasks(self, filters: Any = None, **kw: Any) -> list[SwarmTask]:
        self.lists += 1
        if self.lists > 1:
            self.gate.budget.budget_s = 0.0  # (passed)
            raise self.cut
        return super().tasks(filters, **kw)


def test_an_over_share_restart_cut_at_the_budget_in_its_wait_reopens_its_gate(
        tmp_path: Path) -> None:
    # (the wait's task list was cut, and the gate's reopening, a write past the budget,
    # refused: the service's gate stayed closed, its task never placed again)
    base = victim_cluster({})
    sw = BudgetEndsInTheWait(base.nodes(), base.services(), base.tasks(),
                             base.swarm_labels())
    sw.gate, sw.cut = BudgetGate(BUDGET_S), a_cut_read()
    sw.before_write = sw.gate.check  # type: ignore[attr-defined]
    cfg = Config(state_dir=str(tmp_path), placement=PlacementConfig(overshare="restart"))
    r = Restarter(sw, cfg, wait_s=3.0)  # type: ignore[arg-type]
    u = ServiceUse("third", "n-4090", "gpu-node-2", 0, T_UUID, 30000, 20000, 1000,
                   ("t-third",), (), ())
    with pytest.raises((SwarmError, Stopped)) as ended, \
            answerjson.within_budget(sw.gate.budget):  # (the cycle's)
        r._bounce(sw.service("id-third"), u, "state.moved_at")
    assert sw.node("n-4090").labels.get(gate_key(P, "third")) == "true"
    assert isinstance(ended.value, Stopped), ended.value  # (the cut ends the cycle, unsaid)
