"""The agent's facts-refresh threads a test module leaves running (an agent server or
``FactsCache`` it started and never stopped), checked after each module by
tests/conftest.py: each re-reads its source for the rest of the session and past it,
while the interpreter's exit waits on the NVML pool ("cannot schedule new futures after
shutdown" in the log, minutes after the last test)."""

from __future__ import annotations

import threading
import time

NAME = "facts-refresh"  # swarmgpu.agent.factscache's thread


def facts_refreshers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == NAME and t.is_alive()}


def left_running(before: set[threading.Thread], grace_s: float = 3.0) -> list[threading.Thread]:
    """The facts-refresh threads started since ``before`` still alive after ``grace_s``
    (``FactsCache.stop`` joins for 1 s; a read in progress ends within its deadline)."""
    deadline = time.monotonic() + grace_s
    left = sorted(facts_refreshers() - before, key=lambda t: t.ident or 0)
    for t in left:
        t.join(max(0.0, deadline - time.monotonic()))
    return [t for t in left if t.is_alive()]
