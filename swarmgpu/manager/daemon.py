"""The manager daemon: schedules cycles, watches events, serves /metrics and /healthz.

Runs on every manager; only the one whose engine is the Swarm leader acts, so when
leadership moves the new leader's daemon takes over on its next cycle.
SIGTERM and SIGINT ask for a stop: the writes in flight finish, the step in progress
makes no further write (``engine.stop``: the rest is planned again by the next leader or
start), no new step starts, and the daemon exits 0. A fetch of the agents' facts starts
no further read: a snapshot cut so ends its cycle before any step; the metrics scrape
neither, and its cycle ends with it (no step reads the pages half scraped). A second
signal ends the daemon at once. ``run --once`` stops so too (``once``).
SIGHUP is logged and ignored (the config is read at start only). A cycle past its
engine budget ends so too, between two writes, said in one line (``cycle.budget``), so
that systemd's watchdog ping after it comes in time.
"""

from __future__ import annotations

import functools
import json
import math
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from loguru import logger
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from swarmgpu.core.config import Config
from swarmgpu.core.httpguard import GuardedServer, allowed_hosts
from swarmgpu.core.saidonce import SaidOnce
from swarmgpu.core.sdnotify import sd_notify, watchdog_s
from swarmgpu.core.statefile import save_said
from swarmgpu.core.tenants import TenantSpec
from swarmgpu.manager.cycle.budget import BudgetGate, OverBudget, engine_budget_s, over_budget
from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
from swarmgpu.manager.cycle.healthz import STOPPING, CutKind, cycle_word, health_doc
from swarmgpu.manager.cycle.heap import CycleCollector
from swarmgpu.manager.cycle.host import QueryRoute, Route
from swarmgpu.manager.cycle.label_sync import LabelSyncStep
from swarmgpu.manager.cycle.pipeline import Pipeline, Step
from swarmgpu.manager.cycle.schedule import SYNC_JOB, WATCH_JOB, repeat, run_now
from swarmgpu.manager.cycle.session import CycleSession, Slot
from swarmgpu.manager.cycle.term import LeaderTerm
from swarmgpu.manager.cycle.triggers import CycleTriggers, Trigger
from swarmgpu.manager.engine.stop import (
    BudgetEnded,
    NotRead,
    Stopped,
    StopRequest,
    TermEnded,
    check_term,
    read_cut,
)
from swarmgpu.manager.nodes.agentbook import AgentBook
from swarmgpu.manager.nodes.sync import (
    CycleReport,
    LabelSync,
    Snapshot,
    fetch_agents,
    take_snapshot,
    tenant_specs,
)
from swarmgpu.manager.nodes.watchkey import facts_key
from swarmgpu.manager.nodes.watchmissed import WatchMissed
from swarmgpu.manager.web import webguard
from swarmgpu.manager.web.webauth import WebAuth
from swarmgpu.swarm.answerjson import CycleBudget, within_budget
from swarmgpu.swarm.cache import SwarmCache, follow
from swarmgpu.swarm.client import BudgetCut, SwarmClient, SwarmError, SwarmUnavailable
from swarmgpu.swarm.errors import SwarmStalled
from swarmgpu.swarm.identity import IdentityError, agent_auth

# How often the wall clock is compared with the monotonic one, and the gap that is a step
# (NTP slews far less than this; ``Daemon._clock_check``).
CLOCK_CHECK_S = 1.0
CLOCK_STEP_S = 2.0


def end_by_signal(signum: int) -> None:
    """End the process now by ``signum``, its default action, the logs flushed: a shell
    sees 130 or 143, systemd a clean stop (no ``Restart=on-failure``). A write in flight
    landed whole or not at all; the next leader or start reads which. Called from the
    signal watcher (``Daemon._install_signals``), whose handler already gave ``signum``
    its default action: only the main thread may."""
    logger.complete()
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signum)


