"""Placement inside the daemon's cycle, and its writes, in the only safe order.

0. the services whose plan releases something are read and judged first: one whose
   spec no longer asks for what its plan was made from gets nothing of it written
   (``cycle.releases``);
1. node labels that go away (released gates and ledger entries); where a ledger entry's
   release did not land, nothing new is given out on that node this cycle
   (``releases.hold_unreleased``);
2. service specs (device labels first: a task created later reads them);
3. node labels that appear (ledger + gate: the gate opens last).

Label sync's change of a node rides in placement's first write of it (one write per node
per cycle); between 2 and 3, one list of the tasks lets the gates whose tasks all carry
their new device map open in 3 already (``gates_ready_now``), instead of next cycle.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import Any, NamedTuple

from loguru import logger

from swarmgpu.allocator.workload import WorkloadModel
from swarmgpu.core.config import Config, parse_priority_classes, queue_quotas
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.saidonce import SaidOnce
from swarmgpu.core.tenants import STACK_LABEL
from swarmgpu.manager.commands.audit import Finding
from swarmgpu.manager.cycle.host import CycleHost
from swarmgpu.manager.cycle.oneshot_holds import one_shot_nominations
from swarmgpu.manager.cycle.pipeline import Step
from swarmgpu.manager.cycle.releases import drop_writes, hold_stale_releases, hold_unreleased
from swarmgpu.manager.cycle.session import CycleSession, Slot
from swarmgpu.manager.cycle.triggers import follow_up
from swarmgpu.manager.cycle.workloadstore import load_workload, pinned_workload, store_workload
from swarmgpu.manager.engine.actuator import Why, Writes
from swarmgpu.manager.engine.stop import read_cut
from swarmgpu.manager.engine.writes import HeldNodeWrites, LabelCompute, chain, write_each
from swarmgpu.manager.nodes.agentbook import AgentBook, stale_nodes
from swarmgpu.manager.nodes.sync import Snapshot, facts_by_node
from swarmgpu.manager.placement import (
    NO_WAITING,
    NodeWrites,
    Nomination,
    PlacementPlan,
    Planner,
    ServicePlan,
    State,
    Status,
    gate_key,
)
from swarmgpu.manager.placement.devicemap import UNTRUSTED_RECORD
from swarmgpu.manager.placement.gating import HOLD_ADOPTED
from swarmgpu.manager.placement.jobs import JOB_MODES
from swarmgpu.manager.placement.planned import Planned
from swarmgpu.manager.placement.restarts import HOLD_HINT
from swarmgpu.manager.placement.specwrite import service_compute
from swarmgpu.manager.placement.tasks import tasks_by_service
from swarmgpu.manager.rebalance.record import moving
from swarmgpu.manager.services.startfirst import STALLED
from swarmgpu.manager.services.tenants import FROM_CONFIG, FromConfig, Tenants
from swarmgpu.swarm.client import BudgetCut, SwarmClient, SwarmError, SwarmService, meant_filter


def new_planner(cfg: Config, swarm: Any = None, services: Sequence[SwarmService] = (),
                tenants: Tenants | FromConfig | None = FROM_CONFIG,
                pinned: WorkloadModel | None = None) -> Planner:
    """The daemon's planner of ``cfg``; ``tenants``: the config's, as a one-shot command
    built them once (``FROM_CONFIG``: read here); ``pinned``: ``load_workload``'s."""
    tenants = Tenants.given(cfg, tenants)
    planner = Planner(prefix=cfg.sync.prefix, zone_label=cfg.placement.zone_label,
                      adopt_ungated=cfg.placement.adopt_ungated,
                      generic_kind=cfg.placement.generic_resource_kind,
                      workload=load_workload(cfg, swarm, services, pinned),
                      priority_classes=parse_priority_classes(cfg.preemption.priority_classes),
                      queues=(tenants.quotas(cfg.queues) if tenants is not None
                              else queue_quotas(cfg.queues)),
                      tenants=tenants, grants=cfg.placement.grants,
                      stop_weight=cfg.placement.residual_stop_weight,
                      agent_service=cfg.agents.service)
    if cfg.rebalance.health_policy:  # its holdings on failed GPUs: the health policy's
        planner.keep_failed_holdings(lambda _service, _node: True)
    return planner


