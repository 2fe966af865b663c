"""The leader's term: whether this daemon may still write, asked again during a cycle.

Every cycle starts by asking the engine whether it is the Swarm leader; only the
leader's daemon writes. A cycle's writes can take minutes (a first cycle at a thousand
nodes writes thousands of objects), and raft may elect another manager meanwhile, whose
daemon then plans from its own snapshot while this one still writes from an older one.
Read-modify-write with versions keeps either from overwriting the other's labels, but
not from acting on decisions made for a cluster it no longer leads. So each write asks
again once the last "yes" is older than ``check_s`` (below Swarm's election timeout:
about 10 s by default, 3 s at the test swarm's election tick), and once the answer is
no, every write of the cycle is refused without asking, until a cycle finds this engine
the leader again (``SwarmClient.may_write``: the write raises ``NotLeader``); the
daemon's write gate ends the step before its next write, as a stop does
(``engine.stop.TermEnded``: none left is read, nor said failed).

The writes that find the answer old together (label writes run eight at once:
``engine.writes``) share one ask, its failure too: the first asks, with no lock held
across it, and the others wait for its answer (a cut at the asker's cycle budget is no
answer for them: each asks in its own context, an undo's let past the budget). An answer
asked before a ``start`` or ``end`` lets no write through, nor is that ask joined: the
term as it is now decides (the fence: no write after ``end`` on a "yes" asked before it,
as when ``end`` waited on the lock held across the ask). Asked
under the lock, each waiting write asked again in turn once an ask failed: an engine
that hung cost every write its whole deadline, one after the other.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from loguru import logger

from swarmgpu.swarm.errors import BudgetCut

TERM_CHECK_S = 2.0  # how old the last "leader" answer may be when a write goes out


class _Ask:
    """One "leader?" ask in flight, and what it ended with."""

    def __init__(self, gen: int) -> None:
        self.gen = gen  # (the term's ``start``/``end`` count when it was asked)
        self.done = threading.Event()
        self.answer = False
        self.error: BaseException | None = None


class LeaderTerm:
    """``start`` when a cycle found this engine the leader, ``end`` when it did not;
    ``holds`` before each write (thread-safe: label writes run in parallel). Before the
    first cycle the term is unknown, not ended: a write asks the engine."""

    def __init__(self, is_leader: Callable[[], bool], *, check_s: float = TERM_CHECK_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ask = is_leader
        self.check_s = check_s
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None  # when the engine last said "leader"
        self._ended = False  # it said "not the leader": nothing more is written
        self._asking: _Ask | None = None  # the one ask in flight
        self._gen = 0  # ``start``s and ``end``s: an ask from before one answers no more
        self.refused = 0  # writes refused because the term had ended

    def start(self) -> None:
        with self._lock:
            self._since, self._ended, self._gen = self._clock(), False, self._gen + 1

    def end(self) -> None:
        with self._lock:
            self._since, self._ended, self._gen = None, True, self._gen + 1

    @property
    def lost(self) -> bool:
        return self._ended

    def holds(self) -> bool:
        """Whether a write may go out now: the last "leader" answer is recent, or the
        engine says so again. An engine that cannot be asked raises ``SwarmError``: that
        write fails as it would have on its own (those that waited for that ask too),
        and the next one asks again."""
        while True:
            with self._lock:
                ask, mine = None, False
                if not self._ended:
                    if (self._since is not None
                            and self._clock() - self._since < self.check_s):
                        return True
                    ask = self._asking
                    # (one asked before a start or end is not this term's: not joined)
                    mine = ask is None or ask.gen != self._gen
                    if mine:
                        ask = self._asking = _Ask(self._gen)
            if ask is None:
                break
            if mine:
                self._put(ask)
            else:  # (no deadline of its own: the ask's requests end by theirs)
                ask.done.wait()
                if isinstance(ask.error, BudgetCut):
                    continue  # (the asker's cycle budget, not this write's: it asks itself)
            if ask.error is not None:
                raise ask.error  # (the same failure, not one ask each in turn)
            with self._lock:
                fenced = ask.gen != self._gen
            if fenced:  # (asked before a start or end: the term as it is now decides)
                continue
            if ask.answer:
                return True
            break
        with self._lock:
            self.refused += 1
        return False

    def _put(self, ask: _Ask) -> None:
        """Ask the engine for ``ask``, and end it for its waiters, whatever ends it (an
        interrupt too: none waits for ever, and the next write asks again)."""
        try:
            ask.answer = self._ask()
        except BaseException as exc:
            ask.error = exc
            raise
        finally:
            deposed = False
            try:
                with self._lock:
                    if self._asking is ask:
                        self._asking = None
                    if ask.error is None and ask.gen == self._gen:  # (else a cycle said since)
                        if ask.answer:
                            self._since = self._clock()
                        else:
                            self._since, self._ended, deposed = None, True, True
            finally:
                ask.done.set()
            if deposed:
                logger.warning("this engine no longer leads the swarm: the rest of this "
                               "cycle's writes are not made (the new leader's daemon "
                               "decides from its own reading)")
