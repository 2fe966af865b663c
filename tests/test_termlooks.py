"""A node's first look in the daemon's term (``manager.nodes.termlooks``): kept for the
nodes listed now only (churned nodes leave no entry behind), a node back under a new ID
counted from its own first look, and the agents' records dated as the health policy
counts a loss (``as_counted``). Pure."""

from __future__ import annotations

from swarmgpu.manager.nodes.agentbook import AgentBook, AgentRecord
from swarmgpu.manager.nodes.termlooks import TermLooks, as_counted


def test_first_looks_keep_only_the_nodes_listed_now() -> None:
    looks = TermLooks()
    for i in range(1000):  # (a node churned each cycle: one entry at a time, not a thousand)
        assert looks.look(["n-stay", f"n-{i}"], float(i)) == {"n-stay": 0.0, f"n-{i}": float(i)}
    assert len(looks.at) == 2


def test_a_node_back_under_a_new_id_counts_from_its_own_first_look() -> None:
    """The old ID's record stays as recorded (audit reads no node by it); the new ID,
    no answer yet, counts from its first look, not from the old node's silence."""
    book = AgentBook()
    book.records["n-old"] = AgentRecord("gpu-1", last_ok=0.0, ok_mono=0.0,
                                        answered_at=0.0, answered_mono=0.0)
    book.records["n-new"] = AgentRecord("gpu-1")
    looks = TermLooks()
    looks.look(["n-old"], 100.0)
    at = looks.look(["n-new"], 500.0)  # (the old one gone, the new one listed)
    saved = as_counted(book, at, taken_at=10_000.0, now=800.0)
    assert saved["n-new"]["answered_at"] == 10_000.0 - 300.0  # (from 500, its first look)
    assert saved["n-old"]["answered_at"] == 0.0  # (not listed: as recorded)
    looks.clear()
    assert looks.look(["n-new"], 900.0) == {"n-new": 900.0}  # (a new term looks afresh)
