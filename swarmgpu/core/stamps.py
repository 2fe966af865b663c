"""The one rule for a time read back from Swarm: a label's epoch seconds.

Such a time was written by some manager's clock (the leader's, or another manager's
that may be a little off), or by anyone who edits labels: a stack (a service's own
labels), an operator with the manager API (the swarm object's). A time up to
``MAX_SKEW_S`` ahead of this clock is another manager's clock and counts as written; a
time further ahead no clock wrote. Counted, it would hold a budget hour spent or a
cooldown running for as long as it is ahead (for ever, at 1e12), so:

* ``in_hour``: a budget's list of the last hour counts only times within the hour and
  at most ``MAX_SKEW_S`` ahead; anything else (older, further ahead, NaN) is dropped;
* ``passed``: a time something happened at (a service moved), as this clock may use
  it: at most now; None when no clock wrote it (not finite, or further ahead), which
  the caller reads as no time (a cooldown from it does not run);
* ``started``: the start of something under way or just ended (a move in flight), as
  ``passed``, but now when no clock wrote it: it has started by now, and counts in the
  hour from now on, never for ever and never not at all.
"""

from __future__ import annotations

import math

HOUR_S = 3600.0
MAX_SKEW_S = 60.0  # two managers' clocks may differ by this much (NTP keeps them closer)


def in_hour(t: float, now: float) -> bool:
    """Whether ``t`` counts in the hour up to ``now`` (a little past it by the skew)."""
    return now - HOUR_S < t <= now + MAX_SKEW_S


def passed(t: float, now: float) -> float | None:
    """``t`` as a time that has passed by ``now`` (a little ahead: now); None when no
    clock wrote it: not finite, or more than ``MAX_SKEW_S`` ahead."""
    if not math.isfinite(t) or t > now + MAX_SKEW_S:
        return None
    return min(t, now)


def started(t: float, now: float) -> float:
    """The start ``t`` of something under way by ``now``: ``passed``, or now for a time
    no clock wrote."""
    p = passed(t, now)
    return now if p is None else p
