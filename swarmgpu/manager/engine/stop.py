"""The daemon's stop request as its writes see it: no write starts once it is asked.

A step can be long in writes: the first label sync of a thousand nodes is a thousand
read-modify-writes. Finishing it on SIGTERM ran past systemd's TimeoutStopSec, and the
daemon was SIGKILLed mid-step. So the write gate (``actuator.Writes``, which every
engine write passes) asks ``StopRequest.check`` before each write: once the stop is
asked, that write and every later one of the step raise ``Stopped`` before anything
goes to the engine, while the writes already in flight finish (each is atomic).
``write_each`` counts its items that never started. The writes left are not lost: the
next leader, or this daemon when it starts again, plans them afresh from what Swarm
stores, as after any cycle cut short.
"""

from __future__ import annotations

import threading


class Stopped(Exception):
    """A write not made because the daemon is stopping. Not a ``SwarmError``: no
    caller takes it for a failed write and goes on to the next one; it ends the step."""

    def __init__(self, request: StopRequest) -> None:
        super().__init__("the daemon is stopping: no further write is made")
        self.request = request


class StopRequest(threading.Event):
    """Set once (SIGTERM, SIGINT); ``left`` counts the writes it kept from starting."""

    def __init__(self) -> None:
        super().__init__()
        self._count = threading.Lock()
        self.left = 0

    def check(self) -> None:
        """Before a write: ``Stopped`` once the stop is asked (that write is left)."""
        if self.is_set():
            self.leave(1)
            raise Stopped(self)

    def leave(self, n: int) -> None:
        """``n`` more writes left undone (thread-safe: writes run in parallel)."""
        with self._count:
            self.left += n
