"""What started each of the daemon's cycles, counted on its /metrics.

A cycle runs on the interval timer or sooner, when something asks (``Daemon.trigger``):
the facts watch saw an agent's facts change, a node or service event came, the event
stream reopened (what it missed is unknown), or a step of the cycle itself wrote something
whose effect the next cycle finishes (``followup``: replaced tasks' gates, a move in
flight, preempted victims). ``swarmgpu_cycles_started_total{trigger}``
says which, so an operator sees whether the watches do the work or the timer does, and
a test checks a change arrived by the watch without timing it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Literal

from prometheus_client import Counter

# "start": the daemon's first cycle; "interval": the timer (also run early by a step of
# the wall clock, Daemon._clock_check); the rest come through Daemon.trigger.
Trigger = Literal["start", "interval", "facts", "event", "reconnect", "followup"]


def follow_up(trigger: Callable[[Trigger], None], delay_s: float = 1.0) -> threading.Timer:
    """Ask for a cycle in ``delay_s`` (what was written shows in Swarm by then), counted
    as ``followup``. The ask is typed here: a bare ``Timer(1.0, host.trigger)`` is not
    checked, and once ``trigger`` took its reason such a timer died in its thread."""
    timer = threading.Timer(delay_s, lambda: trigger("followup"))
    timer.daemon = True
    timer.start()
    return timer


class CycleTriggers:
    """The first ask since the last cycle began; the next cycle takes it, and a cycle
    that finds none was the timer's. An ask made while a cycle runs reruns it right
    after (``Daemon._safe_cycle``): taking the ask and clearing it is one step under the
    lock, so an ask between them is neither lost nor counted twice."""

    def __init__(self, started: Counter) -> None:
        self._lock = threading.Lock()
        self._asked: Trigger | None = None
        self._first = True
        self._started = started

    def ask(self, why: Trigger) -> None:
        with self._lock:
            if self._asked is None:
                self._asked = why

    def is_set(self) -> bool:
        """A cycle was asked for since the last one began."""
        with self._lock:
            return self._asked is not None

    def begin(self) -> Trigger:
        """A cycle begins: what started it, counted."""
        with self._lock:
            # the first is "start" even when asked for (an event as the daemon starts):
            # it begins after the ask, so serves it, and "start" counts each start
            why: Trigger = "start" if self._first else (self._asked or "interval")
            self._asked, self._first = None, False
        self._started.labels(trigger=why).inc()
        return why
