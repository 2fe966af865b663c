"""Nodes and services kept from the engine's event stream, re-listed only when needed.

What client-go's informers do for Kubernetes controllers, for Swarm: the cycle reads
the swarm's nodes and services from here (``read``) instead of listing all of them
again. The engine publishes an event for every change of a node or service in
Swarm's store (Docker's daemon/events.go: ``generateClusterEvent`` covers nodes,
services, networks, secrets and configs; tasks have none), so between two reads only
the objects named by an event (or written by swarmgpu, ``invalidate``) are inspected.

A full re-list happens
- until the stream is open (the first read, and whenever it is down: then every read
  is a full list, as without a cache);
- after a gap: the stream was cut, so what happened until it reopened is unknown
  (``opened`` after a reconnect asks for one; events carry no sequence number to
  replay from, and ``since`` reaches back only as far as the engine's small buffer);
- on a slow timer (``relist_s``), for what no event told (a dropped event: the engine
  drops events for a subscriber that does not read them fast enough);
- when so many objects are dirty that inspecting each costs more than one list;
- on every read while the engine is deaf: a write of swarmgpu's that landed had no
  event in ``EVENT_WAIT_S`` (moby/moby#36834), and once more when events come again;
- after ``SILENT_S`` with no event and no full list (``watch_verdict``): a stream can
  stall without a cut (a dead connection, a hung engine or proxy), and the engine sends
  no heartbeat, so silence alone cannot tell a stall from a quiet swarm. This list
  compares: an object it finds changed that no event named (``unseen_changes``) is
  read here, and if no event at all comes in ``EVENT_WAIT_S`` after it, the stream is
  taken for stalled and reopened at once (``cut_with``: the stream's own idle timeout,
  ``swarm.client.EVENT_IDLE_S``, came minutes later, every read listing meanwhile);
  until it is open again every read lists, as while deaf. A quiet swarm costs one list
  a minute; a stall costs at most that minute and a cycle of staleness;
- after an event that names no node or service (it said something changed, not what);
- at once when an inspect is answered without an ID (``SwarmUnkeyed``): the lists leave
  such an object out and say it (``swarm.unkeyed``), and so the cycle reads it; or with
  another object (``SwarmWrongObject``, a proxy's): the lists key each by its own ID;
- after ``forget``: the daemon stood by (not the leader). A follower never reads, so it
  keeps nothing (neither the objects nor the ids events name: those piled up for as long
  as it followed), and a new term starts from a full list, not from an earlier term's.

While a full list is due, events are counted but not kept: the list reads everything.

An object never goes back to an older ``Version.Index`` while the stream stayed open
(an inspect, the timer's list or many changes', also tried again after it failed): the
store only raises it, so an older answer is stale. A list after a gap or at a new term
is taken as it is (the engine may have restarted from a backup). Objects are kept under
their own IDs, whatever an event called them.

A re-list asked for while the stream is open counts from before the list started, so
an event that arrives during the list marks its object again for the next read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Protocol

from loguru import logger

from swarmgpu.core.httpguard import Throttle
from swarmgpu.swarm.client import (
    EVENT_IDLE_S,
    SwarmError,
    SwarmNode,
    SwarmNotFound,
    SwarmService,
    SwarmUnkeyed,
    SwarmWrongObject,
)
from swarmgpu.swarm.unkeyed import Unkeyed

RELIST_S = 600.0  # the slow timer: a full re-list at least this often
# Inspecting more than this share of a kind's objects one by one costs more than
# listing them all: an inspect took 16-23 ms on the test swarm, a list about 4 ms plus
# 0.1 ms an object (benchmarks/measure_engine_latency.py), so one inspect costs about
# what listing 200 objects does.
DIRTY_SHARE = 0.005
DIRTY_MIN = 16  # ...but never re-list for fewer dirty objects than this
KINDS = ("node", "service")
# A write of swarmgpu's that landed is followed by its event within milliseconds; none
# for this long (and none since shortly before the write: the event may come before
# the write call returns, up to one call's time, WRITE_SLACK_S) means the engine stopped
# publishing the swarm's events while its stream stays open (moby/moby#36834).
EVENT_WAIT_S = 30.0
WRITE_SLACK_S = 60.0
# An open stream that brought no event for this long, with no full list since, is
# checked by a list at the next read (``watch_verdict``).
SILENT_S = 60.0


class CacheSource(Protocol):
    """What the cache reads from (``swarmgpu.swarm.client.SwarmClient``)."""

    def nodes(self) -> list[SwarmNode]: ...
    def services(self) -> list[SwarmService]: ...
    def node(self, node_id: str) -> SwarmNode: ...
    def service(self, service_id: str) -> SwarmService: ...
    def unkeyed(self) -> Unkeyed: ...


class Why(Enum):
    """What makes a read list everything (the value counts it in ``CacheStats``)."""

    FIRST_READ = "first read"
    NO_STREAM = "no event stream"
    REOPENED = "stream reopened"
    GAP = "gap"
    TIMER = "timer"
    MANY_CHANGED = "many changed"
    DEAF = "no event for a write"
    SILENT = "silent stream"
    STALLED = "no event for a change"
    EVENTS_AGAIN = "events again"
    MALFORMED = "malformed event"
    UNKEYED = "answered without an ID"  # an inspect's answer (``SwarmUnkeyed``)
    WRONG_OBJECT = "answered another object"  # an inspect's (``SwarmWrongObject``)
    FORGOT = "forgot"  # counted under the words ``forget`` was given

    @property
    def keep_newer(self) -> bool:
        """Only after the timer or many changes is the store the one this open stream
        watched all along; else (a gap, a new term) the list is taken as it is."""
        return self in (Why.TIMER, Why.MANY_CHANGED, Why.SILENT)


@dataclass(frozen=True)
class Relist:
    """One full list due: its reason and, for some, what the log says of it (a gap's
    cause, how many objects changed, ``forget``'s words); ``failed``: it is tried again
    after its list failed (or was cut at a cycle's budget: the facts watch's), still
    keeping newer versions and comparing as its reason does, the objects events named
    kept meanwhile (a gap or a new term since would have replaced it). Not compared,
    the stall check a silent stream's list is for waited another minute."""

    why: Why
    detail: str = ""
    failed: bool = False

    @property
    def keep_newer(self) -> bool:
        return self.why.keep_newer

    @property
    def key(self) -> str:
        """What ``CacheStats.reasons`` counts it under."""
        if self.failed:
            return "failed list"
        return self.detail if self.why is Why.FORGOT else self.why.value

    def __str__(self) -> str:
        said = f"gap: {self.detail}" if self.why is Why.GAP else self.detail or self.why.value
        return f"failed list ({said})" if self.failed else said


@dataclass
class CacheStats:
    """What the reads cost: full lists (and why), single inspects, events taken."""

    relists: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    inspects: int = 0
    events: int = 0
    gaps: int = 0


class SwarmCache:
    """The swarm's nodes and services, kept up to date from events (module docstring).

    Thread-safe: the event thread calls ``on_event``/``opened``/``gap``, the cycle and
    the facts watch call ``read``; writers call ``invalidate``."""

    def __init__(
        self,
        swarm: CacheSource,
        *,
        relist_s: float = RELIST_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.swarm = swarm
        self.relist_s = relist_s
        self.clock = clock
        self.stats = CacheStats()
        self._lock = threading.Lock()  # the dirty sets and flags
        self._read_lock = threading.Lock()  # one read at a time
        self._nodes: dict[str, SwarmNode] = {}
        self._services: dict[str, SwarmService] = {}
        self._left = Unkeyed()  # what the last full lists left out (``unseen_changes``)
        self._dirty: dict[str, set[str]] = {k: set() for k in KINDS}
        self._stream_up = False
        self._relist_why: Relist | None = Relist(Why.FIRST_READ)
        self._listed_at: float | None = None
        self._malformed = Throttle(60.0)  # a log line a minute for events naming nothing
        self._last_event_at: float | None = None  # any event: the engine publishes
        self._awaiting: float | None = None  # the first landed write no event followed
        # A write's event never came (DEAF), or a change's while the stream said nothing
        # (STALLED): list each read until an event comes.
        self._deaf: Why | None = None
        self._unseen_at: float | None = None  # a list found changes no event named
        self._cut: Callable[[], None] | None = None  # ends the open stream (cut_with)

    # --- fed by the event thread and by writers -----------------------------
    def on_event(self, event: Mapping[str, Any]) -> None:
        """An engine event: its node or service is read again at the next ``read``.
        One that names no object of ours (the stream is asked for node and service
        events only) said something changed without saying what: all is listed."""
        kind = event.get("Type")
        if isinstance(kind, str) and kind not in KINDS:
            return  # another kind's: not asked for, nothing of ours changed
        actor = event.get("Actor")
        obj = actor.get("ID") if isinstance(actor, Mapping) else None
        with self._lock:
            self.stats.events += 1
            self._last_event_at, self._awaiting = self.clock(), None
            self._unseen_at = None  # the stream lives: an unseen change was dropped, no stall
            if self._deaf:  # what changed between the last list and now is unknown
                self._deaf = None
                self._relist_why = self._relist_why or Relist(Why.EVENTS_AGAIN)
                logger.info("event stream: the engine publishes the swarm's events again")
            if kind not in KINDS or not isinstance(obj, str) or not obj:
                self._relist_why = self._relist_why or Relist(Why.MALFORMED)
                if n := self._malformed.due():
                    logger.warning(
                        "event stream: an event naming no node or service ({:.120}; {} "
                        "such): the next read lists everything; a proxy between the "
                        "daemon and the engine?",
                        repr(dict(event)),
                        n,
                    )
            elif self._relist_why is None or self._relist_why.keep_newer:
                # (else the coming list reads it anyway; one tried again after it failed
                # compares, and an object so named changed with its event)
                self._dirty[kind].add(obj)

    def invalidate(self, kind: str, obj_id: str) -> None:
        """swarmgpu wrote this object: read it again, without waiting for its event."""
        if kind in KINDS:
            with self._lock:
                self._dirty[kind].add(obj_id)

    def wrote(self, kind: str, obj_id: str) -> None:
        """swarmgpu's write of this object landed: read it again, and expect its event
        (none means the engine went deaf: ``EVENT_WAIT_S``). Only while the stream is
        open: an event published while it was down is lost with the gap, not unheard."""
        self.invalidate(kind, obj_id)
        with self._lock:
            if self._awaiting is None and self._stream_up:
                self._awaiting = self.clock()

    def _heard(self) -> bool:
        """False once a landed write's event is overdue (the lock held)."""
        if self._awaiting is None or self.clock() - self._awaiting < EVENT_WAIT_S:
            return True
        last = self._last_event_at
        if last is not None and last >= self._awaiting - WRITE_SLACK_S:
            self._awaiting = None  # its event came before the write call returned
            return True
        return False

    def cut_with(self, cut: Callable[[], None]) -> None:
        """``cut`` ends the stream now opening (from any thread): called when it is
        taken for stalled, so ``follow`` reopens it at once (``SwarmClient.events``)."""
        with self._lock:
            self._cut = cut

    def opened(self) -> None:
        """The stream is (again) subscribed: what happened before is unknown."""
        with self._lock:
            self._stream_up, self._unseen_at = True, None
            if self._deaf is Why.STALLED:  # a new stream is not the stalled one
                self._deaf = None
            self._relist_why = self._relist_why or Relist(Why.REOPENED)

    def gap(self, why: str) -> None:
        """The stream is down: events are being lost until it reopens."""
        with self._lock:
            self.stats.gaps += int(self._stream_up)
            self._stream_up, self._awaiting = False, None  # a write's event may be lost
            self._unseen_at, self._cut = None, None
            self._relist_why = Relist(Why.GAP, why)

    def forget(self, why: str) -> None:
        """Drop every object and event kept: the next read lists everything (``why``)."""
        with self._read_lock, self._lock:
            self._nodes, self._services = {}, {}
            self._dirty = {k: set() for k in KINDS}
            self._relist_why = Relist(Why.FORGOT, why)

    @property
    def stream_up(self) -> bool:
        return self._stream_up

    @property
    def pending(self) -> int:
        """Objects an event or a write named, waiting for the next read."""
        with self._lock:
            return sum(len(ids) for ids in self._dirty.values())

    # --- read by the cycle ---------------------------------------------------
    def read(self) -> tuple[list[SwarmNode], list[SwarmService]]:
        """The nodes and services as the engine has them now (module docstring: when
        this lists everything, and when it inspects only what changed)."""
        with self._read_lock:
            with self._lock:
                why = self._relist_why
                if why is None and not self._stream_up:
                    why = Relist(Why.NO_STREAM)
                self._check_stream()
                if why is None and self._deaf:
                    why = Relist(self._deaf)
                if (
                    why is None
                    and self._listed_at is not None
                    and self.clock() - self._listed_at >= self.relist_s
                ):
                    why = Relist(Why.TIMER)
                if (
                    why is None
                    and self._stream_up
                    and watch_verdict(self.clock(), self._last_event_at, self._listed_at, None)
                ):
                    why = Relist(Why.SILENT)
                dirty = {k: v for k, v in self._dirty.items()}
                if why is None:
                    for k, have in (("node", self._nodes), ("service", self._services)):
                        if len(dirty[k]) > max(DIRTY_MIN, DIRTY_SHARE * len(have)):
                            why = Relist(Why.MANY_CHANGED, f"{len(dirty[k])} {k}s changed")
                            break
                self._dirty = {k: set() for k in KINDS}
                if why is not None:
                    # Only an open stream makes the list current from here on;
                    # otherwise the next read lists again.
                    self._relist_why = None
            if why is not None:
                self._relist(why, dirty)
            else:
                self._inspect(dirty)
            return list(self._nodes.values()), list(self._services.values())

    def _check_stream(self) -> None:
        """Whether the open stream is deaf (a write's event overdue) or stalled (a
        change's, ``watch_verdict``): then every read lists (the lock held)."""
        if not self._stream_up or self._deaf:
            return
        if not self._heard():
            self._deaf, self._awaiting = Why.DEAF, None
            logger.warning(
                "event stream: no event for a write of swarmgpu's in {:.0f} s: the "
                "engine stopped publishing the swarm's events (moby/moby#36834, "
                "after a leader change); every cycle lists the swarm until an "
                "event comes; restarting this manager's docker ends it",
                EVENT_WAIT_S,
            )
        elif (
            watch_verdict(self.clock(), self._last_event_at, self._listed_at, self._unseen_at)
            is Why.STALLED
        ):
            self._deaf, self._unseen_at = Why.STALLED, None
            cut, self._cut = self._cut, None
            logger.warning(
                "event stream: open but silent, and a change the list found had no event "
                "in {:.0f} s: the stream is stalled (a dead connection, a hung engine or "
                "proxy); {}; every cycle lists the swarm until it is open again",
                EVENT_WAIT_S,
                "reopening it now" if cut is not None
                else f"it is reopened after {EVENT_IDLE_S:.0f} s with nothing",
            )
            if cut is not None:
                cut()  # a socket shut down: the event thread wakes, marks the gap

    def _relist(self, why: Relist, dirty: Mapping[str, set[str]]) -> None:
        self.stats.relists += 1
        self.stats.reasons[why.key] = self.stats.reasons.get(why.key, 0) + 1
        had = self._nodes, self._services
        try:
            nodes, services = self.swarm.nodes(), self.swarm.services()
        except SwarmError:
            with self._lock:  # nothing learnt: list again next time, comparing as this
                self._relist_why = self._relist_why or replace(why, failed=True)
                for kind, ids in dirty.items():  # (the objects events named: no unseen)
                    self._dirty[kind] |= ids
            raise
        left, self._left = self._left, self.swarm.unkeyed()
        if why.keep_newer:
            self._compare(had, nodes, services, dirty, left)
        keep = why.keep_newer
        self._nodes = {n.id: newer(self._nodes, n, keep) for n in nodes}
        self._services = {s.id: newer(self._services, s, keep) for s in services}
        self._listed_at = self.clock()
        logger.debug(
            "swarm cache: full list ({}): {} nodes, {} services", why, len(nodes), len(services)
        )

    def _compare(
        self,
        had: tuple[Mapping[str, SwarmNode], Mapping[str, SwarmService]],
        nodes: list[SwarmNode],
        services: list[SwarmService],
        dirty: Mapping[str, set[str]],
        before: Unkeyed,
    ) -> None:
        """A list of the store the open stream watched: what changed with no event named
        it (before the read, or during the list) starts the wait ``watch_verdict``
        reads. ``before``: what the lists before these left out."""
        with self._lock:
            named = {k: dirty.get(k, set()) | self._dirty[k] for k in KINDS}
            if not self._stream_up:
                return
        now = self._left  # (what these two lists left out)
        unseen = unseen_changes(had[0], nodes, named["node"], len(now.nodes),
                                len(before.nodes)) + unseen_changes(
            had[1], services, named["service"], len(now.services), len(before.services)
        )
        if unseen:
            with self._lock:
                if self._unseen_at is None and self._stream_up:
                    self._unseen_at = self.clock()
            logger.info(
                "event stream: {} change(s) no event named ({}); an event within {:.0f} s "
                "says the stream lives, none that it stalled",
                len(unseen),
                ", ".join(unseen[:3]),
                EVENT_WAIT_S,
            )

    def _inspect(self, dirty: dict[str, set[str]]) -> None:
        """Each object ``dirty`` names read again; one answered without an ID is left out
        and the whole store listed at once, as every list leaves it out and says it
        (``SwarmClient.unkeyed``): raised, every read failed until the timer's list. One
        answered with another object is listed so too (its entry kept until then). The
        first such answer ends the inspects: the list reads the rest (a proxy answering
        each wrongly had every dirty object inspected and warned of, then listed)."""
        done: dict[str, set[str]] = {k: set() for k in KINDS}
        relist: Why | None = None
        try:
            for kind, ids in dirty.items():
                for obj in sorted(ids):
                    if relist is not None:
                        break
                    self.stats.inspects += 1
                    relist = self._refresh(kind, obj)
                    done[kind].add(obj)
        except SwarmError:
            with self._lock:  # what was not read yet stays dirty
                for kind, ids in dirty.items():
                    self._dirty[kind] |= ids - done[kind]
            raise
        if relist is not None:
            self._relist(Relist(relist), dirty)

    def _refresh(self, kind: str, obj: str) -> Why | None:
        """``obj`` read again; the full list due where it was answered without an ID
        (left out) or with another object, else None."""
        store: dict[str, Any] = self._nodes if kind == "node" else self._services
        try:
            got = self.swarm.node(obj) if kind == "node" else self.swarm.service(obj)
        except (SwarmNotFound, SwarmUnkeyed) as exc:
            store.pop(obj, None)
            return Why.UNKEYED if isinstance(exc, SwarmUnkeyed) else None
        except SwarmWrongObject as exc:
            # Not read as removed (its service's holdings read as a removed one's were
            # released), nor the answer kept: neither is known to be Swarm's now.
            logger.warning("swarm cache: {}: listing everything", exc)
            return Why.WRONG_OBJECT
        if got.id != obj:
            # A source that answers a name or an ID prefix (the client refuses it, as
            # above): keep the object under its own ID only, never a second copy.
            store.pop(obj, None)
        store[got.id] = newer(store, got, True)
        return None


def watch_verdict(
    now: float,
    last_event_at: float | None,
    listed_at: float | None,
    unseen_at: float | None,
    *,
    silent_s: float = SILENT_S,
    wait_s: float = EVENT_WAIT_S,
) -> Why | None:
    """What an open stream's silence says at a read (times on the cache's clock).
    ``STALLED``: a list found changes no event named (at ``unseen_at``) and no event
    came in ``wait_s`` since; ``SILENT``: neither an event nor a full list for
    ``silent_s``: list, comparing; None: the stream is trusted. Silence alone is no
    stall (a quiet swarm is silent too): only a change without its event is."""
    if (
        unseen_at is not None
        and now - unseen_at >= wait_s
        and (last_event_at is None or last_event_at < unseen_at)
    ):
        return Why.STALLED
    if listed_at is None:
        return None  # the first read lists anyway
    quiet_since = listed_at if last_event_at is None else max(listed_at, last_event_at)
    return Why.SILENT if now - quiet_since >= silent_s else None


def unseen_changes(have: Mapping[str, Any], listed: list[Any], named: set[str],
                   left_out: int = 0, left_before: int = 0) -> list[str]:
    """The ids (sorted) a list shows created, removed or at a newer version than ``have``
    and no event or write named: changes the stream did not tell of. ``left_out``: how
    many entries the list left out (``swarm.unkeyed``), ``left_before``: the list's
    before. An entry listed without its ID is a proxy's doing, of which Swarm's store
    publishes no event: ids gone no more than could be newly left out, and ids new no
    more than could be listed again with theirs, are those, so none counts; more, each
    does. A service newly left out was taken for removed unseen (the open stream for
    stalled, and cut), and one left out all along hid a removal no event told of."""
    got = {o.id: o for o in listed}
    changed = {i for i, o in got.items() if i not in have or o.version > have[i].version}
    gone = have.keys() - got.keys() - named
    new = got.keys() - have.keys() - named
    # (left out now = before - listed again + newly left out: each bounded by its ids)
    if len(gone) > left_out - left_before + min(left_before, len(new)):
        changed |= gone
    elif len(new) <= left_before - left_out + min(left_out, len(gone)):
        changed -= new
    return sorted(changed - named)


def newer(have: Mapping[str, Any], got: Any, keep: bool) -> Any:
    """``got``, or the cached object of its ID when ``keep`` and that one's version is
    newer: an engine's store only raises an object's Version.Index, so an older answer
    is a stale one (a manager that lost the lead answered, a read raced a write)."""
    old = have.get(got.id)
    return old if keep and old is not None and old.version > got.version else got


def follow(
    events: Callable[[Callable[[], None]], Iterator[Mapping[str, Any]]],
    cache: SwarmCache,
    stop: threading.Event,
    on_event: Callable[[Mapping[str, Any]], None] | None = None,
    on_gap: Callable[[], None] | None = None,
    max_backoff_s: float = 30.0,
) -> None:
    """Feed ``cache`` from the event stream until ``stop``: reconnect after a cut (with
    back-off), marking the gap. ``events(opened)`` opens the stream and calls
    ``opened`` once the engine has subscribed it. ``on_event`` hears each event after
    the cache took it; ``on_gap`` each reconnect (the daemon runs a cycle then)."""
    first = backoff = min(1.0, max_backoff_s)
    said = ""  # the last unexpected error said with its traceback
    while not stop.is_set():
        try:
            for event in events(cache.opened):
                if stop.is_set():
                    return
                backoff = first
                cache.on_event(event)
                if on_event is not None:
                    on_event(event)
            if stop.is_set():
                return
            cache.gap("the stream ended")
        except SwarmError as exc:
            cache.gap(str(exc))
            logger.warning("event stream cut ({}); reconnecting in {:.0f}s", exc, backoff)
        except Exception as exc:  # the watcher must outlive any one bad event
            cache.gap(f"watcher error: {exc}")
            # A fault of ours (a wrong call under on_event) was said by its message
            # alone, every event: its traceback once, until the error changes.
            text = f"{type(exc).__name__}: {exc}"
            logger.opt(exception=exc if text != said else None).warning(
                "event watcher error ({}), a fault of swarmgpu: please report it; "
                "reconnecting", text)
            said = text
        stop.wait(backoff)
        backoff = min(backoff * 2, max_backoff_s)
        if on_gap is not None:
            on_gap()
