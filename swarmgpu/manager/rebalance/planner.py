"""plan_moves: run the enabled policies over one snapshot and the windows. Pure.

The policies are plugins (``policies``), run in ``core.rebalanceconfig.POLICY_ORDER``:
the health policy first (it reads no window, and the daemon acts on its moves even in
dry-run: ``step.py``); among the others order matters only for who gets a target
first: hot spots (relief) before defragmentation (unblocks pending work) before
consolidation and spreading, and fragmentation moves (speculative: they only make
later placements likelier) last.
"""

from __future__ import annotations

from swarmgpu.manager.rebalance.context import Context, Inputs
from swarmgpu.manager.rebalance.moves import HealthInputs, Proposal
from swarmgpu.manager.rebalance.policies import enabled
from swarmgpu.swarm.client import node_names


def plan_moves(inp: Inputs, health_in: HealthInputs | None = None) -> Proposal:
    """Every move the enabled policies propose now, each with its reason. ``health_in``:
    the health policy's switch and budget (None: no health moves, a report only)."""
    ctx = Context.build(inp, health_in)
    for policy in enabled(inp.cfg):
        policy.propose(ctx)
    # By name, `host (ID)` where two nodes share a hostname: each is listed and counted.
    names = node_names(inp.nodes)
    unknown = {names.get(s.node_id, s.hostname): s.why_unknown or "unknown"
               for s in inp.node_signals.values() if not s.known}
    prop = Proposal(moves=list(ctx.moves), notes=list(ctx.notes), unknown_nodes=unknown,
                    at=inp.now)
    got = ctx.health_found
    if got is not None:
        prop.releases = got.releases
        prop.failed_holders = frozenset(got.held)
        prop.failing_nodes = {names.get(n, n): why for n, why in got.failing.items()}
    return prop
