"""The move actuator: the only code that writes a rebalancing move, and every safety.

Safety owned here (policies only propose): dry-run (nothing is written, not even to
finish a move in flight); a budget of moves per cycle and per node (moves in flight
count: ``over_budget``, asked by ``admit`` and again by ``start``, so a move started by
preemption holds it too), and of fragmentation moves per hour and per 100 placements
(``budget.py``); per-service cooldown; opt-out (``<p>rebalance=never``); never an
unconverged service or a job, and a global service only between GPUs of its own node;
the target is verified free against a fresh read of the ledger, and Swarm's filters
against a fresh read of the service, just before the first write.

A move whose target node is its source node is a repin (``repin.py``: the node's task is
replaced with one on the new GPUs, no other node's); everything below is the move between
nodes. Both keep the same record (``record.py``) and go through this class's checks,
budgets and dry-run.

A move of one replica from node A to node B (GPUs U), through placement's own
mechanisms (gate node label, ledger node label, per-node device service label):

0. the record: ``<p>state.moves.<service id>=<json>`` on the swarm object. Only the
   daemon (or an operator with the manager API) writes there; a stack deploy cannot.
   It is the authority: a move advances only while its record names the carrying
   service (id and name) and the service's move label carries the record's move id.
   A move label with no record (``deploy.labels`` can say anything) is reported and
   ignored, and removed from its own service's spec when not in dry-run (a job's is
   left: Swarm runs a job again from the start on any write of its spec).
1. service write: ``<p>state.move=<json>`` (the intent) and ``<p>devices.B=U``; with
   make-before-break also replicas + 1 and ``MaxReplicas=1``. Placement leaves a
   service with a move label alone. A task created from now on carries B's devices.
2. node B: ledger ``<p>assign.<svc>`` and gate ``<p>service.<svc>=true``. With the
   surge, Swarm starts the extra task on B now (the only gated node without one).
3. node A: ledger and gate removed once B's task runs (surge) or right away (no
   surge): the constraint enforcer stops A's task; without the surge its replacement
   can only go to B.
4. service write: replicas and MaxReplicas back, ``<p>devices.A`` and the move label
   removed, ``<p>state.moved-at`` set (the cooldown, kept in Swarm); the outcome is
   said (once, kept in the record: ``outcomes.py``); then the record goes.

Progress is read back from Swarm each cycle (gates, tasks), so a daemon killed at any
point, or a new leader, finishes the move, or rolls it back once ``move_timeout_s`` has
passed without B's task running: A reopened, B closed, the spec restored. A health move
is never rolled back onto its failed GPU: past the timeout it ends on B (A closed, the
spec restored, with a ForceUpdate where its task waits for a node and nothing else of it
runs) and Swarm runs B's task when it can. A roll-back moves the gates before it writes
the spec: a task waiting for a node is never left of an older revision while no node can
take it (Swarm's scheduler never tries such a task again: docs/deploy.md). No step
leaves more than replicas + 1 tasks, and A's task stops only after B is open. A record
whose service lost its move label (a stack re-deploy rewrites the labels) is finished
when A's gate is already closed, else rolled back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from functools import partial
from typing import Any, ParamSpec

from loguru import logger

from swarmgpu.core import stamps
from swarmgpu.core.config import RebalanceConfig
from swarmgpu.core.peertext import peer_text
from swarmgpu.core.saidonce import SaidOnce
from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
from swarmgpu.manager.engine.actuator import Why, Writes
from swarmgpu.manager.engine.stop import Stopped, read_cut
from swarmgpu.manager.placement import (
    MOVE_STATE,
    Holding,
    assign_key,
    devices_key,
    gate_key,
    read_ledger,
)
from swarmgpu.manager.placement.jobs import JOB_MODES
from swarmgpu.manager.rebalance.admission import Budget, admit, over_budget
from swarmgpu.manager.rebalance.budget import FragBudget, finished_times
from swarmgpu.manager.rebalance.findings import repair, report
from swarmgpu.manager.rebalance.heldgpus import Shares
from swarmgpu.manager.rebalance.moves import Move, Outcome, Trigger
from swarmgpu.manager.rebalance.outcomes import Outcomes
from swarmgpu.manager.rebalance.record import (
    HEALTH,
    FirstSeen,
    cannot_run,
    crash_point,
    drop_record,
    end_move,
    end_surge,
    failed_if_raised,
    held_by_others,
    held_unread,
    node_by_id,
    put_record,
    spec_edit,
    spec_labels,
    start_surge,
    unreadable_records,
)

# re-exported for callers: the record (record.py) and the judgement (verdict.py)
from swarmgpu.manager.rebalance.record import MoveState as MoveState
from swarmgpu.manager.rebalance.record import read_records as read_records
from swarmgpu.manager.rebalance.record import record_key as record_key
from swarmgpu.manager.rebalance.repin import Repin, kept_on_healthy
from swarmgpu.manager.rebalance.startchecks import (
    Started,
    first_refusal,
    in_flight,
    move_refusal,
)
from swarmgpu.manager.rebalance.verdict import Verdict as Verdict
from swarmgpu.manager.rebalance.verdict import forged_check as forged_check
from swarmgpu.manager.rebalance.verdict import rebalancing as rebalancing
from swarmgpu.manager.rebalance.verdict import verify as verify
from swarmgpu.manager.rebalance.verdict import verify_scope as verify_scope
from swarmgpu.manager.services.sharing import node_of_key
from swarmgpu.swarm.client import (
    MEANT_STATES,
    BudgetCut,
    NotLeader,
    SwarmClient,
    SwarmError,
    SwarmNode,
    SwarmService,
    SwarmTask,
    VersionConflict,
)

Names = AbstractSet[str]  # (plan_failed: the services whose plan failed this cycle)
_P = ParamSpec("_P")  # (_step: its calls checked, not Callable[..., object])


class Mover:
    def __init__(self, swarm: SwarmClient, cfg: RebalanceConfig, *, prefix: str,
                 dry_run: bool, metrics: DaemonMetrics | None = None,
                 clock: Callable[[], float] = time.time,
                 scope: Callable[[MoveState], bool] | None = None,
                 judge_labels: bool = True, why: str = "move",
                 classes: Mapping[str, int] | None = None) -> None:
        # scope: the records this mover advances (None: all); another mover's records,
        # and their services, are left to it. judge_labels: report and repair move labels
        # with no record (one mover does it). The health mover is the second (step.py).
        self.scope = scope
        # preemption.priority_classes: a label's class read as placement reads it
        self.classes = classes
        self.judge_labels = judge_labels
        self.swarm = swarm
        self.cfg = cfg
        self.prefix = prefix
        self.dry_run = dry_run
        # A move closes gates where its tasks run: each write carries the decision
        # (a rebalancing move; the health mover's are evacuations).
        self.writes = Writes(swarm, dry_run=dry_run, who="rebalance", prefix=prefix,
                             why=Why(why, "a rebalancing move" if why == "move" else
                                     "the health policy moves it off a failed GPU"))
        self.metrics, self.clock = metrics, clock
        # what is said of the moves, each end once (kept in Swarm too): outcomes.py
        self.outcomes = Outcomes(self.writes, prefix, clock, metrics)
        self.recent = self.outcomes.recent
        self.frag_budget = FragBudget(cfg.fragmentation.moves_per_hour,
                                      cfg.fragmentation.moves_per_100_placements)
        self._last_dry: set[tuple[str, str, str]] = set()
        self._dry_flying: SaidOnce[str] = SaidOnce()  # move ids said "left as it is" (dry-run)
        self._said: SaidOnce[str] = SaidOnce()  # forged or mismatched labels reported
        self._raised: SaidOnce[str] = SaidOnce()  # admission's faults ("": its reads)
        self._held: SaidOnce[str] = SaidOnce()  # move ids said "held as it is" (node unread)
        self.seen = FirstSeen()  # a move's age: a record dated ahead still times out
        self.held: Mapping[tuple[str, str], tuple[str, int]] = {}  # ``room_for``'s, per cycle
        self.shares: Shares = {}  # of those, stopping tasks' shares (``room_for``), per cycle
        self._ended = self.outcomes.ended  # moves whose end was said while their record stays
        # moves that stay on their node (source == target): repin.py
        self.repin = Repin(swarm, self.writes, cfg, prefix=prefix, clock=clock,
                           seen=self.seen, ended=self._ended, say=self.outcomes.say,
                           classes=classes)
        self.repin.held_said = self._held

    def hold(self, held: Mapping[tuple[str, str], tuple[str, int]], shares: Shares) -> None:
        """This cycle's GPUs no move (nor repin) of this mover lands on (``room_for``):
        ``held``, the stopping tasks' of them by their ``shares``."""
        self.held = self.repin.held = held
        self.shares = self.repin.shares = shares

    def stand_by(self) -> None:
        """Not the leader: the next term counts the fragmentation budget afresh, its
        hour read from Swarm (another leader's moves meanwhile are in it)."""
        self.frag_budget = FragBudget(self.cfg.fragmentation.moves_per_hour,
                                      self.cfg.fragmentation.moves_per_100_placements)

    # --- the record: the daemon's own word ---------------------------------------
    def records(self) -> dict[str, MoveState]:
        """The moves this daemon (or a leader before it) started, from Swarm itself."""
        return read_records(self.swarm.swarm_labels(), self.prefix)

    # --- writes: through the actuator's gate, which refuses every one in dry-run ------
    def _write_spec(self, sid: str, fn: Callable[[dict[str, Any]], None]) -> bool:
        return self.writes.service_spec(sid, spec_edit(fn))

    def _put_record(self, sid: str, st: MoveState) -> bool:
        return put_record(self.writes, self.prefix, sid, st)

    def _drop_record(self, sid: str, finished: bool = False, started: bool = True) -> bool:
        """Remove a move's record (``record.drop_record``)."""
        return drop_record(self.writes, self.prefix, sid, self.clock(), finished, started)

    # --- starting ------------------------------------------------------------------
    def run_cycle(self, moves: Sequence[Move], nodes: Sequence[SwarmNode],
                  services: Sequence[SwarmService], tasks: Sequence[SwarmTask],
                  reserved: Sequence[Move] = (), plan_failed: Names = frozenset()) -> None:
        """Judge the move labels against the daemon's records, advance the moves it
        started, then start the admitted new ones (``reserved``: moves that wait for the
        budgets elsewhere keep their slots, ``admit``). In dry-run nothing is written."""
        try:
            labels = self.swarm.swarm_labels()
            every = read_records(labels, self.prefix)
            v = verify_scope(every, services, self.prefix, self.scope,
                             unreadable_records(labels, self.prefix),
                             self.swarm.unkeyed().services)
            if not self.judge_labels:
                v.forged = []
        except BudgetCut as exc:  # (its cycle's budget: no fault of its own)
            raise read_cut() from exc
        except SwarmError as exc:
            logger.error("rebalance: cannot read the move records, no move this cycle: {}", exc)
            return
        report(v, self._said, self.outcomes, self.prefix, dry_run=self.dry_run,
               judge_labels=self.judge_labels)
        self.seen.keep(v.in_flight())
        self._ended &= {st.id for st in every.values()}  # gone: said and ended
        if self.dry_run:
            self._dry_flying.begin()
            for st in v.in_flight():
                if self._dry_flying.fresh(st.id):
                    logger.bind(service=st.service).warning(
                        "dry-run: move {} -> {} in flight is left as it is; it is "
                        "finished or rolled back once dry-run is off",
                        st.source_host, st.target_host)
            self._dry_flying.end()
        else:
            self._act_on(v)
        by_name = {s.name: s for s in services}
        raised: dict[str, Exception] = {}  # moves whose checks raised: refused alone
        self._raised.begin()
        try:
            ok, refused = self._admit(moves, v, labels, nodes, by_name, tasks, reserved,
                                      raised)
        except Stopped:
            raise
        except Exception as exc:  # this mover's new moves of the cycle, not the step
            if self._raised.fresh(""):
                logger.opt(exception=exc).error("rebalance: the moves' reads failed "
                                                "unexpectedly, no new move this cycle")
            self._raised.end()
            return
        for m, why in refused:
            if m.service in raised and self._raised.fresh(m.service):
                logger.bind(service=m.service).opt(exception=raised[m.service]).error(
                    "move {} -> {}: its checks failed unexpectedly, not started; the "
                    "others go on", m.source_host, m.target_host)
            logger.bind(service=m.service).info("move {} -> {} not started: {}",
                                                m.source_host, m.target_host, why)
        self._raised.end()
        if self.dry_run:
            now_keys = set()
            for m in ok:
                key = (m.service, m.source_node, m.target_node)
                now_keys.add(key)
                if key not in self._last_dry:
                    self.outcomes.record(m.service, m.source_host, m.target_host, m.reason,
                                         Outcome.DRY_RUN, f"GPUs {','.join(m.target_uuids)}",
                                         m.nodes)
            self._last_dry = now_keys
            return
        self._start_all(ok, by_name, plan_failed)

    def _start_all(self, ok: Sequence[Move], by_name: Mapping[str, SwarmService],
                   plan_failed: Names) -> None:
        """Start the admitted moves, each its own loss whatever it raises."""
        for m in ok:
            wrote: list[bool] = []  # a write of the move was let through (its record first)
            try:
                with self.writes.before_first(partial(wrote.append, True)):
                    got = self.start(m, by_name[m.service], plan_failed)
                if got.budget is not None:  # admitted on this cycle's first read
                    logger.bind(service=m.service).info(
                        "move {} -> {} not started: {}", m.source_host, m.target_host, got.why)
                if got.ok and m.trigger is Trigger.FRAGMENTATION:
                    self.frag_budget.spend(self.clock())
            except BudgetCut as exc:  # (its cycle's budget: no fault of its own)
                raise read_cut() from exc
            except SwarmError as exc:
                self._failed(m, by_name[m.service].id, bool(wrote), exc, str(exc))
            except Stopped:
                raise  # the daemon stops: no later move starts (not a failed one)
            except Exception as exc:  # a bug or unforeseen input: this move's loss only
                # Its record, if written, is the authority: judged from Swarm next cycle.
                logger.bind(service=m.service).opt(exception=exc).error(
                    "move {} -> {} failed unexpectedly; the others go on", m.source_host,
                    m.target_host)
                self._failed(m, by_name[m.service].id, bool(wrote), exc,
                             f"{type(exc).__name__}: {exc}")

    def _failed(self, m: Move, sid: str, wrote: bool, exc: Exception, detail: str) -> None:
        """A start that raised: said failed once (``Outcomes.start_failed``). A
        fragmentation move whose start raised after its first write, its record, may be
        under way: the hour's budget is spent, as by one started; not when the start took
        its record back (``VersionConflict``...)."""
        self.outcomes.start_failed(m.service, sid, m.source_host, m.target_host, m.reason,
                                   wrote, detail, m.nodes)
        if wrote and m.trigger is Trigger.FRAGMENTATION and not isinstance(
                exc, (VersionConflict, NotLeader)):
            self.frag_budget.spend(self.clock())

    def _admit(self, moves: Sequence[Move], v: Verdict, labels: Mapping[str, str],
               nodes: Sequence[SwarmNode], by_name: Mapping[str, SwarmService],
               tasks: Sequence[SwarmTask], reserved: Sequence[Move],
               raised: dict[str, Exception]) -> tuple[list[Move], list[tuple[Move, str]]]:
        """``admit`` on the cycle's ledger and fragmentation hour."""
        ledger = read_ledger(nodes, self.prefix)
        # The hour's moves for a daemon that starts leading: those finished (the mover's
        # list) and those in flight, whose finish joins that list only after this first
        # look; without the latter a restart mid-move gave the hour one move more. A start
        # no clock wrote (far ahead) counts from now: in flight, it was spent by now.
        now = self.clock()
        self.frag_budget.observe(ledger, {st.service for st in v.in_flight()},
                                 [*finished_times(labels, self.prefix),
                                  *(stamps.started(st.started_at, now)
                                    for st in v.in_flight())], now)
        return admit(moves, v.in_flight(), by_name, tasks, ledger, self.cfg, self.prefix,
                     self.clock(), self.frag_budget.left(self.clock()), reserved,
                     len(v.unreadable), raised, self.classes)

    def _act_on(self, v: Verdict) -> None:
        self._held.begin()
        self._act_on_records(v)
        self._held.end()

    def _act_on_records(self, v: Verdict) -> None:
        for s in (s for s, _why in v.forged if s.mode not in JOB_MODES):
            self._step(s.name, repair, self.writes, self.swarm, self.prefix, s)
        for sid in sorted(v.unreadable_gone) if self.judge_labels else ():
            # as a readable record of a gone service: its gates are placement's to release
            key = peer_text(record_key(self.prefix, sid))
            if self._step(key, self._drop_record, sid, False, False):
                logger.warning("move record {} cannot be read and names no service: "
                               "dropped (no move of it can be under way)", key)
        for sid, st in v.gone.items():  # its gates and ledger are placement's to release
            if self._step(st.service, self._drop_record, sid):
                # said: the move ends with no outcome of its own (the log had it started)
                logger.bind(service=st.service).warning(
                    "move record {} of {} ({} -> {}): its service is gone (removed "
                    "mid-move): dropped; placement releases its gates and ledger",
                    peer_text(record_key(self.prefix, sid)), peer_text(st.service),
                    peer_text(st.source_host), peer_text(st.target_host))
        for sid, st in v.verified.items():
            self._step(st.service, self.repin.advance if st.same_node else self.advance,
                       sid, st)
        for sid, st in v.lost.items():
            self._step(st.service, self.repin.recover if st.same_node else self.recover,
                       sid, st)

    def _step(self, service: str, fn: Callable[_P, object], *args: _P.args,
              **kwargs: _P.kwargs) -> bool:
        """``fn(*args)``; False when it failed (logged, retried next cycle), whatever it
        raised: one move's step never stops the others'."""
        try:
            fn(*args, **kwargs)
        except BudgetCut as exc:  # (its cycle's budget: no fault of its own)
            raise read_cut() from exc
        except SwarmError as exc:
            logger.bind(service=service).error("move step failed, retried next cycle: {}",
                                               exc)
            return False
        except Stopped:
            raise  # the daemon stops: the step ends here (not a failed one)
        except Exception as exc:  # a bug or unforeseen input: this move's step only
            logger.bind(service=service).opt(exception=exc).error(
                "move step failed unexpectedly, tried again next cycle; the others go on")
            return False
        return True

    def in_flight(self, every: Mapping[str, MoveState]) -> list[MoveState]:
        """The moves in flight this mover's budgets count (``startchecks.in_flight``)."""
        return in_flight(self.swarm, every, self.prefix, self.scope)

    def start(self, m: Move, svc: SwarmService, plan_failed: Names = frozenset()) -> Started:
        """Start ``m`` after fresh checks, its budgets among them (a caller other than
        ``run_cycle``, such as preemption, gets no move past them); refused: nothing is
        written, and the refusal is recorded unless it is the budget alone (its caller
        says that one, as ``run_cycle`` says ``admit``'s). ``plan_failed``: this cycle's
        (``placement.isolate``), refused. A repin stays on its node (``repin.py``)."""
        fresh = self.swarm.service(svc.id)
        labels = self.swarm.swarm_labels()
        every, bad = read_records(labels, self.prefix), unreadable_records(labels, self.prefix)
        if (first := first_refusal(m, fresh.id, bad, plan_failed, self.prefix)) is not None:
            return self._refused(m, first, None)
        budget = over_budget(m, self.in_flight(every), (), self.cfg, len(bad))
        if m.target_node == m.source_node:
            return self._start_repin(m, fresh, budget)
        why = move_refusal(self.swarm, m, fresh, every, self.prefix, self.cfg, self.clock,
                           self.held, self.shares, self.classes)
        if why is not None or budget is not None:
            return self._refused(m, why, budget)
        return self._begin(m, fresh)

    def _start_repin(self, m: Move, fresh: SwarmService, budget: Budget | None) -> Started:
        """``start`` of a move that stays on its node (``repin.py``): over budget, refused
        with the reason its own checks give, if any (``_refused``)."""
        if budget is not None:
            node = self.swarm.node(m.source_node)
            tasks = self.swarm.tasks({"service": fresh.id})
            return self._refused(m, self.repin.refusal(m, fresh, node, tasks), budget)
        got = self.repin.start(m, fresh)
        if isinstance(got, str):
            return self._refused(m, got, None)
        return Started(ok=True)

    def _begin(self, m: Move, fresh: SwarmService) -> Started:
        """Steps 0 to 2 of a move that passed ``start``'s checks: its record, the
        service write, the target opened."""
        replicas = fresh.replicas or 0
        st = MoveState.start(m, fresh, self.clock(), surge=self.cfg.make_before_break)
        p = self.prefix

        def step1(spec: dict[str, Any]) -> None:
            labels = spec_labels(spec)
            labels[p + MOVE_STATE] = st.to_json()
            labels[devices_key(p, st.target)] = ",".join(st.target_uuids)
            labels.update(dict(m.target_share))  # the moved task is told its share
            if st.surge:
                start_surge(spec, replicas)

        with failed_if_raised(self._ended, st):  # its one outcome: failed
            # The record first: a label is only ever acted on when its record exists.
            self._put_record(fresh.id, st)
            crash_point("move-step-0")
            detail = f"GPUs {','.join(m.target_uuids)}{', make-before-break' if st.surge else ''}"
            try:
                self._write_spec(fresh.id, step1)
            except (VersionConflict, NotLeader):
                self._drop_record(fresh.id, started=False)  # not made: nothing else was written
                raise
            except SwarmError as exc:
                # Outcome unknown (a timeout after the engine made it, an engine error): the
                # spec may carry the move label and the surge. Only the record lets a later
                # cycle undo them (no label: ``recover`` rolls back what the surge set) or go
                # on (label there); dropped, a surge (replicas + 1) stayed for good.
                self.outcomes.record(m.service, m.source_host, m.target_host, m.reason,
                                     Outcome.STARTED, f"{detail}; the spec write's outcome "
                                     f"is unknown ({exc}): judged from the record next cycle",
                                     m.nodes)
                return Started(ok=True)
            self.outcomes.record(m.service, m.source_host, m.target_host, m.reason,
                                 Outcome.STARTED, detail, m.nodes)
            crash_point("move-step-1")
            # In flight from here on by its record, whatever this write does: a failure is
            # retried by ``advance``, and the move is spent (budgets) all the same.
            self._step(m.service, self._open, st.target, st.target_holding())
            crash_point("move-step-2")
            return Started(ok=True)

    def _refused(self, m: Move, why: str | None, budget: Budget | None) -> Started:
        """``start``'s refusal: another reason first (recorded); the budget alone is not
        recorded (it would be every cycle while a caller waits for it)."""
        if why is None and budget is not None:
            return Started(ok=False, why=budget.why, budget=budget)
        why = why or "refused"
        self.outcomes.record(m.service, m.source_host, m.target_host, m.reason,
                             Outcome.REFUSED, why, m.nodes)
        return Started(ok=False, why=why)

    # --- progress ------------------------------------------------------------------
    def _open(self, node_id: str, h: Holding) -> str:
        """``h``'s ledger entry and gate on its node, in one write, unless another service
        holds its GPUs now: the ledger did not hold them for this move (the target before
        its first write landed; the source once closed), and a placement in between may
        have given them out; opened, one GPU had two holders. Then nothing is written,
        and who holds which GPU is returned ("": open)."""
        want = {assign_key(self.prefix, h.service): h.label_value(),
                gate_key(self.prefix, h.service): "true"}
        taken: list[str] = []

        def compute(cur: Mapping[str, str]) -> Mapping[str, str] | None:
            taken[:] = held_by_others(cur, self.prefix, h)  # as the node is at write time
            return None if taken else {**cur, **want}

        self.writes.node_labels(node_id, compute)
        return "; ".join(taken)

    def _close(self, node_id: str, service: str) -> bool:
        keys = (assign_key(self.prefix, service), gate_key(self.prefix, service))

        def compute(cur: Mapping[str, str]) -> Mapping[str, str] | None:
            return {k: v for k, v in cur.items() if k not in keys}

        return self.writes.node_labels(node_id, compute)

    def _finish(self, sid: str, st: MoveState, drop_node: str, outcome: Outcome,
                detail: str, renew: bool = False) -> None:
        """Step 4 (``record.end_move``): the node left behind loses its device map and
        share labels, and the surge goes; the outcome is said before the record goes.
        ``renew``: with a ForceUpdate (its waiting task replaced; nothing of it runs)."""
        p = self.prefix

        def also(spec: dict[str, Any]) -> None:
            labels = spec_labels(spec)
            labels.pop(devices_key(p, drop_node), None)
            for k in [k for k in labels if node_of_key(k, p) == drop_node]:
                labels.pop(k)
            if st.surge:
                end_surge(spec, st)
            if renew:
                tt = spec.setdefault("TaskTemplate", {})
                tt["ForceUpdate"] = int(tt.get("ForceUpdate") or 0) + 1

        end_move(self.writes, p, sid, self.clock(), also,
                 lambda: self.outcomes.end(st, outcome, detail))  # (a partial's args: unchecked)

    def _rolled_back(self, sid: str, st: MoveState, detail: str, taken: str) -> None:
        """The roll-back's end and outcome; not reopened (``taken``): a failed move."""
        if not taken:
            self._finish(sid, st, st.target, Outcome.ROLLED_BACK, detail)
            return
        self._finish(sid, st, st.target, Outcome.FAILED,
                     f"{detail}; {st.service} not reopened on {st.source_host}: {taken} now "
                     "(placed while the move ran); placement places its replica anew")

    def _roll_back(self, sid: str, st: MoveState, detail: str) -> None:
        if st.direction == "forward":  # recorded first: its target no longer held (move_gpus)
            self._put_record(sid, st := replace(st, direction="back"))
        taken = self._open(st.source, st.source_holding())
        self._close(st.target, st.service)
        self._rolled_back(sid, st, detail, taken)

    def _node_left(self, sid: str, st: MoveState, src: SwarmNode | None,
                   dst: SwarmNode | None) -> None:
        """A node of the move left the swarm (``docker node rm``): the move ends on the node
        that is left (placement carries on from its ledger), never a step error each cycle.
        That node unread (``SwarmNode.unread``): every write to it is refused, so the move
        waits as it is, said once, until it reads (it tried the write each cycle)."""
        left = src if dst is None else dst
        if left is not None and left.unread:
            if self._held.fresh(st.id, left.unread):
                logger.bind(service=st.service).warning(
                    "move of {} ({} -> {}) held as it is: {} left the swarm, and {}",
                    peer_text(st.service), peer_text(st.source_host),
                    peer_text(st.target_host), peer_text(st.target_host if dst is None
                                                         else st.source_host), left.unread)
            return
        if dst is None:
            taken = self._open(st.source, st.source_holding()) if src is not None else ""
            self._rolled_back(sid, st, f"{st.target_host} left the swarm", taken)
            return
        taken = self._open(st.target, st.target_holding())
        self._finish(sid, st, st.source, Outcome.FAILED if taken else Outcome.DONE,
                     f"{st.source_host} left the swarm; " + (
                         f"{st.target_host} not opened: {taken} now; placement places its "
                         "replica anew" if taken else
                         f"the replica is {st.target_host}'s"))

    def recover(self, sid: str, st: MoveState) -> None:
        """A recorded move whose service lost its move label: finished when the source is
        already closed (the new task is the one to keep), else rolled back."""
        src, dst = node_by_id(self.swarm, st.source), node_by_id(self.swarm, st.target)
        if src is None or dst is None:
            self._node_left(sid, st, src, dst)
            return
        if held_unread(st, src, dst, self._held):
            return
        src_open = src.labels.get(gate_key(self.prefix, st.service)) == "true"
        if st.direction == "forward" and not src_open:
            self._finish(sid, st, st.source, Outcome.DONE, "finished from the daemon's "
                         "record (the service's move label was gone)")
            return
        self._roll_back(sid, st, "the service's move label was gone (re-deployed?)")

    def advance(self, sid: str, st: MoveState) -> None:
        """One look at a move in flight; make every step whose condition holds. ``st`` is
        the daemon's record, never the service's label."""
        p = self.prefix
        src, dst = node_by_id(self.swarm, st.source), node_by_id(self.swarm, st.target)
        if src is None or dst is None:
            self._node_left(sid, st, src, dst)
            return
        if held_unread(st, src, dst, self._held):
            return
        # judged on Swarm's answer, as victimspec.renewed: its shut-down tasks are none, nor
        # another service's (an engine or proxy that dropped the filter)
        tasks = [t for t in self.swarm.tasks({"service": sid})
                 if t.service_id == sid and t.desired_state in MEANT_STATES]
        running_on = {t.node_id for t in tasks if t.desired_state == t.state == "running"}
        on_source = any(t.node_id == st.source for t in tasks)  # desired ready: may start
        src_open = src.labels.get(gate_key(p, st.service)) == "true"
        dst_open = dst.labels.get(gate_key(p, st.service)) == "true"
        # Failed: B's task does not run and B cannot run it (down, drained, paused: no
        # wait for the timeout with A closed or the budget held), or the timeout passed.
        down = None if st.target in running_on else cannot_run(dst, st.target_host)
        why = down or (f"no task running on {st.target_host} within "
                       f"{self.cfg.move_timeout_s:g}s" if st.target not in running_on and
                       self.clock() - self.seen.started(st, self.clock())
                       > self.cfg.move_timeout_s else None)
        if st.direction == "forward" and why is not None and st.trigger == HEALTH:
            # A health move is not rolled back: its source GPU failed, so a roll-back
            # restores a broken holder that the policy proposes again at once (a restart
            # every move_timeout_s). Its target is healthy and was verified free; Swarm
            # keeps the task there (pending on an image or resources, or under its
            # restart policy) and runs it when it can, as for any placement (a target
            # Swarm cannot run it on: placement's converge re-places it). So it ends
            # on the target: the source closed (the enforcer stops the broken task) and
            # the spec restored. Before the target's gate is open, the steps carry on.
            if dst_open:
                if src_open:
                    self._close(st.source, st.service)
                # Its task waiting for the target would be of an older revision once the
                # spec is written, never tried again (docs/deploy.md): replaced with the
                # write where nothing else of it runs (a running replica is not restarted
                # for it: the pending line names the operator's fix).
                renew = any(not t.node_id for t in tasks) and running_on <= {st.source}
                self._finish(sid, st, st.source, Outcome.FAILED,
                             kept_on_healthy(st, self.cfg.move_timeout_s, down), renew)
                return
        elif st.direction == "back" or why is not None:
            # The record alone (the authority) says "back" (``_roll_back``): a write of the
            # spec before the source reopens would leave a task waiting for the target of
            # an older revision, which Swarm's scheduler never tries again once it finds no
            # node (docs/deploy.md); the roll-back moves the gates first, then ends the move.
            self._roll_back(sid, st, why or "its record says it rolls back")
            return
        if not dst_open:  # its GPUs given out before they were: the move is rolled back
            if taken := self._open(st.target, st.target_holding()):
                self._roll_back(sid, st, f"{st.target_host} not opened: {taken} now")
            crash_point("move-step-2")
            return
        if src_open and (not st.surge or st.target in running_on):
            self._close(st.source, st.service)
            crash_point("move-step-3")
            return
        if not src_open and not on_source and st.target in running_on:
            self._finish(sid, st, st.source, Outcome.DONE,
                         f"running on {st.target_host} with {','.join(st.target_uuids)}")
