"""Logging setup: loguru, readable on a terminal, JSON lines for journald/collectors."""

from __future__ import annotations

import logging
import sys

from loguru import logger


def setup_logging(level: str = "INFO", fmt: str = "text") -> None:
    # An event-triggered cycle that meets a running one is coalesced on purpose; the
    # scheduler's "skipped: maximum number of running instances" is not news.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    logger.remove()
    if fmt == "json":
        logger.add(sys.stderr, level=level.upper(), serialize=True)
    else:
        logger.add(
            sys.stderr,
            level=level.upper(),
            format=(
                "<green>{time:HH:mm:ss}</green> <level>{level: <7}</level> "
                "{extra} <level>{message}</level>"
            ),
        )
