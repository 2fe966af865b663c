"""The rebalancer inside the daemon's cycle (leader only: the daemon runs steps only
when its engine leads). Scrape -> windows -> plan_moves -> mover.

Health moves (``policies.health``) go through a mover of their own: it acts even in
rebalance dry-run (a failed GPU's holders are already broken; only the top-level dry_run
stops it), within ``health.evacuations_per_cycle`` (moves in flight count) and
``health.evacuations_per_hour`` (``HealthBudget``, counted from the swarm object's
labels: ``record.health_spent``), never with a cooldown. While the
policy is on, placement keeps a holding on a failed GPU for it (``keep_failed_holdings``)
unless the policy released it to placement (best healthy GPU on the same node).

``Rebalancer`` is the step (``cycle.wiring`` puts it after the metrics are scraped);
``serve`` serves ``/api/rebalance`` (the cluster JSON ``{"proposed": [...], "recent":
[...], ...}``) from the daemon's HTTP server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import Any

from loguru import logger
from prometheus_client import Counter, Gauge

from swarmgpu.core.config import parse_priority_classes
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.saidonce import SaidOnce
from swarmgpu.manager.cycle.host import CycleHost
from swarmgpu.manager.cycle.pipeline import Step
from swarmgpu.manager.cycle.session import CycleSession, Slot
from swarmgpu.manager.cycle.triggers import follow_up
from swarmgpu.manager.engine.stop import read_cut
from swarmgpu.manager.nodes.agentbook import lost_s, stale_nodes
from swarmgpu.manager.nodes.gpuowners import rejoined
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.nodes.termlooks import TermLooks
from swarmgpu.manager.placement import ASSIGN, Holding, PlacementPlan, read_ledger
from swarmgpu.manager.placement.cpunodes import expects_agent
from swarmgpu.manager.placement.keys import rejected_running
from swarmgpu.manager.placement.nominated import (
    Nomination,
    StoppingGpus,
    held_gpus,
    held_shares,
    holds_with_stopping,
    live_nominations,
    stopping_shares,
)
from swarmgpu.manager.rebalance.context import Inputs
from swarmgpu.manager.rebalance.mover import Mover, rebalancing
from swarmgpu.manager.rebalance.moves import (
    HealthInputs,
    Move,
    MoveRecord,
    Proposal,
    Release,
    Trigger,
    moves_to_dicts,
    render_moves,
)
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.policies.health import HealthBudget
from swarmgpu.manager.rebalance.record import (
    health_spent,
    moving,
    spend_health,
    unreadable_of,
    unreadable_records,
)
from swarmgpu.manager.rebalance.scrape import for_moves
from swarmgpu.manager.rebalance.signals import Signals
from swarmgpu.swarm.client import BudgetCut, SwarmError, SwarmNode

ROUTE = "/api/rebalance"


class Rebalancer(Step):
    """The rebalancing step: this cycle's metrics into the windows, the enabled policies
    over them (``plan_moves``), the movers (health's apart). Kept across cycles."""

    name = "rebalance"
    provides = frozenset({Slot.MOVES})

    def __init__(self, daemon: CycleHost, *, placement: bool = True,
                 reserved: Callable[[], Sequence[Move]] = tuple,
                 nominated: Callable[[], Sequence[Nomination]] = tuple) -> None:
        """``placement``: the placement step runs before this one (its pending services
        are what defragmentation makes room for; its model is what fragmentation judges
        by; it keeps failed holdings for the health policy). ``reserved``: the moves a
        later step waits to start for the move budgets (preemption's, its last cycle):
        the budgets' slots they need are theirs, not this step's new moves'.
        ``nominated``: the GPUs preemptions hold now for their preemptors (the
        preemption step's records, as placement is handed them): no move lands there."""
        cfg = daemon.cfg
        self.host = daemon
        self.placement = placement
        self.reserved = reserved
        self.nominated = nominated
        # Without placement no plan holds the GPUs of tasks Swarm is stopping (a moved
        # source's rejected task among them): built here as placement builds them.
        self.stopping = None if placement else StoppingGpus(cfg.sync.prefix)
        self.requires = frozenset({Slot.SNAPSHOT, Slot.FACTS, Slot.METRICS,
                                   *([Slot.PLACEMENT, Slot.PLANNER] if placement else [])})
        self.cfg = cfg.rebalance
        self.prefix = cfg.sync.prefix
        # a label's class read as placement reads it, by every step of the rebalancer
        self.classes = parse_priority_classes(cfg.preemption.priority_classes)
        # what makes a node a GPU node, as placement reads it (cpunodes.gpu_hint)
        self.agent_service, self.generic_kind = (cfg.agents.service,
                                                 cfg.placement.generic_resource_kind)
        self.signals = Signals(self.cfg)
        self.mover = Mover(daemon.swarm, self.cfg, prefix=self.prefix,
                           dry_run=cfg.dry_run or self.cfg.dry_run, metrics=daemon.metrics,
                           scope=rebalancing, classes=self.classes)  # preemption's mover shares it
        self.last: Proposal | None = None
        self._warned: SaidOnce[str] = SaidOnce()  # the signals' warnings, while they last
        # --- health (policies.health) ---
        self.health = cfg.health
        self.health_on = self.cfg.health_policy
        self.health_mover = Mover(
            daemon.swarm, replace(self.cfg, max_moves_per_cycle=cfg.health.evacuations_per_cycle,
                                  max_moves_per_node=1, cooldown_s=0.0),
            prefix=self.prefix, dry_run=cfg.dry_run, metrics=daemon.metrics,
            scope=lambda st: st.trigger == Trigger.HEALTH, judge_labels=False,
            why="evacuate", classes=self.classes)
        self.health_budget = HealthBudget(cfg.health.evacuations_per_hour)
        # Each listed node's first look this term (monotonic): the agents' records are
        # this daemon's own reads, and a follower reads none (``health_inputs``); a node
        # that joins later counts from its own. Monotonic, as an agent's loss is counted:
        # on the wall clock, a step back delayed an evacuation by the step, and a step
        # forward made one early. (The map's audit counts it so too: ``termlooks``.)
        self.looks = TermLooks()
        self.clock: Callable[[], float] = time.monotonic  # (the tests step it)
        self.swarm = daemon.swarm
        self.released: set[tuple[str, str]] = set()  # (service, node id) left to placement
        self._last_seen: MoveRecord | None = None  # the health mover's last record counted
        self._said: SaidOnce[str] = SaidOnce()  # health notes logged while they last
        self._unread: SaidOnce[str] = SaidOnce()  # services with an unreadable record, logged
        self._failed: SaidOnce[str] = SaidOnce()  # policies that raised, logged while they do
        reg = daemon.metrics.registry
        self.evacuations = Counter(
            "swarmgpu_health_evacuations", "Holders of failed GPUs (or of a drained failing "
            "node) moved or re-placed by the health policy, by outcome", ["outcome"],
            registry=reg)
        # (its meaning kept for dashboards: the agent-lost nodes counted in it too)
        self.failing = Gauge("swarmgpu_health_failing_nodes", "Nodes failing as a whole "
                             "(two or more failed GPUs, or the agent lost)", registry=reg)
        self.agent_lost = Gauge("swarmgpu_health_agent_lost_nodes", "Of the failing "
                                "nodes, those by their agent's loss alone (their GPUs "
                                "not known bad; nothing moved for it)", registry=reg)

    def stand_by(self) -> None:
        """Not the leader: what a new term reads again from Swarm (the windows age out
        by themselves: a gap in them is UNKNOWN). The failing nodes are the leader's
        daemon's to count, its proposal too (kept, /api/rebalance served it frozen)."""
        self.mover.stand_by()
        self.failing.set(0)
        self.agent_lost.set(0)
        self.looks.clear()
        self.last = None

    def keeps(self, service: str, node_id: str) -> bool:
        """Placement keeps this holding on a failed GPU: the health policy moves it."""
        return (service, node_id) not in self.released

    def health_inputs(self, snap: Snapshot) -> HealthInputs:
        try:
            labels = self.swarm.swarm_labels()
            spent = health_spent(labels, self.prefix, snap.taken_at)
            left, why = self.health_budget.left(snap.taken_at,
                                                self.health.evacuations_per_cycle, spent,
                                                len(unreadable_records(labels, self.prefix)))
        except BudgetCut as exc:  # (its cycle's budget: no fault of its own)
            raise read_cut() from exc
        except SwarmError as exc:  # an unknown spend is no budget: nothing starts
            left, why = 0, f"cannot read the health budget from the swarm object: {exc}"
        lost: dict[str, float] = {}
        book = self.host.book
        # A node's loss counts from its agent's last answer, or from the node's first look
        # this term: the time this daemon stood by read no agent, so is no proof of a loss
        # (a restarted daemon, or a new leader, with no answer of it, waits the grace too:
        # a GPU node by what Swarm says, ``expects_agent``, as label sync expects its agent).
        now = self.clock()
        # (from the node's own first look: one that joined an hour into the term was
        # failing at once, before its agent could start; one gone and back joins anew)
        looks = self.looks.look((n.id for n in snap.nodes), now)
        agents = snap.agent_nodes(self.agent_service)
        for n in snap.nodes:
            res = snap.facts.get(n.id)
            rec = book.records.get(n.id)
            if ((res is None or res.facts is None) and rec is not None
                    and expects_agent(n, rec.last_ok is not None, self.prefix,
                                      self.generic_kind, agents)):
                lost[n.id] = lost_s(rec, now, looks[n.id])
        return HealthInputs(evacuate=self.health.evacuate, left=left, left_why=why,
                            released=frozenset(self.released), lost=lost,
                            lost_grace_s=self.health.node_lost_grace_s)

    def run(self, session: CycleSession) -> None:
        snap, facts, scrapes = session.snapshot, session.facts, session.scrapes
        ledger = read_ledger(snap.nodes, self.prefix)
        hostnames = {n.id: n.hostname for n in snap.nodes}
        # Gate at the source: unauthenticated metrics inform the map, not moves.
        trusted = for_moves(scrapes, self.cfg.trust_unauthenticated_metrics)
        # dcgm-exporter's health fields (XID, ECC, remapping) for GPUs whose facts have
        # none, judged in the next cycle's health states; trusted pages only: a state can
        # move holders. (gpuhealth.HealthBook.feed_metrics)
        self.host.labels.health.feed_metrics({nid: sc.result.samples_by_uuid
                                              for nid, sc in trusted.items() if sc.result})
        warnings = self.signals.observe(trusted, facts, hostnames, ledger, snap.taken_at,
                                       rejoined(snap.nodes))
        self._warned.begin()
        for w in warnings:  # say it once when it starts, not every cycle
            if self._warned.fresh(w):
                logger.warning("rebalance: {}", w)
        self._warned.end()
        plan = session.placement if self.placement else None
        pending = pending_of(plan)
        # The fragmentation policy judges moves against the workload placement expects
        # (its learned or pinned model); without placement, the services annotated now.
        planner = session.planner if self.placement else None
        model = planner.model if planner is not None else None
        alone = self.stopping_alone(snap, facts, ledger)
        noms = self.live_holds({sv.name: sv.id for sv in snap.services},  # (one read: both below)
                               snap.services_left_out)
        inp = Inputs(nodes=snap.nodes, services=snap.services, tasks=snap.tasks, facts=facts,
                     ledger=ledger_after(snap.nodes, plan, self.prefix, ledger),
                     measured=ledger,
                     gpus=self.signals.gpus, node_signals=self.signals.nodes,
                     cfg=self.cfg, now=snap.taken_at, pending=pending, prefix=self.prefix,
                     classes=self.classes,
                     workload=model.typical() if model is not None else None,
                     moving=moving(snap.services, snap.swarm_labels, self.prefix),
                     unreadable=self._unreadable(snap), placed=placed_of(plan),
                     failed=failed_of(plan), dropped=plan.dropped if plan else frozenset(),
                     agents=snap.agent_nodes(self.agent_service),
                     generic_kind=self.generic_kind,
                     held=self.held(noms, plan) | held_gpus(alone),
                     held_shares=self.held_shares(noms, plan, alone),
                     stopping=snap.stopping,
                     stale=stale_nodes(self.host.book, snap.facts,
                                       self.health.node_lost_grace_s))
        if planner is not None:  # placement's next cycle keeps failed holdings for us
            planner.keep_failed_holdings(self.keeps if self.health_on else None)
        prop = plan_moves(inp, self.health_inputs(snap))
        self._log_failed(prop)
        self.last = prop
        session.moves = prop
        for m in prop.moves:
            logger.bind(service=m.service).debug("proposed {} -> {} ({}): {}", m.source_host,
                                                 m.target_host, m.trigger, m.reason)
        # The other moves first: each mover judges move labels against the records it
        # reads now, and a health move finished below leaves this snapshot's label stale.
        # A preemption that waited for the budgets gets the slot it needs first: it runs
        # after this step, which would otherwise take every slot that frees.
        for mover in (self.mover, self.health_mover):  # (``Mover.start``'s and its repins')
            mover.hold(inp.held, inp.held_shares)
        self.mover.run_cycle([m for m in prop.moves if m.trigger is not Trigger.HEALTH],
                             snap.nodes, snap.services, snap.tasks, self.reserved(),
                             plan_failed=inp.failed)
        self.health_step(prop, [m for m in prop.moves if m.trigger is Trigger.HEALTH], snap,
                         inp.failed)
        if any(not (self.health_mover if st.trigger == Trigger.HEALTH else self.mover).dry_run
               for st in self.mover.records().values()):
            # A move in flight progresses on the next cycle: make that one come soon.
            follow_up(self.host.trigger)

    def live_holds(self, live: AbstractSet[str] | Mapping[str, str], left_out: bool = False,
                   ) -> list[Nomination]:
        """The preemptors' holds now, only those of a preemptor among ``live`` (the
        snapshot's services, name -> id), as placement reads them: a removed one's hold
        lasted here until the preemption step's next ``keep``, and no move could take its
        GPUs meanwhile. Read once a cycle: ``held`` and ``held_shares`` see the same holds.
        ``left_out``: ``live_nominations``'."""
        return live_nominations(self.nominated(), live, left_out)

    def held(self, noms: Sequence[Nomination], plan: PlacementPlan | None = None,
             ) -> dict[tuple[str, str], tuple[str, int]]:
        """The GPUs ``noms`` (``live_holds``) hold for preemptors (``Inputs.held``):
        (node id, UUID) -> (the preemptor, its priority). With ``plan``: its stopping
        tasks' GPUs too, read with these same holds (one that settled since placement:
        its victims' GPUs held as theirs, not counted nowhere)."""
        return holds_with_stopping(noms, plan)

    def held_shares(self, noms: Sequence[Nomination], plan: PlacementPlan | None,
                    alone: Sequence[Nomination] = ()) -> dict[tuple[str, str], int]:
        """Of the GPUs held now (``held``, ``stopping_alone``), those held for tasks Swarm
        is stopping alone, each by their share (``Inputs.held_shares``): ``plan``'s, or
        without placement ``alone``'s (``stopping_alone``). A GPU a hold of ``noms``
        (``live_holds``) names is held whole, as ever (``nominated.stopping_shares``)."""
        milli = plan.stopping_milli if plan is not None else held_shares(alone)
        return stopping_shares(milli, noms)

    def stopping_alone(self, snap: Snapshot, facts: Mapping[str, NodeFacts],
                       ledger: Mapping[str, Mapping[str, Holding]]) -> list[Nomination]:
        """Without placement (``placement.enabled: false``): the holds of the tasks Swarm
        is stopping, a rejected one's while its container may run, held from every move
        as placement's plan holds them (``StoppingGpus.holds``, kept across cycles: a
        task's GPUs learned from the ledger while it ran, before a move rewrote it).
        With placement: none here (its plan's are read)."""
        if self.stopping is None:
            return []
        now = snap.taken_at
        rejected = [t for t in snap.rejected if rejected_running(t, now)]
        return self.stopping.holds(snap.stopping, snap.services, ledger, snap.tasks, facts,
                                   rejected, now=now)

    def _unreadable(self, snap: Snapshot) -> dict[str, str]:
        """The services whose own move record cannot be read (none is proposed), each
        logged once while it lasts (the plan's notes say it every cycle)."""
        bad = unreadable_of(snap.services, snap.swarm_labels, self.prefix)
        self._unread.begin()
        for name, why in bad.items():
            if self._unread.fresh(name):
                logger.bind(service=name).warning("rebalance: {} is not moved: {}", name, why)
        self._unread.end()
        return bad

    def _log_failed(self, prop: Proposal) -> None:
        """Each policy that raised, with its traceback, once while it does (the plan's
        notes say it every cycle)."""
        self._failed.begin()
        for name, tb in prop.policy_errors.items():
            if self._failed.fresh(name):
                logger.error("rebalance policy {} failed; skipped each cycle it fails (the "
                             "plan's note says what was lost):\n{}", name, tb)
        self._failed.end()

    def health_step(self, prop: Proposal, moves: list[Move], snap: Snapshot,
                    plan_failed: AbstractSet[str] = frozenset()) -> None:
        """Start the health moves (``plan_failed``: ``Mover.start``'s), hand the releases
        to placement, log and count."""
        now = snap.taken_at
        if "health" not in prop.policy_errors:  # else unknown now: kept until it runs
            self.released &= set(prop.failed_holders)  # re-placed, or off the failed GPU
            self.failing.set(len(prop.failing_nodes))
            self.agent_lost.set(len(prop.agent_lost_nodes))
        said = self._said
        said.begin()
        for n in prop.notes:
            # the health policy's (each names its health reason), once while it lasts
            if "health:" in n and said.fresh(n):
                quiet = "a move is under way" in n or "left to placement" in n
                logger.log("INFO" if quiet else "WARNING", "rebalance: {}", n)
        if not self.health_mover.dry_run:
            for r in prop.releases:
                self._release(r, now)
        for r in prop.releases if self.health_mover.dry_run else ():
            if said.fresh(f"release {r.service} {r.node_id}"):
                logger.bind(service=r.service).warning(
                    "dry-run: health would have placement re-place {} on {}: {}", r.service,
                    r.host, r.reason)
        said.end()
        self.health_mover.run_cycle(moves, snap.nodes, snap.services, snap.tasks,
                                    plan_failed=plan_failed)
        for rec in self._new_records():  # (a start is spent by its record: health_spent)
            self.evacuations.labels(outcome=str(rec.outcome)).inc()

    def _new_records(self) -> list[MoveRecord]:
        """The health mover's records made since the last look (after the last one seen;
        its list keeps 50, far more than a cycle's budget)."""
        recent = list(self.health_mover.recent)
        start = 0
        for i in range(len(recent) - 1, -1, -1):
            if recent[i] is self._last_seen:
                start = i + 1
                break
        self._last_seen = recent[-1] if recent else None
        return recent[start:]

    def _release(self, r: Release, now: float) -> None:
        try:  # spent in Swarm first: a new leader must count it
            spend_health(self.health_mover.writes, self.prefix, now)
        except SwarmError as exc:
            logger.bind(service=r.service).error(
                "health: {} on {} not re-placed now, the budget write failed: {}",
                r.service, r.host, exc)
            return
        self.released.add((r.service, r.node_id))
        self.evacuations.labels(outcome="re-placed").inc()
        logger.bind(service=r.service).warning(
            "health: {} on {} is re-placed by placement: {}", r.service, r.host, r.reason)

    def _all_recent(self) -> list[MoveRecord]:
        return sorted([*self.mover.recent, *self.health_mover.recent], key=lambda r: r.at)

    def to_dict(self) -> dict[str, Any]:
        p = self.last
        out: dict[str, Any] = moves_to_dicts(p.moves if p else [], self._all_recent())
        out["notes"] = list(p.notes) if p else []
        out["unknown_nodes"] = dict(p.unknown_nodes) if p else {}
        out["dry_run"] = self.mover.dry_run
        out["health"] = health_dict(p, self.health_mover.dry_run, self.health.evacuate)
        return out

    def render(self) -> str:
        p = self.last
        return render_moves(p.moves if p else [], self._all_recent(), p.notes if p else [])


def placed_of(plan: PlacementPlan | None) -> dict[str, tuple[str, ...]]:
    """This cycle's placement decisions (``Inputs.placed``): service name -> the node of
    each replica placed. Placement ran before this step and wrote after the snapshot, so
    a move's target check counts them from the plan, not from Swarm."""
    if plan is None:
        return {}
    return {sp.name: tuple(p.node_id for p in sp.placements)
            for sp in plan.services if sp.placements}


def pending_of(plan: PlacementPlan | None) -> list[str]:
    """The services placement left pending that a move may make room for
    (``Inputs.pending``): not those their queue's max holds back (the queues' ``blocked``),
    nor those waiting at their gate step (``ServicePlan.gate_waits``): placement gives
    them no room it finds (preemption passes the first over too). Handed to defrag,
    another team's task was moved, restarted, for them every cooldown."""
    if plan is None:
        return []
    held = {n for q in plan.queues for n in q.get("blocked", ())}
    return [sp.name for sp in plan.services
            if sp.status == "pending" and not sp.gate_waits and sp.name not in held]


def failed_of(plan: PlacementPlan | None) -> frozenset[str]:
    """The services whose planning raised this cycle (``Inputs.failed``: none is moved)."""
    return plan.failed if plan else frozenset()


def ledger_after(nodes: Sequence[SwarmNode], plan: PlacementPlan | None, prefix: str,
                 ledger: dict[str, dict[str, Holding]]) -> dict[str, dict[str, Holding]]:
    """The ledger as this cycle's placement writes left it: ``ledger`` (the snapshot's)
    with the node label changes that landed applied (``plan.landed``: in dry-run, all of
    the plan's, as its log says), removals first, as the writer makes them. A release
    held back, refused or failed is not among them: its GPUs stay taken. The rebalancer
    plans on it: a GPU placement just gave away is no move's target, and one it did not
    free is none either (else the move was refused only when the mover started it, by
    the ledger it reads then; a dry-run mover has no such read). An entry placement read
    as a removed service's (``plan.dropped``) is no holding of the live one of its name,
    as placement read it, whether its release landed or not: its GPUs are the stopping
    task's (``plan.stopping_held``), and a move of it moved the live service."""
    out = _landed_ledger(nodes, plan, prefix, ledger)
    dropped = plan.dropped if plan is not None else frozenset()
    if not any(nid in out.get(svc, {}) for svc, nid in dropped):
        return out
    out = {svc: {nid: h for nid, h in per.items() if (svc, nid) not in dropped}
           for svc, per in out.items()}
    return {svc: per for svc, per in out.items() if per}


def _landed_ledger(nodes: Sequence[SwarmNode], plan: PlacementPlan | None, prefix: str,
                   ledger: dict[str, dict[str, Holding]]) -> dict[str, dict[str, Holding]]:
    """``ledger`` with the node label changes of ``plan.landed`` applied."""
    landed = plan.landed if plan is not None else None
    if landed is None or not (landed.set or landed.remove):
        return ledger
    assign = prefix + ASSIGN
    touched = {nid for nid, keys in landed.remove.items()
               if any(k.startswith(assign) for k in keys)}
    touched |= {nid for nid, labels in landed.set.items()
                if any(k.startswith(assign) for k in labels)}
    if not touched:
        return ledger
    after = landed.applied([n for n in nodes if n.id in touched])
    out = {svc: {nid: h for nid, h in per.items() if nid not in touched}
           for svc, per in ledger.items()}
    for svc, per in read_ledger(after, prefix).items():
        out.setdefault(svc, {}).update(per)
    return {svc: per for svc, per in out.items() if per}


def health_dict(p: Proposal | None, dry_run: bool, evacuate: bool) -> Mapping[str, Any]:
    """The health policy's part of ``/api/rebalance``."""
    return {"evacuate": evacuate, "dry_run": dry_run,
            "releases": [r.to_dict() for r in (p.releases if p else [])],
            "failing_nodes": dict(p.failing_nodes) if p else {},
            "agent_lost_nodes": dict(p.agent_lost_nodes) if p else {}}


def serve(daemon: CycleHost, rb: Rebalancer) -> None:
    """Serve ``/api/rebalance`` (the rebalancer's proposal and its recent moves)."""
    daemon.http_routes[ROUTE] = lambda: ("application/json",
                                         json.dumps(rb.to_dict(), indent=1).encode())
