"""Repin: move one service's share between GPUs of one node (a :class:`Move` whose
``target_node`` is its ``source_node``). The mover hands such moves here; any caller of
``Mover.start`` (the fragmentation policy, a health evacuation) asks for a repin just by
proposing a move that stays on its node. Dry-run, budgets, cooldown and the record are the
mover's, as for any move.

A task's devices come from the service label ``<p>devices.<node>``, which Swarm resolves
when it *creates* the task, so the task on the node must be replaced, and only that one
(a forced update would restart the service on every node). Through placement's own
mechanisms:

0. the record ``<p>state.moves.<service id>`` on the swarm object (``record.py``), the
   authority, as for every move: it names the service, the node, both GPU sets and the
   node's share labels before and after.
1. service write: ``<p>state.move`` (placement leaves the service alone), ``<p>devices.N``
   and the node's share labels for the new GPUs. No task restarts: a service label is
   not part of the task template; only tasks created from now on read it.
2. node N, one write: the ledger names the new GPUs and the gate closes. Swarm's
   constraint enforcer stops the task on N (only there: no other node's gate changes).
3. node N: once Swarm no longer wants a task running there, the gate reopens. Swarm
   creates a fresh task on N (global: the orchestrator; replicated: the replacement
   that waited, pending) with the new devices.
4. once that task runs: the move label goes, ``<p>state.moved-at`` is set; then the
   record goes.

Break-before-make is inherent (one node cannot run the task on both GPU sets through one
gate); the node is without its task only between steps 2 and 3's task start, and the
daemon comes back a second later while a move is in flight. The source GPUs are freed in
the ledger at step 2, as a move without make-before-break frees its source.

Progress is read back from Swarm each cycle (the node's ledger and gate, the tasks on
the node), so a restarted daemon or a new leader carries on. A move whose new task does
not run within ``move_timeout_s`` is rolled back: the same steps with the GPU sets
swapped (``direction: back``), unless Swarm still wants its old task there, gate closed:
then it ends on the old GPUs that task has, as at its hold limit (a roll-back in flight
with it on the node, paused then, was handed back on the new GPUs); a roll-back that
times out too is left to placement (gate open, ledger as it is, the device map pointed at
the GPUs it names, move label gone). A
health repin is never rolled back (its source GPU failed): past the timeout it ends on
the new GPUs once their gate is open, and one whose gate has not reopened by its hold
limit (twice ``move_timeout_s``: Swarm has not let the old task go) ends there, gate
left closed (the old task carries the failed GPU), left to placement. A node paused
before Swarm let the old task go (its constraint enforcer acts on no paused node), its
gate closed or step 2 not yet made, ends a repin that cycle, back on the GPUs the old
task has (``_paused``; on the new ones where each task Swarm wants there was made after
step 1, a restart between the steps: ``_hand_back``). No spec write leaves a task of the
service waiting for a node (a replicated replacement N does not take) of an older
revision, which Swarm never tries again (docs/deploy.md; ``Waits``): where nothing of it
runs, a roll-back closes the gate first, then writes the spec with a ForceUpdate (the
waiting task carried the new GPUs), and an end write carries one too; beside a running
replica neither is made while such a task waits, for at most ``move_timeout_s`` past
the repin's timeout (a task Swarm never places would hold the move and its budget for
good): then the repin ends where it is (not rolled back: the roll-back's own task would
be the one its write left waiting), its end written plain, one line naming the waiting
tasks, and placement's renewal replaces them (its gate closed while Swarm still wants
the old task there: back on the old GPUs that task has, gate open, as ``_paused``). A
record whose service lost its move label (a stack re-deploy) is dropped and placement
takes the service back from the ledger. A move label without a record is never acted on
(``mover.verify``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableSet, Sequence
from dataclasses import dataclass, replace
from typing import Any

from loguru import logger

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.core.saidonce import SaidOnce
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.placement import (
    MOVE_STATE,
    Holding,
    assign_key,
    devices_key,
    gate_key,
    parse_holding,
)
from swarmgpu.manager.placement.keys import MEANT_STATES
from swarmgpu.manager.placement.repinned import made_after
from swarmgpu.manager.rebalance.context import why_not_movable
from swarmgpu.manager.rebalance.heldgpus import Held, Shares
from swarmgpu.manager.rebalance.moves import Move, Outcome
from swarmgpu.manager.rebalance.record import (
    HEALTH,
    FirstSeen,
    MoveState,
    crash_point,
    drop_record,
    end_move,
    failed_if_raised,
    held_by_others,
    held_unread,
    node_by_id,
    put_record,
    read_records,
    room_for,
    service_ledger,
    spec_edit,
    spec_labels,
)
from swarmgpu.manager.rebalance.targets import live_refusal
from swarmgpu.manager.services.requests import GpuRequest, parse_all
from swarmgpu.manager.services.sharing import node_of_key
from swarmgpu.swarm.client import (
    NotLeader,
    SwarmClient,
    SwarmError,
    SwarmNode,
    SwarmService,
    SwarmTask,
    VersionConflict,
)

# (move state, outcome, detail): the mover's `recent` list, logs and metrics
Say = Callable[[MoveState, Outcome, str], None]


def same_node_free(m: Move, node: SwarmNode, prefix: str, held: Held | None = None,
                   shares: Shares | None = None) -> str | None:
    """None when the move's target GPUs have room on its node by the live ledger, the
    service's own holding there left out (it is the one that moves), and none of them is
    ``held`` for another (``room_for``: a task Swarm is stopping, a preemptor; a stopping
    task's share in ``shares`` counted used, the rest of that GPU free)."""
    if set(m.target_uuids) == set(m.source_uuids):
        return "the target GPUs are the ones it holds"
    return room_for(m, node, prefix, own_moves=True, held=held, shares=shares)


def own_tasks(swarm: SwarmClient, sid: str) -> list[SwarmTask]:
    """``sid``'s tasks, every desired state: the list's ``service`` filter asks, each
    task's ServiceID on Swarm's answer decides (an engine or proxy that dropped the
    filter would have another service's task count as this one's)."""
    return [t for t in swarm.tasks({"service": sid}) if t.service_id == sid]


def _node_share(labels: Mapping[str, str], prefix: str, node_id: str
                ) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items()
                        if node_of_key(k, prefix) == node_id))


