"""A FIFO where a file belongs, and a read of it that cannot hang the test: the read runs
in a thread; if it has not returned in time, a writer is opened and closed so the
blocked open returns (the thread ends), and the test fails naming the hang."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any


def make_fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def read_within(read: Callable[[], Any], fifo: Path, seconds: float = 5.0) -> Any:
    """``read()``'s result, or the exception it raised, returned (not raised); a read
    still blocked after ``seconds`` fails the test."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(read())
        except BaseException as exc:  # handed to the test to check
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        # A writer that comes and goes: the blocked open returns and reads end-of-file.
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(seconds)
        raise AssertionError(
            f"reading {fifo} blocked for {seconds} s (a FIFO with no "
            "writer): it must be refused without opening it for a read"
        )
    return out[0]
