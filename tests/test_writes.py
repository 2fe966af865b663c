"""Bounded parallel writes (swarmgpu.manager.engine.writes): every item once, results in
order, never more than the bound at once."""

from __future__ import annotations

import threading
import time

import pytest

from swarmgpu.manager.engine.writes import write_each


def test_results_in_order_and_bounded() -> None:
    lock = threading.Lock()
    now = [0]
    peak = [0]

    def write(i: int) -> int:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        time.sleep(0.01)  # a round trip: the others run meanwhile
        with lock:
            now[0] -= 1
        return i * 2

    assert write_each(list(range(20)), write, parallel=4) == [i * 2 for i in range(20)]
    assert 1 < peak[0] <= 4


def test_one_at_a_time_stays_in_this_thread() -> None:
    seen: list[str] = []
    write_each([1, 2, 3], lambda i: seen.append(threading.current_thread().name), parallel=1)
    assert seen == [threading.current_thread().name] * 3


def test_an_error_propagates() -> None:
    def write(i: int) -> int:
        if i == 3:
            raise RuntimeError("boom")
        return i

    with pytest.raises(RuntimeError, match="boom"):
        write_each(list(range(6)), write, parallel=3)
