"""``agents.service`` against Swarm: a name no service has (a typo, or a stack deployed
under another name) marks no node, silently; this says so, with the fix.

Not an error: the key is only one sign of a GPU node (``placement.cpunodes.gpu_hint``),
and systemd agents run in no service at all. Said where GPU nodes exist, so a swarm
without any is not told about agents it does not run.
"""

from __future__ import annotations

from collections.abc import Iterable

from swarmgpu.core.peertext import quoted
from swarmgpu.swarm.client import SwarmService

SHOWN = 5  # services ending in _agent named in the note

# The fix, the same in the daemon's log, ``audit`` and ``doctor``: the systemd fleet's
# first (left at the default, it is told this once), as docs/systemd.md says it.
FIX = ("agents run by systemd (swarmgpu-agent.service) or otherwise outside Swarm: set "
       'agents.service: "" in the daemon\'s config (docs/systemd.md); agents run by a '
       "stack: set agents.service to their service (docker service ls; the stack's is "
       "<stack>_agent)")


def missing_agent_service(services: Iterable[SwarmService], name: str) -> str | None:
    """Why ``agents.service`` (``name``) matches no service in Swarm, with the services
    whose name ends in ``_agent`` (the stack's ``<stack>_agent``) and the fix; None when
    one is named so, or the key is off ("")."""
    names = sorted({s.name for s in services})
    if not name or name in names:
        return None
    like = [n for n in names if n.endswith("_agent")]
    seen = (f"services named *_agent: {', '.join(like[:SHOWN])}"
            + (f" and {len(like) - SHOWN} more" if len(like) > SHOWN else "")
            if like else "no service is named *_agent")
    return (f"agents.service: no Swarm service is named {quoted(name)} ({seen}), so no "
            "node is known as a GPU node by the agents' tasks: one whose agent has not "
            f"answered and has no gpu=true label may be taken as CPU-only; fix: {FIX}")

