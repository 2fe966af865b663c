"""The fresh checks of a move between nodes before its first write (``Mover.start``).

Read again from Swarm just before the write, never taken from the cycle's snapshot: the
reasons a move is refused first (its plan failed this cycle, its record unreadable), the
moves in flight its budgets count (``admission.over_budget``), and whether it may start
at all: the target's room, the replica on the source as planned, neither node unread
(``SwarmNode.unread``), no record of it yet, the service movable now, and Swarm's
filters on the target. A repin's are its own
(``repin.py``). Nothing here writes. ``Started``: what ``start`` did.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.placement import assign_key, parse_holding
from swarmgpu.manager.rebalance.admission import Budget
from swarmgpu.manager.rebalance.context import FAILED_WHY, why_not_movable
from swarmgpu.manager.rebalance.heldgpus import Held, Shares
from swarmgpu.manager.rebalance.moves import Move
from swarmgpu.manager.rebalance.record import (
    MoveState,
    room_for,
    service_ledger,
    swarm_id,
    unreadable_why,
)
from swarmgpu.manager.rebalance.targets import live_refusal
from swarmgpu.manager.rebalance.verdict import verify_scope
from swarmgpu.manager.services.requests import GpuRequest, parse_all
from swarmgpu.swarm.client import SwarmClient, SwarmNotFound, SwarmService


@dataclass(frozen=True)
class Started:
    """What ``Mover.start`` did: started (``ok``), or refused and why; ``budget`` when
    the budget alone refused it (it may start on a later cycle)."""

    ok: bool
    why: str = ""
    budget: Budget | None = None


def first_refusal(m: Move, sid: str, bad: AbstractSet[str], failed: AbstractSet[str],
                  prefix: str) -> str | None:
    """Why ``start`` refuses ``m`` first: its plan failed this cycle (a restart on no
    plan), or its record is unreadable (a move under way that a new one overwrites)."""
    if m.service in failed:
        return FAILED_WHY
    return unreadable_why(prefix, sid) if sid in bad else None


def in_flight(swarm: SwarmClient, every: Mapping[str, MoveState], prefix: str,
              scope: Callable[[MoveState], bool] | None) -> list[MoveState]:
    """The moves in flight a mover's budgets count (its scope's records), judged as
    ``run_cycle`` judges them, against a fresh read of each record's service: one
    inspect per record, not the swarm's whole list (seconds at 25,000 services, per
    move started). Only those services can make a record in flight (``verify``). A
    record under a key that is no service id names no service (``swarm_id``): gone, as
    in the cycle's list, never sent to the engine, which refuses it (a SwarmError:
    ``start`` failed, and preemption stopped its victim instead of moving it)."""
    mine = [sid for sid, st in every.items()
            if swarm_id(sid) and (scope is None or scope(st))]
    services = []
    for sid in mine:
        try:
            services.append(swarm.service(sid))
        except SwarmNotFound:
            continue  # gone: no move in flight, as in the cycle's list
    return verify_scope(every, services, prefix, scope).in_flight()


def move_refusal(swarm: SwarmClient, m: Move, fresh: SwarmService,
                 every: Mapping[str, MoveState], prefix: str, cfg: RebalanceConfig,
                 clock: Callable[[], float],
                 held: Held, shares: Shares | None = None,
                 classes: Mapping[str, int] | None = None) -> str | None:
    """Why ``m`` (between nodes) may not start now, on fresh reads (``fresh``: its
    service as just read; ``every``: the records): None where it may."""
    target = swarm.node(m.target_node)
    source = swarm.node(m.source_node)
    # (an unread source could never be closed: every write to it is refused; an unread
    # target is room_for's own refusal)
    why = source.unread or room_for(m, target, prefix, own_moves=False, held=held,
                                    shares=shares)
    h = parse_holding(m.service, m.source_node,
                      source.labels.get(assign_key(prefix, m.service)) or "")
    if why is None and (h is None or h.uuids != m.source_uuids):
        why = f"the replica on {m.source_host} changed since planning"
    flying = fresh.id in every
    if why is None and flying:
        why = "a move record exists for it already"
    tasks = swarm.tasks({"service": fresh.id})  # desired state: its readers judge it
    req = parse_all(fresh.labels, prefix=prefix, classes=classes)
    ledger = service_ledger(swarm, prefix, m.service)
    why = why or why_not_movable(fresh, req if isinstance(req, GpuRequest) else None,
                                 tasks, ledger, prefix, clock(), cfg.cooldown_s,
                                 moving=flying)
    # Swarm's word on the target for the service as just read (a re-deploy): else pending
    return why or live_refusal(swarm, fresh, target, tasks, prefix)
