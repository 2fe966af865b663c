"""Health: every holder of a failed GPU goes to a healthy GPU, before any other policy.

A failed GPU's holders are already broken (docs/health.md), so this policy waits for no
utilisation window, and the daemon acts on it even in rebalance dry-run (its own mover,
``step.py``). A degraded GPU moves nothing. Each holder goes where the allocator scores
best among the healthy GPUs its service may use (never a failed, degraded or hot one):

* on another node: a make-before-break move through the mover (trigger ``health``);
* on its own node (the only choice of a global service): a move that stays on its node,
  which the mover makes as a repin (``rebalance/repin.py``: that node's task replaced);
* where the mover may not move it (packed, opted out, not converged, MIG, several
  replicas without MaxReplicas 1 on its own node): a ``Release``. Placement then
  re-places it (a new holding on a healthy GPU and a forced update), as it re-places any
  holding that no longer fits; until released, placement keeps the holding for us.

Both spend the health budget (``HealthInputs.left``: per cycle and per hour), so one bad
node cannot start a storm; a holder is proposed once while its move or release is under
way, and a flapping GPU stays failed for its clean window (``core.health``), so its
holder moves once. With ``health.evacuate: false`` holders are only reported. A failing
node (two or more failed GPUs, or its agent lost beyond ``health.node_lost_grace_s``) is
reported; with ``rebalance.health.drain_node`` every GPU holder on a node whose GPUs fail
moves off it. An agent's loss alone moves nothing: the node's GPUs and tasks are not
known bad, only swarmgpu's reader of them is gone. No replicated service moves off a node
Swarm reports down or that is drained, where its constraints allow another: Swarm moves
its task itself (``swarmnode.swarm_moves``, ``_left_to_swarm``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from swarmgpu.allocator.values import Choice, NodeState
from swarmgpu.core.health import Level
from swarmgpu.core.rebalanceconfig import HealthPolicyConfig
from swarmgpu.core.stamps import in_hour
from swarmgpu.manager.nodes.gpuhealth import FAILING_NODE_GPUS, failing_why, level_of
from swarmgpu.manager.placement import demand_of
from swarmgpu.manager.placement.specs import schedulable
from swarmgpu.manager.placement.tasks import meant_to_run
from swarmgpu.manager.rebalance.context import Context, constraints_allow, why_not_movable
from swarmgpu.manager.rebalance.moves import HealthInputs, HealthResult, Release, Trigger
from swarmgpu.manager.rebalance.signals import GpuSignal
from swarmgpu.manager.rebalance.swarmkeeps import kept_said, swarm_keeps
from swarmgpu.manager.rebalance.windows import State
from swarmgpu.manager.services.requests import RequestError, parse_all
from swarmgpu.swarm.client import SwarmService
from swarmgpu.swarm.swarmnode import swarm_moves, unread_source


@dataclass(frozen=True)
class HealthBudget:
    """Health moves and re-placements started per rolling hour (``health.
    evacuations_per_hour``), and at most ``per_cycle`` at once. Counted from what Swarm
    holds (``record.health_spent``: the health records in flight and the list of those
    that ended or were released), never from daemon memory: a restart or a new leader
    sees the hour's spent budget, so a node flapping across leader changes cannot storm."""

    per_hour: int

    def left(self, now: float, per_cycle: int, spent: Sequence[float],
             unreadable: int = 0) -> tuple[int, str]:
        """How many may start now, given the start times ``spent``; why none when 0.
        ``unreadable``: of ``spent``, the move records that cannot be read (said)."""
        used = sum(1 for t in spent if in_hour(t, now))
        by_hour = self.per_hour - used
        if per_cycle <= 0:
            return 0, "health.evacuations_per_cycle is 0"
        if by_hour <= 0:
            what = "a move record" if unreadable == 1 else "move records"
            bad = (f", {unreadable} of them {what} that cannot be read (swarmgpu audit: "
                   "move-record-unreadable)" if unreadable else "")
            return 0, (f"budget: {self.per_hour} health move(s) per hour "
                       f"({used} in the last hour{bad})")
        return min(by_hour, per_cycle), ""