def one_shot_planner(cfg: Config, swarm: Any, snap: Snapshot,
                     tenants: Tenants | FromConfig | None = FROM_CONFIG) -> Planner:
    """``new_planner`` for a command's one plan of ``snap``: a node whose agent answered
    with facts read ``health.node_lost_grace_s`` ago takes nothing new, as the daemon
    blocks it (``stale_nodes``; unblocked, plan, render and apply chose it)."""
    planner = new_planner(cfg, swarm, snap.services, tenants)
    planner.cluster.stale = stale_nodes(AgentBook(), snap.facts, cfg.health.node_lost_grace_s)
    return planner


def make_plan(snap: Snapshot, cfg: Config,
              fallback: Mapping[str, NodeFacts] | None = None, *,
              planner: Planner | None = None, swarm: Any = None,
              nominated: Sequence[Nomination] | None = None,
              tenants: Tenants | FromConfig | None = FROM_CONFIG) -> PlacementPlan:
    """One placement cycle: the daemon passes its long-lived planner, and the GPUs its
    preemptions hold for their preemptors (``Preempter.nominated``); one-shot commands
    (``plan``, ``audit``, ``status``) get a fresh one from the stored model, and the
    holds their victims' records imply (None: ``recorded.recorded_nominations``; ``swarm``
    read for those of a victim the list left out: ``left_out_victims``); ``tenants``: the
    fresh planner's (``new_planner``)."""
    if planner is None:
        planner = one_shot_planner(cfg, swarm, snap, tenants)
    facts = facts_by_node(snap, fallback)
    if nominated is None:
        nominated = one_shot_nominations(snap, cfg, facts, swarm)
    return planner.plan(snap.nodes, snap.services, snap.tasks, facts,
                        moving=moving(snap.services, snap.swarm_labels, cfg.sync.prefix),
                        nominated=nominated, agents=snap.agent_nodes(planner.agent_service),
                        stopping=snap.stopping, rejected=snap.rejected, unkeyed=snap.unkeyed)


class OnePlan:
    """A one-shot's plan of a snapshot, made for its first reader and kept for the next:
    ``audit``'s placement findings and its ungranted-access check read one plan."""

    def __init__(self, cfg: Config, swarm: Any = None,
                 tenants: Tenants | FromConfig | None = FROM_CONFIG) -> None:
        self.cfg, self.swarm, self.tenants = cfg, swarm, tenants
        self._made: tuple[Snapshot, PlacementPlan] | None = None
        self.holds = 0  # of the last plan: the holds its victims' records imply

    def __call__(self, snap: Snapshot) -> PlacementPlan:
        if self._made is None or self._made[0] is not snap:
            held = one_shot_nominations(snap, self.cfg, facts_by_node(snap), self.swarm)
            self._made = snap, make_plan(snap, self.cfg, swarm=self.swarm, nominated=held,
                                         tenants=self.tenants)
            self.holds = len(held)
        return self._made[1]

    @property
    def made(self) -> PlacementPlan | None:
        return None if self._made is None else self._made[1]


WORKLOAD_STORE_EVERY_S = 60.0  # one swarm write a minute at most while the model learns


# On the test swarm a force update's old waiting task leaves the list of tasks meant to
# run 2-6 ms after the update returns, and its replacement appears 50-110 ms after it:
# a list taken at once may still show the old task (its gate then waits a cycle, safe
# but slower). The list waits until this long after the last service write landed.
RELIST_SETTLE_S = 0.25


