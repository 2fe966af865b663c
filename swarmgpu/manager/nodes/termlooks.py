"""An agent's silence as the daemon counts it, for the health policy and the map alike.

The agents' records (``agentbook``) are this daemon's own reads, and a follower reads
none: a loss counts on the monotonic clock from the later of the agent's last answer and
the node's first look in this leader term (``agentbook.lost_s``). The health policy
counted it so (a step of the wall clock neither delays nor hastens a loss; the hours a
daemon stood by are no proof of one), but the map's audit read the records' wall-clock
times: leading again after hours, or with the wall clock stepped ahead, an agent that
missed one read was ``agent-lost`` on the map while the policy and
``swarmgpu_health_agent_lost_nodes`` counted nothing. ``TermLooks`` is the first looks,
one for the rebalancer and the map (``cycle.wiring``: with one each, a cycle cut between
the two steps started the map's a cycle late); ``as_counted`` gives audit the records
dated as the policy counts them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from swarmgpu.manager.nodes.agentbook import AgentBook, lost_s


class TermLooks:
    """Each listed node's first look in this term, on the monotonic clock; ``clear``
    when the daemon stands by (the next term looks afresh)."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}

    def look(self, node_ids: Iterable[str], now: float) -> dict[str, float]:
        """The first looks of ``node_ids`` (the nodes listed now), those first seen now
        at ``now``: a node that joins mid-term counts from its own, and one gone and
        back joins anew."""
        self.at = {nid: self.at.get(nid, now) for nid in node_ids}
        return self.at

    def clear(self) -> None:
        self.at = {}


def as_counted(book: AgentBook, looks: Mapping[str, float], taken_at: float,
               now: float) -> dict[str, dict[str, Any]]:
    """``book``'s records as audit reads them (``AgentRecord.to_dict``), the agent's last
    answer (``answered_at``) and last good facts (``last_ok``) dated as the daemon counts
    them: on the monotonic clock (``now``), the answer no earlier than the node's first
    look (``looks``), each put on the snapshot's wall clock (``taken_at``). A time this
    process did not read on the monotonic clock stays as recorded."""
    out = {}
    for nid, rec in book.records.items():
        saved = rec.to_dict()
        if nid in looks:
            saved["answered_at"] = taken_at - lost_s(rec, now, looks[nid])
        if rec.ok_mono is not None:
            saved["last_ok"] = taken_at - max(0.0, now - rec.ok_mono)
        out[nid] = saved
    return out