def force_update(spec: dict[str, Any]) -> None:
    """The spec edit that replaces the service's tasks (``TaskTemplate.ForceUpdate``)."""
    tt = spec.setdefault("TaskTemplate", {})
    tt["ForceUpdate"] = int(tt.get("ForceUpdate") or 0) + 1


@dataclass(frozen=True)
class Waits:
    """A service's tasks (desired running, or ready: a restart's or an update's new task
    before it starts, ``MEANT_STATES``) as one look found them, for its spec writes:
    a task waiting without a node is never tried again by Swarm once the service is
    written (docs/deploy.md). ``renew``: one waits and nothing of the service runs, so
    the write replaces it (a ForceUpdate restarts no running task); ``held``: one waits
    beside a running task, so the write waits (a running task is never restarted for
    this)."""

    waiting: bool
    running: bool
    ids: tuple[str, ...] = ()  # the waiting tasks, for the line said when a hold ends

    @classmethod
    def of(cls, tasks: Sequence[SwarmTask]) -> Waits:
        wanted = [t for t in tasks if t.desired_state in MEANT_STATES]
        ids = tuple(sorted(t.id for t in wanted if not t.node_id))
        return cls(bool(ids), any(t.state == "running" for t in wanted), ids)

    @property
    def renew(self) -> bool:
        return self.waiting and not self.running

    @property
    def held(self) -> bool:
        return self.waiting and self.running


