"""The daemon's stop request as its writes and its reads of the nodes see it: no write,
and no agent read or metrics scrape, starts once it is asked.

A step can be long in writes: the first label sync of a thousand nodes is a thousand
read-modify-writes. Finishing it on SIGTERM ran past systemd's TimeoutStopSec, and the
daemon was SIGKILLed mid-step. So the write gate (``actuator.Writes``, which every
engine write passes) asks ``StopRequest.check`` before each write: once the stop is
asked, that write and every later one of the step raise ``Stopped`` before anything
goes to the engine, while the writes already in flight finish (each is atomic).
``write_each`` counts its items that never started. The writes left are not lost: the
next leader, or this daemon when it starts again, plans them afresh from what Swarm
stores, as after any cycle cut short.

Reads are long too: with the agents down, a thousand nodes' facts are 63 rounds of a
3 s deadline, 190 s, in the cycle's snapshot and in the facts watch. The facts fetch
(``nodes.agent_client.fetch_all``) starts no read once the stop is asked: those in
flight finish or reach their deadline, the rest are counted (``reads_left``) and the
fetch raises ``Stopped``, so no step plans from facts half read. The metrics scrape
(``rebalance.scrape.scrape_all``, the cycle's metrics step) is one read per node too,
``rebalance.scrape_timeout_s`` each, and ends so: its ``Stopped`` ends the cycle before
the rebalancer or the map takes a node not read for one whose metrics are unknown.
Both count into ``reads_left``; each ``Stopped`` carries its own fetch's count
(``reads``), which its log line says: the facts watch runs beside the cycle, on the
scheduler's other thread, so the total's change over one would count the other's too.

A write that undoes one its own step just made (``undoing``: the over-share restart's
reopened gate) is let through once the stop is asked, as past the cycle's budget: the
step cut between the two would leave its first write standing, a closed gate keeping
its service down until a daemon starts again on that manager.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from swarmgpu.swarm.answerjson import node_reads_passed, outside_budget

T = TypeVar("T")
R = TypeVar("R")


class Stopped(Exception):
    """A write, or a fetch's reads, not made because the daemon is stopping. Not a
    ``SwarmError``: no caller takes it for a failed write and goes on to the next one;
    it ends the step (the cycle, when the snapshot's reads were cut). ``what`` names
    the kind of operation cut, ``reads`` how many of a fetch's reads it left."""

    def __init__(self, request: StopRequest, what: str = "write", reads: int = 0) -> None:
        super().__init__(f"the daemon is stopping: no further {what} is made")
        self.request = request
        self.what = what
        self.reads = reads


class BudgetEnded(Stopped):
    """A write or read not made: its cycle's engine budget has passed (manager.cycle.
    budget). A ``Stopped``: every reader that takes one object's failure for its own lets
    it through, so it ends the step and the cycle, said in one line, and no object is
    taken for failed, unread or unreachable for it."""

    def __init__(self, request: StopRequest, what: str = "write") -> None:
        super().__init__(request, what)
        self.args = (f"the cycle's engine budget has passed: no further {what} is made",)


class TermEnded(Stopped):
    """A write not made: this daemon's leader term ended in its cycle (a write found
    another manager elected: ``manager.cycle.term``). A ``Stopped``: the step ends there
    and the writes not started are left to the new leader's daemon, none taken for a
    failed one (each read its node, then was refused: ``NotLeader``, a failed write);
    the cycle says it once (``Daemon._deposed``)."""

    def __init__(self) -> None:
        super().__init__(StopRequest())
        self.args = ("this daemon no longer leads the swarm: no further write is made",)


def check_term(lost: bool) -> None:
    """Before a write: ``TermEnded`` once the term is ``lost``, but for one that undoes
    its step's own (``undoing``): that one asks, is refused (``NotLeader``) and its
    writer says what it left undone (the over-share restart's gate left shut)."""
    if lost and not _UNDOING.get():
        raise TermEnded()


def read_cut() -> BudgetEnded:
    """What a reader that takes one object's failure for its own raises on a read cut at
    its cycle's budget (``swarm.client.BudgetCut``, raised from it) in its stead."""
    return BudgetEnded(StopRequest(), "read")  # (its own request: it leaves no write)


# Whether this thread's writes undo one of its own step's (``undoing``).
_UNDOING: contextvars.ContextVar[bool] = contextvars.ContextVar("swarmgpu_undoing",
                                                                default=False)


@contextlib.contextmanager
def undoing() -> Iterator[None]:
    """Within: this thread's writes undo a write of its own step (the over-share restart's
    reopened gate), made once the stop is asked and past the cycle's budget too
    (``answerjson.outside_budget``, entered here as well)."""
    token = _UNDOING.set(True)
    try:
        with outside_budget():
            yield
    finally:
        _UNDOING.reset(token)


class StopRequest(threading.Event):
    """Set once (SIGTERM, SIGINT); ``left`` counts the writes it kept from starting,
    ``reads_left`` the reads of nodes (agents' facts, metrics pages)."""

    def __init__(self) -> None:
        super().__init__()
        self._count = threading.Lock()
        self.left = 0
        self.reads_left = 0

    def check(self) -> None:
        """Before a write: ``Stopped`` once the stop is asked (that write is left), but
        for one that undoes its step's own (``undoing``)."""
        if self.is_set() and not _UNDOING.get():
            self.leave(1)
            raise Stopped(self)

    def leave(self, n: int) -> None:
        """``n`` more writes left undone (thread-safe: writes run in parallel)."""
        with self._count:
            self.left += n

    def leave_reads(self, n: int) -> None:
        """``n`` more node reads not started (one fetch counts its own, once)."""
        with self._count:
            self.reads_left += n


class NotRead(enum.Enum):
    """An item's read the cycle's budget cut (``read_some``)."""

    LATE = "late"  # in flight when the budget passed: no answer in time
    UNSTARTED = "unstarted"  # the budget had passed before its turn


def read_each(items: Sequence[T], read: Callable[[T], R], parallel: int,
              stop: StopRequest | None, what: str) -> list[R]:
    """``read(item)`` for every item, ``parallel`` at once, in the items' order: the
    nodes' reads of a cycle (agents' facts, metrics pages). Once ``stop`` is asked no
    further read starts; those in flight end by their own deadline, then ``Stopped`` is
    raised with the reads not made counted (``leave_reads``, and its own ``reads``).
    Within a cycle's budget each read runs in the caller's context, so its deadline is
    cut to what is left of it (``answerjson.read_deadline``); once it has passed no
    further read starts, and ``BudgetEnded`` is raised (``read_cut``: no node's fault,
    none counted as left for a stop), as by a read it cut."""
    got = _read_all(items, read, parallel, stop, what, keep_cut=False)
    done = [r for r in got if not isinstance(r, NotRead)]
    if len(done) < len(got):
        raise read_cut() from node_reads_passed(what)
    return done


def read_some(items: Sequence[T], read: Callable[[T], R], parallel: int,
              stop: StopRequest | None, what: str) -> list[R | NotRead]:
    """``read_each``'s reads, but each one its budget cut is a ``NotRead`` in its place,
    not ``BudgetEnded`` for all: the facts watch compares what it did read (a rack of
    agents down timed out every watch, and threw away the answers it had)."""
    return _read_all(items, read, parallel, stop, what, keep_cut=True)


def _read_all(items: Sequence[T], read: Callable[[T], R], parallel: int,
              stop: StopRequest | None, what: str, *, keep_cut: bool) -> list[R | NotRead]:
    """``read_each``'s and ``read_some``'s reads; ``keep_cut``: a read cut in flight is
    ``NotRead.LATE``, else its ``BudgetEnded`` is raised."""
    if not items:
        return []
    context = contextvars.copy_context()  # (pool threads start with an empty one)

    def one(item: T) -> tuple[R] | NotRead:
        if stop is not None and stop.is_set():
            return NotRead.UNSTARTED  # not started: the queue drains at once
        try:
            return context.copy().run(_within_budget, read, item, what)
        except BudgetEnded:
            if not keep_cut:
                raise
            return NotRead.LATE

    with ThreadPoolExecutor(max_workers=min(parallel, len(items))) as pool:
        got = list(pool.map(one, items))
    left = got.count(NotRead.UNSTARTED)
    if stop is not None and stop.is_set() and left:
        stop.leave_reads(left)
        raise Stopped(stop, what, left)
    return [r if isinstance(r, NotRead) else r[0] for r in got]


def _within_budget(read: Callable[[T], R], item: T, what: str) -> tuple[R] | NotRead:
    """``read(item)``, in the context of its cycle; ``NotRead.UNSTARTED`` once the
    cycle's budget has passed."""
    if node_reads_passed(what) is not None:
        return NotRead.UNSTARTED
    return (read(item),)
