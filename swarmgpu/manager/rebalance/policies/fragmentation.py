"""Fragmentation: the single moves of running GPU shares that lower FGD's fragmentation of
the cluster most, with nothing pending and nothing hot.

The search is :class:`swarmgpu.allocator.defrag.FragmentationMoves`, the same object
``simulate --rebalance-moves`` drives, so the simulator's moves figures measure this
policy's search (not the limits on targets below; the budgets per cycle and per node only
with ``--move-limits daemon``). Here it reads the ledger (what runs where), the workload
(``Inputs.workload``: placement's model; else the typical tasks of the services annotated
now) and the daemon's limits on targets: a node that is ready, active and has known
metrics, a GPU that is verified free (known, not hot, not held for a preemptor:
``Inputs.held``, where tasks Swarm is stopping still use it only the rest of their share
counted free; below ``hotspot.clear_pct`` with the load the pass's earlier moves put on
it, and, checked once the search chose it, with the share's own load: a move that fails
that, or Swarm's word on CPU, memory and host ports with the pass's moves counted, is
dropped, said, and the search runs again without that target for that share), the
service's own constraints, no node the service already holds, and, when the spread policy
runs, no target that spread would undo. The search counts CPU as FGD's score does: its
allocator counts what the nodes' tasks, the holdings whose task does not exist yet and the
pass's moves reserve, and each share asks what its service reserves, so a node with GPUs
free and no CPU left for the share is not chosen.

Only single-GPU shares of services that may move now (``Context.movable``: opt-out,
cooldown, converged, no move in flight) are candidates, and no share with zone rules
(placement's zone choice stands). Up to ``max_moves_per_cycle`` moves are proposed, each
the best after the ones before; the mover admits them against its budgets (moves per
hour and per 100 placements among them).

A global service's share never leaves its node (Swarm runs its task on every gated
node): after the moves between nodes, its shares are searched for the move between GPUs
of their own node that lowers the node's fragmentation most (``best_local_move``; the
mover makes it a repin, ``rebalance/repin.py``). Replicated shares keep the search between
nodes (moves within one node were measured to add nothing there: placement already packs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from typing import cast

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.defrag import (
    Ban,
    DefragMove,
    FragmentationMoves,
    Held,
    Targets,
    movable,
    searchable,
)
from swarmgpu.allocator.values import Choice, NodeState
from swarmgpu.core.rebalanceconfig import FragmentationConfig
from swarmgpu.manager.placement import ClusterAllocator, demand_of
from swarmgpu.manager.placement.specs import schedulable
from swarmgpu.manager.rebalance.context import Context, constraints_allow
from swarmgpu.manager.rebalance.moves import Trigger
from swarmgpu.swarm.swarmnode import unread_source

_PCT_EPS = 1e-9


def _cap(node: NodeState) -> int:
    return sum(g.capacity_milli for g in node.spec.gpus if g.healthy and not g.mig_enabled)


def _alloc_pct(node: NodeState) -> float | None:
    cap = _cap(node)
    if not cap:
        return None
    free = sum(f for f, g in zip(node.free, node.spec.gpus, strict=True)
               if g.healthy and not g.mig_enabled)
    return 100.0 * (cap - free) / cap


def _key(key: Hashable) -> tuple[str, str]:
    """(service, source node id): the keys ``_running_shares`` gives its tasks."""
    svc, nid = cast(tuple[str, str], key)
    return svc, nid


def _consistent_gpus(ctx: Context, alloc: Allocator) -> set[tuple[str, int]]:
    """(node, GPU) whose ledger holdings are exactly what the allocator counts as used (a
    holding it refused, e.g. an over-committed GPU, makes the GPU's state unreliable:
    nothing on it is moved)."""
    used: dict[tuple[str, int], int] = {}
    for by_node in ctx.ledger.values():
        for nid, h in by_node.items():
            f = ctx.inp.facts.get(nid)
            if f is None:
                continue
            index = {g.uuid: i for i, g in enumerate(f.gpus)}
            for u, m in zip(h.uuids, h.milli, strict=True):
                if u in index:
                    used[(nid, index[u])] = used.get((nid, index[u]), 0) + m
    return {k for k, m in used.items() if k[0] in alloc.nodes
            and alloc.nodes[k[0]].spec.gpus[k[1]].capacity_milli - alloc.nodes[k[0]].free[k[1]]
            == m}


def _running_shares(ctx: Context, alloc: Allocator) -> tuple[list[Held], list[Held]]:
    """The candidate shares: (those that may move to another node, those that may only
    move between GPUs of their node: a global service's)."""
    held: list[Held] = []
    local: list[Held] = []
    ok = _consistent_gpus(ctx, alloc)
    for svc in sorted(ctx.ledger):
        req = ctx.requests.get(svc)
        if (req is None or not req.is_fraction or req.mig_profile or req.zone_prefer
                or req.zone_avoid):
            continue
        if ctx.movable(svc) is None:
            out = held
        elif ctx.by_name[svc].mode == "global" and ctx.movable(svc, same_node=True) is None:
            out = local
        else:
            continue
        d = demand_of(req, *ctx.targets.reservation(svc))  # what its new task reserves
        for nid, h in sorted(ctx.ledger[svc].items()):
            f = ctx.inp.facts.get(nid)
            if unread_source(ctx.nodes, nid):
                continue
            if f is None or len(h.uuids) != 1 or h.milli != (d.gpu_milli,):
                continue  # not (yet) what the request asks: placement re-places it
            idx = next((i for i, g in enumerate(f.gpus) if g.uuid == h.uuids[0]), None)
            if idx is None or (nid, idx) not in ok:
                continue
            out.append(Held((svc, nid), d, Choice(nid, (idx,), h.milli, 0.0,
                                                  f"held by {svc}")))
    return held, local


def _free_now(node: NodeState) -> tuple[int, ...]:
    # A MIG GPU counts as full (as the cross-node search counts it).
    return tuple(0 if g.mig_enabled else f for f, g in zip(node.free, node.spec.gpus,
                                                            strict=True))


def _count_stopping(ctx: Context, alloc: Allocator) -> None:
    """The shares tasks Swarm is stopping hold (``Context.held_share``) counted used on
    ``alloc``, as placement counts them: the search moves a share into the rest of such
    a GPU only. Counted after the candidates are read (their GPUs' ledger is the
    allocator's, ``_consistent_gpus``)."""
    for nid, node in alloc.nodes.items():
        for i, g in enumerate(ctx.inp.facts[nid].gpus):
            share = ctx.held_share(None, nid, g.uuid)
            if share and i < len(node.free) and (take := min(share, node.free[i])) > 0:
                alloc.commit(Choice(nid, (i,), (take,), 0.0, "held for tasks Swarm is stopping"))


def best_local_move(alloc: Allocator, local: list[Held], policy: FragmentationMoves,
                    gpu_ok: Callable[[NodeState, int], bool],
                    node_ok: Callable[[NodeState], bool]) -> DefragMove | None:
    """The single move between GPUs of one node that lowers the fragmentation most (a
    global service's share: it never leaves its node), or None. The gain is the drop of
    the node's cost; its CPU does not change."""
    best: DefragMove | None = None
    for h in local:
        node = alloc.nodes.get(h.choice.node)
        if node is None or not movable(h) or not searchable(node) or not node_ok(node):
            continue
        g, milli = h.choice.gpus[0], h.choice.milli[0]
        free = _free_now(node)
        before = policy.cost(node.product, node.cpu_left, free)
        for g2 in alloc.eligible_gpus(node, h.demand):
            if g2 == g or free[g2] < milli or not gpu_ok(node, g2):
                continue
            after = list(free)
            after[g] += milli
            after[g2] -= milli
            gain = before - policy.cost(node.product, node.cpu_left, tuple(after))
            if gain > (best.gain if best is not None else 0.0) + 1e-6:
                best = DefragMove(h.key, h.demand, h.choice,
                                  Choice(node.spec.name, (g2,), h.choice.milli, 0.0,
                                         "same-node move"), gain)
    return best


def propose(ctx: Context, own: FragmentationConfig) -> None:
    cfg = ctx.cfg
    budget = cfg.max_moves_per_cycle
    if budget <= 0 or own.moves_per_hour <= 0 or own.moves_per_100_placements <= 0:
        return
    workload = ctx.workload()
    # What the nodes' tasks and holdings reserve counted, as FGD's score counts the CPU
    # left (a node with GPUs free and no CPU left is no target for a task reserving some)
    alloc = ctx.allocator(None, ()).alloc
    held, local = _running_shares(ctx, alloc)
    if not workload or not (held or local):
        return
    _count_stopping(ctx, alloc)
    policy = FragmentationMoves(workload)
    spread = "spread" in cfg.enabled_policies
    pct = {nid: p for nid, n in alloc.nodes.items() if (p := _alloc_pct(n)) is not None}
    low = {nid for nid, p in pct.items() if p < cfg.spread.low_pct and ctx.node_known(nid)}

    def node_ok(node: NodeState) -> bool:
        # (blocked: one whose facts are stale, ``Inputs.stale``; a same-node move's too)
        n = ctx.nodes.get(node.spec.name)
        return (n is not None and schedulable(n) and not node.blocked
                and ctx.node_known(node.spec.name))

    def gpu_ok(node: NodeState, i: int) -> bool:  # (the pass's earlier moves' load too)
        nid = node.spec.name
        uuid = ctx.inp.facts[nid].gpus[i].uuid
        sig = ctx.inp.gpus.get((nid, uuid))
        return (sig is not None and ctx.gpu_ok_as_target(sig, 0.0)
                and ctx.held_share(None, nid, uuid) is not None)  # (a preemptor's: whole)

    def task_ok(h: Held, node: NodeState) -> bool:
        svc, src = _key(h.key)
        dst = node.spec.name
        s = ctx.by_name[svc]
        if dst in ctx.ledger.get(svc, {}) or dst in ctx.refused(svc) \
                or not constraints_allow(s, ctx.nodes[dst], ctx.inp.prefix):
            return False
        if not spread or dst not in pct:
            return True
        # Spread would move it back: the target squeezed while a node stays (or the
        # source becomes) nearly empty.
        milli = h.demand.gpu_milli
        if pct[dst] + 100.0 * milli / _cap(node) <= cfg.spread.high_pct + _PCT_EPS:
            return True
        src_cap = _cap(alloc.nodes[src])
        after_src = pct[src] - 100.0 * milli / src_cap if src in pct and src_cap else 100.0
        emptied = after_src < cfg.spread.low_pct and ctx.node_known(src)
        return not (low - {dst} or emptied)

    before = [policy.cluster_cost(alloc)]
    room = ctx.allocator(None, ())  # CPU and memory, as Swarm counts

    def check(mv: DefragMove) -> Ban | None:
        """Each move the search finds: proposed (None), or why not (what it must not
        try again)."""
        ban = _refusal(ctx, room, mv)
        if ban is None:
            before[0] = _accept(ctx, mv, before[0], len(workload))
        return ban

    n = len(policy.plan(alloc, held, budget, targets=Targets(node_ok, gpu_ok, task_ok),
                        again=False, check=check)) if held else 0
    while n < budget and local:  # then global services' shares, on their node
        mv = best_local_move(alloc, local, policy, gpu_ok, node_ok)
        if mv is None:
            break
        local = [h for h in local if h.key != mv.key]
        if check(mv) is not None:
            continue  # the share stays; the others' moves are searched without it
        alloc.release(mv.old)
        alloc.commit(mv.new)
        n += 1


def _accept(ctx: Context, mv: DefragMove, before: float, n_shapes: int) -> float:
    """Propose ``mv``; returns the cluster's fragmentation after it."""
    svc, src = _key(mv.key)
    share = before and 100.0 * mv.gain / before
    src_host = ctx.nodes[src].hostname
    dst_host = ctx.nodes[mv.new.node].hostname
    where = " (same node: only this node's task is replaced)" if src == mv.new.node else ""
    m = ctx.make_move(
        svc, src, mv.new, Trigger.FRAGMENTATION, None,
        reason=(f"{src_host} GPU {mv.old.gpus[0]} -> {dst_host} GPU {mv.new.gpus[0]}"
                f"{where}: the move that lowers the cluster's fragmentation most (FGD, "
                f"against {n_shapes} typical task shape(s))"),
        gain=(f"fragmentation -{mv.gain:.0f} GPU-milli ({mv.gain / 1000:.2f} GPU, "
              f"{share:.1f}% of the cluster's {before:.0f})"))
    ctx.accept(dataclasses.replace(m, frag_gain_milli=mv.gain, frag_before_milli=before))
    return before - mv.gain


def _refusal(ctx: Context, room: ClusterAllocator, mv: DefragMove) -> Ban | None:
    """What the search cannot judge (``gpu_ok`` and ``task_ok`` know no GPU's load and
    not the moves accepted in the pass): the share's own load and the load of the moves
    accepted before it keep the target GPU below ``hotspot.clear_pct``; no move before
    it took a host-mode port of the service there; the node has the CPU and memory its
    task reserves (``room``: the nodes' tasks, the holdings whose task does not exist
    yet and the accepted moves counted; this one is added when it passes; the search
    counts them too, so this only guards it). Else the plan's note says why it is
    dropped, and the target the search must not offer that share again is returned: the
    GPU (its load), or the whole node."""
    svc, src = _key(mv.key)
    new = mv.new
    host = f"{ctx.nodes[new.node].hostname} GPU {new.gpus[0]}"
    uuid = ctx.inp.facts[new.node].gpus[new.gpus[0]].uuid
    sig = ctx.inp.gpus.get((new.node, uuid))
    add = ctx.load_of(svc, src)
    ns = room.alloc.nodes.get(new.node)
    cpu, mem = ctx.targets.reservation(svc)
    why = ""
    if sig is None or not ctx.gpu_ok_as_target(sig, add):
        now = sig.util_pct if sig is not None and sig.util_pct is not None else 0.0
        why = (f"with its load (about {add:.0f} points) and that of the moves before it "
               f"({ctx.load.get((new.node, uuid), 0.0):.0f}) that GPU ({now:.0f}% now) "
               f"would reach hotspot.clear_pct ({ctx.cfg.hotspot.clear_pct:g}%)")
    elif new.node != src and new.node in ctx.refused(svc):
        why = "Swarm would not run its task there (a move before it took its host-mode port)"
    elif new.node != src and ns is not None and (
            (cpu and ns.cpu_left is not None and ns.cpu_left < cpu)
            or (mem and ns.mem_left is not None and ns.mem_left < mem)):
        why = "Swarm would not run its task there (the CPU or memory it reserves)"
    if why:
        ctx.notes.append(f"fragmentation: {svc} not moved to {host}: {why}")
        return (mv.key, new.node, new.gpus if why.startswith("with its load") else ())
    if new.node != src and (cpu or mem) and ns is not None:
        room.add_usage(new.node, cpu, mem)
    return None


class Fragmentation:
    """The fragmentation policy (``rebalance.fragmentation``)."""

    name = "fragmentation"

    def __init__(self, cfg: FragmentationConfig) -> None:
        self.cfg = cfg

    def propose(self, ctx: Context) -> None:
        propose(ctx, self.cfg)
