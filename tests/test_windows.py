"""windows.py: whole-window conditions, gaps, hysteresis; tables, no clock."""

from __future__ import annotations

import pytest

from swarmgpu.manager.rebalance.windows import (
    Condition,
    ConditionTracker,
    Point,
    SeriesStore,
    State,
    evaluate,
)

T, F, U = State.TRUE, State.FALSE, State.UNKNOWN

# util < 10 for 100 s, samples every 10 s allowed gaps up to 25 s, at least 3 samples,
# released when util >= 30 for a whole window.
IDLE = Condition("util", "<", 10, window_s=100, clear_threshold=30, max_gap_s=25,
                 min_samples=3)


def series(values: list[float | None], start: float = 0, step: float = 10) -> list[Point]:
    return [Point(start + i * step, v) for i, v in enumerate(values)]


@pytest.mark.parametrize(
    "values, now, previous, want",
    [
        # held for the whole window
        ([5] * 11, 100, U, T),
        ([5] * 11, 100, F, T),
        # one busy sample inside the window
        ([5] * 5 + [50] + [5] * 5, 100, U, F),
        # the busy sample is just outside the window (t=0 < 110-100)
        ([50] + [5] * 11, 110, U, T),
        # value exactly at the threshold does not satisfy "<"
        ([5] * 10 + [10], 100, U, F),
        # late: points at 0..30, now 100
        ([5] * 4, 100, U, U),
        # history shorter than the window: first point at 0, window starts at -10
        ([5] * 10, 90, U, U),
        # the point at the window start counts (it stands until the next one)
        ([50] + [5] * 10, 100, U, F),
        # a gap of 30 s inside the window
        ([5, 5, 5, 5], 30, U, U),
        # a broken (None) sample inside the window
        ([5] * 5 + [None] + [5] * 5, 100, U, U),
        # a broken sample outside the window does not matter
        ([None] + [5] * 11, 110, U, T),
        # late: last sample 40 s old
        ([5] * 8, 110, U, U),
        # empty series
        ([], 100, T, U),
        # hysteresis: latched TRUE, values in the dead band (10..30) keep it TRUE
        ([20] * 11, 100, T, T),
        # ... but from FALSE the dead band is FALSE
        ([20] * 11, 100, F, F),
        # released only when every sample is >= 30
        ([40] * 11, 100, T, F),
        ([40] * 10 + [25], 100, T, T),
        # unknown data forgets nothing into "false": it is UNKNOWN even when latched
        ([5] * 5 + [None] + [5] * 5, 100, T, U),
    ],
)
def test_evaluate_table(
    values: list[float | None], now: float, previous: State, want: State
) -> None:
    assert evaluate(IDLE, series(values), now, previous) is want


def test_series_starting_mid_window_is_unknown() -> None:
    pts = series([5] * 7, start=40)  # 40..100, window 0..100: no data for 40 s
    assert evaluate(IDLE, pts, 100) is U
    pts = series([5] * 9, start=20)  # 20 s short of a whole window: still unknown
    assert evaluate(IDLE, pts, 100) is U
    assert evaluate(IDLE, pts, 120) is T


def test_min_samples() -> None:
    cond = Condition("util", "<", 10, window_s=100, max_gap_s=200, min_samples=3)
    assert evaluate(cond, [Point(0, 1), Point(100, 1)], 100) is U
    assert evaluate(cond, [Point(0, 1), Point(50, 1), Point(100, 1)], 100) is T


def test_points_in_the_future_are_ignored() -> None:
    pts = [*series([5] * 11), Point(150, 99)]
    assert evaluate(IDLE, pts, 100) is T


@pytest.mark.parametrize(
    "op, value, want",
    [(">", 95, T), (">", 90, F), (">=", 90, T), ("<=", 90, T), ("<", 90, F), ("<", 89, T)],
)
def test_operators(op: str, value: float, want: State) -> None:
    clear = 80 if op in (">", ">=") else 95
    cond = Condition("util", op, 90, window_s=30, clear_threshold=clear, max_gap_s=15,
                     min_samples=2)
    assert evaluate(cond, series([value] * 4), 30) is want


def test_busy_condition_hysteresis() -> None:
    busy = Condition("util", ">", 90, window_s=30, clear_threshold=50, max_gap_s=15,
                     min_samples=2)
    assert evaluate(busy, series([70] * 4), 30, T) is T  # between 50 and 90: stays
    assert evaluate(busy, series([40] * 4), 30, T) is F  # below 50 all window: clears


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"op": "=="}, "op '=='"),
        ({"window_s": 0}, "window_s must be > 0"),
        ({"max_gap_s": -1}, "max_gap_s must be > 0"),
        ({"min_samples": 0}, "min_samples must be >= 1"),
        ({"clear_threshold": 5}, "clear_threshold 5 must be >="),
        ({"op": ">", "clear_threshold": 20}, "clear_threshold 20 must be <="),
    ],
)
def test_condition_validation(kwargs: dict[str, object], fragment: str) -> None:
    args: dict[str, object] = {"metric": "util", "op": "<", "threshold": 10, "window_s": 60}
    args.update(kwargs)
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(")):
        Condition(**args)  # type: ignore[arg-type]


def test_store_keeps_order_and_retention() -> None:
    st = SeriesStore(retention_s=50)
    assert st.add("GPU-1", "util", 0, 1)
    assert not st.add("GPU-1", "util", 0, 2)  # not newer: dropped
    assert not st.add("GPU-1", "util", -5, 2)
    for t in range(10, 101, 10):
        st.add("GPU-1", "util", t, t)
    pts = st.points("GPU-1", "util")
    assert [p.t for p in pts] == [50, 60, 70, 80, 90, 100]
    st.record("GPU-2", 100, {"util": None, "fb": 3})
    assert st.points("GPU-2", "util") == (Point(100, None),)
    assert st.keys() == {"GPU-1", "GPU-2"}
    st.forget("GPU-1")
    assert st.keys() == {"GPU-2"} and st.points("GPU-1", "util") == ()
    with pytest.raises(ValueError, match="retention_s"):
        SeriesStore(0)


def test_tracker_latches_across_calls() -> None:
    st = SeriesStore(retention_s=300)
    tr = ConditionTracker(IDLE, st)
    states = []
    # idle for 100 s, then util 20 (dead band) for 100 s, then 50 for 100 s
    for t in range(0, 311, 10):
        v = 5 if t <= 100 else (20 if t <= 200 else 50)
        st.add("GPU-1", "util", t, v)
        states.append(tr.update("GPU-1", t))
    assert states[:10] == [U] * 10  # less than a whole window of history
    assert states[10] is T  # t=100: whole window idle
    assert all(s is T for s in states[10:31])  # dead band, then a partial busy window
    # t=300: window 200..300 still starts with the t=200 sample (20, dead band);
    # t=310: every sample of 210..310 is >= 30: released
    assert states[31] is F
    assert tr.state("GPU-1") is F and tr.state("nope") is U
    with pytest.raises(ValueError, match="retention"):
        ConditionTracker(IDLE, SeriesStore(retention_s=10))


def test_tracker_unknown_key() -> None:
    tr = ConditionTracker(IDLE, SeriesStore(retention_s=300))
    assert tr.update("GPU-x", 1000) is U
