"""``core.andmore.and_more``: the one wording of " (and N more)" after a list's first
entries (release's left-out services, a node's GPU errors, the nodes a filter refused)."""

from __future__ import annotations

from swarmgpu.core.andmore import and_more


def test_and_more_counts_the_entries_left_unsaid() -> None:
    assert and_more(3) == " (and 2 more)"
    assert and_more(5, 3, "nodes") == " (and 2 more nodes)"


def test_and_more_is_empty_when_every_entry_is_said() -> None:
    assert and_more(1) == ""
    assert and_more(0) == ""
    assert and_more(3, 3, "nodes") == ""
