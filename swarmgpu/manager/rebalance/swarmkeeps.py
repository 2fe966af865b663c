"""Which of a node's GPU services Swarm re-creates elsewhere itself, once it reports the
node down or it is drained (``swarmnode.swarm_moves``), and why not the others.

Swarm's orchestrator re-creates only a replicated service's task off such a node, and
only where its constraints allow another node: a global service's task is its node's,
a job's orchestrator acts on no node's state, and a task pinned to the node waits for
it. The health policy leaves the first to Swarm (``policies.health``); its note and
`audit`'s name the others, so "Swarm moves its tasks" is never said of a model server
that stays (docs/health.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from swarmgpu.core.andmore import and_more
from swarmgpu.manager.placement.specs import schedulable
from swarmgpu.manager.rebalance.context import constraints_allow
from swarmgpu.swarm.client import SwarmNode, SwarmService

SHOWN = 5  # services named in a note, the rest counted


def swarm_keeps(s: SwarmService, nid: str, nodes: Iterable[SwarmNode], prefix: str) -> str:
    """Why Swarm re-creates no task of ``s`` off node ``nid`` ("" where it does)."""
    if s.mode == "global":
        return "global service: its task is its node's"
    if s.mode != "replicated":
        return f"{s.mode}: its orchestrator acts on no node's state"
    if not any(n.id != nid and schedulable(n) and constraints_allow(s, n, prefix)
               for n in nodes):
        return "its constraints allow no other node"
    return ""


def kept_said(nid: str, held: Iterable[str], services: Mapping[str, SwarmService],
              nodes: Iterable[SwarmNode], prefix: str) -> str:
    """What Swarm does not move of the GPU services ``held`` on ``nid`` (by name; one not
    in ``services`` is skipped), said after "Swarm moves its tasks itself": "" when it
    moves them all."""
    nodes = list(nodes)
    kept = [f"{name} ({why})" for name in sorted(set(held))
            if (s := services.get(name)) is not None
            and (why := swarm_keeps(s, nid, nodes, prefix))]
    if not kept:
        return ""
    return ("; not these GPU services, which Swarm re-creates nowhere else (they wait "
            f"for the node): {', '.join(kept[:SHOWN])}{and_more(len(kept), SHOWN)}")