def _states(ctx: Context) -> tuple[dict[tuple[str, str], str], set[tuple[str, str]],
                                   dict[str, int]]:
    """(node id, uuid) -> text of each failed GPU; the degraded ones; failed per node."""
    failed: dict[tuple[str, str], str] = {}
    degraded: set[tuple[str, str]] = set()
    per_node: dict[str, int] = {}
    for nid, f in ctx.inp.facts.items():
        for g in f.gpus:
            lv, text = level_of(g)
            if lv is Level.FAILED:
                failed[(nid, g.uuid)] = f"GPU {g.index} ({g.uuid}) {text}"
                per_node[nid] = per_node.get(nid, 0) + 1
                for m in g.mig_devices:  # an XID names the GPU: its slices fail with it
                    failed[(nid, m.uuid)] = f"MIG {m.profile} ({m.uuid}) of GPU {g.index} {text}"
            elif lv is Level.DEGRADED:
                degraded.add((nid, g.uuid))
    return failed, degraded, per_node


def failing_nodes(ctx: Context, h: HealthInputs, per_node: dict[str, int]) -> dict[str, str]:
    """Nodes failing as a whole (``gpuhealth.failing_why``: several failed GPUs, or the
    agent lost beyond a grace)."""
    out: dict[str, str] = {}
    for nid in {*per_node, *h.lost}:
        f = ctx.inp.facts.get(nid)
        why = failing_why(per_node.get(nid, 0), len(f.gpus) if f is not None else 0,
                          h.lost.get(nid), h.lost_grace_s)
        if why is not None:
            out[nid] = why
    return out


def request_problem(s: SwarmService, prefix: str,
                    classes: Mapping[str, int] | None = None) -> str:
    """Why a holder has no GPU request to place it by: its label's error and the fix
    (``classes``: ``preemption.priority_classes``, as placement reads them)."""
    got = parse_all(s.labels, prefix=prefix, classes=classes)
    if isinstance(got, RequestError):
        return (f"its GPU request cannot be read: {got}; fix the service's label {got.key} "
                f"(docker service update --label-add {got.key}=<value> {s.name}, or its "
                "stack's deploy.labels) and the health policy moves it")
    return (f"it no longer carries a GPU request ({prefix}gpus, ... labels gone); "
            "placement releases its holding")


def _target(ctx: Context, svc: str, source: str, *, same: bool, other: bool,
            avoid: AbstractSet[str], degraded: AbstractSet[tuple[str, str]]) -> Choice | None:
    """The best healthy GPUs for ``svc`` once its holding on ``source`` is gone: on
    ``source`` itself when ``same``, elsewhere when ``other``; never on ``avoid``."""
    req, s = ctx.requests.get(svc), ctx.by_name.get(svc)
    if req is None or s is None or not (same or other):
        return None
    lg = ctx.ledger_without([(svc, source)])
    alloc = ctx.allocator(lg, ())  # CPU and memory counted too (Swarm's scheduler does)
    res = ctx.targets.reservation(svc)
    if same and source in alloc.alloc.nodes:
        # its own task there is the one replaced: what the allocator counted for it (its
        # task's reservation), never its spec's (an older task's may be less; unread: more)
        own = [t for t in ctx.tasks_of(s.id) if t.node_id == source and meant_to_run(t)]
        alloc.add_usage(source, -sum(t.cpu_milli for t in own),
                        -sum(t.memory_mib for t in own))

    def blocked(node: NodeState, _i: int, uuid: str, sig: GpuSignal | None) -> bool:
        return (node.spec.name, uuid) in degraded or (sig is not None and sig.hot is State.TRUE)

    ctx.block_targets(alloc, svc, blocked)  # degraded, known-hot and held: no target
    has = set(lg.get(svc, {}))
    no = ctx.refused(svc)  # Swarm's filters: plugins, platforms, host ports, ...

    def allowed(ns: NodeState) -> bool:
        nid = ns.spec.name
        n = ctx.nodes.get(nid)
        return (n is not None and nid not in has and nid not in avoid
                and (same if nid == source else other)
                and schedulable(n)
                and nid not in no and constraints_allow(s, n, ctx.inp.prefix))

    got = alloc.place(demand_of(req, *res), allowed)
    return got if isinstance(got, Choice) and (got.gpus or got.mig is not None) else None


