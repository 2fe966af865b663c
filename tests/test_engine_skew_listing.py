"""``swarm.engineskew.SkewGuard``: once the node list's minute is out, the writes that run
in parallel (up to eight, manager.engine.writes) share one listing, its failure too, and
no lock is held across it (a node list read meanwhile is taken at once). Threads meet
through events, never a sleep or a time limit asserted: the fake listing answers only
once every writer has found the verdict stale."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
from support.shared_ask import HANG_S, Stale, in_parallel

from swarmgpu.swarm.engineskew import EngineBehind, SkewGuard
from swarmgpu.swarm.errors import SwarmError
from swarmgpu.swarm.swarmnode import SwarmNode

WRITERS = 8


def node(host: str, engine: str) -> SwarmNode:
    return SwarmNode(id=host, hostname=host, addr="", role="manager", state="ready",
                     availability="active", labels={}, engine_labels={}, version=1,
                     generic_resources={}, discrete_resources={}, engine_version=engine)


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


def test_a_version_asked_while_another_writer_lists_is_the_verdicts_too() -> None:
    """Writer A lists the nodes (its version still fresh); writer B, past the version's
    minute, asks the engine, which answers only after A's listing took its verdict: the
    engine now runs 27.3.1, not the 26.1.5 the client connected to. B's write is refused
    (restart swarmgpu), as the writes after it. Before, B waited on A's listing and wrote
    with A's verdict, the version it had just read left unsaid until the next node list."""
    now = [10.0]
    asked, answer = threading.Event(), threading.Event()

    def running() -> str:
        asked.set()
        answer.wait(HANG_S)
        return "27.3.1"

    guard = SkewGuard("unix:///run/docker.sock", "26.1.5", clock=lambda: now[0],
                      running=running)
    now[0] = 30.0  # (A: the node list never read, the version 30 s old)
    gate = threading.Event()
    lister = Lister(gate, [node("m1", "26.1.5")])
    got: dict[str, BaseException | None] = {}

    def write(name: str) -> None:
        try:
            guard.check(lister)
            got[name] = None
        except BaseException as exc:  # (each writer's outcome is asserted)
            got[name] = exc

    a = threading.Thread(target=write, args=("a",))
    a.start()
    assert lister.started.wait(HANG_S)
    now[0] = 75.0  # (B: the version's minute out, A's listing in flight)
    b = threading.Thread(target=write, args=("b",))
    b.start()
    assert asked.wait(HANG_S)
    gate.set()
    a.join(HANG_S)
    answer.set()
    b.join(HANG_S)
    assert not a.is_alive() and not b.is_alive()
    assert got["a"] is None  # (its verdict was taken before the answer came)
    assert isinstance(got["b"], EngineBehind) and "restart swarmgpu" in str(got["b"])
    with pytest.raises(EngineBehind, match="restart swarmgpu"):
        guard.check(lister)
    assert lister.calls == 1


def test_an_interrupt_after_the_version_answer_ends_the_listing_it_had_taken() -> None:
    """The first writer past both minutes takes the listing, asks the version, and is
    interrupted (Ctrl-C, the daemon's stop) as it notes the answer: the next write lists
    the nodes itself. Before, the interrupt came outside the guard that ends a listing, and
    every later write waited for ever on a listing no one ran."""
    calls, raise_at = [0], [3]  # (the client's, the check's, then the answer's)

    def clock() -> float:
        calls[0] += 1
        if calls[0] == raise_at[0]:
            raise KeyboardInterrupt
        return 120.0 if calls[0] > 1 else 0.0

    guard = SkewGuard("unix:///run/docker.sock", "26.1.5", clock=clock,
                      running=lambda: "26.1.5")
    lister = Lister(threading.Event(), [node("m1", "26.1.5")])
    lister.gate.set()
    with pytest.raises(KeyboardInterrupt):
        guard.check(lister)
    assert lister.calls == 0
    after = threading.Thread(target=guard.check, args=(lister,), daemon=True)
    after.start()
    after.join(HANG_S)
    assert not after.is_alive(), "a write waits on the interrupted writer's listing"
    assert lister.calls == 1
