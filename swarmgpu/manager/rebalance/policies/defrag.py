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

from collections.abc import Callable, Hashable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace

from swarmgpu.allocator.rescue import MAX_TRIES, plans
from swarmgpu.allocator.values import Choice, Demand, NodeState
from swarmgpu.core.rebalanceconfig import DefragConfig
from swarmgpu.manager.placement import ClusterAllocator, Holding, demand_of
from swarmgpu.manager.placement.keys import MEANT_STATES
from swarmgpu.manager.placement.specs import schedulable
from swarmgpu.manager.rebalance.context import Context, Statement
from swarmgpu.manager.rebalance.moves import Move, Trigger
from swarmgpu.manager.rebalance.signals import GpuSignal
from swarmgpu.manager.rebalance.trial import Trial


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
    with ctx.trial(st.moves, st.evict) as trial:
        alloc = trial.alloc
        if node not in alloc.alloc.nodes:
            return None
        cpu, mem = alloc.alloc.usage(node)
        for sid in {ctx.by_name[svc].id for svc, _h in combo}:
            for t in ctx.tasks_of(sid):
                if t.node_id == node and t.desired_state in MEANT_STATES:
                    cpu, mem = cpu - t.cpu_milli, mem - t.memory_mib
        trial.set_usage(node, max(0, cpu), max(0, mem))
        ctx.count_held(alloc, node, pending, trial.taken)
        ok = alloc.alloc.place_on(node, demand_of(req, *ctx.targets.reservation(pending)))
    return st if getattr(ok, "gpus", None) else None


# What no GPU satisfies: the search's stand-in for GPUs held for another preemptor, or
# used by a holding that may not move, is a task that cannot move (``rescue.plans``
# never counts its GPUs as room; a used GPU holding no task counts as room to it).
_STUCK = 1 << 62


def _stuck(nid: str, gpus: tuple[int, ...], why: str) -> tuple[Demand, Choice]:
    return (Demand(num_gpu=len(gpus), min_memory_mib=_STUCK),
            Choice(node=nid, gpus=gpus, milli=(0,) * len(gpus), score=0.0, explanation=why))


def _hide_held(ctx: Context, held: Trial,
               running: dict[str, dict[str, tuple[Demand, Choice]]], pending: str) -> None:
    """The GPUs held for a preemptor other than ``pending`` kept out of the search's
    room: counted used on its copy ``held`` (``Context.count_held``), and, where the search looks
    (``running``'s nodes), occupied by a task that cannot move (a used GPU holding no
    task counts as room to it). Counted free, plans needing them used up ``MAX_TRIES``
    before a workable one was tried (``_try`` checks them too)."""
    for nid in sorted(held.alloc.alloc.nodes):
        gpus = ctx.count_held(held.alloc, nid, pending, held.taken)
        if gpus and nid in running:
            running[nid][f"held for a preemptor on {nid}"] = _stuck(
                nid, gpus, "held for a preemptor")


def _movers_room(ctx: Context, kept: Trial | None = None, since: Sequence[Move] = ()
                 ) -> Trial:
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
    service's own rules (its constraints, its other nodes) are ``_barred``'s.
    ``kept``: the room made before the moves ``since`` were accepted, brought in step
    (its blocks taken back, those moves counted: ``Context.accept``) where a build
    cost a pass over every holding and task; None (or ``Context.fresh_trials``),
    built anew."""
    if kept is None or Context.fresh_trials:
        room = Trial(ctx.allocator(None, ()))
    else:
        room = kept
        room.undo()
        for m in since:
            ctx.count_move(room.alloc, m, +1)

    def unverified(node: NodeState, _i: int, _uuid: str, sig: GpuSignal | None) -> bool:
        return (sig is None or not ctx.node_known(node.spec.name)
                or not ctx.gpu_ok_as_target(sig, 0.0))

    ctx.block_targets(room.alloc, None, unverified, room.taken)
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
    # (in the ledger's order, the order a new allocator commits them in: a kept one
    # commits again at its end what a check took off)
    for svc, nid in [(svc, nid) for svc, per in ctx.ledger.items() for nid in per]:
        h = held.held_at(svc, nid)
        if h is None:
            continue
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
    away: Trial | None = None
    kept: Trial | None = None  # ``away`` before the last commit (``_movers_room``)
    since: list[Move] = []  # the moves committed since
    for pending in sorted(ctx.inp.pending):
        req = ctx.requests.get(pending)
        # (gpus: "0": GPU work is not moved for CPU work, as it is not preempted for it)
        if req is None or req.mig_profile or req.cpu_only or k_max == 0:
            continue
        # CPU and memory counted (the nodes' tasks, the holdings whose task does not
        # exist yet, the pass's moves) and asked (the pending task's reservation): a
        # search blind to them planned room the last check (``_try``) then refused
        best: Statement | None = None
        want = demand_of(req, *ctx.targets.reservation(pending))
        with ctx.trial() as held:
            running = _running(ctx, held.alloc, pending, may)
            _hide_held(ctx, held, running, pending)
            if running and away is None:
                away, kept, since = _movers_room(ctx, kept, since), None, []
            tries = plans(held.alloc.alloc, running, want, k_max,
                          elsewhere=away.alloc.alloc if away is not None else None,
                          barred=_barred(ctx, bar))[:MAX_TRIES] if running else []
        for plan in tries:  # (each tried on the kept allocator: ``held`` put back)
            combo = tuple((str(svc), ctx.ledger[str(svc)][plan.node]) for svc in plan.tasks)
            best = _try(ctx, plan.node, combo, pending)
            if best is not None:
                break
        if best is None:
            ctx.notes.append(f"pending {pending}: no plan of <= {k_max} move(s) makes room")
            continue
        if any(m.target_node in ctx.ledger.get(m.service, {}) for m in best.moves):
            kept, since = None, []  # it replaces a holding: built anew when asked
        else:
            kept, since = kept or away, [*since, *best.moves]
        best.commit()
        may, bar, away = {}, {}, None  # the pass's ledger, moves and load changed


class Defrag:
    """The defragmentation policy (``rebalance.defrag``)."""

    name = "defrag"

    def __init__(self, cfg: DefragConfig) -> None:
        self.cfg = cfg

    def propose(self, ctx: Context) -> None:
        propose(ctx, self.cfg)
