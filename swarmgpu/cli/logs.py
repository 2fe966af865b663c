"""Logging setup: loguru, readable on a terminal, JSON lines for journald/collectors."""

from __future__ import annotations

import logging
import sys
from typing import Any

from loguru import logger

_TEXT = "<green>{time:HH:mm:ss}</green> <level>{level: <7}</level> "


def _escape(text: str) -> str:
    """Literal text inside a loguru format: no field braces, no colour tags."""
    return text.replace("{", "{{").replace("}", "}}").replace("<", r"\<")


def context_text(extra: dict[str, Any]) -> str:
    """A record's bound context as text: ``component=agent service=llm`` (a value with
    spaces quoted), or nothing when there is none."""
    parts = []
    for key, value in extra.items():
        v = str(value)
        parts.append(f"{key}={v!r}" if (not v or any(c.isspace() for c in v)) else f"{key}={v}")
    return " ".join(parts)


def _text_format(record: Any) -> str:
    ctx = context_text(record["extra"])
    return _TEXT + (f"<cyan>{_escape(ctx)}</cyan> " if ctx else "") + \
        "<level>{message}</level>\n{exception}"


def setup_logging(level: str = "INFO", fmt: str = "text") -> None:
    # An event-triggered cycle that meets a running one is coalesced on purpose; the
    # scheduler's "skipped: maximum number of running instances" is not news.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    logger.remove()
    if fmt == "json":
        logger.add(sys.stderr, level=level.upper(), serialize=True)
    else:
        logger.add(sys.stderr, level=level.upper(), format=_text_format)
