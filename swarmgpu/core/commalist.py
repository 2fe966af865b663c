"""Comma-separated lists in settings and options (``rebalance.policies``, ``simulate
--policy``, ...): one parser, so each reads the same way."""

from __future__ import annotations


def comma_list(text: str) -> list[str]:
    """The items of ``a, b,,c``: each stripped, empty ones left out, in order."""
    return [p for p in (x.strip() for x in text.split(",")) if p]
