"""The tail of a message that names the first few of a list: " (and N more)".

One wording for every layer that says a list's first entries and counts the rest
(a lookup's left-out services, a node's GPU errors, the nodes a filter refused).
"""

from __future__ import annotations


def and_more(count: int, shown: int = 1, what: str = "") -> str:
    """" (and N more WHAT)" for a list of ``count`` entries whose first ``shown`` are
    said ("" when none is left unsaid); ``what`` names the entries ("" for none)."""
    left = count - shown
    if left <= 0:
        return ""
    return f" (and {left} more {what})" if what else f" (and {left} more)"
