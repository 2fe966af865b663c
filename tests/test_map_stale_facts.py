"""The map's document (``/api/v1/cluster``, `status --json`) shows an agent that answers
with stale facts as stale, with the facts' age (stop 80). An agent whose GPU source hangs
serves its last read with ``X-Swarmgpu-Facts-Age`` (``FactsResult.facts_age_s``): from
``health.node_lost_grace_s`` on the daemon places nothing new there (``stale_nodes``), as
``plan`` and ``status``' placement do. Before, the map said ``"status": "ok"`` with
``last_ok`` the fetch time, facts hours old as fresh as any.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from support.forged import P, snapshot, sw_node

from swarmgpu.manager.web.cluster_view import build_cluster, render_status


def _agent(age: float, grace: float = 300.0) -> dict[str, Any]:
    snap = snapshot([sw_node("n-dgx", "gpu-node-1"), sw_node("n-4090", "gpu-node-2")], [], [])
    snap.facts["n-4090"] = replace(snap.facts["n-4090"], fetched_at=10_000.0,
                                   facts_age_s=age)
    doc = json.loads(json.dumps(build_cluster(snap, None, prefix=P,
                                              node_lost_grace_s=grace)))
    (node,) = [n for n in doc["nodes"] if n["id"] == "n-4090"]
    return dict(node["agent"])


def test_an_agent_answering_facts_past_the_grace_is_stale_with_their_age() -> None:
    agent = _agent(400.0)
    assert agent["status"] == "stale", agent
    assert agent["last_ok"] == 9_600.0, agent  # when the facts were read, not fetched
    assert agent["facts_age_s"] == 400.0, agent
    assert "400s" in agent["cause"] and "health.node_lost_grace_s" in agent["cause"], agent
    assert agent["fix"], agent


def test_facts_within_the_grace_are_ok_dated_by_their_read() -> None:
    agent = _agent(42.0)
    assert agent["status"] == "ok", agent
    assert (agent["last_ok"], agent["facts_age_s"]) == (9_958.0, 42.0), agent


def test_the_grace_is_the_configured_one() -> None:
    assert _agent(400.0, grace=600.0)["status"] == "ok"
    assert _agent(400.0, grace=60.0)["status"] == "stale"


def test_status_names_the_stale_agent() -> None:
    snap = snapshot([sw_node("n-4090", "gpu-node-2")], [], [])
    snap.facts["n-4090"] = replace(snap.facts["n-4090"], facts_age_s=400.0)
    text = render_status(build_cluster(snap, None, prefix=P))
    assert "agent stale (facts read 400s ago" in text, text


def test_status_gives_the_stale_agents_fix() -> None:
    """(stop 80 read) The map's badge has the fix as its tooltip; `status` said the cause
    alone, as it gives an unreachable agent's fix on a line of its own."""
    snap = snapshot([sw_node("n-4090", "gpu-node-2")], [], [])
    snap.facts["n-4090"] = replace(snap.facts["n-4090"], facts_age_s=400.0)
    text = render_status(build_cluster(snap, None, prefix=P))
    assert "  fix: its agent serves its last read again" in text, text
