"""The most memory a call holds while it runs, traced (tracemalloc): work counted, not
timed, for the tests that bound what a reader keeps of a large input."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def traced_peak(call: Callable[[], T]) -> tuple[T, int]:
    """``call()``'s result and the most memory it held while it ran (bytes); tracing
    stops also when it raises."""
    tracemalloc.start()
    try:
        got = call()
        return got, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
