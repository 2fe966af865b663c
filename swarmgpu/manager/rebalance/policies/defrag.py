"""Defragmentation: a pending request that fits after moving K tasks; fewest moves wins.

For each pending service and node, try every set of at most ``max_moves``
movable holdings on that node (fewest first): move them to their best targets
elsewhere and see whether the pending request then fits there. The first plan with
the smallest K, over all nodes in allocator order, is proposed.
"""

from __future__ import annotations

import itertools

from swarmgpu.core.rebalanceconfig import DefragConfig
from swarmgpu.manager.placement import Holding, demand_of
from swarmgpu.manager.rebalance.context import Context, Statement
from swarmgpu.manager.rebalance.moves import Trigger

_MAX_COMBOS = 500  # per pending service: bounds the search on crowded nodes


def _try(ctx: Context, node: str, combo: tuple[tuple[str, Holding], ...], pending: str
         ) -> Statement | None:
    """The moves of ``combo`` off ``node``, when the pending request then fits there."""
    req = ctx.requests[pending]
    st = ctx.statement(evict=[(svc, node) for svc, _ in combo])
    for svc, _h in combo:
        choice = ctx.find_target(svc, node, ledger=st.ledger)
        if choice is None:
            return None
        st.move(ctx.make_move(
            svc, node, choice, Trigger.DEFRAG, None,
            reason=f"makes room for pending {pending} ({req.describe()}) on "
                   f"{ctx.nodes[node].hostname}",
            gain=f"pending {pending} can be placed"))
    alloc = ctx.allocator(st.ledger)
    if node not in alloc.alloc.nodes:
        return None
    ok = alloc.alloc.place_on(node, demand_of(req))
    return st if getattr(ok, "gpus", None) else None


def propose(ctx: Context, cfg: DefragConfig) -> None:
    k_max = cfg.max_moves
    for pending in sorted(ctx.inp.pending):
        req = ctx.requests.get(pending)
        if req is None or req.mig_profile or k_max == 0:
            continue
        has = set(ctx.ledger.get(pending, {}))
        per_node: dict[str, list[tuple[str, Holding]]] = {}
        for svc, by_node in ctx.ledger.items():
            for nid, h in by_node.items():
                if svc != pending and nid not in has and ctx.movable(svc) is None:
                    per_node.setdefault(nid, []).append((svc, h))
        best: Statement | None = None
        tried = 0
        for k in range(1, k_max + 1):
            for nid in sorted(per_node, key=lambda n: ctx.nodes[n].hostname):
                n = ctx.nodes[nid]
                if n.state != "ready" or n.availability != "active":
                    continue
                for combo in itertools.combinations(sorted(per_node[nid]), k):
                    tried += 1
                    if tried > _MAX_COMBOS:
                        break
                    got = _try(ctx, nid, combo, pending)
                    if got is not None:
                        best = got
                        break
                if best is not None:
                    break
            if best is not None:
                break
        if best is None:
            ctx.notes.append(f"pending {pending}: no plan of <= {k_max} move(s) makes room")
            continue
        best.commit()


class Defrag:
    """The defragmentation policy (``rebalance.defrag``)."""

    name = "defrag"

    def __init__(self, cfg: DefragConfig) -> None:
        self.cfg = cfg

    def propose(self, ctx: Context) -> None:
        propose(ctx, self.cfg)
