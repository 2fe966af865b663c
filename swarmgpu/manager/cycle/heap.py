"""Garbage collection between the daemon's cycles, not in the middle of one.

The planner keeps a large, long-lived state (every node, service and plan: millions
of objects at 5,000 nodes). Python's automatic full collection walks all of it, about
0.8 s at that size (benchmarks/bench_scale.py), and started in about every second
steady cycle and several times in a first one. So a cycle runs with collection off;
after it, one collection of what is new, and the survivors are frozen (left out of
later collections). Reference counting still frees most garbage at once; the cyclic
rest waits for the cycle's end. Every ``full_every`` cycles everything is unfrozen and
collected, so a frozen object that has since become cyclic garbage is freed too.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


class CycleCollector:
    def __init__(self, full_every: int = 10) -> None:
        self.full_every = full_every
        self.cycles = 0

    @contextlib.contextmanager
    def around_cycle(self) -> Iterator[None]:
        was = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if was:
                gc.enable()
            self.after_cycle()

    def after_cycle(self) -> None:
        self.cycles += 1
        if self.cycles % self.full_every == 0:
            gc.unfreeze()
        gc.collect()
        gc.freeze()