class WrittenSaid:
    """Per service, what its last service write said (placements and decision), and the
    renewal writes landed since: a renewal that writes what was said (its waiting task
    replaced where it is, after each back-off) is counted in the debug line of its
    write, not said again. Not the pending line's count (``PlacementStep.renewals``,
    ``_say_pending``), which counts the cycles that plan a renewal while the pending
    note lasts, before the writes and in dry-run too: this one counts the writes that
    landed while the placements are unchanged (a failed write is not counted, a changed
    note does not reset it). Kept by the daemon's placement step across cycles; each
    service is written by one thread of a cycle."""

    def __init__(self) -> None:
        self._said: dict[str, tuple[str, int]] = {}  # service id -> (what, renewals)

    @staticmethod
    def _what(sp: ServicePlan) -> str:
        return repr(([p.to_dict() for p in sp.placements], sp.decision))

    def fresh(self, sp: ServicePlan) -> bool:
        """Whether ``sp``'s write is to be said: not a renewal of what was said last."""
        kept = self._said.get(sp.id)
        return not (sp.renewed and kept is not None and kept[0] == self._what(sp))

    def landed(self, sp: ServicePlan, said: bool) -> None:
        """``sp``'s write landed: said (``fresh``), or counted as a renewal."""
        kept = self._said.get(sp.id)
        self._said[sp.id] = (self._what(sp), 0 if said or kept is None else kept[1] + 1)

    def renewals(self, service_id: str) -> int:
        """The renewals counted since the service's write was last said."""
        return self._said.get(service_id, ("", 0))[1]

    def keep(self, service_ids: AbstractSet[str]) -> None:
        """Forget the services not in this cycle's plan (gone, or no longer placed)."""
        for gone in self._said.keys() - service_ids:
            del self._said[gone]


def apply_plan(swarm: SwarmClient, plan: PlacementPlan, *, dry_run: bool,
               services: Sequence[SwarmService], held: HeldNodeWrites | None = None,
               prefix: str = "swarmgpu.", open_gates_now: bool = True,
               said: WrittenSaid | None = None) -> int:
    """Apply in the safe order; return the number of placement writes that landed.

    ``services``: the snapshot's, as the plan saw them: a service whose spec no longer
    asks for what its plan was made from gets none of its writes (``placement.planned``);
    one whose plan releases something is judged before its releases are written
    (``cycle.releases``), with the services that would take the room they make.

    ``held``: label sync's node writes of this cycle, each folded into placement's write
    of the same node (the first one: phase 1 where the node has one, else phase 3), or
    written in phase 1 alone: one write per node per cycle, and label sync's changes
    land no later than the node's gate. ``open_gates_now``: after the service writes,
    one list of the tasks opens, in this cycle, the gates whose service's tasks all
    carry the new device map (``gates_ready_now``). ``said``: the daemon's memory of
    what each service write said (``WrittenSaid``; none: every write is said).

    ``plan.landed``: what of its node label changes landed, recorded as each phase ends
    (in dry-run: all of them, as the log says they would), for the steps after this one
    (the rebalancer plans on the ledger as it is, ``cycle.rebalance.ledger_after``)."""
    if dry_run:
        say_dry_run(plan)
        return 0
    gate = Writes(swarm, dry_run=dry_run, who="placement", prefix=prefix)
    forced = _Forced()
    landed = plan.landed = NodeWrites()
    # Phase 0: a release is judged before it is written, not with its service write
    # (which comes after it): a refused write would leave its release standing.
    held_back = hold_stale_releases(swarm, gate, plan, services, prefix)

    def node_write(nid: str, set_: Mapping[str, str], remove: Sequence[str]) -> Written:
        return write_node(gate, nid, set_, remove, held, RELEASE if remove else None)

    # Phase 1: released gates and ledger entries, and label sync's writes of the nodes
    # placement does not open anything on. Each phase's writes go to different objects:
    # a few at a time (manager.engine.writes); a phase ends before the next one starts.
    first = dict(plan.node_remove)
    if held is not None:
        for nid in held.nodes():
            if nid not in plan.node_set:
                first.setdefault(nid, [])
    items = list(first.items())
    # Each write taken as it lands (``write_each``): a phase ended by a stop or the
    # budget keeps what it made. A release counts only once it landed: one whose outcome
    # is unknown still holds, and no service takes the room it would have made.
    write_each(items, lambda kv: node_write(kv[0], {}, kv[1]), taken=lambda kv, w: landed.took(
        w.made, remove={kv[0]: kv[1]} if kv[1] and w.landed is True else None))
    held_back |= hold_unreleased(plan, {nid: keys for nid, keys in items
                                        if keys and nid not in landed.remove}, prefix)
    # Phase 2: service specs (device maps), before any gate that lets a task use them.
    todo = [sp for sp in plan.services if sp.needs_service_write and sp.name not in held_back]
    seen = {s.id: s.spec for s in services}
    for sp, ok in zip(todo, write_each(todo, lambda sp: write_service(
            gate, sp, forced, Planned(seen.get(sp.id, {}), prefix), said),
            taken=lambda _sp, ok: landed.took(int(ok is True))), strict=True):
        if ok is None or ok is STALE:  # never open a gate whose devices were not written,
            drop_writes(plan, sp.name, prefix)  # nor write a ledger planned for an old spec
    if open_gates_now and any(sp.gates_deferred and sp.id in forced.value
                              for sp in plan.services):
        # Give Swarm's updater a moment to act on the last update (see RELIST_SETTLE_S);
        # at scale the service writes took longer than that already.
        time.sleep(max(0.0, forced.last_at + RELIST_SETTLE_S - time.monotonic()))
        gates_ready_now(swarm, plan, forced.value, prefix)
    # Phase 3: ledger entries and gates (with label sync's change of the same node).
    sets = list(plan.node_set.items())
    # A ledger entry counts unless it surely did not land: one whose outcome is unknown
    # may have, and its GPUs are no one else's to plan on.
    write_each(sets, lambda kv: node_write(kv[0], kv[1], []), taken=lambda kv, w: landed.took(
        w.made, set_={kv[0]: kv[1]} if w.landed is not False else None))
    return landed.written


