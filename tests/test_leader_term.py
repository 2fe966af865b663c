"""The leader's term (``manager.cycle.term``): a write asks again whether this engine
still leads once the last answer is older than ``check_s``; after a "no" nothing more is
written until a cycle finds it the leader again. On the real 3-manager swarm:
tests/test_ha_swarm.py::test_a_deposed_leaders_daemon_writes_nothing."""

from __future__ import annotations

import threading

import pytest
from support.shared_ask import HANG_S, Stale, in_parallel

from swarmgpu.manager.cycle.term import LeaderTerm
from swarmgpu.swarm.client import SwarmUnavailable
from swarmgpu.swarm.errors import BudgetCut


class Engine:
    """Answers "leader?" as told, counting the questions."""

    def __init__(self) -> None:
        self.leader = True
        self.asked = 0
        self.down = False

    def is_leader(self) -> bool:
        self.asked += 1
        if self.down:
            raise SwarmUnavailable("engine unreachable")
        return self.leader


def term_at(engine: Engine, now: list[float]) -> LeaderTerm:
    return LeaderTerm(engine.is_leader, check_s=2.0, clock=lambda: now[0])


def test_a_recent_answer_is_enough_an_old_one_is_asked_again() -> None:
    engine, now = Engine(), [100.0]
    term = term_at(engine, now)
    term.start()
    now[0] += 1.9
    assert term.holds() and engine.asked == 0
    now[0] += 0.2  # 2.1 s after the cycle's answer
    assert term.holds() and engine.asked == 1
    now[0] += 1.0  # the new answer counts from when it came
    assert term.holds() and engine.asked == 1


def test_after_a_no_nothing_is_written_until_a_cycle_finds_it_leader() -> None:
    engine, now = Engine(), [0.0]
    term = term_at(engine, now)
    term.start()
    engine.leader = False
    now[0] += 5
    assert not term.holds() and term.lost
    engine.leader = True  # elected again: still nothing until the next cycle says so
    now[0] += 5
    assert not term.holds() and not term.holds()
    assert engine.asked == 1 and term.refused == 3
    term.start()
    assert term.holds() and not term.lost


def test_a_cycle_that_found_a_follower_ends_the_term() -> None:
    engine, now = Engine(), [0.0]
    term = term_at(engine, now)
    term.end()
    assert not term.holds() and engine.asked == 0


def test_before_any_cycle_a_write_asks() -> None:
    engine, now = Engine(), [0.0]
    term = term_at(engine, now)
    assert not term.lost
    assert term.holds() and engine.asked == 1
    assert term.holds() and engine.asked == 1


def test_an_engine_that_cannot_answer_fails_that_write_only() -> None:
    engine, now = Engine(), [0.0]
    term = term_at(engine, now)
    term.start()
    now[0] += 3
    engine.down = True
    with pytest.raises(SwarmUnavailable):
        term.holds()
    assert not term.lost
    engine.down = False
    assert term.holds() and engine.asked == 2


WRITERS = 8  # manager.engine.writes.WRITE_PARALLEL: label writes in flight at once


def test_writes_waiting_on_a_failed_ask_share_its_failure_not_ask_in_turn() -> None:
    """The parallel writes that find the last "leader" answer old together share one
    ask, its failure too, and no lock is held across it. Before, the lock was held
    across the engine's answer and each waiting write asked again in turn once it
    failed: an engine that hangs cost every write its whole deadline, one after the
    other (eight writes, eight deadlines, while the others' work waited)."""
    clock = Stale(WRITERS)
    asked: list[int] = []

    def is_leader() -> bool:
        asked.append(1)
        if len(asked) == 1:  # (the first ask answers once every write has looked)
            clock.all_in.wait(HANG_S)
        raise SwarmUnavailable("engine unreachable")

    term = LeaderTerm(is_leader, check_s=2.0, clock=clock)
    term.start()  # (at 0)
    clock.now = 10.0
    got = in_parallel(term.holds, WRITERS)
    assert len(asked) == 1
    assert all(isinstance(e, SwarmUnavailable) for e in got), got
    assert not term.lost  # (no answer: the next write asks again)
    with pytest.raises(SwarmUnavailable):
        term.holds()
    assert len(asked) == 2