def _say_failing(ctx: Context, out: HealthResult, per_node: dict[str, int],
                 drain: bool) -> set[str]:
    """Note each failing node and what is done about it; return those drained: with
    ``drain``, a node whose GPUs fail, unless Swarm moves its tasks itself. An agent's
    loss alone drains nothing: its node's GPUs and tasks are not known bad (Swarm, which
    still reports it up, runs them), only swarmgpu's own reader of them is gone; such a
    node is said "agent lost" (``out.agent_lost``), never failing, read as broken GPUs."""
    drained: set[str] = set()
    for nid, why in sorted(out.failing.items()):
        node = ctx.nodes.get(nid)
        host = node.hostname if node is not None else nid
        lost = per_node.get(nid, 0) < FAILING_NODE_GPUS
        if lost:
            out.agent_lost.add(nid)
        if by_swarm := swarm_moves(node):
            done = (f"Swarm moves its tasks itself ({by_swarm}): the health policy does "
                    "not" + kept_said(nid, [svc for svc, per in ctx.inp.ledger.items()
                                           if nid in per], ctx.by_name,
                                      ctx.nodes.values(), ctx.inp.prefix))
        elif lost:
            done = ("reported only: its agent's loss alone moves nothing (Swarm does not "
                    "report the node down, so its tasks run; bring the agent back)")
        elif drain:
            drained.add(nid)
            done = "its GPU services are moved off it"
        else:
            done = "reported only (rebalance.health.drain_node: false)"
        state = f": agent lost ({why})" if lost else f" is failing ({why})"
        ctx.notes.append(f"health: node {host}{state}: {done}")
    return drained


def evacuate(ctx: Context, h: HealthInputs, drain: bool) -> HealthResult:
    """Propose the moves (``ctx.accept``) and releases of this cycle, within ``h.left``."""
    out = HealthResult()
    failed, degraded, per_node = _states(ctx)
    out.failing = failing_nodes(ctx, h, per_node)
    drained = _say_failing(ctx, out, per_node, drain)
    left = h.left
    prefix = ctx.inp.prefix
    for svc in sorted(ctx.inp.ledger):
        for nid, hold in sorted(ctx.inp.ledger[svc].items()):
            bad = [failed[(nid, u)] for u in hold.uuids if (nid, u) in failed]
            draining = not bad and nid in drained
            if not bad and not draining:
                continue
            host = ctx.nodes[nid].hostname if nid in ctx.nodes else nid
            reason = (f"health: {host} {'; '.join(bad)}" if bad else
                      f"health: node {host} is failing ({out.failing[nid]}); draining it")
            out.held.add((svc, nid))
            s = ctx.by_name.get(svc)
            if s is None or svc in ctx.moved:
                continue
            unread = unread_source(ctx.nodes, nid)
            if unread:  # never moved nor released
                ctx.notes.append(f"{svc} on {host} stays: {unread} ({reason})")
                continue
            if by_swarm := _left_to_swarm(ctx, s, nid):  # (never twice)
                ctx.notes.append(f"{svc} on {host}: left to Swarm, which moves its task "
                                 f"({by_swarm}), and to placement, which re-places its "
                                 f"GPUs ({reason})")
                continue
            if not h.evacuate:
                ctx.notes.append(f"{svc} on {host} stays (health.evacuate: false): {reason}")
                continue
            if (svc, nid) in h.released:
                ctx.notes.append(f"{svc} on {host}: left to placement to re-place ({reason})")
                continue
            # its record unreadable (a move may be under way) or its planning failed
            # this cycle (nothing is written for it): the plan's note says why, once
            if svc in ctx.inp.unreadable or svc in ctx.inp.failed:
                continue
            if svc in ctx.inp.moving:  # by the daemon's record, never a label alone
                ctx.notes.append(f"{svc} on {host}: a move is under way ({reason})")
                continue
            if svc not in ctx.requests:  # never "no GPU free": the request is the why
                why = request_problem(s, prefix, ctx.inp.classes)
                ctx.notes.append(f"{svc} on {host} stays: {why} ({reason})")
                continue
            unread = ctx.targets.filters.unread_why(s)
            if unread:  # Swarm's filters unknown: refused on every node, it alone
                ctx.notes.append(f"{svc} on {host} stays: {unread} ({reason})")
                continue
            if left <= 0:
                ctx.notes.append(f"{svc} on {host} waits for the health budget: "
                                 f"{h.left_why} ({reason})")
                continue
            # The mover's rules, but no cooldown: a broken holder does not wait.
            why_not = ctx.namesake_entry(svc) or why_not_movable(
                s, ctx.requests.get(svc), ctx.tasks_of(s.id), ctx.inp.ledger.get(svc, {}),
                prefix, ctx.inp.now, 0.0, moving=svc in ctx.inp.moving)
            if draining and why_not is not None:
                ctx.notes.append(f"{svc} on {host} cannot be drained: {why_not}")
                continue
            # A slice is never moved, only released: placement may take one anywhere.
            mig = ctx.requests[svc].mig_profile is not None
            choice = _target(ctx, svc, nid, same=not draining and nid not in out.failing,
                             other=why_not is None or mig, avoid=set(out.failing) - {nid},
                             degraded=degraded)
            if choice is None and not draining and nid in out.failing:
                # a failing node's own healthy GPUs, when nothing else has room
                choice = _target(ctx, svc, nid, same=True, other=False, avoid=set(),
                                 degraded=degraded)
            if choice is None:
                ctx.notes.append(_no_room(f"{svc} on {host}", None if mig else why_not,
                                          reason))
                continue
            left -= 1
            ctx.moved.add(svc)
            _propose(ctx, out, s, nid, choice, reason, mig)
    return out


