"""Time windows with hysteresis: "GPU util below 10 % for 10 minutes", done safely.

Pure: no clock is read here; every call takes ``now``. Three answers, never two:

* ``TRUE``: every sample in the whole window satisfied the condition, the samples
  cover the window (a sample stands until the next one, so the last sample at or
  before the window start counts, and there must be one; no gap between samples,
  nor from the last sample to ``now``, wider than ``max_gap_s``) and there are at
  least ``min_samples`` of them.
* ``FALSE``: the window is fully covered and the condition did not hold throughout.
* ``UNKNOWN``: the data cannot say: too few samples, a gap, a late series, or a
  broken sample (a ``None`` value) inside the window. A rebalancer must treat
  UNKNOWN as "do nothing", never as idle.

Hysteresis: once TRUE, a condition stays TRUE until the value has been on the far
side of ``clear_threshold`` for a whole window (for ``util < 10`` with
``clear_threshold=20``: until util >= 20 throughout a window). Readings between the
two thresholds keep the previous answer, so a value hovering at the threshold does
not flap. An UNKNOWN in between forgets the latch: the next TRUE needs a whole new
window, which errs on the side of doing nothing.
"""

from __future__ import annotations

import enum
import itertools
import operator
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


class State(enum.StrEnum):
    TRUE = "true"
    FALSE = "false"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Point:
    t: float
    value: float | None  # None: the sample was missing or broken at that time


@dataclass(frozen=True)
class Condition:
    """``metric op threshold`` held for ``window_s``, released at ``clear_threshold``."""

    metric: str
    op: str
    threshold: float
    window_s: float
    clear_threshold: float | None = None  # None: same as threshold (no dead band)
    max_gap_s: float = 90.0
    min_samples: int = 3

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"condition on {self.metric}: op {self.op!r} is not one of "
                             f"{sorted(_OPS)}")
        if self.window_s <= 0:
            raise ValueError(f"condition on {self.metric}: window_s must be > 0, "
                             f"got {self.window_s}")
        if self.max_gap_s <= 0:
            raise ValueError(f"condition on {self.metric}: max_gap_s must be > 0, "
                             f"got {self.max_gap_s}")
        if self.min_samples < 1:
            raise ValueError(f"condition on {self.metric}: min_samples must be >= 1, "
                             f"got {self.min_samples}")
        c = self.clear
        if (self.op in ("<", "<=") and c < self.threshold) or (
            self.op in (">", ">=") and c > self.threshold
        ):
            side = ">=" if self.op in ("<", "<=") else "<="
            raise ValueError(
                f"condition on {self.metric} {self.op} {self.threshold}: clear_threshold "
                f"{c} must be {side} the threshold (it is where the condition lets go)"
            )

    @property
    def clear(self) -> float:
        return self.threshold if self.clear_threshold is None else self.clear_threshold

    def holds(self, v: float) -> bool:
        return _OPS[self.op](v, self.threshold)

    def cleared(self, v: float) -> bool:
        """True when v is past the clear threshold, on the side opposite to ``op``."""
        return not _OPS[self.op](v, self.clear)


def window_points(points: Sequence[Point], now: float, window_s: float) -> list[Point]:
    """The points that decide the window ``[now - window_s, now]``.

    A sample stands until the next one, so the last point at or before the window
    start belongs to the window (it is the value at the start). Empty when there is
    no such point: the history is shorter than the window. ``points`` sorted by time.
    """
    ts = [p.t for p in points]
    first = bisect_right(ts, now - window_s) - 1
    if first < 0:
        return []
    return [p for p in points[first:] if p.t <= now]


def coverage_problem(points: Sequence[Point], now: float, cond: Condition) -> str | None:
    """Why the window ending at ``now`` cannot be judged, or None when it can."""
    pts = window_points(points, now, cond.window_s)
    if not pts:
        return f"no sample at or before the window start (history shorter than {cond.window_s}s)"
    if len(pts) < cond.min_samples:
        return f"{len(pts)} sample(s) in the window, need {cond.min_samples}"
    if now - pts[-1].t > cond.max_gap_s:
        return f"last sample is {now - pts[-1].t:.0f}s old (late)"
    for a, b in itertools.pairwise(pts):
        if b.t - a.t > cond.max_gap_s:
            return f"gap of {b.t - a.t:.0f}s in the window"
    if any(p.value is None for p in pts):
        return "missing or broken sample in the window"
    return None


def evaluate(
    cond: Condition,
    points: Sequence[Point],
    now: float,
    previous: State = State.UNKNOWN,
) -> State:
    """State of ``cond`` over the window ending at ``now`` (points sorted by time)."""
    if coverage_problem(points, now, cond) is not None:
        return State.UNKNOWN
    values = [p.value for p in window_points(points, now, cond.window_s) if p.value is not None]
    if previous is State.TRUE:
        return State.FALSE if all(cond.cleared(v) for v in values) else State.TRUE
    return State.TRUE if all(cond.holds(v) for v in values) else State.FALSE


class SeriesStore:
    """Per-key, per-metric time series with a retention limit (keys: node or GPU UUID)."""

    def __init__(self, retention_s: float) -> None:
        if retention_s <= 0:
            raise ValueError(f"retention_s must be > 0, got {retention_s}")
        self.retention_s = retention_s
        self._series: dict[tuple[str, str], deque[Point]] = {}

    def add(self, key: str, metric: str, t: float, value: float | None) -> bool:
        """Append one point; a point not newer than the last one is dropped (False)."""
        s = self._series.setdefault((key, metric), deque())
        if s and t <= s[-1].t:
            return False
        s.append(Point(t, value))
        while s and s[0].t < t - self.retention_s:
            s.popleft()
        return True

    def record(self, key: str, t: float, values: Mapping[str, float | None]) -> None:
        """Several metrics of one key read at the same time."""
        for metric, v in values.items():
            self.add(key, metric, t, v)

    def points(self, key: str, metric: str) -> tuple[Point, ...]:
        return tuple(self._series.get((key, metric), ()))

    def keys(self) -> set[str]:
        return {k for k, _ in self._series}

    def forget(self, key: str) -> None:
        for k in [k for k in self._series if k[0] == key]:
            del self._series[k]


class ConditionTracker:
    """Holds the previous state per key so hysteresis works across calls."""

    def __init__(self, cond: Condition, store: SeriesStore) -> None:
        if store.retention_s < cond.window_s + cond.max_gap_s:
            raise ValueError(
                f"store retention {store.retention_s}s is shorter than the window "
                f"{cond.window_s}s plus max_gap_s {cond.max_gap_s}s of {cond.metric}; "
                "raise retention_s"
            )
        self.cond = cond
        self.store = store
        self._state: dict[str, State] = {}

    def update(self, key: str, now: float) -> State:
        st = evaluate(
            self.cond, self.store.points(key, self.cond.metric), now,
            self._state.get(key, State.UNKNOWN),
        )
        self._state[key] = st
        return st

    def state(self, key: str) -> State:
        return self._state.get(key, State.UNKNOWN)

    def __len__(self) -> int:
        return len(self._state)

    def forget(self, key: str) -> None:
        """A key that left (its series forgotten: it would judge UNKNOWN anyway)."""
        self._state.pop(key, None)
