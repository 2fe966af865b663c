"""swarm.cache: when it lists everything again (first read, stream down, a gap, the
timer, many changes) and when it reads only what an event or a write named; and
``follow``'s reconnects. The source is faked at swarmgpu's own boundary (the four
reads ``CacheSource`` names); tests/test_swarm_cache_swarm.py runs it on the real
swarm."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from support.swarm_cache import Clock, Source, event, mk_node, mk_service, same

from swarmgpu.core.config import AgentsConfig, Config, SyncConfig
from swarmgpu.manager.daemon import Daemon
from swarmgpu.swarm.cache import (
    DIRTY_MIN,
    EVENT_WAIT_S,
    SILENT_S,
    WRITE_SLACK_S,
    Relist,
    SwarmCache,
    Why,
    follow,
    unseen_changes,
    watch_verdict,
)
from swarmgpu.swarm.client import (
    SwarmUnavailable,
)


def opened_cache(src: Source, **kw: Any) -> SwarmCache:
    """A cache whose stream is open and that has made its first list after that."""
    cache = SwarmCache(src, **kw)
    cache.opened()
    cache.read()
    src.lists, src.inspects = 0, []
    return cache


def test_without_a_stream_every_read_lists_everything() -> None:
    src = Source()
    cache = SwarmCache(src)
    for _ in range(3):
        assert same(cache, src)
    assert src.lists == 3 and not src.inspects
    assert cache.stats.reasons == {"first read": 1, "no event stream": 2}


def test_the_first_list_after_the_stream_opens_then_only_what_events_name() -> None:
    src = Source()
    cache = SwarmCache(src)
    cache.read()  # before the stream: a list that events may already have outdated
    cache.opened()
    cache.read()
    assert src.lists == 2  # the list that counts is the one after the subscription
    src.lists = 0
    src.bump("n1")
    src.bump("s2")
    cache.on_event(event("node", "n1"))
    cache.on_event(event("service", "s2"))
    cache.on_event({"Type": "network", "Actor": {"ID": "x"}})  # not ours
    assert same(cache, src)
    assert src.lists == 0 and sorted(src.inspects) == ["n1", "s2"]
    src.inspects = []
    assert same(cache, src) and src.inspects == [] and src.lists == 0  # nothing changed


def test_creates_and_removes_arrive_as_events() -> None:
    src = Source()
    cache = opened_cache(src)
    src.s["s9"] = mk_service(9)
    del src.s["s0"]
    del src.n["n2"]
    for e in (
        event("service", "s9", "create"),
        event("service", "s0", "remove"),
        event("node", "n2", "remove"),
    ):
        cache.on_event(e)
    assert same(cache, src) and src.lists == 0


def test_a_write_is_read_again_without_its_event() -> None:
    src = Source()
    cache = opened_cache(src)
    src.bump("s1")
    cache.invalidate("service", "s1")
    assert same(cache, src) and src.inspects == ["s1"]


def test_a_gap_lists_again_once_the_stream_reopens() -> None:
    src = Source()
    cache = opened_cache(src)
    cache.gap("connection reset")
    src.bump("n0")  # changed while the stream was down: no event will ever say so
    assert same(cache, src) and src.lists == 1  # down: a full list per read
    assert same(cache, src) and src.lists == 2
    cache.opened()
    src.bump("s3")  # changed between the reconnect and the next read, event lost too
    assert same(cache, src) and src.lists == 3
    assert same(cache, src) and src.lists == 3  # and then events again
    assert cache.stats.gaps == 1
    assert cache.stats.reasons["gap"] == 1 and cache.stats.reasons["no event stream"] == 1


def test_an_event_during_a_list_is_read_at_the_next_read() -> None:
    """A list answers as of some moment during the call: an event arriving while it
    runs may or may not be in it, so its object is read again next time."""
    src = Source()
    cache = SwarmCache(src)
    cache.opened()

    def change() -> None:
        src.bump("s1")
        cache.on_event(event("service", "s1"))

    src.during_list = change
    cache.read()
    src.during_list = None
    src.bump("s1")  # after the list: only the event says so
    assert same(cache, src) and src.inspects == ["s1"] and src.lists == 1


def test_the_timer_lists_everything_again() -> None:
    src = Source()
    clock = Clock()
    cache = opened_cache(src, relist_s=600.0, clock=clock)
    src.bump("n0")  # a change whose event the engine dropped
    for t in range(50, 600, 50):  # the stream lives: other objects' events keep coming
        clock.t = float(t)
        src.bump("s0")
        cache.on_event(event("service", "s0"))
        cache.read()
    clock.t = 599.0
    cache.read()
    assert src.lists == 0
    clock.t = 600.0
    assert same(cache, src) and src.lists == 1 and cache.stats.reasons["timer"] == 1


def test_many_changes_list_instead_of_inspecting_each() -> None:
    src = Source(services=10)
    cache = opened_cache(src)
    for i in range(DIRTY_MIN + 1):
        src.s[f"new{i}"] = dataclasses.replace(mk_service(100 + i), id=f"new{i}")
        cache.on_event(event("service", f"new{i}", "create"))
    assert same(cache, src) and src.lists == 1 and not src.inspects


def test_a_failed_read_keeps_what_it_did_not_read() -> None:
    src = Source()
    cache = opened_cache(src)
    for obj in ("n0", "n1", "s0"):
        src.bump(obj)
        cache.on_event(event("node" if obj[0] == "n" else "service", obj))
    src.fail_inspect = "n1"
    with pytest.raises(SwarmUnavailable):
        cache.read()
    src.fail_inspect = None
    assert same(cache, src) and src.lists == 0


def test_a_failed_list_is_tried_again() -> None:
    src = Source()
    cache = SwarmCache(src)
    cache.opened()

    def boom() -> None:
        raise SwarmUnavailable("engine unreachable")

    src.during_list = boom
    with pytest.raises(SwarmUnavailable):
        cache.read()
    src.during_list = None
    assert same(cache, src) and src.lists == 2


class Stream:
    """Event streams to hand out one after the other: a list of events, then the end
    (``None``) or a cut (an exception)."""

    def __init__(
        self, rounds: list[tuple[list[dict[str, Any]], BaseException | None]], stop: threading.Event
    ) -> None:
        self.rounds = rounds
        self.stop = stop
        self.opens = 0

    def __call__(self, on_open: Callable[[], None]) -> Iterator[Mapping[str, Any]]:
        if not self.rounds:
            self.stop.set()
            return iter(())
        events, end = self.rounds.pop(0)

        def gen() -> Iterator[Mapping[str, Any]]:
            self.opens += 1
            on_open()
            yield from events
            if end is not None:
                raise end

        return gen()


def test_follow_marks_each_cut_as_a_gap_and_reconnects() -> None:
    src = Source()
    cache = SwarmCache(src)
    stop = threading.Event()
    stream = Stream(
        [
            ([event("node", "n0")], SwarmUnavailable("reset by peer")),
            ([event("service", "s1")], None),
            ([event("node", "n1")], None),
        ],
        stop,
    )
    seen: list[str] = []
    gaps: list[int] = []
    follow(
        stream,
        cache,
        stop,
        on_event=lambda e: seen.append(e["Actor"]["ID"]),
        on_gap=lambda: gaps.append(1),
        max_backoff_s=0.0,
    )
    assert seen == ["n0", "s1", "n1"] and stream.opens == 3
    assert len(gaps) == 3 and cache.stats.gaps == 3 and not cache.stream_up
    assert cache.stats.events == 3


def test_follow_stops_when_told() -> None:
    src = Source()
    cache = SwarmCache(src)
    stop = threading.Event()
    seen: list[str] = []

    def endless(on_open: Callable[[], None]) -> Iterator[Mapping[str, Any]]:
        on_open()
        while True:
            seen.append("e")
            if len(seen) == 5:
                stop.set()
            yield event("node", "n0")

    follow(endless, cache, stop)
    assert len(seen) == 5 and cache.stream_up


def test_a_new_term_lists_everything_and_a_follower_keeps_nothing() -> None:
    """Standing by (not the leader) the cache drops what it held and the events it is
    told of: a follower never reads, so they piled up for as long as it followed (one id
    per object ever changed), and a new term read from what an earlier term listed."""
    src = Source()
    cache = opened_cache(src)
    cache.forget("not the leader")
    assert cache.pending == 0
    for i in range(1000):  # a busy swarm while this daemon follows
        cache.on_event(event("service", f"gone{i}", "remove"))
    assert cache.pending == 0
    src.bump("n0")  # its event lost in the leader change
    assert same(cache, src) and src.lists == 1 and not src.inspects
    assert cache.stats.reasons["not the leader"] == 1
    cache.on_event(event("service", "s1"))  # a term's events are kept again
    assert cache.pending == 1


def test_a_follower_cycle_makes_the_next_term_list_everything(tmp_path: Path) -> None:
    leads = [True]

    class Swarm(Source):
        on_write: Any = None

        def is_leader(self) -> bool:
            return leads[0]

        def swarm_labels(self) -> dict[str, str]:
            return {}

        def tasks(self, filters: Any = None, *, states: Any = None,
                  read: Any = None) -> list[Any]:
            return []

    swarm = Swarm(nodes=0)  # no agent to ask
    cfg = Config(
        state_dir=str(tmp_path),
        sync=SyncConfig(watch_events=False),
        agents=AgentsConfig(timeout_s=0.5, identity="none"),
    )
    d = Daemon(cfg, swarm=swarm)  # type: ignore[arg-type]
    d.cache.opened()  # as the event thread does
    d.cycle()
    assert swarm.lists == 1
    leads[0] = False
    d.cycle()
    leads[0] = True
    swarm.bump("s2")  # changed while another manager led: no event here said so
    d.cycle()
    assert swarm.lists == 2 and d.cache.stats.reasons.get("not the leader") == 1


def test_an_event_naming_an_object_by_name_keeps_one_copy_under_its_id() -> None:
    """The engine's inspect takes a name or an ID prefix as well as the ID: an event
    whose Actor.ID is not the object's own ID (a broken or hostile peer) stored the
    object a second time under that text, so the cycle saw the service twice."""

    class ByName(Source):
        def _get(self, store: dict[str, Any], obj: str) -> Any:
            found = [
                o
                for o in store.values()
                if obj in (o.id, getattr(o, "name", None), getattr(o, "hostname", None))
            ]
            return super()._get(store, found[0].id if found else obj)

    src = ByName()
    cache = opened_cache(src)
    src.bump("s1")
    src.bump("n2")
    cache.on_event(event("service", "svc1"))  # the name, not the ID
    cache.on_event(event("node", "host2"))
    assert same(cache, src)
    nodes, services = cache.read()
    assert len(services) == 4 and len(nodes) == 3


def test_an_older_version_than_the_cached_one_never_replaces_it() -> None:
    """While the stream stays open the engine is the same store, whose Version.Index
    only grows: an older answer (a stale manager answered, a read racing a write) keeps
    what the cache has, in an inspect and in the timer's list. After a gap the list is
    taken as it is: the engine may have restarted from a backup."""
    src = Source()
    clock = Clock()
    cache = opened_cache(src, relist_s=600.0, clock=clock)
    src.bump("s1")
    src.bump("n1")
    cache.invalidate("service", "s1")
    cache.invalidate("node", "n1")
    assert same(cache, src)
    src.s["s1"] = mk_service(1, version=1)  # an answer older than the cached version 2
    src.n["n1"] = mk_node(1, version=1)
    cache.on_event(event("service", "s1"))
    nodes, services = cache.read()
    assert {s.id: s.version for s in services}["s1"] == 2
    clock.t = 600.0  # the timer's list: the same store, still older
    nodes, services = cache.read()
    assert src.lists == 1
    assert {s.id: s.version for s in services}["s1"] == 2
    assert {n.id: n.version for n in nodes}["n1"] == 2
    cache.gap("connection reset")
    cache.opened()
    assert same(cache, src)  # after a gap: as listed


@pytest.mark.parametrize(
    "bad",
    [
        {"Type": "service", "Actor": "s1"},  # was an AttributeError: the stream cut
        {"Type": "service", "Actor": ["s1"]},
        {"Type": "service", "Actor": {"ID": 5}},  # these were dropped: a change lost
        {"Type": "node", "Actor": {"Attributes": {}}},
        {"Type": "node", "Actor": {"ID": ""}},
        {"Type": ["node"], "Actor": {"ID": "n1"}},
        {"Action": "update", "Actor": {"ID": "n1"}},  # no Type: the filter asks for it
    ],
)
def test_an_event_that_names_no_object_lists_everything_at_the_next_read(
    bad: dict[str, Any],
) -> None:
    """The stream is asked for node and service events only: one whose object cannot
    be read said something changed without saying what, so the next read lists
    everything (the log names the event); it never cuts the stream."""
    src = Source()
    cache = opened_cache(src)
    src.bump("n1")
    src.bump("s1")
    cache.on_event(bad)
    assert same(cache, src) and src.lists == 1
    assert cache.stats.reasons == {"first read": 1, "malformed event": 1}
    cache.on_event({"Type": "network", "Actor": {"ID": "x"}})  # not ours: no list
    assert same(cache, src) and src.lists == 1


def test_a_write_no_event_follows_lists_every_read_until_events_come_again() -> None:
    """An engine can stop publishing the swarm's events while its stream stays open
    (moby's watch of the store ends with a leader change and is not restarted:
    moby/moby#36834, docker/for-linux#101): only the timer saw changes by others. A
    write of swarmgpu's that landed is always followed by its event; none for
    ``EVENT_WAIT_S`` means the engine is deaf, so every read lists until an event
    comes, and the one after that lists again (what changed in between)."""
    src = Source()
    clock = Clock()
    cache = opened_cache(src, clock=clock)
    src.bump("s1")
    cache.wrote("service", "s1")
    clock.t = EVENT_WAIT_S - 1
    assert same(cache, src) and src.lists == 0 and src.inspects == ["s1"]
    src.bump("n0")  # a change by someone else: the deaf engine says nothing
    clock.t = EVENT_WAIT_S + 1
    assert same(cache, src) and src.lists == 1
    assert same(cache, src) and src.lists == 2  # still deaf: a list a read
    assert cache.stats.reasons["no event for a write"] == 2
    cache.on_event(event("node", "n2"))  # events again
    assert same(cache, src) and src.lists == 3
    assert same(cache, src) and src.lists == 3  # and the cache is read again


def test_a_write_whose_event_came_before_the_write_returned_is_heard() -> None:
    src = Source()
    clock = Clock()
    cache = opened_cache(src, clock=clock)
    src.bump("s1")
    clock.t = 5.0
    cache.on_event(event("service", "s1"))  # the event thread was quicker
    clock.t = 6.0
    cache.wrote("service", "s1")
    clock.t = 6.0 + EVENT_WAIT_S + 1  # (and within SILENT_S of the event)
    assert same(cache, src) and src.lists == 0
    cache.wrote("service", "s1")  # a write nothing followed: no event since it
    clock.t += EVENT_WAIT_S + 1
    assert same(cache, src) and src.lists == 1


def test_a_write_before_the_stream_reopened_expects_no_event() -> None:
    """A write's event published while the stream was down (cut, or not yet reopened)
    is lost with the gap, which a list reads anyway: waiting for it took a quiet swarm
    after an engine restart, the very cure, for a deaf engine, a list every read."""
    src = Source()
    clock = Clock()
    cache = opened_cache(src, clock=clock)
    src.bump("s1")
    cache.wrote("service", "s1")  # its event is on its way when the stream is cut
    cache.gap("connection reset")
    src.bump("n0")
    cache.wrote("node", "n0")  # a cycle's write while the stream reconnects
    cache.opened()
    clock.t = EVENT_WAIT_S + 1  # a quiet swarm: no event since
    assert same(cache, src) and src.lists == 1  # the gap's list
    assert same(cache, src) and src.lists == 1
    assert "no event for a write" not in cache.stats.reasons
    cache.wrote("node", "n0")  # a write with the stream open is expected again
    clock.t += WRITE_SLACK_S + EVENT_WAIT_S
    assert same(cache, src) and src.lists == 2
    assert cache.stats.reasons["no event for a write"] == 1


def test_a_list_that_keeps_failing_is_said_as_one_failed_list() -> None:
    """Each read whose list failed wrapped the reason once more ("failed list (failed
    list (timer))"...), a new count under that text each time: a list failing every
    read while the stream stayed open (an engine timing out on a large swarm) grew the
    reason and the counts without end."""
    src = Source()
    clock = Clock()
    cache = opened_cache(src, relist_s=600.0, clock=clock)

    def boom() -> None:
        raise SwarmUnavailable("engine unreachable")

    src.during_list = boom
    clock.t = 600.0
    for _ in range(5):
        with pytest.raises(SwarmUnavailable):
            cache.read()
    src.during_list = None
    assert same(cache, src) and src.lists == 6
    assert cache.stats.reasons == {"first read": 1, "timer": 1, "failed list": 5}


@pytest.mark.parametrize(
    ("relist", "keep_newer", "key", "said"),
    [
        (Relist(Why.FIRST_READ), False, "first read", "first read"),
        (Relist(Why.NO_STREAM), False, "no event stream", "no event stream"),
        (Relist(Why.REOPENED), False, "stream reopened", "stream reopened"),
        (Relist(Why.GAP, "connection reset"), False, "gap", "gap: connection reset"),
        (Relist(Why.TIMER), True, "timer", "timer"),
        (
            Relist(Why.MANY_CHANGED, "17 services changed"),
            True,
            "many changed",
            "17 services changed",
        ),
        (Relist(Why.DEAF), False, "no event for a write", "no event for a write"),
        (Relist(Why.SILENT), True, "silent stream", "silent stream"),
        (Relist(Why.STALLED), False, "no event for a change", "no event for a change"),
        (Relist(Why.EVENTS_AGAIN), False, "events again", "events again"),
        (Relist(Why.MALFORMED), False, "malformed event", "malformed event"),
        (Relist(Why.UNKEYED), False, "answered without an ID", "answered without an ID"),
        (Relist(Why.FORGOT, "not the leader"), False, "not the leader", "not the leader"),
        (Relist(Why.GAP, "x", failed=True), False, "failed list", "failed list (gap: x)"),
        (Relist(Why.TIMER, failed=True), True, "failed list", "failed list (timer)"),
    ],
)
def test_each_reason_says_whether_its_list_keeps_a_newer_cached_version(
    relist: Relist, keep_newer: bool, key: str, said: str
) -> None:
    """Only a list from the store the open stream watched all along (the timer's, many
    changes', a silent stream's) keeps a cached object whose version is newer than the
    list's; after a gap or at a new term the engine may have restarted from a backup."""
    assert relist.keep_newer is keep_newer
    assert relist.key == key and str(relist) == said
    assert {w for w in Why if w.keep_newer} == {Why.TIMER, Why.MANY_CHANGED, Why.SILENT}


def test_a_failed_timer_list_tried_again_keeps_a_newer_cached_version() -> None:
    """The timer's list that failed is tried at the next read, from the same store the
    open stream watched all along (a gap in between lists as a gap): an older answer
    there is as stale as in the timer's own list, and replaced the newer cached one."""
    src = Source()
    clock = Clock()
    cache = opened_cache(src, relist_s=600.0, clock=clock)
    src.bump("s1")
    cache.invalidate("service", "s1")
    assert same(cache, src)
    src.s["s1"] = mk_service(1, version=1)  # a stale manager's answer, from now on

    def boom() -> None:
        raise SwarmUnavailable("engine unreachable")

    src.during_list = boom
    clock.t = 600.0
    with pytest.raises(SwarmUnavailable):
        cache.read()
    src.during_list = None
    _, services = cache.read()
    assert src.lists == 2 and cache.stats.reasons["failed list"] == 1
    assert {s.id: s.version for s in services}["s1"] == 2


# --- a stream that stalls without a cut ---------------------------------------------


@pytest.mark.parametrize(
    ("now", "last_event", "listed", "unseen", "verdict"),
    [
        (59.0, None, 0.0, None, None),  # quiet for less than SILENT_S: trusted
        (60.0, None, 0.0, None, Why.SILENT),  # no event, no list for SILENT_S: list
        (100.0, 50.0, 0.0, None, None),  # an event 50 s ago: the stream lives
        (110.0, 50.0, 0.0, None, Why.SILENT),
        (100.0, None, 45.0, None, None),  # a list 55 s ago (the timer's, a gap's)
        (100.0, None, None, None, None),  # never listed: the first read lists anyway
        # a list found changes no event told: an event since says the stream lives...
        (200.0, 171.0, 170.0, 170.0, None),
        # ...none in EVENT_WAIT_S says it stalled
        (200.0, 100.0, 170.0, 170.0, Why.STALLED),
        (199.0, 100.0, 170.0, 170.0, None),
        (200.0, None, 170.0, 170.0, Why.STALLED),
    ],
)
def test_the_silence_verdict(
    now: float,
    last_event: float | None,
    listed: float | None,
    unseen: float | None,
    verdict: Why | None,
) -> None:
    assert SILENT_S == 60.0 and EVENT_WAIT_S == 30.0
    assert watch_verdict(now, last_event, listed, unseen) is verdict


def test_changes_no_event_named() -> None:
    have = {"s1": mk_service(1, 2), "s2": mk_service(2), "s3": mk_service(3)}
    listed = [mk_service(1, 1), mk_service(2, 2), mk_service(4)]  # s1 stale, s3 gone
    assert unseen_changes(have, listed, set()) == ["s2", "s3", "s4"]
    assert unseen_changes(have, listed, {"s2", "s4"}) == ["s3"]
    assert unseen_changes(have, list(have.values()), set()) == []


def test_a_stalled_stream_is_noticed_within_a_minute_and_a_half() -> None:
    """The stream stays open and says nothing (a dead connection, a hung engine or
    proxy): changes by others were read only at the 10-minute list (or when the stream,
    idle for 600 s, was reopened). A minute with no event and no list lists everything,
    comparing: a change no event told of is read there, and when no event comes in
    ``EVENT_WAIT_S`` after it the stream is taken for stalled: every read lists until
    an event comes, and the stream is cut then, to be reopened (it was left to its own
    600 s idle timeout, every cycle listing meanwhile)."""
    src = Source()
    clock = Clock()
    cuts: list[float] = []
    cache = SwarmCache(src, relist_s=600.0, clock=clock)
    cache.cut_with(lambda: cuts.append(clock.t))
    cache.opened()
    cache.read()
    src.lists = 0
    src.bump("s2")  # a user's update; the stalled stream says nothing
    clock.t = 30.0
    assert not same(cache, src) and src.lists == 0  # trusted for a while
    clock.t = 60.0
    assert same(cache, src) and src.lists == 1
    assert cache.stats.reasons["silent stream"] == 1
    clock.t = 89.0
    assert same(cache, src) and src.lists == 1  # no verdict yet
    assert cuts == []
    clock.t = 90.0
    src.bump("n1")
    assert same(cache, src) and src.lists == 2
    assert cuts == [90.0]  # reopened when the stall is noticed
    assert same(cache, src) and src.lists == 3  # stalled: a list a read
    assert cuts == [90.0]
    assert cache.stats.reasons["no event for a change"] == 2
    cache.on_event(event("node", "n0"))  # events again: read once more, then trusted
    assert same(cache, src) and src.lists == 4
    assert same(cache, src) and src.lists == 4


def test_a_quiet_stream_costs_a_list_a_minute_and_no_verdict() -> None:
    """A healthy stream on a quiet swarm: the minute's list finds nothing changed
    unseen, so it is never taken for stalled."""
    src = Source()
    clock = Clock()
    cache = opened_cache(src, relist_s=600.0, clock=clock)
    for minute in range(1, 6):
        clock.t = 60.0 * minute
        assert same(cache, src) and src.lists == minute
    assert "no event for a change" not in cache.stats.reasons


def test_a_change_whose_event_is_on_its_way_is_no_stall() -> None:
    """The minute's list may see a change whose event is still in flight: the event
    comes, the stream lives."""
    src = Source()
    clock = Clock()
    cache = opened_cache(src, relist_s=600.0, clock=clock)
    clock.t = 60.0
    src.bump("s1")
    assert same(cache, src) and src.lists == 1
    clock.t = 60.5
    cache.on_event(event("service", "s1"))
    clock.t = 200.0
    assert same(cache, src)
    assert "no event for a change" not in cache.stats.reasons


def test_a_reopened_stream_is_not_taken_for_stalled() -> None:
    src = Source()
    clock = Clock()
    cache = opened_cache(src, relist_s=600.0, clock=clock)
    src.bump("s1")
    clock.t = 60.0
    assert same(cache, src)
    cache.gap("no event for 600 s")  # the stream's idle timeout reopened it
    cache.opened()
    clock.t = 95.0
    assert same(cache, src) and src.lists == 2  # the reopen's list, then trusted
    assert same(cache, src) and src.lists == 2
    assert "no event for a change" not in cache.stats.reasons