def kept_on_healthy(st: MoveState, timeout_s: float, why: str | None = None) -> str:
    """The outcome's detail of a health move that ends on its target past its timeout
    (or ``why`` it failed before: its target's state)."""
    why = why or (f"its task on {st.target_host} ({','.join(st.target_uuids)}) is not "
                  f"running within {timeout_s:g}s")
    return f"{why}; kept there, not rolled back onto the failed GPU(s); Swarm runs it when it can"


def unlanded(st: MoveState, limit: str, gate_open: bool) -> str:
    """The outcome's detail of a repin (or its roll-back) whose node write (the ledger on
    its target GPUs, the gate closed) never landed within ``limit``: that write failed,
    not Swarm (``gate_open``: the gate as read); the ledger still names its source."""
    what = "roll-back's node write" if st.direction == "back" else "node write"
    return (f"its {what} on {st.source_host} (the ledger on {','.join(st.target_uuids)}, "
            f"the gate closed) did not land within {limit} (the daemon's log says why it "
            f"failed), not Swarm's doing; gate {'open' if gate_open else 'closed'} as read, "
            f"on the GPU(s) its ledger still names ({','.join(st.source_uuids)}; the device "
            "map pointed back at them)")


def swapped(st: MoveState, now: float) -> MoveState:
    """The roll-back of ``st``: the same steps, GPU sets swapped, its own timeout."""
    return replace(st, source_uuids=st.target_uuids, source_milli=st.target_milli,
                   target_uuids=st.source_uuids, target_milli=st.source_milli,
                   source_share=st.target_share, target_share=st.source_share,
                   direction="back", started_at=now)