def test_a_write_that_waited_on_an_ask_its_askers_budget_cut_asks_itself() -> None:
    """An ask cut at its asker's cycle budget (``BudgetCut``) is no answer for a write
    that waited on it: that one asks in its own context (an undo is let through past the
    budget: ``engine.stop.undoing``)."""
    clock = Stale(2)
    asked: list[int] = []

    def is_leader() -> bool:
        asked.append(1)
        if len(asked) == 1:  # (the first ask is cut once both writes have looked)
            clock.all_in.wait(HANG_S)
            raise BudgetCut("the cycle's engine budget has passed")
        return True

    term = LeaderTerm(is_leader, check_s=2.0, clock=clock)
    term.start()
    clock.now = 10.0
    got = in_parallel(term.holds, 2)
    assert len(asked) == 2
    assert sorted(type(g).__name__ for g in got) == ["BudgetCut", "bool"], got
    assert True in got and term.holds()  # (its answer stands for the next write)


class Held:
    """An engine whose first "leader?" answer (``first``) waits for ``release``, the
    later ones answering ``then`` at once."""

    def __init__(self, first: bool, then: bool) -> None:
        self.first, self.then, self.asked = first, then, 0
        self.asking, self.release = threading.Event(), threading.Event()

    def is_leader(self) -> bool:
        self.asked += 1
        if self.asked == 1:
            self.asking.set()
            self.release.wait(HANG_S)
            return self.first
        return self.then


def _holds_in(term: LeaderTerm, got: list[object], i: int) -> threading.Thread:
    def write() -> None:
        try:
            got[i] = term.holds()
        except BaseException as exc:  # (each write's outcome is asserted)
            got[i] = exc

    t = threading.Thread(target=write)
    t.start()
    return t


def test_a_yes_asked_before_the_term_ended_lets_no_write_through() -> None:
    """The term fence: a cycle ends the term (``end``) while a write's "leader?" ask is
    in flight; its "yes" was asked before the end, so neither that write nor one that
    waited on its ask goes out. Before, both went out: asked under the lock, ``end``
    waited for the answer; asked outside it, the answer from before ``end`` let them."""
    clock = Stale(2)
    engine = Held(first=True, then=True)
    term = LeaderTerm(engine.is_leader, check_s=2.0, clock=clock)
    term.start()  # (at 0)
    clock.now = 10.0
    got: list[object] = [None, None]
    asker = _holds_in(term, got, 0)
    assert engine.asking.wait(HANG_S)
    waiter = _holds_in(term, got, 1)
    assert clock.all_in.wait(HANG_S)  # (both found the answer old: one asks, one waits)
    term.end()  # (the waiter took the ask under the lock: it is on it by now)
    engine.release.set()
    asker.join(HANG_S)
    waiter.join(HANG_S)
    assert got == [False, False] and term.lost and engine.asked == 1


def test_a_write_of_a_new_term_neither_waits_on_nor_takes_an_ask_of_the_last() -> None:
    """A term ended and started again while an ask of the last one is in flight: a write
    of the new term that finds its answer old asks for itself (the engine says "no" now),
    and the last term's "yes", come late, lets no write through. Before, the new write
    waited on the old ask and both writes went out on its "yes"."""
    now = [0.0]
    engine = Held(first=True, then=False)
    term = LeaderTerm(engine.is_leader, check_s=2.0, clock=lambda: now[0])
    term.start()
    now[0] = 10.0
    got: list[object] = [None, None]
    old = _holds_in(term, got, 0)
    assert engine.asking.wait(HANG_S)
    term.end()
    term.start()  # (at 10: a new cycle found this engine the leader)
    now[0] = 13.0  # (that answer old too)
    new = _holds_in(term, got, 1)
    new.join(HANG_S)  # (a guard only: it does not wait on the old ask)
    engine.release.set()
    old.join(HANG_S)
    assert got == [False, False] and term.lost and engine.asked == 2


def test_an_interrupted_ask_leaves_no_write_waiting_and_the_next_asks_again() -> None:
    """The asker interrupted (``KeyboardInterrupt``, a ``BaseException``) mid-ask: the
    write that waited on it ends too (none waits for ever on an ask no one will end),
    the term is not ended, and the next write asks the engine again."""
    clock = Stale(2)
    calls: list[int] = []

    def is_leader() -> bool:
        calls.append(1)
        if len(calls) == 1:
            clock.all_in.wait(HANG_S)  # (once the second write is on this ask)
            raise KeyboardInterrupt
        return True

    term = LeaderTerm(is_leader, check_s=2.0, clock=clock)
    term.start()
    clock.now = 10.0
    got: list[object] = [None, None]
    threads = [_holds_in(term, got, i) for i in range(2)]
    for t in threads:
        t.join(HANG_S)
    assert not any(t.is_alive() for t in threads) and len(calls) == 1
    assert KeyboardInterrupt in [type(g) for g in got] and None not in got, got
    assert not term.lost and term.holds() and len(calls) == 2
