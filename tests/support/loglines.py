"""The log as a test reads it: ``log_lines`` is a fixture's body that keeps each line
logged at ``level`` or above, whole (with its traceback), while the fixture lasts."""

from __future__ import annotations

from collections.abc import Iterator

from loguru import logger


def log_lines(level: str) -> Iterator[list[str]]:
    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m)), level=level)
    yield said
    logger.remove(sink)
