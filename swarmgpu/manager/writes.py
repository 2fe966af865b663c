"""Bounded parallel writes to different Swarm objects.

Each daemon write is a read-modify-write round trip (inspect, then update with the
version read): about 25 ms on the test swarm (benchmarks/measure_engine_latency.py),
so a first cycle's thousands of writes take minutes one at a time. Swarm orders
writes to one object by its version, and writes to different objects (two nodes, two
services) do not conflict, so a phase's writes run a few at a time. The bound keeps
the manager's raft store from a burst (four writers cut the wall time per node update
from 25 to 7 ms on the test swarm; eight per service update from 23 to 9 ms).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

WRITE_PARALLEL = 8  # writes in flight at once, each to a different object

T = TypeVar("T")
R = TypeVar("R")


def write_each(items: Sequence[T], write: Callable[[T], R],
               parallel: int = WRITE_PARALLEL) -> list[R]:
    """``write(item)`` for every item, at most ``parallel`` at once; results in the
    items' order. The items must name different objects; ``write`` handles its own
    errors (an exception still propagates, after the writes in flight finish)."""
    if parallel <= 1 or len(items) <= 1:
        return [write(x) for x in items]
    with ThreadPoolExecutor(min(parallel, len(items)), thread_name_prefix="write") as pool:
        return list(pool.map(write, items))