def say_dry_run(plan: PlacementPlan) -> None:
    """Dry-run: log what ``apply_plan`` would write; ``plan.landed`` is all of its node
    label changes, as the log says they would land."""
    plan.landed = NodeWrites({nid: dict(v) for nid, v in plan.node_set.items()},
                             {nid: list(v) for nid, v in plan.node_remove.items()})
    for sp in plan.services:
        if sp.needs_service_write:
            logger.bind(service=sp.name).info(
                "dry-run: would set {} remove {} add constraints {} remove constraints "
                "{} env {} remove env {} mounts {}",
                sp.service_labels_set, sp.service_labels_remove, sp.add_constraints,
                sp.remove_constraints, [*sp.add_env, *(new for _, new in sp.replace_env)],
                [*sp.remove_env, *(old for old, _ in sp.replace_env)],
                [m["Target"] for m in sp.add_mounts])
    for nid in set(plan.node_set) | set(plan.node_remove):
        logger.info("dry-run: node {} labels set {} remove {}", nid[:12],
                    plan.node_set.get(nid, {}), plan.node_remove.get(nid, []))


class _Forced:
    """The ForceUpdate each service write of this cycle landed, and when the last did."""

    def __init__(self) -> None:
        self.value: dict[str, int] = {}  # service id -> ForceUpdate
        self.last_at = 0.0  # monotonic
        self._lock = threading.Lock()

    def landed(self, service_id: str, spec: Mapping[str, Any]) -> None:
        with self._lock:
            self.value[service_id] = int((spec.get("TaskTemplate") or {}).get("ForceUpdate")
                                         or 0)
            self.last_at = max(self.last_at, time.monotonic())


# Placement closes a gate only where nothing of the service is meant to run any more.
RELEASE = Why("release", "the service is gone, scaled down, no longer annotated, or "
                         "re-placed off a node where Swarm would not run it")


class Written(NamedTuple):
    """One node write's outcome (``write_node``): ``made`` 1 when placement's part made
    a change; ``landed`` True when the node's labels now carry placement's part (made,
    or there already), False when it surely did not land (refused), None unknown (the
    write failed: it may have landed before its answer was lost)."""

    made: int
    landed: bool | None


