"""Parallel writes that share one ask (the leader's term: ``manager.cycle.term``; the
engine's node listing: ``swarm.engineskew``): a clock past the last answer that counts
the writers' reads of it (``Stale``), and the writes run at once (``in_parallel``).
Threads meet through events, never a sleep or a time limit asserted."""

from __future__ import annotations

import threading
from collections.abc import Callable

HANG_S = 30.0  # (a guard against a hang only: a fault fails the asserts, not this)


class Stale:
    """A clock the last answer is read against, counting the writers' reads of it once
    ``now`` is past 0: each writer reads it once, so ``all_in`` is set once every writer
    has found the answer old."""

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


def in_parallel(write: Callable[[], object], n: int) -> list[object]:
    """``write()`` in ``n`` threads at once; what each returned or raised."""
    got: list[object] = [None] * n

    def one(i: int) -> None:
        try:
            got[i] = write()
        except BaseException as exc:  # (each writer's outcome is asserted)
            got[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_S)
    return got
