"""Node joined or freed: spread back what was squeezed.

Descheduler-style allocation thresholds with a dead band: a node above
``rebalance.spread.high_pct`` of its GPU share allocated gives one movable holding to a node
below ``low_pct`` (known metrics, schedulable), when that leaves the target
below the source. One move per squeezed node per pass.
"""

from __future__ import annotations

from swarmgpu.core.rebalanceconfig import SpreadConfig
from swarmgpu.manager.rebalance.context import Context
from swarmgpu.manager.rebalance.moves import Trigger


def _alloc_pct(ctx: Context) -> tuple[dict[str, float], dict[str, int]]:
    """Per node: the % of its GPU share allocated, and that share (milli)."""
    alloc = ctx.allocator()
    out: dict[str, float] = {}
    caps: dict[str, int] = {}
    for nid, ns in alloc.alloc.nodes.items():
        cap = sum(g.capacity_milli for g in ns.spec.gpus if g.healthy and not g.mig_enabled)
        if cap:
            free = sum(f for f, g in zip(ns.free, ns.spec.gpus, strict=True)
                       if g.healthy and not g.mig_enabled)
            out[nid] = 100.0 * (cap - free) / cap
            caps[nid] = cap
    return out, caps


def propose(ctx: Context, cfg: SpreadConfig) -> None:
    pct, cap = _alloc_pct(ctx)
    low = {nid for nid, p in pct.items() if p < cfg.low_pct and ctx.node_known(nid)}
    if not low:
        return
    for src in sorted((n for n, p in pct.items() if p > cfg.high_pct),
                      key=lambda n: -pct[n]):
        holdings = sorted(((sum(h.milli), svc) for svc, by in ctx.ledger.items()
                           for nid, h in by.items() if nid == src))
        for size, svc in holdings:
            if ctx.movable(svc) is not None:
                continue
            choice = ctx.find_target(svc, src, only_nodes=low)
            if choice is None:
                continue
            # The target must stay below the source: else the next pass (a node now
            # squeezed, one nearly empty) moves it back, once per cooldown.
            dst = choice.node
            if pct[dst] + 100.0 * size / cap[dst] >= pct[src] - 100.0 * size / cap[src]:
                continue
            m = ctx.make_move(
                svc, src, choice, Trigger.SPREAD, None,
                reason=(f"{ctx.nodes[src].hostname} has {pct[src]:.0f}% of its GPU share "
                        f"allocated (> {cfg.high_pct:g}%), "
                        f"{ctx.nodes[choice.node].hostname} {pct[choice.node]:.0f}% "
                        f"(< {cfg.low_pct:g}%)"),
                gain=f"{size / 1000:g} GPU moves to the emptier node")
            ctx.accept(m)
            low.discard(choice.node)
            break


class Spread:
    """The spread policy (``rebalance.spread``)."""

    name = "spread"

    def __init__(self, cfg: SpreadConfig) -> None:
        self.cfg = cfg

    def propose(self, ctx: Context) -> None:
        propose(ctx, self.cfg)