def write_node(gate: Writes, nid: str, set_: Mapping[str, str], remove: Sequence[str],
               held: HeldNodeWrites | None, why: Why | None = None) -> Written:
    """One node's write: label sync's held change of it first (if any), then placement's
    (``remove``, then ``set_``)."""
    mine_changed = [False]  # the last call is the one that landed (retries)

    def mine(cur: Mapping[str, str]) -> Mapping[str, str] | None:
        new = dict(cur)
        for k in remove:
            new.pop(k, None)
        new.update(set_)
        mine_changed[0] = new != dict(cur)
        return new if mine_changed[0] else None

    other = held.take(nid) if held is not None else None
    finish: Callable[[bool, str | None], None] = lambda _landed, _error: None  # noqa: E731
    compute: LabelCompute = mine
    if other is not None:  # label sync's change first, as when it wrote first
        part, finish = other.part()
        compute = chain(part, mine)
    try:
        landed = gate.node_labels(nid, compute, why)
    except SwarmError as exc:
        logger.error("placement: node {} label write failed: {}", nid[:12], exc)
        finish(False, str(exc))
        return Written(0, None)
    finish(landed, None)  # label sync's part: landed, and its version conflicts counted
    # Not landed and placement's part a change: the gate refused the write (or nothing
    # was written, the labels as wanted already: ``mine_changed`` False then).
    return Written(int(landed and mine_changed[0]), landed or not mine_changed[0])


STALE = "stale"  # write_service: the spec changed what its plan was made from


