"""Defragmentation: a pending request that fits after moving K tasks; fewest moves wins.

The candidate plans are the shared search's (``swarmgpu.allocator.rescue.plans``, what
``simulate --rebalance-moves`` carries out for a pod that finds no node): per node Swarm
would run the pending task on, the
fewest movable holdings (at most ``max_moves``) whose GPU share, CPU and memory, given
back, let the pending request fit there (the nodes' CPU and memory as Swarm counts them:
its tasks', the holdings' whose task does not exist yet, the pass's moves'; the
request's reservation asked); cheapest first (fewest moves, least GPU moved, node
order), none of it on GPUs held for another preemptor (``Inputs.held``: counted used; a
stopping task's share of its GPU counted so, the rest free). The cheapest few
(``MAX_TRIES``) are tried for real under the daemon's rules: each holding moves to its
best target elsewhere (``Context.find_target``: ready nodes with known metrics,
verified-free GPUs, the service's constraints), and the pending request must then fit on
the node they left: its GPUs, and the CPU and memory it reserves beside the node's other
tasks (the moved ones' given back), as Swarm counts, and none of the GPUs held there for
another preemptor (``Inputs.held``), which placement does not give it.
The first plan that holds is proposed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from collections.abc import Set as AbstractSet
from dataclasses import replace

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.rescue import MAX_TRIES, plans
from swarmgpu.allocator.values import Choice, Demand, NodeState
from swarmgpu.core.rebalanceconfig import DefragConfig
from swarmgpu.manager.placement import ClusterAllocator, Holding, demand_of
from swarmgpu.manager.placement.keys import MEANT_STATES
from swarmgpu.manager.placement.specs import schedulable
from swarmgpu.manager.rebalance.context import Context, Statement
from swarmgpu.manager.rebalance.moves import Trigger
from swarmgpu.manager.rebalance.signals import GpuSignal


def _try(ctx: Context, node: str, combo: tuple[tuple[str, Holding], ...], pending: str
         ) -> Statement | None:
    """The moves of ``combo`` off ``node``, when the pending request then fits there."""
    req = ctx.requests[pending]
    st = ctx.statement(evict=[(svc, node) for svc, _ in combo])
    for svc, _h in combo:
        choice = ctx.find_target(svc, node, st=st)
        if choice is None:
            return None
        st.move(ctx.make_move(
            svc, node, choice, Trigger.DEFRAG, None,
            reason=f"makes room for pending {pending} ({req.describe()}) on "
                   f"{ctx.nodes[node].hostname}",
            gain=f"pending {pending} can be placed"))
    # As Swarm's resource filter counts: what the node's tasks and the pass's moves onto
    # it reserve, less the moved tasks' (they leave), and what the pending task reserves.
    alloc = ctx.allocator(st.ledger, st.moves)
    if node not in alloc.alloc.nodes:
        return None
    cpu, mem = alloc.alloc.usage(node)
    for sid in {ctx.by_name[svc].id for svc, _h in combo}:
        for t in ctx.tasks_of(sid):
            if t.node_id == node and t.desired_state in MEANT_STATES:
                cpu, mem = cpu - t.cpu_milli, mem - t.memory_mib
    alloc.alloc.set_usage(node, max(0, cpu), max(0, mem))
    ctx.count_held(alloc, node, pending)
    ok = alloc.alloc.place_on(node, demand_of(req, *ctx.targets.reservation(pending)))
    return st if getattr(ok, "gpus", None) else None


# What no GPU satisfies: the search's stand-in for GPUs held for another preemptor, or
# used by a holding that may not move, is a task that cannot move (``rescue.plans``
# never counts its GPUs as room; a used GPU holding no task counts as room to it).
_STUCK = 1 << 62


def _stuck(nid: str, gpus: tuple[int, ...], why: str) -> tuple[Demand, Choice]:
    return (Demand(num_gpu=len(gpus), min_memory_mib=_STUCK),
            Choice(node=nid, gpus=gpus, milli=(0,) * len(gpus), score=0.0, explanation=why))


def _hide_held(ctx: Context, held: ClusterAllocator,
               running: dict[str, dict[str, tuple[Demand, Choice]]], pending: str) -> None:
    """The GPUs held for a preemptor other than ``pending`` kept out of the search's
    room: counted used on its copy ``held`` (``Context.count_held``), and, where the search looks
    (``running``'s nodes), occupied by a task that cannot move (a used GPU holding no
    task counts as room to it). Counted free, plans needing them used up ``MAX_TRIES``
    before a workable one was tried (``_try`` checks them too)."""
    for nid in sorted(held.alloc.nodes):
        gpus = ctx.count_held(held, nid, pending)
        if gpus and nid in running:
            running[nid][f"held for a preemptor on {nid}"] = _stuck(
                nid, gpus, "held for a preemptor")


def _movers_room(ctx: Context) -> ClusterAllocator:
    """Where the search asks whether a holding can go elsewhere: the GPUs no move's
    target counted used, by the rules the moves' targets are found by (``Context.
    find_target``): held ones (``block_targets``), and those not verified free (a GPU
    hot or unread even before the mover's load is added, any GPU of a node whose
    metrics are unknown). The pending request's room (``count_held``) is placement's: a
    GPU held for the pending service itself, or held for another and partly used, is
    free to it but no move's target; judged so, plans whose tasks had nowhere to go used
    up ``MAX_TRIES`` (before stop 76 held GPUs, then hot and unread ones). Held from
    every service, its own hold too: the search asks by demand, so a holder of a live
    hold never moves (``_running``): converged all the same (its preemption step cut
    before ``keep`` ended the hold), it moved onto room the search did not count. A
    service's own rules (its constraints, its other nodes) are ``_barred``'s."""
    room = ctx.allocator(None, ())

    def unverified(node: NodeState, _i: int, _uuid: str, sig: GpuSignal | None) -> bool:
        return (sig is None or not ctx.node_known(node.spec.name)
                or not ctx.gpu_ok_as_target(sig, 0.0))

    ctx.block_targets(room, None, unverified)
    return room


def _barred(ctx: Context, bar: dict[str, frozenset[str]]
            ) -> Callable[[Hashable, str], AbstractSet[str]]:
    """The search's ``barred``: the nodes besides its own a holding's move may not go to
    by its service's rules, as ``Context.find_target`` asks them (Swarm's filters:
    ``Context.refused``; the nodes it holds). Asked by demand alone, a holding pinned by
    its constraints counted as movable, and plans it was in used up ``MAX_TRIES``.
    ``bar``: service -> those nodes, filled as asked (the caller's, as ``may``)."""
    def barred(tid: Hashable, node: str) -> AbstractSet[str]:
        svc = str(tid)
        if svc not in bar:
            bar[svc] = frozenset(ctx.refused(svc) | ctx.ledger.get(svc, {}).keys())
        return bar[svc] - {node}
    return barred


def _running(ctx: Context, held: ClusterAllocator, pending: str, may: dict[str, bool]
             ) -> dict[str, dict[str, tuple[Demand, Choice]]]:
    """Per ready, active node Swarm would run the pending task on (its constraints,
    platforms, plugins, host ports: ``Context.refused``): the holdings that may move now
    (not the pending service's, not on a node it holds), each with what its new task
    reserves and the choice ``held`` committed for it, carrying the CPU and memory its
    tasks there reserve (they leave with it: the search gives them back); those that
    may not (opted out, unconverged, cooling down, no GPU request, the holder of a live
    hold: ``_movers_room`` holds its GPUs from it too) as tasks that cannot move. Left
    out, their GPUs counted as room no move was needed for, and a node with one got no
    plan at all. ``may``: service -> may move now, filled as asked (the
    caller's, for the pass while no plan is committed)."""
    has = set(ctx.ledger.get(pending, {})) | ctx.refused(pending)
    holders = {who for who, _pr in ctx.inp.held.values()}
    out: dict[str, dict[str, tuple[Demand, Choice]]] = {}
    use: dict[tuple[str, str], tuple[int, int]] = {}  # (service id, node) -> its tasks'
    for t in ctx.inp.tasks:
        if t.desired_state in MEANT_STATES and t.node_id and (t.cpu_milli or t.memory_mib):
            u = use.get((t.service_id, t.node_id), (0, 0))
            use[(t.service_id, t.node_id)] = (u[0] + t.cpu_milli, u[1] + t.memory_mib)
    for (svc, nid), h in held.held_items():
        req = ctx.requests.get(svc)
        n = ctx.nodes.get(nid)
        if (svc == pending or h.choice is None or not h.choice.gpus
                or nid in has or n is None or not schedulable(n)):
            continue
        if svc not in may:
            may[svc] = req is not None and svc not in holders and ctx.movable(svc) is None
        if not may[svc]:
            out.setdefault(nid, {})[svc] = _stuck(nid, h.choice.gpus, "may not move")
        elif req is not None:
            cpu, mem = use.get((ctx.by_name[svc].id, nid), (0, 0))
            out.setdefault(nid, {})[svc] = (
                demand_of(req, *ctx.targets.reservation(svc)),
                replace(h.choice, cpu_milli=h.choice.cpu_milli + cpu,
                        memory_mib=h.choice.memory_mib + mem))
    return out


def propose(ctx: Context, cfg: DefragConfig) -> None:
    k_max = cfg.max_moves
    # Which holdings may move and where movers may go change only as a plan is
    # committed: built again for each pending request, they took most of defrag's time
    # on a big cluster where pending requests found no plan.
    may: dict[str, bool] = {}
    bar: dict[str, frozenset[str]] = {}
    away: Allocator | None = None
    for pending in sorted(ctx.inp.pending):
        req = ctx.requests.get(pending)
        # (gpus: "0": GPU work is not moved for CPU work, as it is not preempted for it)
        if req is None or req.mig_profile or req.cpu_only or k_max == 0:
            continue
        # CPU and memory counted (the nodes' tasks, the holdings whose task does not
        # exist yet, the pass's moves) and asked (the pending task's reservation): a
        # search blind to them planned room the last check (``_try``) then refused
        held = ctx.allocator(None, ())
        running = _running(ctx, held, pending, may)
        _hide_held(ctx, held, running, pending)
        best: Statement | None = None
        want = demand_of(req, *ctx.targets.reservation(pending))
        if running:
            if away is None:
                away = _movers_room(ctx).alloc
            for plan in plans(held.alloc, running, want, k_max, elsewhere=away,
                              barred=_barred(ctx, bar))[:MAX_TRIES]:
                combo = tuple((str(svc), ctx.ledger[str(svc)][plan.node])
                              for svc in plan.tasks)
                best = _try(ctx, plan.node, combo, pending)
                if best is not None:
                    break
        if best is None:
            ctx.notes.append(f"pending {pending}: no plan of <= {k_max} move(s) makes room")
            continue
        best.commit()
        may, bar, away = {}, {}, None  # the pass's ledger, moves and load changed


class Defrag:
    """The defragmentation policy (``rebalance.defrag``)."""

    name = "defrag"

    def __init__(self, cfg: DefragConfig) -> None:
        self.cfg = cfg

    def propose(self, ctx: Context) -> None:
        propose(ctx, self.cfg)
