"""Hot spot: a shared GPU above the high threshold for its whole window.

Moving one holder off a GPU whose other holders keep running relieves it; a GPU held
by one service alone gains nothing from a move (the load moves with it), so such a
GPU is only noted. The smallest movable share goes (least disruption), to the best
target the allocator finds on another node whose GPUs are known and would stay cool.
"""

from __future__ import annotations

from swarmgpu.core.rebalanceconfig import HotspotConfig
from swarmgpu.manager.rebalance.context import Context
from swarmgpu.manager.rebalance.moves import Trigger
from swarmgpu.manager.rebalance.windows import State


def propose(ctx: Context, cfg: HotspotConfig) -> None:
    holders = ctx.holders()
    hot = sorted((g for g in ctx.inp.gpus.values() if g.hot is State.TRUE),
                 key=lambda g: (-(g.util_pct or 0), g.uuid))
    for g in hot:
        host = ctx.nodes[g.node_id].hostname if g.node_id in ctx.nodes else g.node_id
        on = [s for s in holders.get(g.uuid, []) if s.node_id == g.node_id]
        if len(on) < 2:
            ctx.notes.append(f"{host} GPU {g.index} hot ({g.util_pct:.0f}%) but held by "
                             f"{len(on)} service(s): a move would carry the load along")
            continue
        cands = sorted(on, key=lambda s: (s.milli, s.service))
        for share in cands:
            why = ctx.movable(share.service)
            if why is not None:
                ctx.notes.append(f"hot spot {host} GPU {g.index}: {share.service} stays: {why}")
                continue
            est = ctx.share_util(share.service, g.node_id, g.uuid, g.util_pct)
            choice = ctx.find_target(share.service, g.node_id, add_util=est)
            if choice is None:
                ctx.notes.append(f"hot spot {host} GPU {g.index}: no verified-free target "
                                 f"for {share.service}")
                continue
            ctx.accept(ctx.make_move(
                share.service, g.node_id, choice, Trigger.HOTSPOT, cfg.window_s,
                reason=(f"{host} GPU {g.index} above {cfg.util_pct:g}% util for "
                        f"{cfg.window_s:g}s (now {g.util_pct:.0f}%), shared by "
                        f"{len(on)} services"),
                gain=f"about {est:.0f} points of util off {host} GPU {g.index}"))
            break


class Hotspot:
    """The hot-spot policy (``rebalance.hotspot``)."""

    name = "hotspot"

    def __init__(self, cfg: HotspotConfig) -> None:
        self.cfg = cfg

    def propose(self, ctx: Context) -> None:
        propose(ctx, self.cfg)
