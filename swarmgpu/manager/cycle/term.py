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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from loguru import logger

TERM_CHECK_S = 2.0  # how old the last "leader" answer may be when a write goes out


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
        self.refused = 0  # writes refused because the term had ended

    def start(self) -> None:
        with self._lock:
            self._since, self._ended = self._clock(), False

    def end(self) -> None:
        with self._lock:
            self._since, self._ended = None, True

    @property
    def lost(self) -> bool:
        return self._ended

    def holds(self) -> bool:
        """Whether a write may go out now: the last "leader" answer is recent, or the
        engine says so again. An engine that cannot be asked raises ``SwarmError``: that
        write fails as it would have on its own, and the next one asks again."""
        with self._lock:
            if not self._ended:
                if self._since is not None and self._clock() - self._since < self.check_s:
                    return True
                if self._ask():
                    self._since = self._clock()
                    return True
                self._since, self._ended = None, True
                logger.warning("this engine no longer leads the swarm: the rest of this "
                               "cycle's writes are not made (the new leader's daemon "
                               "decides from its own reading)")
            self.refused += 1
            return False
