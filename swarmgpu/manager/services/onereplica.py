"""The replica the over-share restart judges for a tenant that may not opt out: the one
on the node over its share, alone. The restart closes that node's gate and nothing
else, so whether the service is settled is asked of that node (one holding there, its
one task there running: ``rebalance.context.why_not_movable``), not of every replica:
a replica left waiting elsewhere (its queue at its max, no GPU free) kept each running
one from the restart for as long as it waited, an opt-out by scaling past the quota."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.services.coolmark import on_node
from swarmgpu.swarm.client import SwarmService, SwarmTask


def one_node(s: SwarmService, tasks: Sequence[SwarmTask], held: Mapping[str, Holding],
             node_id: str) -> tuple[SwarmService, list[SwarmTask], dict[str, Holding]]:
    """``s`` as one replica on ``node_id``: its tasks and holding there alone, and a
    replicated service's replicas 1 (a global one counts its holdings: one)."""
    one = replace(s, replicas=1) if s.mode == "replicated" else s
    return one, on_node(tasks, node_id), {n: h for n, h in held.items() if n == node_id}