class Daemon:
    """The cycle and its wiring: label sync, then the steps given to ``use`` (see
    ``swarmgpu.manager.cycle``), which see the daemon as a
    ``swarmgpu.manager.cycle.host.CycleHost``."""

    def __init__(
        self, cfg: Config, swarm: SwarmClient | None = None, metrics: DaemonMetrics | None = None
    ) -> None:
        self.cfg = cfg
        self.swarm = swarm or SwarmClient(cfg.docker_host,
                                          max_answer_bytes=cfg.engine.max_answer_bytes)
        self.metrics = metrics or DaemonMetrics()
        self.book = AgentBook()
        self.labels = LabelSync(self.swarm, cfg, self.metrics, self.book)
        # Nodes and services from the event stream (swarm.cache); until the stream is
        # open (watch_events off, or not started yet) every read lists them in full.
        self.cache = SwarmCache(self.swarm)
        self.swarm.on_write = self.cache.invalidate
        self.swarm.on_landed = self.cache.wrote  # its event is due: a deaf engine shows
        # each write asks again whether this engine still leads (cycle.term)
        self.term = LeaderTerm(lambda: self.swarm.is_leader())
        self.swarm.may_write = self.term.holds
        # SIGTERM: the write gate starts no write once it is set, the facts fetch no agent
        # read (engine.stop)
        self.stop_event = StopRequest()
        self.swarm.before_write = self._write_gate
        self._budget: BudgetGate | None = None  # the cycle's in progress (cycle.budget)
        self.stopped_by: str | None = None  # the signal that asked for the stop
        self.pipeline = Pipeline([LabelSyncStep(self.labels, hold=False)])
        self.last_session: CycleSession | None = None  # the last cycle's, as leader
        self._cycle_lock = threading.Lock()
        self._collector = CycleCollector()  # garbage collection between cycles
        self._rerun = CycleTriggers(self.metrics.cycles_started)  # asked since the last began
        self._slow = False  # the last cycle outlasted the interval (said once: _overran)
        self._save_said: SaidOnce[str] = SaidOnce()  # agents.json could not be saved
        self._watch_missed = WatchMissed()  # the agents the facts watch did not read
        self.last_report: CycleReport | None = None
        # time.monotonic() at the last cycle's end: /healthz's age survives a step of the
        # wall clock (NTP, a hand `date -s`)
        self.last_cycle_at: float | None = None
        self.leader = False
        # Why the engine could not be asked (the last cycle's ask failed), else None:
        # /healthz then says leadership is unknown, not the last answer it had.
        self.engine_error: str | None = None
        self.engine_state = "reachable"  # with it: its word (cycle.host.CycleHost)
        # The line that said the last cycle ended at its engine budget, else None:
        # /healthz says so (the engine answers, too slowly for a whole cycle).
        self.budget_ended: str | None = None
        # Why the last cycle did not complete (its line: an engine error, a stop, an
        # exception, its budget, its term lost), else None: /healthz says so until one
        # completes, not the last whole cycle's report as if current.
        self.cut_short: str | None = None
        self.cut_kind: CutKind | None = None  # its word, set with it (``_cut``)
        self._steps_cut: str | None = None  # this cycle's steps stopped (run_steps)
        self.last_cycle_ended: float | None = None  # time.time() at the last one's end
        self._scheduler: BackgroundScheduler | None = None
        self._http: GuardedServer | None = None
        self.web_auth = WebAuth(cfg.http)  # who may read the HTTP (webauth)
        # path -> () -> (content type, body); the GPU map and APIs plug in here
        self.http_routes: dict[str, Route] = {}
        # path -> (raw query string) -> (content type, body); e.g. /api/v1/history
        self.http_query_routes: dict[str, QueryRoute] = {}

    def use(self, steps: Sequence[Step]) -> Pipeline:
        """Run ``steps`` after label sync, in this order, every cycle as leader. The order
        is checked now, before any cycle: a step that requires what no earlier step
        provides is refused (``PipelineError``, naming both). When a step requires label
        sync's held writes, label sync holds its node writes for it (one write per node
        per cycle)."""
        hold = any(Slot.HELD in s.requires for s in steps)
        self.pipeline = Pipeline([LabelSyncStep(self.labels, hold=hold), *steps])
        return self.pipeline

    @functools.cached_property
    def tenants(self) -> tuple[TenantSpec, ...]:
        """The config's tenants (``tenant_specs``), parsed at the first snapshot alone:
        the daemon's config is its for life."""
        return tenant_specs(self.cfg)

    # --- one cycle -------------------------------------------------------
    def cycle(self, *, unbounded: bool = False) -> CycleReport:
        """Run one full cycle now (serialised: never two at once), within its engine
        budget (``cycle.budget``): past it the cycle ends, said in one line, counted as
        ``errors{kind="budget"}`` and ``cycles{outcome="over_budget"}`` (no engine
        error: the engine answered, slowly) and told by /healthz until a cycle ends
        otherwise. ``unbounded``: no budget (``once`` without a watchdog)."""
        with self._cycle_lock, self._collector.around_cycle():
            dog, every = watchdog_s(), self.cfg.sync.interval_s
            budget_s = math.inf if unbounded else engine_budget_s(every, dog)
            gate = self._budget = BudgetGate(budget_s)
            self.labels.report = None  # (its writes as they land: ``_cut_report``)
            try:
                with within_budget(gate.budget):
                    report = self._cycle()
                self.budget_ended = None
                return report
            except BudgetEnded:  # (a write refused past it, or a read cut there)
                said = self.budget_ended = self._cut("over_budget", over_budget(gate, every, dog))
                self.metrics.errors.labels(kind="budget").inc()
                self.metrics.cycles.labels(outcome="over_budget").inc()
                logger.error(said)
                return self._cut_report(said)
            except Exception as exc:  # (said and counted by the caller: _safe_cycle)
                self.budget_ended = None
                self._cut("aborted", f"cycle failed: {type(exc).__name__}: {exc}")
                raise
            finally:
                self._budget = None
                self.last_cycle_ended = time.time()

    def _cut_report(self, said: str) -> CycleReport:
        """A cycle ended at its budget (``said``): aborted, with the label writes it made
        before counted and their errors kept (the next cycle plans only the rest)."""
        done = self.labels.report or CycleReport()
        return CycleReport(writes=done.writes, errors=[said, *done.errors], aborted=True)

    def _write_gate(self) -> None:
        # Before each write (the client's before_write): none once stopping, once the
        # term ended (each left still read its node, then failed: NotLeader), or once
        # the cycle's engine budget has passed.
        self.stop_event.check()
        check_term(self.term.lost)
        gate = self._budget
        if gate is not None:
            gate.check()

    def _over(self, exc: SwarmError | None = None) -> None:
        # A cycle past its budget ends as one that cannot write: its reads not acted on;
        # so does one whose write its slack cut (``exc``: no engine error, it answered).
        gate = self._budget
        if gate is not None and gate.ended(exc):
            raise OverBudget(gate.writes) from exc

    def _cycle(self) -> CycleReport:
        """``cycle``'s body, its budget set."""
        start = time.monotonic()
        try:
            self.leader = self.swarm.is_leader()
            self.engine_error, self.engine_state = None, "reachable"
        except SwarmError as exc:
            self._over(exc)
            self._leader_unknown(exc)
            self.metrics.errors.labels(kind="swarm").inc()
            self.metrics.cycles.labels(outcome="error").inc()
            # (an engine that answers, its swarm node stalled, is not said unreachable)
            what = "no Swarm manager runs here" if isinstance(exc, SwarmStalled) else \
                "cannot reach the Swarm manager"
            logger.error("{}", self._cut("aborted", f"{what}: {exc}"))
            return CycleReport(leader=False, errors=[str(exc)], aborted=True)
        self.metrics.is_leader.set(1 if self.leader else 0)
        if self.leader and self.term.lost:
            # The last term ended (a write found this engine deposed, or a cycle
            # could not ask): another manager may have led since.
            self.pipeline.stand_by()
        (self.term.start if self.leader else self.term.end)()
        self._web_identity()
        if not self.leader:
            self.pipeline.stand_by()  # a new term starts from what Swarm stores
            self.cache.forget("not the leader")
            self.metrics.cycles.labels(outcome="follower").inc()
            logger.debug("not the Swarm leader; standing by")
            self.cut_short = self.cut_kind = None
            # (its /healthz says none of the errors of its last cycle as leader)
            self.last_report = CycleReport(leader=False)
            return self.last_report
        try:
            try:
                snapshot = take_snapshot(self.swarm, self.cfg, self.cache, self.stop_event,
                                         self.tenants)
            except BudgetEnded:  # (the agents' reads cut at it: ``cycle`` says so)
                raise
            except Stopped as exc:  # facts half read: no step plans from them, none saved
                self._reads_left("no step of this cycle ran", exc)
                self._cut("stopped", f"{STOPPING}{exc.reads} agent read(s) not made, no step ran")
                self.metrics.cycles.labels(outcome="stopped").inc()
                return CycleReport()
            # A read cut at the budget that the snapshot took for one part's failure (the
            # agents' identity: every agent unread): no step, label sync none, runs on it.
            self._over()
            self._steps_cut = None
            report = self.run_steps(snapshot)
            self._over()
            if self.term.lost:  # (a step's write found another manager leading)
                return self._deposed(report)
        except SwarmError as exc:
            self._over(exc)
            if self.term.lost:  # (its NotLeader, or a write failed after it)
                return self._deposed(CycleReport(errors=[str(exc)]))
            if isinstance(exc, SwarmUnavailable):  # gone mid-cycle: the next ask says
                self._leader_unknown(exc)
            self.metrics.errors.labels(kind="swarm").inc()
            self.metrics.cycles.labels(outcome="error").inc()
            self._cut("aborted", f"cycle aborted, will retry next interval: {exc}")
            logger.error("cycle aborted, will retry next interval: {}", exc)
            return CycleReport(errors=[str(exc)], aborted=True)
        save_said(self._save_said, "agent state", self.cfg.state_dir, self.book.save)
        report.duration_s = time.monotonic() - start
        self.metrics.cycle_seconds.observe(report.duration_s)
        self.metrics.cycles.labels(outcome="stopped" if self._steps_cut else
                                   "ok" if not report.errors else "partial").inc()
        self.last_report = report
        self.last_cycle_at = time.monotonic()
        # (None: every step ran; else a stop cut them: _over and _deposed raise or say)
        self.cut_short, self.cut_kind = self._steps_cut, "stopped" if self._steps_cut else None
        return report

    def _leader_unknown(self, exc: SwarmError) -> None:
        """The engine cannot say who leads (``exc``): unreachable, locked, demoted or
        without quorum, at a cycle's first ask or in its middle. Writes are blocked (the
        term ended: another manager may lead meanwhile, so a new term starts afresh) and
        /healthz, the gauge and the map say leadership unknown, not the last answer had;
        the cluster gauges read 0, as a follower's (frozen, they stood beside the
        leader's while a locked manager waited)."""
        self.term.end()
        self.leader = False
        self.engine_error = str(exc)
        self.engine_state = exc.state if isinstance(exc, SwarmStalled) else "unreachable"
        self.metrics.is_leader.set(0)
        self.pipeline.stand_by()

    def _cut(self, kind: CutKind, line: str) -> str:
        """The last cycle did not complete: ``line`` says why, ``kind`` in one word."""
        self.cut_short, self.cut_kind = line, kind
        return line

    def _deposed(self, done: CycleReport) -> CycleReport:
        """The cycle's term lost mid-cycle: a write found this engine no longer the
        leader (raft elected another manager meanwhile), so no further write or step
        of it ran. The cycle ends as a follower's: not the leader (/healthz, the gauge),
        said aborted with why until a cycle completes, the label writes that landed
        before (``done``) counted and their errors kept."""
        self.leader = False
        self.metrics.is_leader.set(0)
        self.metrics.cycles.labels(outcome="follower").inc()
        said = self._cut("aborted", (
            "leadership lost mid-cycle: this engine no longer leads the swarm, so the "
            "rest of this cycle's writes were refused and no later step ran; "
            "the new leader's daemon plans from its own reading (this one stands by "
            "until a cycle finds its engine the leader again)"))
        logger.warning(said)
        return CycleReport(leader=False, writes=done.writes, errors=[said, *done.errors],
                           aborted=True)

    def run_steps(self, snapshot: Snapshot) -> CycleReport:
        """The pipeline on one snapshot, in a new session. Label sync's held node writes
        (when a step requires them) wait for the step after it, which folds each into its
        own write of the same node (``cycle.placement.apply_plan``): one write per node
        per cycle. Whatever that step did not take is written right after it, before the
        next step, and if a step fails. A stop asked mid-step ends it between two writes
        or two reads of the nodes' metrics pages (``engine.stop``), said here once, with
        the number of writes, and of reads, left."""
        session = CycleSession(snapshot)
        self.last_session = session
        ran = [""]
        left = self.stop_event.left

        def after(step: Step) -> None:
            ran[0] = step.name
            if Slot.HELD not in step.provides:
                self.labels.flush()

        try:
            try:
                # a term lost mid-cycle (its writes refused) starts no further step
                skipped = self.pipeline.run(session, stop=lambda: self._stops(), after=after)
            finally:
                self.labels.flush()
            if skipped is not None and self.stop_event.is_set():
                # (a term lost or a budget passed says so itself: _deposed, _over)
                self._steps_cut = f"{STOPPING}step {skipped} and later ones not run"
                logger.warning("{}: the next leader's daemon, or this one when it starts "
                               "again, runs them afresh", self._steps_cut)
        except Stopped as exc:
            if isinstance(exc, BudgetEnded):  # (said by ``cycle``)
                raise
            if not isinstance(exc, TermEnded):  # (its cycle says so once: _deposed)
                self._say_stopped(exc, ran[0] or "-", self.stop_event.left - left)
            if Slot.REPORT not in session.written():  # label sync itself was cut short
                # (its writes that landed counted, as at the budget: ``_cut_report``)
                done = self.labels.report or CycleReport()
                return CycleReport(writes=done.writes, errors=list(done.errors),
                                   aborted=True)
        return session.report

    def _say_stopped(self, exc: Stopped, step: str, writes: int) -> None:
        # A step's reads (the metrics scrape) say their own count: the facts watch,
        # beside the cycle, counts into reads_left too.
        cut = f"{writes} write(s)"
        if exc.reads:
            cut += f" and {exc.reads} {exc.what}(s)"
        self._steps_cut = f"{STOPPING}{cut} of step {step} not made, nor later ones"
        logger.warning("stopping: the {} in flight finished; {} of step {} not made, nor "
                       "any later step's: the next leader's daemon, or this one when it "
                       "starts again, plans them afresh from what Swarm stores and the "
                       "nodes say", "writes and reads" if exc.reads else "writes", cut, step)

    def _stops(self) -> bool:
        # No further step: the daemon stops, the term was lost mid-cycle (its writes
        # refused), or the cycle's engine budget has passed.
        gate = self._budget
        return (self.stop_event.is_set() or self.term.lost
                or (gate is not None and gate.stops()))

    def _reads_left(self, what: str, stopped: Stopped) -> None:
        # The fetch's own count: the cycle's and the facts watch's run side by side, on
        # the scheduler's threads, and both count into stop_event.reads_left.
        logger.warning(
            "stopping: the agent reads in flight finished; {} agent read(s) not "
            "made, {}: the next leader's daemon, or this one when it starts "
            "again, reads them afresh",
            stopped.reads,
            what,
        )

    def once(self) -> CycleReport:
        """One cycle now (``run --once``), stopped by SIGTERM or SIGINT as the daemon is:
        between two writes or node reads; a second signal ends the process at once. No
        engine budget unless a watchdog waits for it (``$WATCHDOG_USEC``): no ping
        follows, and a one-shot on a slow engine ran whole before the budget came."""
        self._install_signals()
        return self.cycle(unbounded=watchdog_s() is None)

    def _safe_cycle(self) -> None:
        # An event that arrives while a cycle runs cannot start another one (one at a
        # time); it leaves a flag instead, and the cycle is run again right after.
        for _ in range(5):
            if self.stop_event.is_set():
                return
            self._rerun.begin()  # counted by what started it (cycle.triggers)
            start = time.monotonic()
            try:
                self.cycle()
                sd_notify("WATCHDOG=1")
            except Exception as exc:  # the daemon must outlive any one bad cycle
                self.metrics.errors.labels(kind="cycle").inc()
                logger.exception("cycle failed: {}", exc)
            self._overran(time.monotonic() - start)
            if not self._rerun.is_set():
                return

    def _overran(self, took_s: float) -> None:
        # The scheduler skips a run due while one runs and says so under the log level
        # (events meet running cycles on purpose): said here, once per run of slow cycles.
        every = self.cfg.sync.interval_s
        if took_s <= every:
            self._slow = False
        elif not self._slow:
            self._slow = True
            logger.warning(
                "a cycle took {:.1f}s, longer than sync.interval_s {:g}s: the "
                "cycle due meanwhile was skipped and the next waits for the next "
                "interval (said once until a cycle fits again); raise "
                "sync.interval_s above it, and WatchdogSec= to 2 x interval + 60 s "
                "with it (docs/systemd.md)",
                took_s,
                every,
            )

    def _web_identity(self) -> None:
        """The HTTP server's HTTPS for manager certificates, from what the agents' fetch
        uses (the manager's certificate, the swarm root CA, the cluster ID; rebuilt every
        few minutes): on followers too, whose map and API are asked as well."""
        if not self.web_auth.required or self.cfg.agents.identity != "swarm-pki":
            return
        try:
            self.web_auth.update(agent_auth(self.swarm, self.cfg.agents))
        except BudgetCut as exc:  # (no fault of the identity: the last one is kept)
            raise read_cut() from exc
        except (IdentityError, SwarmError, OSError) as exc:
            self.web_auth.failed(str(exc))

    # --- continuous mode ---------------------------------------------------
    def trigger(self, why: Trigger) -> None:
        """Run a cycle soon (after an event), coalescing bursts; the first ``why`` counts it."""
        self._rerun.ask(why)
        if self._scheduler is not None:
            run_now(self._scheduler, SYNC_JOB)

    def _watch_facts(self) -> None:
        """Between full cycles, poll the agents' facts; a change starts a cycle now."""
        if not self.leader or self.stop_event.is_set():
            return
        try:
            # Its engine reads within a budget of its interval: they take the locks the
            # cycle's reads take (the cache's, the agents' identity's), and unbounded
            # they held the cycle past its own budget; cut, the next cycle reads them.
            with within_budget(CycleBudget(self.cfg.agents.watch_s)):
                self._compare_facts()
        except Exception as exc:  # APScheduler's stdlib log has no handler: say it here
            self.metrics.errors.labels(kind="watch").inc()
            logger.exception("facts watch failed (the next full cycle reads the facts): {}", exc)

    def _compare_facts(self) -> None:
        try:  # from the cache while the event stream keeps it current
            nodes = self.cache.read()[0] if self.cache.stream_up else self.swarm.nodes()
        except SwarmError as exc:  # the next full cycle reports it
            if isinstance(exc, BudgetCut):  # (a list cut so: the next read lists, comparing)
                logger.debug("facts watch: its swarm read outlasted its {:g} s; cut",
                             self.cfg.agents.watch_s)
            return
        missed: dict[str, NotRead] = {}  # the reads its budget cut: the cycle reads them
        try:
            got = fetch_agents(self.swarm, self.cfg, nodes, self.stop_event, missed)
        except BudgetEnded:  # (no read raises it so: each cut is in missed) not a stop's
            return
        except Stopped as exc:
            self._reads_left("the facts watch ended", exc)
            return
        self._watch_missed.note(nodes, missed, self.cfg.agents.watch_s,
                                self.cfg.sync.interval_s)
        changed = []
        for node_id, res in got.items():
            if res.facts is None:
                continue
            rec = self.book.records.get(node_id)
            # (the agent's last answer as it gave it: the cycle's facts carry health states)
            if rec is None or rec.read is None or facts_key(rec.read) != facts_key(res.facts):
                changed.append(res.hostname)
        if changed:
            logger.info("facts changed on {}: syncing now", ", ".join(sorted(changed)))
            self.trigger("facts")

    def _watch_events(self) -> None:
        """Feed the cache from the event stream; each event, and each reconnect (events
        sent while the stream was down are lost: the cache re-lists), runs a cycle."""

        def opened(on_open: Callable[[], None]) -> Any:
            return self.swarm.events(types=("node", "service"), on_open=on_open,
                                     on_cut=self.cache.cut_with)

        def on_event(event: Any) -> None:
            logger.debug("event {} {}", event.get("Type"), event.get("Action"))
            self.trigger("event")

        follow(opened, self.cache, self.stop_event, on_event=on_event,
               on_gap=lambda: self.trigger("reconnect"))

    def run_forever(self) -> None:
        self._install_signals()
        self._start_http()
        sched = BackgroundScheduler()
        repeat(
            sched,
            self._safe_cycle,
            self.cfg.sync.interval_s,
            SYNC_JOB,
            first=datetime.now().astimezone(),
        )
        if self.cfg.agents.watch_s:
            repeat(sched, self._watch_facts, self.cfg.agents.watch_s, WATCH_JOB)
        self._scheduler = sched
        clocks = (time.time(), time.monotonic())  # before the first run: it may step
        sched.start()
        if self.cfg.sync.watch_events:
            threading.Thread(target=self._watch_events, name="events", daemon=True).start()
        sd_notify("READY=1")
        logger.info("swarmgpu daemon running (interval {}s)", self.cfg.sync.interval_s)
        dog, every = watchdog_s(), self.cfg.sync.interval_s
        if dog is not None and dog < 2 * every + 60:
            # the next ping comes after the interval and the next cycle (docs/systemd.md);
            # one too short for the shortest budget was refused at start (`run`)
            logger.warning(
                "WatchdogSec={:g}s is short for sync.interval_s {:g}s: a cycle may take "
                "{:g} s of the engine, {:g} s under the WatchdogSec= docs/systemd.md "
                "asks for, so a slow engine's cycles end early; use at least {:g}s "
                "(2 x interval + 60 s; systemctl edit swarmgpu.service)",
                dog, every, engine_budget_s(every, dog), engine_budget_s(every, None),
                2 * every + 60,
            )
        while not self.stop_event.wait(CLOCK_CHECK_S):
            clocks = self._clock_check(clocks)
        logger.info("stopping: the step in progress ends after its writes and node reads in flight")
        sd_notify("STOPPING=1")
        sched.shutdown(wait=True)
        if self._http is not None:
            self._http.shutdown()
        logger.info("stopped cleanly")

    def _clock_check(self, last: tuple[float, float]) -> tuple[float, float]:
        """APScheduler's interval trigger adds the interval to the last run's wall-clock
        date: a clock stepped back an hour held the next cycle, and the watchdog's pings,
        for the hour; stepped forward, a run was missed. When the wall clock parts from
        the monotonic one, every job runs now and counts on from there."""
        wall, mono = time.time(), time.monotonic()
        step = (wall - last[0]) - (mono - last[1])
        if abs(step) > CLOCK_STEP_S and self._scheduler is not None:
            logger.warning(
                "the wall clock stepped {:+.0f} s: the cycles and the facts watch "
                "run now and count on from there",
                step,
            )
            for job in self._scheduler.get_jobs():
                run_now(self._scheduler, job.id)
        return wall, mono

    def _install_signals(self) -> None:
        """A handler runs in the main thread between two bytecodes, maybe inside a log
        call holding loguru's lock (a re-entry is refused: the line lost, a second
        signal's exit raised away) or inside ``stop_event.wait`` holding the event's
        lock (its ``set`` would hang): the handlers only note the signal in a
        re-entrant queue; a watcher thread logs it and acts."""
        if threading.current_thread() is not threading.main_thread():
            return
        inbox: queue.SimpleQueue[int] = queue.SimpleQueue()
        stops: list[int] = []  # the stop signals received so far (append is atomic)

        def handler(signum: int, _frame: object) -> None:
            if stops:  # the second: a third ends the process even if the watcher hangs
                signal.signal(signum, signal.SIG_DFL)
            stops.append(signum)
            inbox.put(signum)

        def hangup(signum: int, _frame: object) -> None:
            # Its default would end the daemon at once, in the middle of a cycle's writes.
            inbox.put(signum)

        threading.Thread(
            target=lambda: self._watch_signals(inbox), name="signals", daemon=True
        ).start()
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGHUP, hangup)

    def _watch_signals(self, inbox: queue.SimpleQueue[int]) -> None:
        """Each signal the handlers noted, logged and acted on outside them."""
        asked: list[str] = []
        while True:
            signum = inbox.get()
            name = signal.Signals(signum).name
            if signum == signal.SIGHUP:
                logger.warning(
                    "SIGHUP received: the configuration is read only at start, "
                    "so nothing changed; to apply an edited config, check it "
                    "(swarmgpu config check FILE) and restart the daemon "
                    "(systemctl restart swarmgpu)"
                )
            elif asked:  # asked twice: the operator will not wait
                logger.warning("{} received while stopping ({} first): exiting now", name, asked[0])
                end_by_signal(signum)
            else:
                asked.append(name)
                self.stopped_by = name
                logger.info(
                    "signal {} received: stopping after the writes and node reads "
                    "in flight (a second SIGTERM or SIGINT exits at once)",
                    name,
                )
                self.stop_event.set()

    # --- HTTP ----------------------------------------------------------------
    @property
    def last_cycle(self) -> str | None:
        """The last cycle's outcome in one word (``healthz.cycle_word``); None before one."""
        return cycle_word(self.last_cycle_ended, self.cut_kind)

    def health(self, detail: bool = True) -> dict[str, Any]:
        """/healthz (``healthz.health_doc``); ``detail``: the errors' texts too."""
        age = None if self.last_cycle_at is None else time.monotonic() - self.last_cycle_at
        return health_doc(
            leader=self.leader, engine_error=self.engine_error,
            engine_state=self.engine_state, cut_short=self.cut_short,
            cut_kind=self.cut_kind, budget_ended=self.budget_ended,
            errors=self.last_report.errors if self.last_report else [], age=age,
            stale=age is None or age > 3 * self.cfg.sync.interval_s,
            ended_at=self.last_cycle_ended, detail=detail)

    def _start_http(self) -> None:
        host, _, port = self.cfg.http.listen.rpartition(":")
        daemon = self
        allowed = allowed_hosts(self.cfg.http.listen, self.cfg.http.allowed_hosts)

        class Handler(webguard.GuardedHandler):
            def answer(self, path: str, query: str) -> tuple[int, str, bytes]:
                if path == "/metrics":
                    return 200, CONTENT_TYPE_LATEST, generate_latest(daemon.metrics.registry)
                if path == "/healthz":
                    return 200, "application/json", json.dumps(daemon.health(self.trusted)).encode()
                if path in daemon.http_query_routes:
                    ctype, body = daemon.http_query_routes[path](query)
                    return 200, ctype, body
                extra = daemon.http_routes.get(path)
                if extra is None:
                    return 404, "text/plain; charset=utf-8", b"not found\n"
                ctype, body = extra()
                return 200, ctype, body

        Handler.allowed_hosts = allowed
        Handler.auth = self.web_auth
        try:
            self._http = GuardedServer((host.strip("[]"), int(port)), Handler)
        except OSError as exc:
            logger.error("cannot serve HTTP on {}: {}", self.cfg.http.listen, exc)
            return
        threading.Thread(target=self._http.serve_forever, name="http", daemon=True).start()
        logger.info(
            "serving /metrics, /healthz and the GPU map on {}: {}",
            self.cfg.http.listen,
            self.web_auth.describe(),
        )
