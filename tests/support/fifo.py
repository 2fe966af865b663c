"""A FIFO where a file belongs, and a read of it that cannot hang the test: the read runs
in a thread; if it has not returned in time, a writer is opened and closed so the
blocked open returns (the thread ends), and the test fails naming the hang. And a file
the doctor reads swapped for a FIFO between its stat and its open
(``swapped_after_stat``)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swarmgpu.agent.doctor import read as doctor_read

if TYPE_CHECKING:
    import pytest


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


def swapped_after_stat(monkeypatch: pytest.MonkeyPatch, root: Path, path: str) -> Path:
    """The doctor's file ``path`` (absolute under ``root``) swapped for a FIFO once its
    stat (``read.not_regular``) has looked: a regular file then, a FIFO by the open.
    The FIFO, on disk."""
    looked = doctor_read.not_regular
    on_disk = root / path.lstrip("/")

    def swapped(r: str, p: str) -> Any:
        said = looked(r, p)
        if p == path:
            on_disk.unlink()
            make_fifo(on_disk)
        return said

    monkeypatch.setattr(doctor_read, "not_regular", swapped)
    return on_disk
