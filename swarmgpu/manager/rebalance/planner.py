"""plan_moves: run the enabled policies over one snapshot and the windows. Pure.

Order matters only for who gets a target first: hot spots (relief) before
defragmentation (unblocks pending work) before consolidation and spreading, and
fragmentation moves (speculative: they only make later placements likelier) last.
"""

from __future__ import annotations

from collections.abc import Callable

from swarmgpu.manager.rebalance.context import Context, Inputs
from swarmgpu.manager.rebalance.moves import Proposal
from swarmgpu.manager.rebalance.policies import (
    consolidation,
    defrag,
    fragmentation,
    hotspot,
    spread,
)

POLICIES: dict[str, Callable[[Context], None]] = {
    "hotspot": hotspot.propose,
    "defrag": defrag.propose,
    "consolidation": consolidation.propose,
    "spread": spread.propose,
    "fragmentation": fragmentation.propose,
}


def enabled(policies: str) -> list[str]:
    wanted = {p.strip() for p in policies.split(",") if p.strip()}
    return [p for p in POLICIES if p in wanted]


def plan_moves(inp: Inputs) -> Proposal:
    """Every move the enabled policies propose now, each with its reason."""
    ctx = Context.build(inp)
    for name in enabled(inp.cfg.policies):
        POLICIES[name](ctx)
    unknown = {s.hostname: s.why_unknown or "unknown" for s in inp.node_signals.values()
               if not s.known}
    return Proposal(moves=list(ctx.moves), notes=list(ctx.notes), unknown_nodes=unknown,
                    at=inp.now)
