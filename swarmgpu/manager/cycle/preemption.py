"""The preemption actuator: the only code that stops a service for a higher-priority one.

``placement.preempt`` decides (snapshot in, preemptions out); this step owns every
safety and the writes:

* ``preemption.dry_run`` (default true): the decision is logged and shown on the
  preemptor's plan ("would preempt ..."); nothing is written;
* budgets: at most ``max_per_hour`` victims stopped per hour (0 turns preemption off),
  and with tenants in the config, at most each tenant's ``preemptions_per_hour`` for its
  services' preemptions (``manager.services.tenants``): no one tenant spends the whole hour's.
  The hour is kept in Swarm too (``preempt_budget``), so a new leader spends what is left;
  it is stored before the victims' writes (``preempt_hour``; a victim moved instead,
  before its move's first write: ``_count_first``), so a stop between them never leaves
  it short;
* cooldown per victim (``victim_cooldown_s``, from its last preemption, by service ID:
  kept in Swarm in its ``<p>state.preempted`` label and here; the label counts only when
  the hour on the swarm object has a victim stopped at its time, as a stack can write it
  too, where the victim no longer holds the node it names, and on a holder only when its
  tasks were made after it: ``preempted.recorded_cooling``; a victim whose move rolled
  back preempted nothing, nor is it spent in the hour where no task of it stopped:
  ``victimback``) and a settle time per preemptor (``settle_s``): a preemptor still
  pending after its victims were stopped stops no more until it has passed, their GPUs
  held for it meanwhile (``nominated``, never a label; ``placement.nominated``), and
  while a victim's move is in flight or its task stops (``Nominations.keep``) and
  ``settle_s`` after; held, they are used for the other preemptors of its priority or
  lower, and no victim moves there;
* times Swarm keeps (the hour, ``<p>state.preempted``) are wall-clock (``now``), those in
  memory (settle, cooldowns, holds) monotonic (``clock``, ``mono``): no clock step moves them;
* input is not state: each victim's holding is read again from its node just before
  the writes, and a victim whose ledger entry is gone or changed is left alone;
* no victim under a move, no GPU a move holds counted free: the snapshot is older than
  the moves the rebalancer and the health mover started in this cycle, so the records
  are read again before deciding (``record.recorded``, ``record.move_gpus``; unreadable:
  no preemption this cycle). Stopped under its move, a victim's roll-back reopened its
  source, given to the preemptor; a move's new target looked free beside a victim.

A victim that can run on another node (``Preemption.moves``) is moved there instead,
make-before-break, through the rebalancer's mover (``Mover.start``: its own checks, the
record, the surge, and the rebalancer's budgets ``max_moves_per_cycle`` and
``max_moves_per_node``, its moves in flight counted: this step runs after it, and one
actuator owns the budgets); the rebalancer's mover advances it each cycle, so a move needs
``rebalance.enabled``, ``rebalance.dry_run: false`` and both budgets above 0 (0 turns
those moves off; else the victim is stopped). The
mover refuses a service with ``swarmgpu.rebalance: never``, one cooling down or not
converged: that victim is stopped. A move refused for the budgets alone waits instead (a
budget never turns a move into a stop): the victim keeps running, and so do the
preemption's other victims (one stopped alone frees GPUs the preemptor cannot use yet),
nothing of the hour is spent, the preemptor stays pending with the reason (its plan, the
log once) and the move is tried again next cycle. It holds its slot meanwhile: the
rebalancer, which runs first, starts none of its own moves in the slots the waiting move
needs (``reserved``, found again each cycle, so the slot is held only while it waits).
Its preemptor waits while the move is in flight.

A victim is stopped by swarmgpu's own state only: its ``<p>devices.<node>`` lists go and
``<p>state.preempted`` is set on the service (no task restarts: labels only), then its
ledger entry and gate leave the node, and Swarm's constraint enforcer stops the task with
the service's own stop_grace_period. Its spec is otherwise untouched; the planner places
it again when capacity frees (and removes the record then).

The victims of one preemption (all on the preemptor's node) are stopped whole or not at
all: their holdings are read again first, then each one's spec is written, then all
their gates close in one node write (``victimstop``). A victim that no longer holds what was
decided, or a spec write that fails, stops none (the hour given back, tried again next
cycle; a spec written is placement's to restore, its victim still holding); a gate
write that fails leaves them counted, judged next cycle (``victimback``). Stopped one
by one, a failure left the others stopped for a preemptor that still could not run, and
placement gave them their GPUs back the next cycle: stopped and restarted for nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Literal

from loguru import logger

from swarmgpu.core.config import Config, parse_priority_classes
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.saidonce import SaidOnce
from swarmgpu.manager.cycle.preempt_budget import SpentHour
from swarmgpu.manager.cycle.preempt_hour import HourStore
from swarmgpu.manager.cycle.preempt_notes import (
    UnknownVictims,
    dry_note,
    note_on,
    note_unread,
    raised_note,
    unread_note,
)
from swarmgpu.manager.cycle.victimback import MovedBack, VictimSpent, ran_on, rolled_back, undone
from swarmgpu.manager.cycle.victimlist import victim_seconds
from swarmgpu.manager.cycle.victimspec import unread_victims
from swarmgpu.manager.cycle.victimstop import close_gates, names
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.engine.stop import BudgetEnded, Stopped, TermEnded, read_cut
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import (
    Nominations,
    PlacementPlan,
    ServicePlan,
)
from swarmgpu.manager.placement.nominated import (
    Nomination,
    holds_with_stopping,
    live_nominations,
    stopping_shares,
    stops_waited,
)
from swarmgpu.manager.placement.preempt import Candidate, Preemption, choose_preemptions
from swarmgpu.manager.placement.preempted import recorded_cooling
from swarmgpu.manager.placement.preemptview import holdings_by_node
from swarmgpu.manager.rebalance.mover import Mover, rebalancing
from swarmgpu.manager.rebalance.moves import Move, Trigger
from swarmgpu.manager.rebalance.record import move_gpus, moving, recorded
from swarmgpu.manager.services.tenants import FROM_CONFIG, FromConfig, Tenants
from swarmgpu.swarm.client import (
    BudgetCut,
    NotLeader,
    SwarmClient,
    SwarmError,
    SwarmService,
    SwarmTask,
    VersionConflict,
)

# service -> nodes refused to it for a host-mode port alone -> who binds it (Planner.port_takers)
PortTakers = Callable[[SwarmService], Mapping[str, AbstractSet[str]]]


class Unstored(Exception):
    """The hour could not be stored before a victim's move (``_count_first``). Not a
    ``SwarmError``: no caller takes it for a failed write and goes on to the next."""


class Preempter:
    """Kept across cycles by the daemon: the budget window and the last preemptions."""

    def __init__(self, cfg: Config, clock: Callable[[], float] | None = None,
                 tenants: Tenants | FromConfig | None = FROM_CONFIG) -> None:
        self.cfg = cfg
        self.clock = clock or time.monotonic  # the in-memory times' (the module's two clocks)
        self.prefix = cfg.sync.prefix
        self.spent = SpentHour(self.prefix)  # when each victim was stopped, per tenant too
        self.hour = HourStore(self.spent, self.prefix,  # (its config's dry-run, read live)
                              lambda: self.cfg.dry_run or self.cfg.preemption.dry_run)
        self.tenants = Tenants.given(cfg, tenants)  # (a one-shot's, built once: handed on)
        # victim's service id -> when last preempted (``clock``): by id, as Swarm's own
        # record on its spec is, so a service later created under its name is not cooling
        self.victim_at: dict[str, float] = {}
        self.preemptor_at: dict[str, float] = {}  # preemptor -> its last preemption
        self.preemptor_id: dict[str, str] = {}  # preemptor -> its service id then
        # its victims' GPUs, held for it (while a victim's move is in flight too)
        self.nominated = Nominations(cfg.preemption.settle_s, cfg.rebalance.move_timeout_s, clock)
        self.logged: SaidOnce[str] = SaidOnce()  # dry-run decisions, while decided
        self.said_spent: SaidOnce[str] = SaidOnce()  # budget refusals, while they last
        self.said_raised: SaidOnce[str] = SaidOnce()  # victims that raised, while they do
        self.unknown = UnknownVictims()  # preemptors held back by a queue's unknown use
        self.moving: dict[str, set[str]] = {}  # preemptor -> each victim it had moved
        self.left: dict[str, tuple[str, str]] = {}  # victim moved -> its id, the node it left
        self.half: dict[str, tuple[str, str]] = {}  # victim of a stop half made -> the same
        self.left_spent: dict[str, VictimSpent] = {}  # and their counts (``victimback.undone``)
        self.moved_back = MovedBack()  # victims whose move rolled back: stopped next time
        self.mover: Mover | None = None
        self.waits: SaidOnce[str] = SaidOnce()  # moves said to wait for the move budgets
        self.unread: dict[str, str] = {}  # holders never chosen: their specs' faults
        # Those moves, as of this step's last cycle: the rebalancer's next cycle holds
        # their slots of the budgets for them (``reserved``).
        self.waiting: tuple[Move, ...] = ()
        rb = cfg.rebalance
        # A budget of 0 turns those moves off: no move would ever start, so the victim is
        # stopped (waiting for it would keep the preemptor pending for good).
        self.can_move = (rb.enabled and not rb.dry_run and not cfg.dry_run
                         and rb.max_moves_per_cycle > 0 and rb.max_moves_per_node > 0)

    def _mover(self, swarm: SwarmClient) -> Mover:
        if self.mover is None:
            # the rebalancer's scope: its moves in flight and these share its budgets
            self.mover = Mover(swarm, self.cfg.rebalance, prefix=self.prefix,
                               dry_run=self.cfg.dry_run or self.cfg.preemption.dry_run,
                               scope=rebalancing, classes=parse_priority_classes(
                                   self.cfg.preemption.priority_classes))
        return self.mover

    def cycle(self, swarm: SwarmClient, snap: Snapshot, plan: PlacementPlan,
              facts: Mapping[str, NodeFacts],
              refused: Callable[[SwarmService], AbstractSet[str]] | None = None,
              now: float | None = None, ports: PortTakers | None = None,
              mono: float | None = None) -> list[Preemption]:
        """Decide and (outside dry-run, within budget) act; return what was acted on
        (in dry-run: what would have been). ``refused``, ``ports``: the planner's
        ``refused_nodes`` and ``port_takers`` (``choose_preemptions``). ``now``, ``mono``:
        the wall clock's and ``clock``'s (the module's two clocks; None: now)."""
        pc = self.cfg.preemption
        now = time.time() if now is None else now  # stored in Swarm: wall clock
        mono = self.clock() if mono is None else mono
        # Found again each cycle, so a cycle that fails part-way holds no stale slot.
        self.waiting = ()
        self.said_raised.begin()
        dry = pc.dry_run or self.cfg.dry_run
        records = self._records(swarm, pc.max_per_hour, dry)
        if records is None and not dry:  # dry-run stops nothing: the snapshot's will do
            self.said_raised.end()
            return []
        raised: dict[str, Exception] = {}
        chosen = self.decide(snap, plan, facts, refused, now, ports, raised, records, mono)
        self.unknown.note(plan, log=True)
        by_name = {sp.name: i for i, sp in enumerate(plan.services)}
        note_unread(plan, by_name, self.unread)  # the map says it each cycle, the log once
        for name, why in self.unread.items():
            if self.said_raised.fresh(f"unread:{name}", why):
                logger.bind(service=name).warning("{}", unread_note(name, why))
        for name, exc in raised.items():
            self._say_raised(f"choose:{name}", name, exc, f"choosing victims for {name} "
                             "failed unexpectedly, it preempts nothing this cycle; the "
                             "other preemptions go on")
            note_on(plan, by_name, name, raised_note(name, exc))
        done: list[Preemption] = []
        waits: list[tuple[str, str, Move]] = []  # (key, what is said, the move) that wait
        unstored = False  # the hour in memory differs from the one last stored
        said = self.said_spent  # this cycle's budget refusals (said again once gone)
        said.begin()
        self.logged.begin()
        for p in chosen:
            log = logger.bind(service=p.service)
            i = by_name.get(p.service)
            if dry:
                if i is not None:
                    plan.services[i] = plan.services[i].noted(dry_note(p))
                if self.logged.fresh(p.describe()):
                    log.info("dry-run: would {}", p.describe())
                done.append(p)
                continue
            tenant = self._tenant_of(plan.services[i] if i is not None else None)
            spent = self.over_budget(p, tenant)
            if spent:
                if said.fresh(spent):  # a wait for the hour: said once
                    log.warning("{}", spent)
                continue
            stopped, corrected = self._act(swarm, snap, plan, p, tenant, now, waits, mono)
            unstored |= corrected
            if stopped:
                self.took(p, stopped, mono)
                done.append(p)
        self.logged.end()
        said.end()
        self.said_raised.end()
        self._say_waits(waits)
        if unstored or self.spent.given:  # (given back in a cycle cut at its budget too)
            self.hour.store(swarm)
        return done

    def _act(self, swarm: SwarmClient, snap: Snapshot, plan: PlacementPlan, p: Preemption,
             tenant: str, now: float, waits: list[tuple[str, str, Move]],
             mono: float | None = None,
             ) -> tuple[list[Candidate], bool]:
        """Move or stop ``p``'s victims: those moved or stopped, and whether the hour in
        memory now differs from the one stored. A victim whose move waits (the move
        budgets: a budget never turns a move into a stop) or is held (the hour not
        stored) holds the whole preemption back: no victim of it is stopped this cycle.
        Stopped alone, a victim freed GPUs the preemptor could not use yet, and placement
        gave them back to it the next cycle: stopped and restarted for nothing. Cut at the
        cycle's budget or by the term's end (the write gate's ``TermEnded``) part-way, those
        moved before the cut are taken (``_took_cut``), and those counted before a move
        that did not start, never stopped, given back: this daemon may lead again with
        this memory, and stores the hour without them then (``spent.given``)."""
        was = set(self.moving.get(p.service, ()))
        counted: set[str] = set()  # victims spent and stored before their move's writes
        try:
            return self._act_on(swarm, snap, plan, p, tenant, now, waits, mono, counted)
        except (BudgetEnded, TermEnded):
            landed = self.moving.get(p.service, set()) - was
            if back := len(counted - landed):  # (the cycle's end stores none: ``given``)
                self.spent.release(now, tenant, back)
            self._took_cut(p, landed, self.clock() if mono is None else mono)
            raise
        finally:  # (those under way now, cut or not: each was counted at ``now``)
            for v in p.victims:
                if v.service in self.moving.get(p.service, set()) - was:
                    self.left_spent[v.service] = VictimSpent(
                        now, tenant, ran_on(snap.tasks, v.service_id, p.node_id))

    def _act_on(self, swarm: SwarmClient, snap: Snapshot, plan: PlacementPlan, p: Preemption,
                tenant: str, now: float, waits: list[tuple[str, str, Move]],
                mono: float | None, counted: set[str]) -> tuple[list[Candidate], bool]:
        i = next((k for k, sp in enumerate(plan.services) if sp.name == p.service), None)
        if self.can_move:  # a victim's target: no GPU a task Swarm is stopping still uses
            # (a hold's victims' too), nor one held for another preemptor (one nominated
            # earlier in this very cycle too), as the rebalance step's movers are given
            noms = live_nominations(self.nominated.current(mono),
                                    {s.name: s.id for s in snap.services},
                                    snap.services_left_out)
            self._mover(swarm).hold(holds_with_stopping(noms, plan),
                                    stopping_shares(plan.stopping_milli, noms))
        moved: list[Candidate] = []
        to_stop: list[Candidate] = []
        unstored, whole = False, True
        for v in p.victims:
            act = self._move(swarm, snap, p, v, waits,  # its start refuses plan.failed too
                             self._count_first(swarm, p, tenant, now, v, counted), plan.failed)
            if act == "moved":
                moved.append(v)
                if v.service not in counted:  # no write was let through: counted now
                    self.spent.spend(now, tenant)
                    unstored = True
            elif act == "stop":
                to_stop.append(v)
            else:
                whole = False
                if act == "wait" and i is not None:
                    plan.services[i] = plan.services[i].noted(waits[-1][1])
        if not whole:  # counted by a move that did not start: neither moved nor stopped
            back = sum(1 for v in to_stop if v.service in counted)
            if back:
                self.spent.release(now, tenant, back)
                unstored = True
            to_stop = []
        made, corrected = self._stop_all(swarm, p, tenant, now, to_stop, counted, snap.tasks)
        return moved + made, unstored or corrected

    def _records(self, swarm: SwarmClient, per_hour: int,
                 dry: bool = False) -> Mapping[str, str] | None:
        """The swarm object's labels read now, after the rebalancer's movers ran in this
        cycle: the moves they started are not in the snapshot (``decide``). None when
        unread, said once while it lasts: a move unknown could be stopped under, so
        nothing is preempted this cycle; in dry-run (``dry``), which stops nothing, the
        snapshot's records decide, as `plan` and `status` do. Preemption off: not read."""
        if per_hour == 0:
            return {}
        try:
            return swarm.swarm_labels()
        except BudgetCut as exc:  # (its cycle's budget: no fault of its own)
            raise read_cut() from exc
        except SwarmError as exc:
            if self.said_raised.fresh("records"):
                if dry:
                    logger.warning("preemption (dry-run): the move records cannot be read, "
                                   "its decisions read the cycle's snapshot (a move started "
                                   "this cycle is not in it): {}", exc)
                else:
                    logger.warning("preemption: none this cycle, the move records cannot "
                                   "be read (a move started this cycle is not in the "
                                   "snapshot, and its service would be stopped under it): "
                                   "{}", exc)
            return None

    def decide(self, snap: Snapshot, plan: PlacementPlan, facts: Mapping[str, NodeFacts],
               refused: Callable[[SwarmService], AbstractSet[str]] | None,
               now: float, ports: PortTakers | None = None,
               raised: dict[str, Exception] | None = None,
               records: Mapping[str, str] | None = None,
               mono: float | None = None) -> list[Preemption]:
        """The preemptions of this cycle (``choose_preemptions``), with the cooldowns,
        settle times and the hour as this Preempter and Swarm keep them; acts on none.
        ``now``, ``mono``: the wall clock's and ``clock``'s (None: now).
        ``raised``: preemptors whose choice raised, skipped alone (else it raises).
        ``records``: the swarm object's labels read after this cycle's moves started
        (None: the snapshot's); a service with a move record there is neither victim nor
        preemptor, its move label in the snapshot or not (``record.recorded``)."""
        pc = self.cfg.preemption
        if pc.max_per_hour == 0:
            return []
        # the hour as stored in Swarm counts too (a new leader's first cycle)
        self.spent.read(snap.swarm_labels, now, self.tenants.by_name if self.tenants else ())
        mono = self.clock() if mono is None else mono
        # A time past its cooldown (settle time) decides nothing: dropped, or each name a
        # month of CI stacks had preempted stayed in memory for good (``clock``'s times).
        # The daemon's records only (a move label alone protects nothing); those read
        # after the rebalancer's movers ran too: a move they started this cycle, stopped
        # here, would reopen its source, now the preemptor's, if rolled back.
        fresh = snap.swarm_labels if records is None else records
        in_move = moving(snap.services, snap.swarm_labels, self.prefix) | recorded(
            snap.services, fresh, self.prefix, snap.services_left_out)
        holders = holdings_by_node(snap.nodes, self.prefix, plan.dropped)  # (as placement's)
        back = rolled_back(self.left, in_move, holders, snap.services)  # preempted nothing
        kept = rolled_back(self.half, frozenset(), holders, snap.services)  # gate never closed
        undone(self.spent, {**self.half, **self.left}, back | kept, self.left_spent, snap.tasks)
        self.moved_back.note(back, mono, self.cfg.rebalance.cooldown_s)
        self.left, self.half = {v: at for v, at in self.left.items() if v in in_move}, {}
        self.left_spent = {v: m for v, m in self.left_spent.items() if v in self.left}
        self.victim_at = {i: at for i, at in self.victim_at.items()
                          if mono - at < pc.victim_cooldown_s and i not in back}
        self.preemptor_at = {n: at for n, at in self.preemptor_at.items()
                             if mono - at < pc.settle_s and not self._recreated(n, snap)}
        cooling = {s.name for s in snap.services if s.id in self.victim_at}
        # A holder whose spec its victim write cannot read is never chosen (the write
        # would fail after the choice); ``cycle`` says why.
        self.unread = unread_victims(snap.services, {svc for per in holders.values()
                                                     for svc in per})
        cooling |= self.unread.keys()
        # The record in Swarm counts too (a new leader), checked against the hour, the
        # ledger and the tasks (a stack writes its own spec; a gate never closed stopped
        # nothing; a record copied onto a holder that ran all along names no stop of it)
        cooling |= recorded_cooling(snap.services, snap.tasks, self.prefix, now,
                                    pc.victim_cooldown_s, self.spent.all, holders,
                                    victim_seconds(snap.swarm_labels, self.prefix))
        settling = set(self.preemptor_at)
        self.moving = {p: vs & in_move for p, vs in self.moving.items()
                       if vs & in_move and not self._recreated(p, snap)}
        self.preemptor_id = {n: i for n, i in self.preemptor_id.items()
                             if n in self.preemptor_at or n in self.moving}
        self.nominated.keep(plan, mono, in_move,  # placed, gone or settled: it ends
                            stops_waited(snap.stopping, snap.nodes),
                            left_out=snap.services_left_out)
        # used for those of their priority or lower; a live preemptor's, as every other
        # reader has them (``keep`` reads the plan's, which lacks a plain namesake's id)
        held = live_nominations(self.nominated.current(mono),
                                {s.name: s.id for s in snap.services},
                                snap.services_left_out)
        # its victim's move is in flight, or its GPUs still held for it: wait for them
        settling |= self.moving.keys() | {n.service for n in held}
        def choose(p: PlacementPlan, raised: dict[str, Exception] | None,
                   first: Sequence[Preemption] = ()) -> list[Preemption]:
            return choose_preemptions(
                p, snap.nodes, snap.services, snap.tasks, facts, prefix=self.prefix,
                preemptible_below=pc.preemptible_below, cooling=cooling, settling=settling,
                refused=refused, moving=in_move, ports=ports, raised=raised,
                held=holds_with_stopping(held, p),  # (those ``keep`` ended too)
                flying=move_gpus(fresh, self.prefix),
                stopping=snap.stopping, first=first)
        chosen = choose(plan, raised)
        # (acts on nothing; those chosen are taken first as they were: ``find``)
        self.unknown.find(plan, chosen, lambda p: choose(p, {}, chosen))
        return chosen

    def took(self, p: Preemption, victims: list[Candidate], mono: float) -> None:
        """``p`` stopped or moved ``victims`` at ``mono`` (``clock``'s): from then on its
        preemptor settles (``settle_s``: ``decide`` passes it over while their GPUs free, held
        for it meanwhile: ``nominated``, ``p.held`` whether all went or some) and they cool
        down (``victim_cooldown_s``). The simulator calls it too (its one clock for both)."""
        self.preemptor_at[p.service] = mono
        self.preemptor_id[p.service] = p.service_id
        self.nominated.nominate(p, victims, mono)
        for v in victims:
            self.victim_at[v.service_id] = mono

    def _took_cut(self, p: Preemption, landed: AbstractSet[str], mono: float) -> None:
        """``p``'s victims moved (their record landed: ``landed``) before a cut at the
        budget taken, and its hold held as one held back by the move budgets holds it
        (``took``): else the next cycle chose them again, and gave the GPUs its
        preemptor counts on to another service."""
        got = [v for v in p.victims if v.service in landed]
        if got:
            self.took(p, got, mono)

    def _recreated(self, preemptor: str, snap: Snapshot) -> bool:
        """Whether ``snap`` lists ``preemptor``'s name under another id than its own when
        it preempted (known: ``took``): Swarm's names are unique and a service cannot be
        renamed, so that one was created after it was removed and has preempted nothing;
        by name it was passed over until the removed one's settle time ended."""
        sid = self.preemptor_id.get(preemptor, "")
        return bool(sid) and any(s.name == preemptor and s.id != sid for s in snap.services)

    def over_budget(self, p: Preemption, tenant: str) -> str | None:
        """Why ``p`` is not made for the hour's budgets (all, then ``tenant``'s), or None."""
        pc = self.cfg.preemption
        if len(self.spent.all) + len(p.victims) > pc.max_per_hour:
            return f"preemption budget spent ({pc.max_per_hour} per hour): not {p.describe()}"
        if tenant and self.tenants is not None and \
                len(self.spent.tenant(tenant)) + len(p.victims) > self.tenants.budget(tenant):
            return (f"tenant {tenant}'s preemption budget spent ({self.tenants.budget(tenant)}"
                    f" per hour, tenants.{tenant}.preemptions_per_hour): not {p.describe()}")
        return None

    def preview(self, snap: Snapshot, plan: PlacementPlan, facts: Mapping[str, NodeFacts],
                refused: Callable[[SwarmService], AbstractSet[str]] | None = None,
                now: float | None = None, ports: PortTakers | None = None,
                mono: float | None = None, recorded: Sequence[Nomination] = (),
                ) -> list[Preemption]:
        """What ``cycle`` decides on ``plan``, acting on nothing (`plan`, `status`): each
        preemptor's plan notes it as the daemon's does in dry-run, or outside dry-run what
        this step would do (or that a budget stops it). A fresh Preempter decides as a new
        leader's first cycle: cooldowns and the hour as Swarm keeps them; a preemptor's
        settle time lives in the daemon's memory only, but for the holds its victims'
        records imply (``recorded``: ``recorded_nominations``, those ``plan`` was made
        with), taken as its own: their preemptors settle. Before, one pending for the
        CPU its job victim's stopping task holds chose new victims in `plan`, where the
        daemon, its hold live, waits."""
        mono = self.clock() if mono is None else mono
        for n in recorded:  # (one per preemptor, as the daemon keeps them)
            self.nominated.by.setdefault(n.service, (n, mono, mono))
        now = time.time() if now is None else now
        dry = self.cfg.preemption.dry_run or self.cfg.dry_run
        raised: dict[str, Exception] = {}  # isolated as ``cycle`` does: the rest shown
        chosen = self.decide(snap, plan, facts, refused, now, ports, raised, mono=mono)
        self.unknown.note(plan)
        by_name = {sp.name: i for i, sp in enumerate(plan.services)}
        note_unread(plan, by_name, self.unread)  # as ``cycle``'s plan says it
        for name, exc in raised.items():
            note_on(plan, by_name, name, raised_note(name, exc))
        for p in chosen:
            i = by_name.get(p.service)
            if i is None:
                continue
            tenant = self._tenant_of(plan.services[i])
            if dry:
                plan.services[i] = plan.services[i].noted(dry_note(p))
                continue
            spent = self.over_budget(p, tenant)
            plan.services[i] = plan.services[i].noted(spent or f"would {p.describe()}")
            if not spent:  # spent in this Preempter only: the next one's budget, as ``cycle``
                for _ in p.victims:
                    self.spent.spend(now, tenant)
        return chosen

    def reserved(self) -> tuple[Move, ...]:
        """The victims' moves that waited for the move budgets in this step's last cycle
        (none once it ran without a wait): the rebalancer starts none of its own moves in
        the slots they need (``cycle.wiring`` hands it this)."""
        return self.waiting

    def _say_waits(self, waits: list[tuple[str, str, Move]]) -> None:
        """Log each move that waits for the budgets once while it waits, not every cycle
        (the preemptor's plan says it each cycle); keep the moves (``reserved``)."""
        self.waits.begin()
        for key, said, _m in waits:
            if self.waits.fresh(key):
                logger.bind(service=key.split(":")[0]).warning("{}", said)
        self.waits.end()
        self.waiting = tuple(m for _key, _said, m in waits)

    def _stop_all(self, swarm: SwarmClient, p: Preemption, tenant: str, now: float,
                  to_stop: list[Candidate], counted: set[str], tasks: Sequence[SwarmTask],
                  ) -> tuple[list[Candidate], bool]:
        """Stop ``to_stop`` as one (``_stop``), the hour stored first for those not yet
        ``counted`` (a victim whose move failed after its hook counted it); those stopped,
        and whether the hour was corrected after (none stopped: stored by ``cycle``). A
        stop half made is judged next cycle (``half``: ``victimback.undone``), by the
        tasks then (``tasks``: the cycle's snapshot's)."""
        if not to_stop:
            return [], False
        fresh = [v for v in to_stop if v.service not in counted]
        if fresh and not self.hour.reserve(swarm, p, tenant, [v.service_id for v in fresh],
                                           now):
            # none stopped: only those counted by their move are left to give back
            ok: bool | None = False
            left = len(to_stop) - len(fresh)
        else:
            try:
                ok = self._stop(swarm, p, to_stop, now)
            except (BudgetEnded, TermEnded):
                # None stopped (the gate write is refused before it is sent, never cut):
                # given back here, as the cycle ends and writes no correction; the next
                # stores it (``spent.given``). Those counted by their move too: not again
                self.spent.release(now, tenant, len(to_stop))
                counted.difference_update(v.service for v in to_stop)
                raise
            left = len(to_stop) if ok is False else 0
        # a stop half made (None) stays counted: it may have landed (the safe side)
        for v in to_stop if ok is None else ():
            self.half[v.service] = (v.service_id, p.node_id)
            self.left_spent[v.service] = VictimSpent(
                now, tenant, ran_on(tasks, v.service_id, p.node_id))
        if left:
            self.spent.release(now, tenant, left)
        return (list(to_stop) if ok else []), bool(left)

    def _count_first(self, swarm: SwarmClient, p: Preemption, tenant: str, now: float,
                     v: Candidate, counted: set[str]) -> Callable[[], None]:
        """The hook run before the first write of ``v``'s move (``Writes.before_first``):
        ``v`` spent and the hour stored, as before a stop (``HourStore.reserve``). Stored after,
        a daemon stop inside the mover's writes left a move under way uncounted. Not
        stored: ``Unstored`` is raised and nothing of the move is written."""

        def first() -> None:
            if not self.hour.reserve(swarm, p, tenant, [v.service_id], now):
                raise Unstored(v.service)
            counted.add(v.service)

        return first

    def _tenant_of(self, sp: ServicePlan | None) -> str:
        """The preemptor's tenant ("" without tenants): its budget is spent."""
        if self.tenants is None or sp is None or sp.request is None:
            return ""
        return sp.request.tenant

    def _move(self, swarm: SwarmClient, snap: Snapshot, p: Preemption, v: Candidate,
              waits: list[tuple[str, str, Move]], first: Callable[[], None],
              plan_failed: AbstractSet[str]) -> Literal["moved", "wait", "stop", "held"]:
        """Start moving ``v`` where it can run instead, ``first`` run before the move's
        first write. "stop": it cannot move (the mover refused it, or moves are off);
        "wait": the move budgets alone refused it (said in ``waits``), tried again next
        cycle: a budget never turns a move into a stop; "held": ``first`` could not store
        the hour, nothing of the move was written (said), tried again next cycle."""
        where = p.moves.get(v.service)
        svc = next((s for s in snap.services if s.id == v.service_id), None)
        if (where is None or not self.can_move or v.holding is None or svc is None
                or v.service_id in self.moved_back):
            return "stop"
        m = Move(service=v.service, service_id=v.service_id, source_node=v.node_id,
                 source_host=p.hostname, source_uuids=v.holding.uuids,
                 source_milli=v.holding.milli, target_node=where.node_id,
                 target_host=where.hostname, target_gpus=where.gpus, target_uuids=where.uuids,
                 target_milli=tuple(1000 for _ in where.uuids), trigger=Trigger.PREEMPTION,
                 window_s=None, reason=f"room for {p.service} (priority {p.priority})",
                 gain=f"{p.service} runs, {v.service} keeps running")
        mover = self._mover(swarm)
        wrote: list[bool] = []  # the move's first write was let through (``first`` ran)

        def counted_first() -> None:
            first()
            wrote.append(True)

        try:
            with mover.writes.before_first(counted_first):
                started = mover.start(m, svc, plan_failed)
        except Unstored:
            return "held"
        except (BudgetCut, Stopped) as exc:  # (a cut at the cycle's budget, or a stop)
            if wrote:  # its record landed: under way, judged from it next cycle (as below)
                self._under_way(p, v)
            if isinstance(exc, BudgetCut):  # (no fault of its own)
                raise read_cut() from exc
            raise  # no later victim is acted on
        except SwarmError as exc:
            if not wrote or isinstance(exc, VersionConflict | NotLeader):
                # nothing written, or the start took its record back: no move of it
                logger.bind(service=v.service).error("preemption: move failed to start: {}",
                                                     exc)
                return "stop"
            # Its record was written (or its answer lost): the move may be under way, and
            # the record is the authority, as below; stopped too, it lost its source twice.
            logger.bind(service=v.service).error(
                "preemption: moving {} for {} failed after its record was written ({}): "
                "counted as started, judged from its record next cycle", v.service,
                p.service, exc)
            self._under_way(p, v)
            return "moved"
        except Exception as exc:  # a bug or unforeseen input: this victim's loss only
            # Nothing written: stopped instead, as a move that failed to start. Else its
            # record, the first write, is the authority: the rebalancer's mover goes on
            # with the move or rolls it back next cycle; stopped too, the victim would
            # lose its source under a move in flight.
            self._say_raised(f"move:{p.service}:{v.service}", v.service, exc,
                             f"moving {v.service} for {p.service} failed unexpectedly ("
                             + ("counted as started, judged from its record next cycle"
                                if wrote else "nothing written: stopped instead")
                             + "); the other preemptions go on")
            if not wrote:
                return "stop"
            self._under_way(p, v)
            return "moved"
        if started.budget is not None:
            waits.append((f"{p.service}:{v.service}:{started.budget.key}", (
                f"preemption for {p.service} waits: moving {v.service} {p.hostname} -> "
                f"{where.hostname} is over rebalance.{started.budget.key} ({started.why}; "
                "the rebalancer's moves in flight count); tried again next cycle, the "
                "rebalancer starting no move in its place"), m))
            return "wait"
        if not started.ok:
            return "stop"
        self._under_way(p, v)
        logger.bind(service=v.service).warning(
            "moved from {} to {} (make-before-break) to make room for {} (priority {})",
            p.hostname, where.hostname, p.service, p.priority)
        return "moved"

    def _under_way(self, p: Preemption, v: Candidate) -> None:
        """``v``'s move for ``p`` counted as started (its record the authority)."""
        self.moving.setdefault(p.service, set()).add(v.service)
        self.left[v.service] = (v.service_id, p.node_id)

    def _say_raised(self, key: str, service: str, exc: Exception, what: str) -> None:
        """Log ``what`` at error with ``exc``'s traceback once while ``key`` keeps
        raising (``said_raised``: said again after a cycle without it)."""
        if self.said_raised.fresh(key):
            logger.bind(service=service).opt(exception=exc).error("preemption: {}", what)

    def _stop(self, swarm: SwarmClient, p: Preemption, victims: list[Candidate],
              now: float) -> bool | None:
        """``close_gates``, this preemption's loss only whatever it raises: True stopped, False
        none stopped; None when half made (the gate write let through, then it raised: a
        bug or an answer no one foresaw): counted, judged from Swarm next cycle."""
        gate = Writes(swarm, dry_run=self.cfg.dry_run or self.cfg.preemption.dry_run,
                      who="preemption", prefix=self.prefix)
        closing: list[bool] = []
        who = names(victims)
        try:
            return close_gates(gate, swarm, self.prefix, p, victims, now, closing)
        except Stopped:
            raise  # the daemon stops: no later victim is stopped
        except Exception as exc:  # a bug or unforeseen input: this preemption's loss only
            self._say_raised(f"stop:{p.service}:{who}", victims[0].service, exc,
                             f"stopping {who} for {p.service} failed unexpectedly ("
                             + ("half made: counted, judged from Swarm next cycle" if closing
                                else "no gate closed: left as they were")
                             + "); the other preemptions go on")
            return None if closing else False