def write_service(gate: Writes, sp: ServicePlan, forced: _Forced,
                  planned: Planned, said: WrittenSaid | None = None) -> bool | str | None:
    """True: written, False: nothing to write, None: the write failed, ``STALE``: the
    spec no longer asks for what ``planned`` saw (nothing written; it is read afresh and
    planned again next cycle). A forced update notes the ForceUpdate it landed (the last
    compute is the one that landed). A renewal that writes what was said is counted in
    ``said``, its decision and written lines at debug."""
    log = logger.bind(service=sp.name)
    say = said is None or said.fresh(sp)
    inner = planned.guard(service_compute(sp.writes))
    last: list[Mapping[str, Any] | None] = [None]

    def compute(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
        new: Mapping[str, Any] | None = inner(spec)
        last[0] = new
        return new

    try:
        landed = gate.service_spec(sp.id, compute, Why(*sp.decision) if sp.decision else None,
                                   say)
    except SwarmError as exc:  # its own node writes only are left out: the rest go
        log.error("placement: {}'s service write failed: its gates stay closed and its "
                  "ledger entries unwritten; made again next cycle: {}", sp.name, exc)
        return None
    if planned.stale:
        gate.reread("service", sp.id)
        log.warning("placement: {} changed since the snapshot its plan was made from ({}): "
                    "nothing written, its gates stay closed; read again and planned next "
                    "cycle", sp.name, "; ".join(planned.changed))
        return STALE
    if not landed:
        return False
    if said is not None:
        said.landed(sp, say)
    if say:
        log.info("placement written: {}", [p.to_dict() for p in sp.placements])
    else:
        log.debug("placement written as said, its waiting task renewed ({} time(s) since)",
                  said.renewals(sp.id) if said is not None else 0)
    if sp.force_update and last[0] is not None:
        forced.landed(sp.id, last[0])
    return True


def gates_ready_now(swarm: SwarmClient, plan: PlacementPlan,
                    written_force: Mapping[str, int], prefix: str) -> list[str]:
    """Open, in this cycle, the deferred gates of the services whose tasks already all
    carry the device map just written; return their names. The others keep the
    next-cycle path (the planner opens a gate once every waiting task is newer).

    Safe because: a task reads its devices from the service labels copied into it when
    it is created, and the map was written in the same spec update that bumped
    ``ForceUpdate`` to ``written_force[id]`` -- the value this write landed, not the
    snapshot's guess, so a ``--force`` by someone else in between cannot pass for ours.
    A task created before that update has a lower ``ForceUpdate``; the list is read
    after the update landed, so every such task still meant to run (desired running or
    ready: a restart's in its delay, ``MEANT_STATES``) is in it, waiting
    (a gate closed since the map was planned: none can be running). Only when none is
    does the gate open; a task Swarm creates after the list is made from the spec that
    carries the map. The gate goes into the same node write as the service's ledger
    entry (phase 3), so a crash anywhere leaves either both or neither: before it, the
    gate is closed and the next leader plans again from the ledger; after it, the
    ledger names the GPUs before any task can use them. Jobs are left to the next
    cycle: their tasks have desired state "complete" and a list of running ones would
    not show them."""
    try:
        tasks = swarm.tasks({"desired-state": meant_filter()})
    except BudgetCut as exc:  # (its cycle's budget: no fault of its own)
        raise read_cut() from exc
    except SwarmError as exc:
        logger.warning("placement: cannot list tasks, gates open next cycle: {}", exc)
        return []
    waiting = tasks_by_service(tasks, slots_of=lambda _: False).waiting
    opened: list[str] = []
    for i, sp in enumerate(plan.services):
        force = written_force.get(sp.id)
        if (force is None or not sp.gates_deferred or sp.mode in JOB_MODES
                or not waiting.get(sp.id, NO_WAITING).all_newer(force)):
            continue
        for p in sp.placements:
            if p.node_id in plan.node_set:  # its ledger entry is written there too
                plan.node_set[p.node_id][gate_key(prefix, sp.name)] = "true"
        plan.services[i] = replace(sp, gates_deferred=False)
        opened.append(sp.name)
    if opened:
        logger.info("placement: {} service(s) open their gates in this cycle (every task "
                    "carries its device map)", len(opened))
    return opened


class PlacementStep(Step):
    """Placement in the daemon's cycle: plan from this cycle's facts, log what people
    must see, apply the plan (``apply_plan``), with label sync's held node writes folded
    into its own. Keeps the planner across cycles while the daemon leads."""

    name = "placement"
    requires = frozenset({Slot.SNAPSHOT, Slot.FACTS, Slot.HELD})
    provides = frozenset({Slot.PLACEMENT, Slot.PLANNER})

    def __init__(self, host: CycleHost,
                 nominated: Callable[[], Sequence[Nomination]] = tuple) -> None:
        """``nominated``: the GPUs preemptions hold now (the preemption step's records)."""
        self.host = host
        self.cfg = host.cfg
        self.nominated = nominated
        self.planner: Planner | None = None  # kept across cycles as leader
        self.pinned = pinned_workload(self.cfg)  # read at start, as the config is
        self.last_store = 0.0
        # each logged while it lasts: (service, tenant limit); service -> its held-back
        # note (while it is held); service id -> (status, reason) if invalid or pending
        self.said: SaidOnce[tuple[str, str]] = SaidOnce()
        self.held_said: SaidOnce[str] = SaidOnce()
        self.status_said: SaidOnce[str] = SaidOnce()
        self.record_said: SaidOnce[tuple[str, str]] = SaidOnce()  # (service, its note)
        # service id -> (its pending note, renewals planned since it was said), of a
        # service that renews its waiting task: kept while it waits, across a cycle it is
        # not pending (``_say_pending``; not ``WrittenSaid``'s count of writes landed)
        self.renewals: dict[str, tuple[str, int]] = {}
        self.written_said = WrittenSaid()  # each service write said once per change

    def stand_by(self) -> None:
        self.planner = None  # a new term starts from what Swarm stores
        # (the leader's daemon counts the requests: this term's last counts, frozen,
        # stood beside its)
        self.host.metrics.pending.set(0)
        for status in Status:
            self.host.metrics.planned.labels(status=str(status)).set(0)

    def term_planner(self, snap: Snapshot) -> Planner:
        """A new term's planner: from the stored model, or the file pinned at start."""
        return new_planner(self.cfg, self.host.swarm, snap.services, pinned=self.pinned)

    def run(self, session: CycleSession) -> None:
        cfg, host = self.cfg, self.host
        snap = session.snapshot
        if self.planner is None:  # first cycle as leader: start from the stored model
            self.planner = self.term_planner(snap)
            logger.info("placement: workload model {}", self.planner.model.summary())
        planner = self.planner
        # (label sync counts them: swarmgpu_nodes_facts_stale)
        planner.cluster.stale = stale_nodes(host.book, snap.facts, cfg.health.node_lost_grace_s)
        plan = make_plan(snap, cfg, session.facts, planner=planner, nominated=self.nominated())
        session.placement = plan
        session.planner = planner
        now = time.monotonic()
        if (planner.model_changed and not cfg.dry_run
                and now - self.last_store >= WORKLOAD_STORE_EVERY_S):
            if store_workload(host.swarm, cfg, planner.model):
                planner.model_changed = False
            self.last_store = now
        host.metrics.pending.set(self._log(plan))
        counts = Counter(sp.status for sp in plan.services)  # one pass, not one a status
        for status in Status:  # a failed one (placement.isolate) is counted as the others
            host.metrics.planned.labels(status=str(status)).set(counts[status])
        if plan.empty:
            return
        self.written_said.keep({sp.id for sp in plan.services})
        try:
            apply_plan(host.swarm, plan, dry_run=cfg.dry_run, services=snap.services,
                       held=session.held, prefix=cfg.sync.prefix, said=self.written_said)
        finally:  # (those that landed before a stop or the budget ended it too)
            written = plan.landed.written if plan.landed is not None else 0
            host.metrics.placements.labels(outcome="written").inc(written)
        if any(sp.gates_deferred or sp.force_update for sp in plan.services):
            # Replaced tasks appear within a second; open their gates right after.
            follow_up(host.trigger)

    def _say_pending(self, sp: ServicePlan, note: str, again: bool) -> None:
        """A pending line, said once while it lasts (``again``: a new note). A task its
        node truly refuses is renewed after each back-off (Swarm's message is the one it
        gives a task it stopped trying, ``converge``): each renewal is counted in a short
        line, and the cycle between a renewal and Swarm's word on the new task (not
        pending then: ``renewals`` outlives it) does not make the note new again."""
        log = logger.bind(service=sp.name)
        kept = self.renewals.get(sp.id)
        if kept is not None and kept[0] != note:
            kept = None
        if again and kept is None:
            log.warning("pending: {} ({})", sp.reason or "", sp.request_text)
            kept = (note, 0) if sp.renewed else None  # (only a renewal is kept past a gap)
        elif sp.renewed:
            kept = (note, (kept[1] if kept is not None else 0) + 1)
            log.info("pending as said: its waiting task replaced where it is again, {} "
                     "time(s) since (Swarm's message unchanged)", kept[1])
        if kept is not None:
            self.renewals[sp.id] = kept

    def _log(self, plan: PlacementPlan) -> int:
        """Log what people must see of ``plan`` (each invalid or pending service, held-back
        note and tenant limit once while it lasts); return the number of pending services."""
        held_said, status_said, record_said = self.held_said, self.status_said, self.record_said
        held_said.begin()
        status_said.begin()
        record_said.begin()
        pending = 0
        for sp in plan.services:
            log = logger.bind(service=sp.name)
            if sp.status in ("invalid", "pending"):
                # Said again when the reason changes or comes back after a fix; the
                # plan and the map keep it every cycle. Its transient clause (a
                # back-off's countdown, a renewal: ``converge``) is no change.
                note = (sp.reason or "").replace(sp.transient, "")
                again = status_said.fresh(sp.id, (sp.status, note))
                if sp.status == "invalid" and again:
                    log.warning("invalid GPU request, service left as it is: {}", note)
                elif sp.status == "pending":
                    pending += 1
                    self._say_pending(sp, note, again)
            for w in sp.warnings:
                if w == sp.replaced:  # moved off a node where Swarm would not run it
                    log.warning("{}", w)
                elif w.startswith(HOLD_HINT):  # logged when it changes, not every cycle
                    if held_said.fresh(sp.name, w):
                        log.info("{}", w)
                elif w.startswith((UNTRUSTED_RECORD, STALLED)):  # once while it lasts
                    if record_said.fresh((sp.name, w)):  # (a stall's text has no name)
                        log.warning("{}{}", f"{sp.name}: " * w.startswith(STALLED), w)
                else:
                    log.info("{}", w)
            if not sp.held:  # kept while the service is held (and there), no longer
                held_said.forget(sp.name)
        held_said.end()
        status_said.end()
        record_said.end()
        waits = {sp.id for sp in plan.services if sp.status == Status.PENDING
                 or (sp.status == Status.PLACED and sp.state != State.ACTIVE)}
        for gone in self.renewals.keys() - waits:
            del self.renewals[gone]
        limits = {(sp.name, why) for sp in plan.services if sp.request is not None
                  for why in sp.request.limits}
        self.said.begin()
        for name, why in sorted(limits):  # labels asked more than the tenant may
            if self.said.fresh((name, why)):
                logger.bind(service=name).warning("{}: {}", name, why)
        self.said.end()
        return pending


def audit_checks(cfg: Config, tenants: Tenants | FromConfig | None = FROM_CONFIG,
                 plans: OnePlan | None = None) -> list[Any]:
    """Audit findings about placement: invalid requests, pending, ungated services, and
    what tenants did not give (or that there are none); ``tenants``: as ``new_planner``;
    ``plans``: the run's one plan, shared with its other checks (of these ``tenants``)."""
    given = Tenants.given(cfg, tenants)
    plan_of = plans or OnePlan(cfg, tenants=given)

    def check(snap: Snapshot) -> list[Finding]:
        plan = plan_of(snap)
        out = findings_of(plan)
        if given is None:
            return [SELF_DECLARED, *out] if any(sp.request is not None
                                                for sp in plan.services) else out
        requests = {sp.name for sp in plan.services if sp.request is not None}
        for s in snap.services:  # the first in file order takes it: say so
            names = [t.name for t in given.matching(s.name, s.labels.get(STACK_LABEL))]
            if s.name in requests and len(names) > 1:
                out.append(Finding(
                    "tenant-overlap", s.name, f"matches tenants {', '.join(names)}; the "
                    f"first in the config's order, {names[0]}, takes it", key="tenants",
                    advisory=True))
        return out

    return [check]


# Without tenants, a stack's labels are the last word on its priority, opt-out and queue.
SELF_DECLARED = Finding(
    "self-declared-priority", "config",
    "no tenants section: swarmgpu.priority, swarmgpu.preemptible and swarmgpu.queue are "
    "as each stack declares them (any stack may ask for the top priority and preempt the "
    "others); give each team a tenant with its limits (docs/requests.md, \"Tenants\")",
    key="tenants", advisory=True)


def findings_of(plan: PlacementPlan) -> list[Finding]:
    """The findings of one placement plan (``audit_checks``)."""
    out_gates = [Finding("foreign-gate", sp.name, w) for sp in plan.services
                 for w in sp.warnings if "names another service" in w]
    out: list[Finding] = []
    for sp in plan.services:
        if sp.status == "invalid":
            out.append(Finding("invalid-request", sp.name, sp.reason or ""))
        elif sp.status == "pending":
            out.append(Finding("pending", sp.name, f"{sp.request_text}: {sp.reason}"))
        elif sp.status == Status.FAILED and sp.unread:  # its spec's fault, not swarmgpu's
            out.append(Finding("unreadable-spec", sp.name, sp.reason or ""))
        elif sp.status == Status.FAILED:  # planning it raised: a fault to report (isolate)
            out.append(Finding("placement-fault", sp.name, sp.reason or ""))
        for host, why in sorted(sp.nodes_waiting.items()):  # global: a node without room
            out.append(Finding("global-node-waiting", sp.name, f"{host}: {why}",
                               advisory=sp.status != "pending"))
        out += [Finding("start-first", sp.name, w) for w in sp.warnings
                if w.startswith(STALLED)]  # its gate never opens (services.startfirst)
        for c in sp.held:  # would restart a running task: waits (placement.restarts)
            out.append(Finding("held-change", sp.name,
                               f"{c}: held back, it would restart its running task; it "
                               "goes with its next placement, or now with `swarmgpu apply "
                               f"--service {sp.name}`", advisory=True))
        for w in sp.warnings:
            if w.startswith("adopted") and not w.startswith(HOLD_ADOPTED):
                # advisory: the daemon adds the gate and env itself (adopt_ungated)
                out.append(Finding("ungated", sp.name,
                                   "annotated service without the gate/env in its spec: " +
                                   w.removeprefix("adopted: "), advisory=True))
        if sp.request is not None:  # its labels asked more than its tenant may have
            out += [Finding("tenant-limit", sp.name, f"tenant {sp.request.tenant}: {why}",
                            key="tenants") for why in sp.request.limits]
    return out + out_gates
