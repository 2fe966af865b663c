"""plan_moves: run the enabled policies over one snapshot and the windows. Pure.

The health policy runs first, apart (it reads no window, and the daemon acts on its
moves even in dry-run: ``step.py``). Among the others order matters only for who gets a
target first: hot spots (relief) before
defragmentation (unblocks pending work) before consolidation and spreading, and
fragmentation moves (speculative: they only make later placements likelier) last.
"""

from __future__ import annotations

from collections.abc import Callable

from swarmgpu.manager.rebalance.context import Context, Inputs
from swarmgpu.manager.rebalance.moves import HealthInputs, Proposal
from swarmgpu.manager.rebalance.policies import (
    consolidation,
    defrag,
    fragmentation,
    health,
    hotspot,
    spread,
)

HEALTH = "health"  # the policy name in rebalance.policies (runs first, not in POLICIES)

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


def health_enabled(policies: str) -> bool:
    return HEALTH in {p.strip() for p in policies.split(",")}


def plan_moves(inp: Inputs, health_in: HealthInputs | None = None) -> Proposal:
    """Every move the enabled policies propose now, each with its reason. ``health_in``:
    the health policy's switch and budget (None: no health moves, a report only)."""
    ctx = Context.build(inp)
    got = None
    if health_enabled(inp.cfg.policies):
        got = health.evacuate(ctx, health_in or HealthInputs(evacuate=False))
    for name in enabled(inp.cfg.policies):
        POLICIES[name](ctx)
    unknown = {s.hostname: s.why_unknown or "unknown" for s in inp.node_signals.values()
               if not s.known}
    prop = Proposal(moves=list(ctx.moves), notes=list(ctx.notes), unknown_nodes=unknown,
                    at=inp.now)
    if got is not None:
        prop.releases = got.releases
        prop.failed_holders = frozenset(got.held)
        prop.failing_nodes = {ctx.nodes[n].hostname if n in ctx.nodes else n: why
                              for n, why in got.failing.items()}
    return prop
