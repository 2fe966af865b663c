"""The replica the over-share restart judges for a tenant that may not opt out: the one
on the node over its share, alone. The restart closes that node's gate and nothing
else, so whether the service is settled is asked of that node (one holding there, its
one task there running: ``rebalance.context.why_not_movable``), not of every replica:
a replica left waiting elsewhere (its queue at its max, no GPU free) kept each running
one from the restart for as long as it waited, an opt-out by scaling past the quota.

A task there that Swarm calls ``starting`` is judged running: Swarm holds a task so
until its container's health check first passes (moby#24545), for as long as the check's
interval or start period runs (hours, if its stack says so), while the container runs
and uses the GPU; read as not converged, such a health check was an opt-out too."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.services.coolmark import on_node
from swarmgpu.swarm.client import SwarmService, SwarmTask


def _started(t: SwarmTask) -> SwarmTask:
    """``t`` as the restart judges it: ``starting`` (its container runs) as running."""
    return (replace(t, state="running")
            if t.state == "starting" and t.desired_state == "running" else t)


def one_node(s: SwarmService, tasks: Sequence[SwarmTask], held: Mapping[str, Holding],
             node_id: str) -> tuple[SwarmService, list[SwarmTask], dict[str, Holding]]:
    """``s`` as one replica on ``node_id``: its tasks (``starting`` read as running) and
    holding there alone, and a replicated service's replicas 1 (a global one counts its
    holdings: one)."""
    one = replace(s, replicas=1) if s.mode == "replicated" else s
    return (one, [_started(t) for t in on_node(tasks, node_id)],
            {n: h for n, h in held.items() if n == node_id})
