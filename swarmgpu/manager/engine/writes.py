"""Bounded parallel writes to different Swarm objects.

Each daemon write is a read-modify-write round trip (inspect, then update with the
version read): about 25 ms on the test swarm (benchmarks/measure_engine_latency.py),
so a first cycle's thousands of writes take minutes one at a time. Swarm orders
writes to one object by its version, and writes to different objects (two nodes, two
services) do not conflict, so a phase's writes run a few at a time. The bound keeps
the manager's raft store from a burst (four writers cut the wall time per node update
from 25 to 7 ms on the test swarm; eight per service update from 23 to 9 ms).

Two steps changing one node in a cycle (label sync's labels, placement's ledger and
gates) share one round trip: label sync holds its writes (``HeldNodeWrites``) and
placement ``chain``s each into its own write of the node.

A stopping daemon's writes end between two of them (``stop``): those in flight finish,
the items not started are left, counted; so do a cycle's past its engine budget
(manager.cycle.budget).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TypeVar

from swarmgpu.manager.engine.stop import Stopped

WRITE_PARALLEL = 8  # writes in flight at once, each to a different object

T = TypeVar("T")
R = TypeVar("R")


def write_each(items: Sequence[T], write: Callable[[T], R],
               parallel: int = WRITE_PARALLEL,
               taken: Callable[[T, R], None] | None = None) -> list[R]:
    """``write(item)`` for every item, at most ``parallel`` at once; results in the
    items' order. The items must name different objects; ``write`` handles its own
    errors (an exception still propagates, after the writes in flight finish, and the
    items not started are not). A stopping daemon's ``Stopped`` counts them as left.
    ``taken(item, result)``, in the caller's thread and the items' order, for each write
    made: before the list is returned, or before ``Stopped`` (or the budget's
    ``OverBudget``) is raised, once the writes in flight finished, so that those that
    landed are counted and recorded as any (dropped with the list, the cycle's report,
    metrics and records lost them; only the writes left are not made)."""
    if parallel <= 1 or len(items) <= 1:
        out: list[R] = []
        try:
            for i, x in enumerate(items):
                try:
                    out.append(write(x))
                except Stopped as exc:
                    exc.request.leave(len(items) - i - 1)
                    raise
        finally:
            _take(items, out, taken)
        return out
    with ThreadPoolExecutor(min(parallel, len(items)), thread_name_prefix="write") as pool:
        # each in its cycle's context: its reads keep the cycle's engine budget
        # (swarm.answerjson.within_budget); one copy each, as one runs in one thread
        futures = [pool.submit(contextvars.copy_context().run, write, x) for x in items]
        try:
            done = [f.result() for f in futures]
        except Stopped as exc:
            exc.request.leave(sum(f.cancel() for f in futures))
            wait(futures)  # (the writes in flight finish: what they made is taken)
            _take(items, [f.result() if _made(f) else _NOT_MADE for f in futures], taken)
            raise
        finally:
            for f in futures:
                f.cancel()
    _take(items, done, taken)
    return done


class _NotMade:
    """In place of a write not made (not started, or raised) for ``_take``."""


_NOT_MADE = _NotMade()


def _made(f: Future[R]) -> bool:
    return not f.cancelled() and f.exception() is None


def _take(items: Sequence[T], results: Sequence[R | _NotMade],
          taken: Callable[[T, R], None] | None) -> None:
    if taken is not None:
        for x, r in zip(items, results, strict=False):
            if not isinstance(r, _NotMade):
                taken(x, r)


# --- one write per node per cycle -------------------------------------------------------

LabelCompute = Callable[[Mapping[str, str]], Mapping[str, str] | None]


def chain(first: LabelCompute, then: LabelCompute) -> LabelCompute:
    """One read-modify-write of a node's labels doing ``first``'s change, then
    ``then``'s on its result: two steps' changes in one round trip. Each part derives its
    change from the labels as they are at write time and touches only its own keys."""

    def compute(current: Mapping[str, str]) -> Mapping[str, str] | None:
        mid = first(current)
        base = current if mid is None else mid
        new = then(base)
        out = base if new is None else new
        return None if dict(out) == dict(current) else out

    return compute


@dataclass
class HeldWrite:
    """A node label write a step holds back for a later step's write of the same node.
    ``compute`` is its read-modify-write; ``done(landed, error)`` is told, once, whether
    its own change landed (and why not); ``conflicts(n)``, when its change was retried
    ``n`` times because the node changed under the write (a version conflict), as the
    step counts its own writes' retries."""

    compute: LabelCompute
    done: Callable[[bool, str | None], None]
    conflicts: Callable[[int], None] | None = None

    def part(self) -> tuple[LabelCompute, Callable[[bool, str | None], None]]:
        """``compute`` for a chained write, and ``finish(landed, error)`` to call once
        that write ended: tells ``done`` whether this part's change landed (a retried
        write calls ``compute`` again: the last call is the one that landed) and
        ``conflicts`` how many of its attempts were retried."""
        changed = [False]
        tries = [0]  # attempts that carried this part's change

        def compute(current: Mapping[str, str]) -> Mapping[str, str] | None:
            new = self.compute(current)
            changed[0] = new is not None and dict(new) != dict(current)
            tries[0] += changed[0]
            return new

        def finish(landed: bool, error: str | None) -> None:
            if tries[0] > 1 and self.conflicts is not None:
                self.conflicts(tries[0] - 1)
            self.done(landed and changed[0] and error is None, error)

        return compute, finish


class HeldNodeWrites:
    """Label sync's node writes of one cycle, held so that placement folds each into its
    own write of the same node (one round trip per node per cycle instead of two).
    ``take`` hands a node's write over (once); ``flush`` writes, one by one as before,
    what nobody took. Thread-safe: writes to different nodes run in parallel."""

    def __init__(self, held: Mapping[str, HeldWrite],
                 write_alone: Callable[[str, HeldWrite], None]) -> None:
        self._held = dict(held)
        self._write_alone = write_alone
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._held)

    def nodes(self) -> set[str]:
        with self._lock:
            return set(self._held)

    def take(self, node_id: str) -> HeldWrite | None:
        with self._lock:
            return self._held.pop(node_id, None)

    def flush(self) -> None:
        with self._lock:
            rest, self._held = self._held, {}
        write_each(list(rest.items()), lambda kv: self._write_alone(*kv))
