"""The daemon's own record of a move in flight, and what every move shares: the writes
of its steps, the check of its target's room, and the test hook that stops the daemon
between two steps. Used by both kinds of move (``mover.py``, ``repin.py``).

``<p>state.moves.<service id>=<MoveState JSON>`` on the swarm object is the authority for
a move (``mover.py``: between nodes; ``repin.py``: between GPUs of one node). Only the
daemon (or an operator with the manager API) writes there; a stack deploy cannot.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, MutableSet, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any

from loguru import logger

from swarmgpu.core import stamps
from swarmgpu.core.peertext import peer_text
from swarmgpu.core.saidonce import SaidOnce
from swarmgpu.manager.commands.audit import Finding
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.engine.stop import Stopped
from swarmgpu.manager.placement import (
    ASSIGN,
    MOVE_STATE,
    Holding,
    Moving,
    assign_key,
    parse_holding,
    read_ledger,
)
from swarmgpu.manager.rebalance.budget import (
    FINISHED,
    finished_times,
    times_in,
    with_finished,
    with_time,
)
from swarmgpu.manager.rebalance.context import MOVED_AT
from swarmgpu.manager.rebalance.endedlist import ENDED, with_ended
from swarmgpu.manager.rebalance.heldgpus import Held, Shares, held_from
from swarmgpu.manager.rebalance.moves import Move
from swarmgpu.swarm.client import BudgetCut, SwarmClient, SwarmNode, SwarmNotFound, SwarmService
from swarmgpu.swarm.jsonstrict import sub_object

RECORD = "state.moves."  # swarm-object label: <p>state.moves.<service id> = MoveState JSON
# swarm-object label: start times (epoch s) of the last hour's health moves that ended and
# of its releases to placement; with the health records in flight, the hour's spent
# health budget, whichever daemon leads (``health_spent``).
HEALTH_SPENT = "state.health-spent"
HEALTH_KEEP = 256  # bounds the label (~3 KB); an hourly budget above it counts up to it
HEALTH = "health"  # the trigger of a health move (moves.Trigger.HEALTH)
MAX_LABEL_CHARS = 8192  # a move label or record longer than any the mover writes is not read


CRASH_ENV = "SWARMGPU_TEST_CRASH_AFTER"  # test hook: os._exit(137) at a named point


def crash_point(name: str) -> None:
    """The test hook: stop the daemon right after the step named ``name`` (as a kill
    would), when ``SWARMGPU_TEST_CRASH_AFTER`` names it."""
    if os.environ.get(CRASH_ENV) == name:
        logger.warning("test hook {}={}: exiting now", CRASH_ENV, name)
        os._exit(137)


def service_ledger(swarm: SwarmClient, prefix: str, service: str) -> dict[str, Holding]:
    """node id -> ``service``'s holding, fresh from every node whose labels carry its
    ledger entry (the engine's filter): all of them, not only the move's nodes or those
    its tasks run on. A holding elsewhere (placement not done, or left behind) makes it
    unconverged, never moved: its open gate could take the surge's task. One filtered
    list, not every node (0.5 s at 5,000 nodes, per move started)."""
    nodes = swarm.nodes_with_label(assign_key(prefix, service))
    return read_ledger(nodes, prefix).get(service, {})


# A node or service id as Swarm makes them (base36; the shape the socket proxy lets into
# a path, ``dockerproxy._ID``): a record's id that is not one names no node or service
# and is never sent to the engine (anyone with the manager API can write a record; the
# proxy answers one with a / 403, the SDK an empty one NullResource: a SwarmError).
SWARM_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def swarm_id(text: object) -> bool:
    """Whether ``text`` has the shape of a Swarm node or service id."""
    return isinstance(text, str) and SWARM_ID.fullmatch(text) is not None


def node_by_id(swarm: SwarmClient, node_id: str) -> SwarmNode | None:
    """Node ``node_id`` of a move in flight, fresh: one inspect, not every node of the
    swarm (0.5 s at 5,000 nodes, per move in flight per cycle). None when no node has
    that id: the engine's 404 (``docker node rm``), as the whole list read it, or no
    node of that id listed where Docker answered the node whose hostname it is (the
    client reads it by ID alone then: ``unkeyed.by_id_alone``). Another node's answer
    (a proxy's) raises the client's ``SwarmWrongObject``: not read as gone."""
    if not swarm_id(node_id):
        return None
    try:
        node = swarm.node(node_id)
    except SwarmNotFound:
        return None
    return node if node.id == node_id else None


def cannot_run(node: SwarmNode, host: str) -> str | None:
    """Why Swarm starts no task of a move on ``node`` (None: it may). Not "unknown": a
    new leader says so of every node until it reports again (the timeout bounds it)."""
    if node.state == "down" or node.availability != "active":
        return f"{host} is {node.state}/{node.availability}"
    return None


def held_unread(st: MoveState, src: SwarmNode, dst: SwarmNode,
                said: SaidOnce[str] | None = None) -> bool:
    """True, said, where a node of move ``st`` cannot be read in part (``SwarmNode.unread``):
    the move is held as it is. Its labels as Swarm has them are not known (a gate read
    as closed may be open: the move was finished with the source's entry left behind)
    and every write to it is refused, so no step is judged or made until it reads; past
    its timeout by then, it is rolled back as any move is. ``said``: the mover's, the
    hold said once while it lasts (not each cycle)."""
    why = src.unread or dst.unread
    if why and (said is None or said.fresh(st.id, why)):
        logger.bind(service=st.service).warning(
            "move of {} ({} -> {}) held as it is: {}", peer_text(st.service),
            peer_text(st.source_host), peer_text(st.target_host), why)
    return bool(why)


def room_for(m: Move, node: SwarmNode, prefix: str, *, own_moves: bool,
             held: Held | None = None, shares: Shares | None = None) -> str | None:
    """None when ``m``'s target GPUs have room on ``node`` by its live ledger and the node
    takes work. ``own_moves``: the service's own holding there is the one that moves (a
    repin), left out of the count; else any holding of it there refuses the move.
    ``held``: (node id, GPU uuid) -> (for whom, priority), GPUs the ledger shows free that
    are not (a preemptor's nomination, a task Swarm is stopping: ``Inputs.held``); one held
    for another than ``m.service`` refuses it, but for the share in ``shares`` (a stopping
    task's), counted used as placement counts it (``heldgpus.held_from``, the policies'
    rule)."""
    held, shares = held or {}, shares or {}
    stopping: dict[str, tuple[int, str]] = {}  # uuid -> (its stopping tasks' share, whose)
    for u in m.target_uuids:
        kept = held_from(held, shares, m.service, node.id, u)
        if kept is None:
            return f"{u} on {node.hostname} is held for {held[(node.id, u)][0]}"
        if kept:
            stopping[u] = (kept, held[(node.id, u)][0])
    used: dict[str, int] = {}
    for by_node in read_ledger([node], prefix).values():
        for h in by_node.values():
            if h.service == m.service:
                if own_moves:
                    continue
                return f"{m.service} already holds GPUs on {node.hostname}"
            for u, mi in zip(h.uuids, h.milli, strict=True):
                used[u] = used.get(u, 0) + mi
    for u, mi in zip(m.target_uuids, m.target_milli, strict=True):
        if used.get(u, 0) + mi > 1000:
            return f"{u} on {node.hostname} is no longer free ({used[u]} milli held)"
        share, whose = stopping.get(u, (0, ""))
        if used.get(u, 0) + share + mi > 1000:
            return (f"{u} on {node.hostname} has no room for {mi} milli: {share} milli of "
                    f"it is held for {whose} ({used.get(u, 0)} milli by the ledger)")
    if node.state != "ready" or node.availability != "active":
        return f"{node.hostname} is {node.state}/{node.availability}"
    return node.unread or None


def held_by_others(labels: Mapping[str, str], prefix: str, h: Holding) -> list[str]:
    """Which of ``h``'s GPUs another service's holding in a node's ``labels`` leaves no
    room for now, and whose (empty: all of them have room). A roll-back asks before it
    writes its source back: a placement may have given out what the move freed."""
    used: dict[str, int] = {}
    whose: dict[str, list[str]] = {}
    ak = prefix + ASSIGN
    for k, v in labels.items():
        other = k[len(ak):] if k.startswith(ak) else None
        if other is None or other == h.service:
            continue
        got = parse_holding(other, h.node_id, v)
        for u, mi in zip(got.uuids, got.milli, strict=True) if got is not None else ():
            used[u] = used.get(u, 0) + mi
            whose.setdefault(u, []).append(other)
    return [f"GPU {u} is held by {', '.join(sorted(whose[u]))}"
            for u, mi in zip(h.uuids, h.milli, strict=True) if used.get(u, 0) + mi > 1000]


def node_gone_finding(key: str, st: MoveState, nodes: Sequence[SwarmNode]) -> Finding | None:
    """``audit``: a record naming a node that left the swarm (``docker node rm``). The
    daemon ends such a move on its next cycle; one left here says it does not run, or
    runs in dry-run (a move in flight is left as it is)."""
    ids = {n.id for n in nodes}
    src, dst = st.source in ids, st.target in ids
    if src and dst:
        return None
    gone = [] if src else [f"{st.source_host} ({st.source})"]
    if not dst and not st.same_node:  # a repin's one node is named once
        gone.append(f"{st.target_host} ({st.target})")
    end = (f"rolled back onto {st.source_host}" if src
           else f"finished on {st.target_host}" if dst and not st.same_node
           else "nothing left to open or close")
    return Finding("move-record-node-gone", st.service, peer_text(
        f"move record {key} of {st.service} names {' and '.join(gone)}, which left the "
        f"swarm; the swarmgpu daemon ends the move on its next cycle ({end}")
        + "; placement carries on from the ledger); still here, the daemon is not running "
        "or is in dry-run, which leaves a move in flight as it is: run it with writes on "
        "(docs/rebalancing.md)", key=peer_text(key))


def stuck_finding(key: str, st: MoveState, now: float, timeout_s: float, cycle_s: float,
                  *, gone: bool = False) -> Finding | None:
    """``audit``: a record older than ``move_timeout_s``, one cycle (``cycle_s``) and the
    clocks' skew (``stamps.MAX_SKEW_S``), by the audit's clock. By then a daemon with
    writes on has finished it or rolled it back (a service that is gone: dropped at
    once); one left says it does not run, runs in dry-run, or its steps fail. A start
    no clock wrote (``core.stamps``) is not judged. A repin's writes may be held
    ``timeout_s`` longer while a task of its service waits for a node beside a running
    one, and a health repin's steps carry on that long while Swarm has not let its old
    task go (``repin.py``, its hold limit): judged past that."""
    age = now - stamps.started(st.started_at, now)
    # The daemon's worst case, by this clock: it times the move by its own clock from the
    # record's start (``FirstSeen`` only ever takes an earlier time), ends it at its
    # first look past the limit (a cycle later at most), and its clock may be up to
    # ``MAX_SKEW_S`` behind this one (the audit run on another manager; a new leader
    # behind the one that wrote the start). With a cycle's margin alone, a record it
    # still held within its limit was said stuck.
    if age <= timeout_s * (2 if st.same_node else 1) + cycle_s + stamps.MAX_SKEW_S:
        return None
    what = "its service is gone" if gone else f"{st.source_host} -> {st.target_host}"
    return Finding("move-record-stuck", st.service, peer_text(
        f"move record {key} of {st.service} ({what}) started {age:.0f}s ago, past "
        f"rebalance.move_timeout_s ({timeout_s:g}s)")
        + ": the swarmgpu daemon ends a move by then; still here, it is not running, is "
        "in dry-run, or a step fails (its log says which): run it with writes on, or check "
        "the service's gates and remove the record by hand (docs/rebalancing.md)",
        key=peer_text(key))


class FirstSeen:
    """When this daemon first read each move in flight. A move's age for its timeout
    counts from the earlier of its record's start and that: a record dated ahead of this
    clock (another manager's clock, a hand edit) times out ``move_timeout_s`` after it
    was first seen here, not once the clock reaches its date. Keyed by the move's id,
    direction and start: a repin's roll-back (``repin.swapped``) has its own timeout."""

    def __init__(self) -> None:
        self._at: dict[tuple[str, str, float], float] = {}

    def started(self, st: MoveState, now: float) -> float:
        return min(st.started_at, self._at.setdefault(_seen_key(st), now))

    def keep(self, flying: Collection[MoveState]) -> None:
        """Forget the moves no longer in flight (bounds the map)."""
        keys = {_seen_key(st) for st in flying}
        self._at = {k: v for k, v in self._at.items() if k in keys}


def _seen_key(st: MoveState) -> tuple[str, str, float]:
    return st.id, st.direction, st.started_at


def record_key(prefix: str, service_id: str) -> str:
    """The swarm-object label that records the move of service ``service_id``."""
    return f"{prefix}{RECORD}{service_id}"


@dataclass(frozen=True)
class MoveState:
    """The intent of a move in flight: the daemon's record (swarm object) and its copy in
    the service's move label."""

    id: str
    service: str
    source: str
    source_host: str
    source_uuids: tuple[str, ...]
    source_milli: tuple[int, ...]
    target: str
    target_host: str
    target_uuids: tuple[str, ...]
    target_milli: tuple[int, ...]
    surge: bool
    replicas: int
    max_replicas: int  # the spec's MaxReplicas before the move (0: unset)
    started_at: float
    trigger: str
    reason: str
    direction: str = "forward"  # or "back"
    service_id: str = ""
    # A move between GPUs of one node (``source == target``, ``repin``): the service's
    # share labels for that node before and after (the node keys are the same, so a
    # roll-back needs the old values).
    source_share: tuple[tuple[str, str], ...] = ()
    target_share: tuple[tuple[str, str], ...] = ()
    # The move's outcome, once said (``mark_said``, just before): kept in Swarm, so a
    # restarted daemon or a new leader that ends the move says nothing again.
    said: str = ""

    @property
    def same_node(self) -> bool:
        return self.source == self.target

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> MoveState:
        d = json.loads(text)
        for k in ("source_uuids", "source_milli", "target_uuids", "target_milli"):
            if not isinstance(d[k], list):  # a text would be read as its letters
                raise TypeError(f"{k} is no list")
            d[k] = tuple(d[k])
        for k in ("source_share", "target_share"):
            if k in d:
                d[k] = tuple((str(a), str(b)) for a, b in d[k])
        return cls(**d)

    @classmethod
    def parse(cls, text: str) -> MoveState | None:
        """``from_json``, or None for anything it cannot read (a label is anyone's text)."""
        if len(text) > MAX_LABEL_CHARS:
            return None
        try:
            st = cls.from_json(text)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            return None
        return st if st.well_typed() else None

    def well_typed(self) -> bool:
        """Every field of the type the mover writes: a record is anyone's JSON with the
        manager API, and its fields go into the mover's sums and, through its recent
        moves, into the map's document (a list for a host, a text for a time). Node ids
        are judged where used (``swarm_id``: a move to no node is rolled back)."""
        texts = (self.id, self.service, self.source_host, self.target_host,
                 self.trigger, self.reason, self.direction, self.said,
                 self.service_id, *self.source_uuids, *self.target_uuids)
        ints = (self.replicas, self.max_replicas, *self.source_milli, *self.target_milli)
        return (all(isinstance(t, str) for t in texts)
                and all(isinstance(i, int) and not isinstance(i, bool) for i in ints)
                and isinstance(self.surge, bool)
                and isinstance(self.started_at, int | float)
                and not isinstance(self.started_at, bool) and math.isfinite(self.started_at)
                and len(self.source_uuids) == len(self.source_milli)
                and len(self.target_uuids) == len(self.target_milli))

    @classmethod
    def start(cls, m: Move, fresh: SwarmService, now: float, *, surge: bool,
              source_share: tuple[tuple[str, str], ...] = (),
              target_share: tuple[tuple[str, str], ...] = ()) -> MoveState:
        """The record of ``m`` starting now on service ``fresh`` (read just before)."""
        return cls(
            id=uuid.uuid4().hex[:12], service=fresh.name, source=m.source_node,
            source_host=m.source_host, source_uuids=m.source_uuids,
            source_milli=m.source_milli, target=m.target_node, target_host=m.target_host,
            target_uuids=m.target_uuids, target_milli=m.target_milli, surge=surge,
            replicas=fresh.replicas or 0, max_replicas=int(fresh.max_replicas_per_node or 0),
            started_at=now, trigger=str(m.trigger), reason=m.reason, service_id=fresh.id,
            source_share=source_share, target_share=target_share)

    def source_holding(self) -> Holding:
        return Holding(self.service, self.source, self.source_uuids, self.source_milli)

    def target_holding(self) -> Holding:
        return Holding(self.service, self.target, self.target_uuids, self.target_milli)


def read_records(labels: Mapping[str, str], prefix: str) -> dict[str, MoveState]:
    """service id -> the move the daemon recorded for it, from the swarm object's labels.
    Those that cannot be read are left out (``unreadable_records``), said by the mover
    once while they last (``findings.report``): this is read several times a cycle."""
    out: dict[str, MoveState] = {}
    head = prefix + RECORD
    for k, v in labels.items():
        if k.startswith(head) and (st := MoveState.parse(v)) is not None:
            out[k[len(head):]] = st
    return out


def move_gpus(labels: Mapping[str, str], prefix: str) -> frozenset[tuple[str, str]]:
    """(node, uuid) each recorded move holds (``read_records``), from its start: a move
    started this cycle is in no snapshot's ledger yet, and preemption counted such a GPU
    free beside a victim's. A move's target (its source is in the ledger until the move
    ends, its service never a victim: those never looked freed); once a move between
    nodes records its roll-back (``direction`` back, or the outcome said), its source
    instead, reopened (by then maybe in no snapshot), its target closed: nothing of it
    runs there, so it reads free, not busy until the record goes (none where the source
    was not reopened: failed). A repin's roll-back names the GPUs it returns to as its
    target (``repin.swapped``)."""
    out: set[tuple[str, str]] = set()
    for st in read_records(labels, prefix).values():
        back = not st.same_node and (st.direction == "back" or st.said == "rolled-back")
        if back and st.said != "failed":
            out.update((st.source, u) for u in st.source_uuids)
        elif not back:
            out.update((st.target, u) for u in st.target_uuids)
    return frozenset(out)


def unreadable_records(labels: Mapping[str, str], prefix: str) -> set[str]:
    """Service ids whose move record exists but cannot be read (``read_records`` leaves
    them out): such a move may still be under way in Swarm, so its service is left
    alone and it counts against the budgets until removed by hand."""
    head = prefix + RECORD
    return {k[len(head):] for k, v in labels.items()
            if k.startswith(head) and MoveState.parse(v) is None}


def unreadable_why(prefix: str, sid: str) -> str:
    """Why no move of service ``sid`` starts while its record cannot be read."""
    return (f"its move record {record_key(prefix, sid)} cannot be read: check the "
            "service's gates, then remove it by hand (swarmgpu audit: move-record-unreadable)")


def unreadable_of(services: Sequence[SwarmService], labels: Mapping[str, str],
                  prefix: str) -> dict[str, str]:
    """Name -> why of each service whose own move record cannot be read: the planners
    propose no move of it (``Inputs.unreadable``), as ``Mover.start`` would refuse it."""
    bad = unreadable_records(labels, prefix)
    return {s.name: unreadable_why(prefix, s.id) for s in services if s.id in bad}


def move_of(s: SwarmService, records: Mapping[str, MoveState], prefix: str
            ) -> MoveState | None:
    """The move in flight of ``s``, by the daemon's own word: its record on the swarm
    object, keyed by ``s``'s id, naming ``s`` (and its id, when the record says one),
    whose move id ``s``'s move label carries. None otherwise: a ``<p>state.move`` label
    alone is whatever the stack's ``deploy.labels`` say, and proves nothing.

    The one rule for "a move in flight": the mover (``mover.verify``), placement,
    preemption, the rebalancing policies (health included) and the service states of
    ``plan``, ``status`` and the map all ask it (through ``moving``)."""
    st = records.get(s.id)
    if st is None or st.service != s.name or (st.service_id and st.service_id != s.id):
        return None
    raw = s.labels.get(prefix + MOVE_STATE)
    carried = MoveState.parse(raw) if raw is not None else None
    if carried is None or carried.id != st.id or carried.service != s.name:
        return None
    return st


def moving(services: Sequence[SwarmService], swarm_labels: Mapping[str, str],
           prefix: str) -> Moving:
    """Names of the services with a move in flight (``move_of``), from one read of the
    swarm object's labels (``Snapshot.swarm_labels``), with each move's (source, target)
    nodes (``placement.queues.Moving``). Only services that carry a move label are
    looked at, and only their records are read. A service whose own record cannot be
    read is in it too, with why (``Moving.unread``): its move may be under way, so
    placement leaves it as it is and preemption passes it by, as the mover refuses it."""
    key = prefix + MOVE_STATE
    out: dict[str, tuple[str, str]] = {}
    unread = unreadable_of(services, swarm_labels, prefix)
    for s in services:
        if key not in s.labels:
            continue
        text = swarm_labels.get(record_key(prefix, s.id))
        st = MoveState.parse(text) if text is not None else None
        if st is not None and move_of(s, {s.id: st}, prefix) is not None:
            out[s.name] = (st.source, st.target)
    return Moving(out, unread)


def recorded(services: Sequence[SwarmService], swarm_labels: Mapping[str, str],
             prefix: str, left_out: bool = False) -> frozenset[str]:
    """Names of the services with a move record of their own on the swarm object (under
    their id, naming them, or one that cannot be read), whatever their move label says:
    a mover acts on it, finishing or rolling back the move (its source reopened).
    Preemption reads this from a read made after the rebalancer's movers ran: a move
    they started that cycle has its record before its label, and is not in the
    snapshot's ``moving``. ``left_out``: the list left a service out (``swarm.unkeyed``):
    the name each record of a service not listed names too (the mover holds it:
    ``verdict.verify``), as that service may be the one left out, its move under way;
    not a name a listed service carries (Swarm's names are unique: that one is gone)."""
    records, bad = read_records(swarm_labels, prefix), unreadable_records(swarm_labels, prefix)
    held = {st.service for st in unlisted_records(services, records).values()} \
        if left_out else set()
    return frozenset(held | {s.name for s in services if s.id in bad or (
        (st := records.get(s.id)) is not None and st.service == s.name)})


def unlisted_records(services: Sequence[SwarmService], records: Mapping[str, MoveState],
                     ) -> dict[str, MoveState]:
    """The ``records`` (by service id) of a service not among ``services`` whose name none
    of them carries: while the list left a service out (``swarm.unkeyed``) it may be that
    one, its move under way (``verdict.verify`` holds it, ``recorded`` names it). One whose
    name a listed service carries is gone: Swarm's names are unique and never change."""
    ids, names = {s.id for s in services}, {s.name for s in services}
    return {sid: st for sid, st in records.items()
            if sid not in ids and st.service not in names}


def spec_edit(fn: Callable[[dict[str, Any]], None]) -> Callable[[Mapping[str, Any]],
                                                                Mapping[str, Any] | None]:
    """A service-spec compute for ``Writes.service_spec``: ``fn`` edits a copy in place;
    no change, no write."""

    def compute(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
        new = copy.deepcopy(dict(spec))
        fn(new)
        return None if new == spec else new

    return compute


def spec_labels(spec: dict[str, Any]) -> dict[str, str]:
    """The spec's service labels, created when missing (edited in place)."""
    labels: dict[str, str] = spec.setdefault("Labels", {}) or {}
    spec["Labels"] = labels
    return labels


def put_record(writes: Writes, prefix: str, sid: str, st: MoveState) -> bool:
    key, text = record_key(prefix, sid), st.to_json()
    return writes.swarm_labels(lambda cur: None if cur.get(key) == text else {**cur, key: text})


def mark_said(writes: Writes, prefix: str, sid: str, outcome: str,
              ids: Collection[str]) -> bool:
    """Note in service ``sid``'s move record, while it is a move of ``ids`` with no
    outcome said yet, that ``outcome`` is said now (the mover's ``_end``, and a start
    that failed after its record landed): a daemon restarted before the record goes, or
    a new leader, ends the move saying nothing again (the mover's memory is its own)."""
    key = record_key(prefix, sid)

    def compute(cur: Mapping[str, str]) -> Mapping[str, str] | None:
        text = cur.get(key)
        st = MoveState.parse(text) if text is not None else None
        if st is None or st.id not in ids or st.said:
            return None
        return {**cur, key: replace(st, said=outcome).to_json()}

    return writes.swarm_labels(compute)


def drop_record(writes: Writes, prefix: str, sid: str, now: float,
                finished: bool = False, started: bool = True) -> bool:
    """Remove a move's record; ``finished``: the move ended (done or rolled back), so its
    time joins the list the fragmentation budget counts after a restart, and ``sid``'s
    end the list a cool-down mark is read against (``endedlist``). A health move's
    start time joins the health list in the same write (its budget stays spent) unless
    ``started`` is False (nothing was written but the record); a start no clock wrote
    (``core.stamps``: far ahead) joins it as now, which the hour then forgets."""
    key, done = record_key(prefix, sid), prefix + FINISHED

    def compute(cur: Mapping[str, str]) -> Mapping[str, str] | None:
        if key not in cur:
            return None
        new = {k: v for k, v in cur.items() if k != key}
        if finished:
            new[done] = with_finished(finished_times(cur, prefix), now)
            new[prefix + ENDED] = with_ended(cur, prefix, sid, now)
        st = MoveState.parse(cur[key])
        if started and st is not None and st.trigger == HEALTH:
            new[prefix + HEALTH_SPENT] = _with_health(
                cur, prefix, stamps.started(st.started_at, now), now)
        return new

    return writes.swarm_labels(compute)


def _with_health(cur: Mapping[str, str], prefix: str, at: float, now: float) -> str:
    return with_time(times_in(cur, prefix + HEALTH_SPENT, HEALTH_KEEP), at, now, HEALTH_KEEP)


def spend_health(writes: Writes, prefix: str, now: float) -> bool:
    """Note a health release to placement (no record of its own) in the health list."""
    return writes.swarm_labels(lambda cur: {**cur, prefix + HEALTH_SPENT:
                                            _with_health(cur, prefix, now, now)})


def health_spent(labels: Mapping[str, str], prefix: str, now: float) -> list[float]:
    """Start times of the health moves and releases of the last hour, from Swarm: the
    health records in flight and the list of those that ended. A restarted daemon or a
    new leader reads the same, so it cannot spend an hour's health budget twice. A record
    that cannot be read counts as a health move started ``now`` (its trigger and start
    unknown: the safe side, as the move budgets count it in flight) while it is there,
    and so does one whose start no clock wrote (``core.stamps``: far ahead); a time in
    the list so far ahead is not counted (``in_hour``): it would be, for ever."""
    head = prefix + RECORD
    flying = [stamps.started(st.started_at, now) for k, v in labels.items()
              if k.startswith(head)
              if (st := MoveState.parse(v)) is not None and st.trigger == HEALTH]
    unread = [now for _ in unreadable_records(labels, prefix)]
    return [t for t in [*times_in(labels, prefix + HEALTH_SPENT, HEALTH_KEEP), *flying,
                        *unread] if stamps.in_hour(t, now)]


def start_surge(spec: dict[str, Any], replicas: int) -> None:
    """make-before-break: one replica more, at most one per node (``end_surge`` undoes)."""
    spec.setdefault("Mode", {}).setdefault("Replicated", {})["Replicas"] = replicas + 1
    spec.setdefault("TaskTemplate", {}).setdefault("Placement", {})["MaxReplicas"] = 1


def end_surge(spec: dict[str, Any], st: MoveState) -> None:
    """The surge goes: replicas back to the count before the move, MaxReplicas to its
    value then, each only while it is what the surge set. An owner who scaled or
    re-deployed the service during the move keeps what they set (the docker-proxy lets
    the daemon raise replicas by one only: the surge)."""
    rep = sub_object(spec, "Mode", "Replicated")
    if rep is not None and rep.get("Replicas") == st.replicas + 1:
        rep["Replicas"] = st.replicas
    placement = sub_object(spec, "TaskTemplate", "Placement")
    if placement is not None and placement.get("MaxReplicas") == 1:
        if st.max_replicas:
            placement["MaxReplicas"] = st.max_replicas
        else:
            placement.pop("MaxReplicas")


def earlier_surge(s: SwarmService, prefix: str, swarm: SwarmClient) -> MoveState | None:
    """The move whose surge (replicas + 1, MaxReplicas 1) ``s``'s move label says an
    earlier release left: releases before the record (293896d) kept a move in its
    service's label alone, so after an upgrade mid-move that label has no record and is
    removed as one the daemon did not write (``findings.repair``), which left the surge's
    extra replica for good. None unless the label is that format (no ``service_id``,
    which every label written since carries), a make-before-break move of ``s``
    between two nodes, and the service's ledger -- swarmgpu's own node labels, not the
    label's word -- holds what it names on its source or its target. ``repair`` asks
    Swarm's PreviousSpec too (``findings.surge_shown``): the label is the owner's text.
    ``end_surge`` then undoes only what the surge set on the spec as it is."""
    raw = s.labels.get(prefix + MOVE_STATE)
    st = MoveState.parse(raw) if raw is not None else None
    if (st is None or st.service_id or not st.surge or st.same_node
            or st.service != s.name):
        return None
    ledger = service_ledger(swarm, prefix, s.name)
    if ledger.get(st.source) != st.source_holding() and (
            ledger.get(st.target) != st.target_holding()):
        return None
    return st


def end_move(writes: Writes, prefix: str, sid: str, now: float,
             also: Callable[[dict[str, Any]], None] | None = None,
             said: Callable[[], None] | None = None) -> None:
    """The last step of every move: the service's move label goes and ``moved-at`` is
    set (the cooldown, kept in Swarm), with ``also``'s edit of the same spec; ``said``
    (the move's outcome) runs once that write is made; then the record goes, last:
    until it does, a restarted daemon finishes this step again (its outcome said once:
    the mover's ``_end``)."""

    def edit(spec: dict[str, Any]) -> None:
        labels = spec_labels(spec)
        labels.pop(prefix + MOVE_STATE, None)
        labels[prefix + MOVED_AT] = f"{now:.0f}"
        if also is not None:
            also(spec)

    writes.service_spec(sid, spec_edit(edit))
    if said is not None:
        said()
    drop_record(writes, prefix, sid, now, finished=True)


@contextmanager
def failed_if_raised(ended: MutableSet[str], st: MoveState) -> Iterator[None]:
    """A start's writes from its record on. One that raises (not ``Stopped``) is said
    failed by the mover's caller (``Mover._start_all``): that is the move's one outcome,
    so ``st`` joins ``ended`` (the mover's ``_end``). Its record may have landed all the
    same (a write made, its answer lost): the next cycle rolls it back, saying nothing
    more."""
    try:
        yield
    except (Stopped, BudgetCut):  # (a read cut at the cycle's budget: no failure either)
        raise  # the daemon stops: nothing is said of this move, its record judges it later
    except Exception:
        ended.add(st.id)
        raise
