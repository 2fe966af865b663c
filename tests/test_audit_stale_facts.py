"""`swarmgpu audit` names an agent that answers with stale facts (stop 80 read). An agent
whose GPU source hangs serves its last read with ``X-Swarmgpu-Facts-Age``
(``FactsResult.facts_age_s``); from ``health.node_lost_grace_s`` on the daemon places
nothing new there (``agentbook.stale_nodes``) and the map says ``agent stale``
(``factsage``). Before, audit found nothing and its table said AGENT ``ok``.
"""

from __future__ import annotations

from dataclasses import replace

from support.forged import P, snapshot, sw_node

from swarmgpu.manager.commands.audit import audit, render_table


def _snap(age: float):  # type: ignore[no-untyped-def]
    snap = snapshot([sw_node("n-4090", "gpu-node-2")], [], [])
    snap.facts["n-4090"] = replace(snap.facts["n-4090"], facts_age_s=age)
    return snap


def test_an_agent_serving_facts_past_the_grace_is_a_finding() -> None:
    snap = _snap(400.0)
    found = [f for f in audit(snap, prefix=P, node_lost_grace_s=300.0)
             if f.kind == "stale-facts"]
    assert len(found) == 1, found
    assert found[0].severity == "action", found
    assert "400s" in found[0].message and "places nothing new" in found[0].message, found
    assert "swarmgpu doctor" in found[0].message, found
    table = render_table(audit(snap, prefix=P, node_lost_grace_s=300.0), snap, P)
    (row,) = [line for line in table.splitlines() if line.startswith("gpu-node-2")]
    assert " stale " in row, row


def test_facts_within_the_grace_are_no_finding() -> None:
    snap = _snap(42.0)
    assert not [f for f in audit(snap, prefix=P, node_lost_grace_s=300.0)
                if f.kind == "stale-facts"]
    table = render_table(audit(snap, prefix=P), snap, P)
    (row,) = [line for line in table.splitlines() if line.startswith("gpu-node-2")]
    assert " ok " in row, row
