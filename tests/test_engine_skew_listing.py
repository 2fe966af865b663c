"""``swarm.engineskew.SkewGuard``: once the node list's minute is out, the writes that run
in parallel (up to eight, manager.engine.writes) share one listing, its failure too, and
no lock is held across it (a node list read meanwhile is taken at once). Threads meet
through events, never a sleep or a time limit asserted: the fake listing answers only
once every writer has found the verdict stale."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import pytest

from swarmgpu.swarm.engineskew import EngineBehind, SkewGuard
from swarmgpu.swarm.errors import SwarmError
from swarmgpu.swarm.swarmnode import SwarmNode

WRITERS = 8
HANG_S = 30.0  # (a guard against a hang only: a fault fails the asserts, not this)


def node(host: str, engine: str) -> SwarmNode:
    return SwarmNode(id=host, hostname=host, addr="", role="manager", state="ready",
                     availability="active", labels={}, engine_labels={}, version=1,
                     generic_resources={}, discrete_resources={}, engine_version=engine)


class Stale:
    """A clock past the verdict's minute that counts the writers' reads of it: each check
    reads it once, so ``all_in`` is set once every writer has looked."""

    def __init__(self, writers: int) -> None:
        self.now, self.left = 0.0, writers
        self.all_in = threading.Event()
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            if self.now > 0:
                self.left -= 1
                if self.left <= 0:
                    self.all_in.set()
            return self.now


class Lister:
    """The client's node list, counted: it answers (or fails) once ``gate`` is set."""

    def __init__(self, gate: threading.Event, nodes: Sequence[SwarmNode],
                 fail: Exception | None = None) -> None:
        self.gate, self.nodes, self.fail = gate, nodes, fail
        self.calls = 0
        self.started = threading.Event()
        self._lock = threading.Lock()

    def __call__(self) -> Sequence[SwarmNode]:
        with self._lock:
            self.calls += 1
        self.started.set()
        self.gate.wait(HANG_S)
        if self.fail is not None:
            raise self.fail
        return self.nodes


def in_parallel(check: Callable[[], None], n: int) -> list[BaseException | None]:
    """``check()`` in ``n`` threads at once; what each raised (None: returned)."""
    got: list[BaseException | None] = [None] * n

    def one(i: int) -> None:
        try:
            check()
        except BaseException as exc:  # (each writer's outcome is asserted)
            got[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_S)
    return got


def guard_past_its_minute(clock: Stale) -> SkewGuard:
    guard = SkewGuard("unix:///run/docker.sock", "26.1.5", clock=clock)
    guard.seen([node("m1", "26.1.5")])  # (at 0: same release, writes go)
    clock.now = 60.0
    return guard


def test_parallel_writes_past_the_minute_share_one_node_listing() -> None:
    clock = Stale(WRITERS)
    guard = guard_past_its_minute(clock)
    lister = Lister(clock.all_in, [node("m1", "26.1.5"), node("m2", "27.3.1")])
    got = in_parallel(lambda: guard.check(lister), WRITERS)
    assert lister.calls == 1
    assert all(isinstance(e, EngineBehind) for e in got), got  # each told the verdict


def test_a_failed_listing_is_shared_and_the_next_write_lists_again() -> None:
    clock = Stale(WRITERS)
    guard = guard_past_its_minute(clock)
    lister = Lister(clock.all_in, [], fail=SwarmError("engine unreachable"))
    got = in_parallel(lambda: guard.check(lister), WRITERS)
    assert lister.calls == 1
    assert all(isinstance(e, SwarmError) and "unreachable" in str(e) for e in got), got
    lister.fail, lister.nodes = None, [node("m1", "26.1.5")]
    guard.check(lister)  # (no verdict was taken: listed again, and it goes)
    assert lister.calls == 2


def test_a_node_list_read_while_one_is_listed_is_not_held_by_it() -> None:
    """The cycle's own node list (``seen``) and a write within the minute go on while a
    listing hangs: no lock is held across it."""
    clock = Stale(1)
    guard = guard_past_its_minute(clock)
    gate = threading.Event()
    lister = Lister(gate, [node("m1", "26.1.5")])
    writer = threading.Thread(target=guard.check, args=(lister,))
    writer.start()
    assert lister.started.wait(HANG_S)
    done = threading.Event()

    def cycle_reads() -> None:
        guard.seen([node("m1", "26.1.5"), node("m2", "27.3.1")])
        done.set()

    threading.Thread(target=cycle_reads).start()
    try:
        assert done.wait(HANG_S)
        with pytest.raises(EngineBehind):  # (fresh now: the cycle's list is the verdict)
            guard.check(lister)
    finally:
        gate.set()
        writer.join(HANG_S)
    assert lister.calls == 1


def test_a_failed_version_ask_releases_the_writers_waiting_on_its_listing() -> None:
    """The first writer past both minutes asks the version, then lists; where the ask
    fails the writers waiting on its listing get that failure, not a wait for ever."""
    import threading as _threading

    from swarmgpu.swarm.engineskew import SkewGuard

    now = [0.0]
    entered, release = _threading.Event(), _threading.Event()

    def running() -> str:
        entered.set()
        release.wait(5)
        raise ConnectionError("engine gone")

    guard = SkewGuard("unix:///run/docker.sock", "28.2.2", clock=lambda: now[0],
                      running=running)
    now[0] = 120.0
    errors: list[BaseException] = []

    def write() -> None:
        try:
            guard.check(lambda: [])
        except BaseException as exc:  # (the test reads what each got)
            errors.append(exc)

    first = _threading.Thread(target=write)
    first.start()
    assert entered.wait(5)
    second = _threading.Thread(target=write)
    second.start()
    release.set()
    first.join(5)
    second.join(5)
    assert not first.is_alive() and not second.is_alive()
    assert len(errors) == 2 and all(isinstance(e, ConnectionError) for e in errors)
