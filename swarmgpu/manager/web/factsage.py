"""The map's word on an agent that answered with facts: ``ok``, or ``stale`` where the
facts it served were read ``health.node_lost_grace_s`` ago or more. An agent whose GPU
source hangs serves its last read again, dated by ``X-Swarmgpu-Facts-Age``
(``FactsResult.facts_age_s``); the daemon places nothing new on such facts
(``agentbook.stale_nodes``), and ``last_ok`` dates them by their read, as the agent book
does, not by the fetch.
"""

from __future__ import annotations

from typing import Any

from swarmgpu.core.config import HealthConfig
from swarmgpu.manager.nodes.agent_client import FactsResult

GRACE_S = HealthConfig.node_lost_grace_s  # (its default, where no config is handed)
STALE_FIX = ("its agent serves its last read again: the GPU source it reads (NVML) "
             "hangs; run `swarmgpu doctor` on the node, and restart the agent once the "
             "driver answers")


def answered(res: FactsResult, grace_s: float) -> dict[str, Any]:
    """The map's ``agent`` of a node whose agent answered with facts (``res``)."""
    age = res.facts_age_s
    agent: dict[str, Any] = {"status": "ok", "error": None, "last_ok": res.fetched_at - age,
                             "failing_since": None, "facts_age_s": round(age, 1)}
    if age >= grace_s:
        agent.update(status="stale", fix=STALE_FIX,
                     cause=f"facts read {age:.0f}s ago, health.node_lost_grace_s "
                           f"({grace_s:g}s) or more: nothing new is placed on it")
    return agent
