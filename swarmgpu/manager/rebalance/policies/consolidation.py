"""Consolidation / idle clean-up: pack fractional services from under-used shared GPUs.

Acts on a node whose free share is fragmented (``frag_pct`` held for its window) and
on a GPU of it that stayed under the low threshold for its window: when every holder
of that GPU can move to partly used GPUs elsewhere (keeping them below the hot clear
threshold), the GPU becomes whole again. Only then are the moves proposed.
"""

from __future__ import annotations

from swarmgpu.core.rebalanceconfig import ConsolidationConfig
from swarmgpu.manager.rebalance.attribution import add_holder
from swarmgpu.manager.rebalance.context import Context
from swarmgpu.manager.rebalance.moves import Trigger
from swarmgpu.manager.rebalance.windows import State


def propose(ctx: Context, cfg: ConsolidationConfig) -> None:
    holders = ctx.holders()
    for nid, ns in sorted(ctx.inp.node_signals.items(), key=lambda kv: -kv[1].frag_pct):
        if ns.frag is not State.TRUE or not ns.known:
            continue
        idle = [g for g in ctx.inp.gpus.values()
                if g.node_id == nid and g.idle is State.TRUE]
        for g in sorted(idle, key=lambda g: sum(s.milli for s in holders.get(g.uuid, []))):
            on = [s for s in holders.get(g.uuid, []) if s.node_id == nid]
            if not on or any(len(s.holding.uuids) != 1 or s.milli >= 1000 for s in on):
                continue
            if any(ctx.movable(s.service) is not None for s in on):
                continue
            st = ctx.statement()  # every holder moves, or none
            for s in on:
                est = ctx.share_util(s.service, nid, g.uuid, g.util_pct)
                choice = ctx.find_target(s.service, nid, add_util=est, only_shared=True,
                                         st=st)
                if choice is None:
                    break
                m = ctx.make_move(
                    s.service, nid, choice, Trigger.CONSOLIDATION, cfg.idle_window_s,
                    reason=(f"{ns.hostname} GPU {g.index} under {cfg.idle_util_pct:g}% util "
                            f"for {cfg.idle_window_s:g}s and {ns.frag_pct:.0f}% of the node's "
                            f"free share is fragmented (> {cfg.frag_pct:g}% for "
                            f"{cfg.frag_window_s:g}s)"),
                    gain=f"frees {ns.hostname} GPU {g.index} as a whole GPU")
                st.move(m)
            if len(st.moves) == len(on):
                st.commit()
                # Counted: a GPU these moves land on holds them now (and they may not
                # move again), so it is not freed; judged on the old read, its holders
                # went to the GPU just freed, the source the moves still reserve. Added
                # to the read, not read again: a pass over every holding per commit.
                for m in st.moves:
                    add_holder(holders, ctx.ledger[m.service][m.target_node])


class Consolidation:
    """The consolidation policy (``rebalance.consolidation``)."""

    name = "consolidation"

    def __init__(self, cfg: ConsolidationConfig) -> None:
        self.cfg = cfg

    def propose(self, ctx: Context) -> None:
        propose(ctx, self.cfg)