def _left_to_swarm(ctx: Context, s: SwarmService, nid: str) -> str:
    """Why Swarm itself moves ``s``'s task off ``nid`` ("" where it does not: the policy's
    own path then says why it stays, or releases a slice). Only a replicated service's
    task is re-created elsewhere, and only where its constraints allow another node: a
    global service's task is its node's, a job's orchestrator acts on no node's state,
    and a task pinned to the node waits for it (a move said left to Swarm never came)."""
    by_swarm = swarm_moves(ctx.nodes.get(nid))
    if not by_swarm or swarm_keeps(s, nid, ctx.nodes.values(), ctx.inp.prefix):
        return ""
    return by_swarm


def _no_room(who: str, why_not: str | None, reason: str) -> str:
    """The note of a holder that stays for want of a healthy GPU; ``why_not``: why it
    may not move to another node (only its own was looked at: said, not "none free")."""
    where = "" if why_not is None else (
        f" on its own node, and it may not move to another: {why_not}")
    return f"{who} stays: no healthy GPU free for it{where} ({reason})"


def _propose(ctx: Context, out: HealthResult, s: SwarmService, nid: str, choice: Choice,
             reason: str, mig: bool) -> None:
    """The move (or, where the mover may not make it, the release) of ``s``'s holding on
    ``nid`` to ``choice``."""
    svc, prefix = s.name, ctx.inp.prefix
    host = ctx.nodes[nid].hostname if nid in ctx.nodes else nid
    f = ctx.inp.facts[choice.node]
    uuids = ",".join(f.gpus[i].uuid for i in choice.gpus)
    if choice.node == nid or mig:  # its own node: a repin, else placement's
        why_here = ctx.namesake_entry(svc) or why_not_movable(
            s, ctx.requests.get(svc), ctx.tasks_of(s.id), ctx.inp.ledger.get(svc, {}),
            prefix, ctx.inp.now, 0.0, same_node=True, moving=svc in ctx.inp.moving)
        if why_here is not None:
            to = ctx.nodes[choice.node].hostname if choice.node in ctx.nodes else host
            out.releases.append(Release(svc, nid, host, f"{reason}; re-placed on "
                                        f"{to} by placement ({why_here})"))
            return
        ctx.accept(ctx.make_move(svc, nid, choice, Trigger.HEALTH, None, reason=reason,
                                 gain=f"runs on healthy GPU(s) {uuids} of its node"))
        return
    ctx.accept(ctx.make_move(
        svc, nid, choice, Trigger.HEALTH, None, reason=reason,
        gain=f"runs on healthy GPU(s) {uuids} of {ctx.nodes[choice.node].hostname}"))


class Health:
    """The health policy (``rebalance.health``): first, even in rebalance dry-run. Its
    inputs (switch, budget, lost nodes) are the context's ``health_in``; what it finds
    beside its moves goes to ``health_found``."""

    name = "health"

    def __init__(self, cfg: HealthPolicyConfig) -> None:
        self.cfg = cfg

    def propose(self, ctx: Context) -> None:
        ctx.health_found = evacuate(ctx, ctx.health_in, self.cfg.drain_node)