class Repin:
    """The steps of a same-node move; every write through the mover's ``Writes``."""

    def __init__(self, swarm: SwarmClient, writes: Writes, cfg: RebalanceConfig, *,
                 prefix: str, clock: Callable[[], float], say: Say,
                 seen: FirstSeen | None = None, ended: MutableSet[str] | None = None,
                 classes: Mapping[str, int] | None = None) -> None:
        self.classes = classes  # preemption.priority_classes (the mover's)
        self.seen = seen or FirstSeen()  # a move's age (``record.FirstSeen``)
        # moves whose outcome was said (the mover's ``_end``): a start that raised is one
        self.ended: MutableSet[str] = set() if ended is None else ended
        self.swarm = swarm
        self.writes = writes
        self.cfg = cfg
        self.prefix = prefix
        self.clock = clock
        self.say = say
        self.held_said: SaidOnce[str] | None = None  # the mover's: held_unread says once
        # GPUs the ledger shows free that are held (``Inputs.held``: a stopping or rejected
        # task's, a preemptor's), as its proposal read them: set each cycle beside the
        # mover's own (``Mover.held``), checked again at ``start``
        self.held: Held = {}
        self.shares: Shares = {}  # of those, stopping tasks' shares (``room_for``)

    # --- starting ------------------------------------------------------------------
    def refusal(self, m: Move, fresh: SwarmService, node: SwarmNode,
                tasks: Sequence[SwarmTask]) -> str | None:
        """Why ``m`` may not start now, from fresh reads; None when it may."""
        p = self.prefix
        tasks = [t for t in tasks if t.service_id == fresh.id]  # (``own_tasks``: the caller's)
        held = parse_holding(m.service, node.id, node.labels.get(assign_key(p, m.service), ""))
        if held is None or held.uuids != m.source_uuids or held.milli != m.source_milli:
            return f"the share on {m.source_host} changed since planning"
        if node.labels.get(gate_key(p, m.service)) != "true":
            return f"its gate on {m.source_host} is not open"
        why = same_node_free(m, node, p, self.held, self.shares)
        if why is not None:
            return why
        if fresh.id in read_records(self.swarm.swarm_labels(), p):
            return "a move record exists for it already"
        req = parse_all(fresh.labels, prefix=p, classes=self.classes)
        ledger = service_ledger(self.swarm, p, m.service)
        # No record of a move (just read): a move label it carries is nobody's move.
        why = why_not_movable(fresh, req if isinstance(req, GpuRequest) else None, tasks,
                              ledger, p, self.clock(), self.cfg.cooldown_s, same_node=True,
                              moving=False)
        # Swarm's word on the node for the service as it is now, as for a move between
        # nodes: a re-deploy since planning (a constraint, a host-mode port another
        # service's task binds there) would leave the new task pending once the gate closes.
        return why or live_refusal(self.swarm, fresh, node, tasks, p)

    def start(self, m: Move, fresh: SwarmService) -> MoveState | str:
        """Steps 0-2 for ``m`` (``m.source_node == m.target_node``); the move's state, or
        why it was refused (nothing written then)."""
        node = self.swarm.node(m.source_node)
        # No desired-state filter: refusal's readers judge it on Swarm's answer (MEANT_STATES)
        tasks = own_tasks(self.swarm, fresh.id)
        why = self.refusal(m, fresh, node, tasks)
        if why is not None:
            return why
        p = self.prefix
        st = MoveState.start(m, fresh, self.clock(), surge=False,
                             source_share=_node_share(fresh.labels, p, m.source_node),
                             target_share=tuple(sorted(m.target_share)))
        with failed_if_raised(self.ended, st):  # its one outcome: failed
            # The record first: a label is only ever acted on when its record exists.
            put_record(self.writes, p, fresh.id, st)
            crash_point("repin-step-0")
            detail = (f"GPUs {','.join(st.source_uuids)} -> {','.join(st.target_uuids)} on "
                      f"{st.source_host}")
            try:
                self._point_spec(fresh.id, st, st)
            except (VersionConflict, NotLeader):
                # not made: nothing else was written
                drop_record(self.writes, p, fresh.id, self.clock(), started=False)
                raise
            except SwarmError as exc:
                # Outcome unknown (a timeout after the engine made it): the spec may carry the
                # label and the new device map. The record stays, so the next cycle goes on
                # (label there) or drops it (``recover``); dropped now, a device map naming
                # GPUs the ledger does not was left behind.
                self.say(st, Outcome.STARTED, f"{detail}; the spec write's outcome is unknown "
                                              f"({exc}): judged from the record next cycle")
                return st
            self.say(st, Outcome.STARTED, detail)
            crash_point("repin-step-1")
            try:
                self._close(st)
            except SwarmError as exc:  # in flight by its record: ``advance`` retries the step
                logger.bind(service=st.service).error(
                    "repin step failed, retried next cycle: {}", exc)
            crash_point("repin-step-2")
            return st

    # --- writes --------------------------------------------------------------------
    def _point_spec(self, sid: str, st: MoveState, label: MoveState,
                    renew: bool = False) -> bool:
        """Step 1: the move label (``label``) and the node's device map and share labels
        for ``st``'s target GPUs. Tasks created from now on read them. ``renew``: with a
        ForceUpdate (``Waits.renew``)."""
        p, nid = self.prefix, st.source

        def edit(spec: dict[str, Any]) -> None:
            labels = spec_labels(spec)
            labels[p + MOVE_STATE] = label.to_json()
            labels[devices_key(p, nid)] = ",".join(st.target_uuids)
            for k in [k for k in labels if node_of_key(k, p) == nid]:
                labels.pop(k)
            labels.update(dict(st.target_share))
            if renew:
                force_update(spec)

        return self.writes.service_spec(sid, spec_edit(edit))

    def _node(self, st: MoveState, h: Holding, gate_open: bool) -> bool:
        """Node N's ledger entry ``h`` and its gate, in one write."""
        ak, gk = assign_key(self.prefix, st.service), gate_key(self.prefix, st.service)

        def compute(cur: Mapping[str, str]) -> Mapping[str, str] | None:
            new = {k: v for k, v in cur.items() if k != gk}
            new[ak] = h.label_value()
            if gate_open:
                new[gk] = "true"
            return new

        return self.writes.node_labels(st.source, compute)

    def _close(self, st: MoveState) -> bool:
        """Step 2: the ledger names the target GPUs; the gate closes (Swarm stops the task)."""
        return self._node(st, st.target_holding(), gate_open=False)

    def _open(self, st: MoveState, h: Holding) -> bool:
        return self._node(st, h, gate_open=True)

    def _finish(self, sid: str, st: MoveState, outcome: Outcome, detail: str,
                waits: Waits | None = None) -> None:
        """Step 4: the move label goes, ``moved-at`` is set, the outcome is said (once:
        the mover's ``say``), then the record goes. ``waits``: the service's tasks as
        this look found them; while one waits for a node the write is held (the move
        stays in flight) or replaces it (``Waits``)."""
        if waits is not None and waits.held:
            if not self._hold_over(st):
                logger.bind(service=st.service).debug(
                    "repin on {}: its end waits while a task of it waits for a node",
                    st.source_host)
                return
            # Past the hold's limit: made as the mover makes its end (it holds none),
            # plain (a running replica is never restarted for it). The waiting task is
            # left of an older revision; placement's renewal replaces it where it is.
            logger.bind(service=st.service).warning(
                "repin of {} on {}: its end, held while task(s) {} of it wait for a node, "
                "is written past its limit ({:g}s from its start); placement replaces "
                "them where they are", st.service, st.source_host, ",".join(waits.ids),
                2 * self.cfg.move_timeout_s)
        renew = waits is not None and waits.renew
        end_move(self.writes, self.prefix, sid, self.clock(),
                 force_update if renew else None,
                 lambda: self.say(st, outcome, detail))  # (a partial's args: unchecked)

    # --- progress ------------------------------------------------------------------
    def advance(self, sid: str, st: MoveState) -> None:
        """One look at a repin in flight; make the step whose condition holds. ``st`` is
        the daemon's record, never the service's label."""
        node = node_by_id(self.swarm, st.source)
        if node is None:  # the node left the swarm: nothing to repin there
            self._finish(sid, st, Outcome.FAILED,
                         f"{st.source_host} left the swarm; left to placement")
            return
        if held_unread(st, node, node, self.held_said):  # (its entry read as gone: left before)
            return
        p = self.prefix
        held = parse_holding(st.service, node.id, node.labels.get(assign_key(p, st.service), ""))
        gate_open = node.labels.get(gate_key(p, st.service)) == "true"
        tasks = own_tasks(self.swarm, sid)
        waits = Waits.of(tasks)  # every spec write below is made by it (docs/deploy.md)
        on_node = [t for t in tasks if t.node_id == st.source]
        # a task desired ready there (a restart's, made before the gate closed) would
        # start with the old devices once the gate opens: Swarm still wants it too
        meant = [t for t in on_node if t.desired_state in MEANT_STATES]
        wanted = bool(meant)
        # each made after step 1 (a restart between the steps): they run with the step's
        # target GPUs, and a hand-back ends there (``_hand_back``)
        renewed = wanted and all(made_after(t, st.started_at) for t in meant)
        runs = any(t.desired_state == "running" and t.state == "running" for t in on_node)
        at_target = held == st.target_holding()
        if held not in (st.source_holding(), st.target_holding()):
            self._leave(sid, st, held, f"its ledger entry on {st.source_host} is "
                                       f"{'gone' if held is None else 'another GPU set'}",
                        waits)
            return
        # paused before step 2 too: closing the gate would stop nothing there, and the
        # next look would only open it again (two writes, a restart risk)
        if ((not at_target or not gate_open) and wanted and node.availability == "pause"
                and st.trigger != HEALTH and not waits.waiting):
            self._paused(sid, st, node, held, waits, renewed)
            return
        done = at_target and gate_open and runs
        late = (not done and self.clock() - self.seen.started(st, self.clock())
                > self.cfg.move_timeout_s)
        if late and self._late(sid, st, node, held, gate_open, waits,
                               kept=not gate_open and wanted, renewed=renewed):
            return
        if not at_target:  # step 2 (or a roll-back's first node write)
            if self._taken(sid, st, node, held, st.target_holding(), waits, repoint=True):
                return
            self._close(st)
            crash_point("repin-step-2")
        elif not gate_open:
            if not wanted:  # Swarm has let the old task go: step 3
                self._open(st, st.target_holding())
                crash_point("repin-step-3")
        elif runs:
            outcome = Outcome.DONE if st.direction == "forward" else Outcome.ROLLED_BACK
            self._finish(sid, st, outcome, f"running on {st.source_host} with "
                                           f"{','.join(st.target_uuids)}; only that node's "
                                           "task was replaced", waits)

    def _paused(self, sid: str, st: MoveState, node: SwarmNode, held: Holding | None,
                waits: Waits, renewed: bool = False) -> None:
        """Its node paused by the operator before Swarm let the old task go (its gate
        closed, or step 2 not yet made: closing it would stop nothing): Swarm's
        constraint enforcer acts on no paused node, so that task runs on with the step's
        source GPUs and the step would only wait for its timeout (a roll-back on it
        too). Left to placement at once where its task is: the ledger and the
        device map back on those GPUs, the gate open. (A health repin is not: its source
        GPU failed; its hold limit ends it.)"""
        self._hand_back(sid, st, node, held, waits, (
            f"{st.source_host} is paused (availability pause: the operator's `docker node "
            "update`): Swarm stops no task there, so its task runs on with "
            f"{','.join(st.source_uuids)}; the ledger and device map back on them, gate "
            "open; left to placement (`docker node update --availability active` lets a "
            "repin there again)"), renewed)

    def _hand_back(self, sid: str, st: MoveState, node: SwarmNode, held: Holding | None,
                   waits: Waits, why: str, renewed: bool = False) -> None:
        """Left to placement on ``st``'s source GPUs, which its task still runs with: the
        ledger and device map back on them, gate open, ``why`` said (another service
        holds them now: ``_taken``). ``renewed``: each task Swarm wants on the node was
        made after step 1 (a restart between the steps), with the device map of
        ``st``'s target GPUs: it ends there instead, the ledger on them, gate open."""
        if renewed:
            if self._taken(sid, st, node, held, st.target_holding(), waits):
                return
            self._open(st, st.target_holding())
            outcome = Outcome.DONE if st.direction == "forward" else Outcome.ROLLED_BACK
            self._finish(sid, st, outcome, (
                f"its task on {st.source_host} was made after the repin's device map "
                f"(restarted between its steps), with {','.join(st.target_uuids)}: the "
                "ledger names them, gate open"), waits)
            return
        if self._taken(sid, st, node, held, st.source_holding(), waits):
            return
        ahead = swapped(st, self.clock())  # its GPU sets swapped: its target is the source
        self._point_spec(sid, ahead, ahead)
        self._open(st, st.source_holding())
        self._finish(sid, st, Outcome.FAILED, why, waits)

    def _late(self, sid: str, st: MoveState, node: SwarmNode, held: Holding | None,
              gate_open: bool, waits: Waits, kept: bool = False,
              renewed: bool = False) -> bool:
        """Past ``move_timeout_s``; True when this look is done (``gate_open``: the gate
        as ``advance`` read it; ``kept``: closed while Swarm still wants a task on the
        node, made before it closed; ``renewed``: each such task made after step 1)."""
        if st.trigger == HEALTH:
            # Never rolled back: that would restore its holding on the failed GPU, which
            # the policy proposes again at once (a restart loop). Once the gate is open on
            # the healthy GPUs, Swarm has a task with the new devices and keeps it (a slow
            # start, an image, its restart policy), as for any placement: the repin ends
            # there. Before that the steps carry on (the closed gate is Swarm's to act on:
            # its constraint enforcer stops the old task), for at most the hold's limit.
            if held == st.target_holding() and gate_open:
                self._finish(sid, st, Outcome.FAILED,
                             kept_on_healthy(st, self.cfg.move_timeout_s), waits)
                return True
            if not self._hold_over(st):
                return False
            self._health_over(sid, st, held, waits, gate_open)
            return True
        if st.direction == "forward" and self._taken(sid, st, node, held,
                                                     st.source_holding(), waits):
            return True
        if st.direction == "back":
            if not (waits.held and not self._hold_over(st)):  # else its end waits too
                self._point_at_held(sid, st, held)
            why = f"the roll-back's task did not run within {self.cfg.move_timeout_s:g}s"
            if held != st.target_holding():  # its node write never landed: not Swarm's
                why = unlanded(st, f"{self.cfg.move_timeout_s:g}s", gate_open)
            self._leave(sid, st, held, why, waits)
            return True
        if waits.held and not self._hold_over(st):
            # Its waiting task carries the new GPUs, which the ledger holds: it runs with
            # them once the node takes it (the repin then ends). A roll-back's spec write
            # would leave it of an older revision, never tried again, and a forced one
            # restarts the running replicas.
            logger.bind(service=st.service).debug(
                "repin on {}: not rolled back while a task of it waits for a node beside a "
                "running one", st.source_host)
            return True
        if kept and held == st.target_holding():
            # Swarm still wants its old task there, on the old GPUs (made before the gate
            # closed: a paused node's, its stop grace, one that does not answer): the repin
            # ends on them (past the hold's limit, or with no hold). Opened on the new ones,
            # those read free under it; a roll-back would run with that task on the node,
            # and a pause then handed it back on the roll-back's source, the new GPUs.
            self._hand_back(sid, st, node, held, waits, (
                f"its task on {st.source_host} is not running within "
                f"{self.cfg.move_timeout_s:g}s and Swarm still wants its old task there, "
                f"on {','.join(st.source_uuids)}: the ledger and device map back on "
                "them, gate open; left to placement"), renewed)
            return True
        if waits.held:
            # Past the hold's limit: ended where it is, not rolled back (a roll-back's own
            # task would be the one its spec write left waiting for good): the ledger and
            # the device map name the GPUs it holds, and placement takes it from there.
            self._point_at_held(sid, st, held)
            self._leave(sid, st, held, f"its task on {st.source_host} is not running "
                                       f"within {self.cfg.move_timeout_s:g}s", waits)
            return True
        self._roll_back(sid, swapped(st, self.clock()), node, held, waits)
        return True

    def _health_over(self, sid: str, st: MoveState, held: Holding | None,
                     waits: Waits, gate_open: bool) -> None:
        """A health repin past its hold limit (``_hold_over``) whose gate on the healthy
        GPUs never opened (Swarm has not let the old task go: a node that does not
        answer, say): it ends where it is, failed, its record and budget released, as
        the non-health repin's hold ends. Never rolled back, and its gate is not opened:
        the old task carries the failed GPU's devices, and an open gate would keep it
        running there; the closed gate still has Swarm's enforcer stop it, the ledger
        keeps the healthy GPUs, and placement carries on from there. Its node write
        never landed (the ledger still on the failed GPU): the device map is pointed
        back at the ledger's GPUs, and the health policy proposes the move again: its
        outcome says that write failed, not Swarm (``gate_open``: the gate as read)."""
        self._point_at_held(sid, st, held)
        limit = f"{2 * self.cfg.move_timeout_s:g}s"
        if held == st.target_holding():
            why = (f"its gate on {st.source_host} did not reopen within {limit} (Swarm has "
                   "not let its old task go); gate left closed, not rolled back onto the "
                   "failed GPU(s); left to placement on the healthy GPU(s) it holds")
        else:
            why = f"{unlanded(st, limit, gate_open)}; left to placement"
        self._finish(sid, st, Outcome.FAILED, why, waits)

    def _point_at_held(self, sid: str, st: MoveState, held: Holding | None) -> None:
        """Before ``st`` is left to placement on ``held``: when its first node write (the
        ledger on its target GPUs) never landed, the device map, which names the target
        GPUs since step 1, is pointed at ``held``'s again (written plain: ``_finish``
        replaces a waiting task where nothing runs), so the task sees the GPUs its
        ledger gives it."""
        if held is not None and held != st.target_holding():
            ahead = swapped(st, self.clock())  # its GPU sets swapped: its target is held's
            self._point_spec(sid, ahead, ahead)

    def _hold_over(self, st: MoveState) -> bool:
        """A write held while a task of the service waits for a node beside a running one
        (``Waits.held``) waits at most ``move_timeout_s`` past the repin's own timeout
        (``st``'s age, as ``advance`` times it): a task Swarm never places would hold the
        move, and its budget, for good."""
        now = self.clock()
        return now - self.seen.started(st, now) > 2 * self.cfg.move_timeout_s

    def _roll_back(self, sid: str, back: MoveState, node: SwarmNode, held: Holding | None,
                   waits: Waits) -> None:
        """The roll-back's first steps (``back``: the record's GPU sets swapped)."""
        put_record(self.writes, self.prefix, sid, back)  # the record first: the authority
        logger.bind(service=back.service).warning(
            "repin on {}: no task running on {} within {:g}s; rolling back",
            back.source_host, ",".join(back.source_uuids), self.cfg.move_timeout_s)
        if not waits.renew:
            self._point_spec(sid, back, back)
            self.advance(sid, back)
            return
        # A task waits for a node, nothing of the service runs: the gate closes first
        # (it stops no task: none is on the node), then the spec write replaces the
        # waiting task (a ForceUpdate), which carried the repin's target GPUs, by one of
        # the roll-back's device map, of the spec's revision (tried again: docs/deploy.md).
        if self._taken(sid, back, node, held, back.target_holding(), waits, repoint=True):
            return
        self._close(back)
        crash_point("repin-step-2")
        self._point_spec(sid, back, back, renew=True)

    def _taken(self, sid: str, st: MoveState, node: SwarmNode, held: Holding | None,
               h: Holding, waits: Waits, *, repoint: bool = False) -> bool:
        """A step about to write ``h`` into the ledger finds another service holding its
        GPUs now: the ledger did not hold them for this move (the new GPUs before step 2
        landed, the old ones once it did), and a placement in between may have given
        them out. Then the service is left to placement on the GPUs it holds (``held``),
        ``repoint``: its device map, which names ``h``'s GPUs, pointed at those again;
        True then (a write held by ``waits``: tried again next look)."""
        taken = "; ".join(held_by_others(node.labels, self.prefix, h))
        if not taken:
            return False
        if repoint and not waits.held:
            ahead = swapped(st, self.clock())  # its GPU sets swapped: its target is held's
            self._point_spec(sid, ahead, ahead, renew=waits.renew)
        if not (repoint and waits.held):
            self._leave(sid, st, held, f"{st.service}'s GPUs {','.join(h.uuids)} on "
                                       f"{st.source_host}: {taken} now (placed while it "
                                       "moved)", waits)
        return True

    def _leave(self, sid: str, st: MoveState, held: Holding | None, why: str,
               waits: Waits) -> None:
        """Give the service back to placement: its gate open on the ledger as it is (none:
        closed, placement places it), the move label and record gone."""
        if held is not None:
            self._open(st, held)
        self._finish(sid, st, Outcome.FAILED, f"{why}; left to placement", waits)

    def recover(self, sid: str, st: MoveState) -> None:
        """A recorded repin whose service lost its move label (a stack re-deploy, or a
        stop between the record and the label): placement takes the service back from
        the node's ledger; only the record goes."""
        node = node_by_id(self.swarm, st.source)
        held = None if node is None else parse_holding(
            st.service, node.id, node.labels.get(assign_key(self.prefix, st.service), ""))
        started = held is not None and held != st.source_holding()
        self.say(st, Outcome.DONE if started and st.direction == "forward"
                 else Outcome.ROLLED_BACK,
                 "the service's move label was gone; placement carries on from the ledger")
        drop_record(self.writes, self.prefix, sid, self.clock(), finished=started)
