"""Admission, pure: which proposed moves may start this cycle, and the move budgets.

``over_budget`` is the one rule of ``rebalance.max_moves_per_cycle`` and
``max_moves_per_node`` (moves in flight count; a repin counts once on its node): ``admit``
asks it for the rebalancer's proposals, ``Mover.start`` for every move it starts
(preemption's too), and the over-share restart for each restart, a move on its one node
(``services.overshare``, through ``over_budget_on``).
Moves another step waits to start for the budgets (``reserved``: a preemption's victim)
are counted as admitted before the proposals, so the slots they need stay theirs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import NamedTuple

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.placement import Holding
from swarmgpu.manager.rebalance.context import by_service, why_not_movable
from swarmgpu.manager.rebalance.moves import Move, Trigger
from swarmgpu.manager.rebalance.record import MoveState
from swarmgpu.manager.services.requests import GpuRequest, parse_all
from swarmgpu.swarm.client import SwarmService, SwarmTask


class Budget(NamedTuple):
    """A move over a budget: which (the ``rebalance`` key) and why, for the log."""

    key: str  # max_moves_per_cycle or max_moves_per_node
    why: str


def over_budget(m: Move, in_flight: Sequence[MoveState], admitted: Sequence[Move],
                cfg: RebalanceConfig, unreadable: int = 0) -> Budget | None:
    """Which budget ``m`` would pass, the moves in flight and those admitted before it
    counted; None within both (pure). The one rule: ``admit`` and ``Mover.start`` (every
    move started, preemption's too) ask it."""
    return over_budget_on({m.source_node, m.target_node}, in_flight,
                          [{a.source_node, a.target_node} for a in admitted], cfg, unreadable)


def over_budget_on(nodes: AbstractSet[str], in_flight: Sequence[MoveState],
                   admitted: Sequence[AbstractSet[str]], cfg: RebalanceConfig,
                   unreadable: int = 0) -> Budget | None:
    """``over_budget`` for what touches ``nodes`` (a move: its source and target; an
    over-share restart: its one node), ``admitted`` the nodes of each admitted before.
    ``unreadable``: move records that cannot be read (``Verdict.unreadable``), each a
    move that may be in flight in any scope: counted per cycle (the safe side); not per
    node, as their nodes are unknown."""
    flying = len(in_flight) + unreadable
    if flying + len(admitted) >= cfg.max_moves_per_cycle:
        return Budget("max_moves_per_cycle", f"budget: {cfg.max_moves_per_cycle} move(s) "
                                             f"per cycle ({flying} in flight)")
    touched = [*({st.source, st.target} for st in in_flight), *admitted]  # a repin: once
    if any(sum(n in t for t in touched) >= cfg.max_moves_per_node for n in nodes):
        return Budget("max_moves_per_node",
                      f"budget: {cfg.max_moves_per_node} move(s) per node per cycle")
    return None


def admit(moves: Sequence[Move], in_flight: Sequence[MoveState],
          services: Mapping[str, SwarmService], tasks: Sequence[SwarmTask],
          ledger: Mapping[str, Mapping[str, Holding]], cfg: RebalanceConfig, prefix: str,
          now: float, frag_left: tuple[int, str] | None = None,
          reserved: Sequence[Move] = (), unreadable: int = 0,
          raised: dict[str, Exception] | None = None,
          classes: Mapping[str, int] | None = None,
          ) -> tuple[list[Move], list[tuple[Move, str]]]:
    """Which proposed moves may start this cycle; the rest with the reason (pure).

    ``frag_left``: fragmentation moves allowed now and why none is when 0
    (:meth:`FragBudget.left`); None: no such limit. ``reserved``: moves another step
    waits to start (a preemption's victim), counted as admitted before these: the
    budgets' slots they need stay free for them. ``unreadable``: as ``over_budget_on``.
    ``raised``: a move whose checks raise (a bug, or input no one foresaw) is refused
    alone, its exception kept there by service for the caller's log (None: it raises).
    ``classes``: ``preemption.priority_classes``, a label's class read as placement reads it.
    """
    frag = frag_left[0] if frag_left is not None else 0
    ok: list[Move] = []
    refused: list[tuple[Move, str]] = []
    flying = {st.service for st in in_flight}  # the records' word, not move labels
    mine = by_service(tasks)  # one walk for the batch, not one a move
    for m in moves:
        s = services.get(m.service)
        try:
            req = parse_all(s.labels, prefix=prefix, classes=classes) if s is not None else None
            why = "service gone" if s is None else why_not_movable(
                s, req if isinstance(req, GpuRequest) else None, mine.get(s.id, ()),
                ledger.get(m.service, {}), prefix, now, cfg.cooldown_s,
                same_node=m.source_node == m.target_node, moving=m.service in flying)
        except Exception as exc:  # one move's checks: its loss only, not the batch's
            if raised is None:
                raise
            raised[m.service] = exc
            refused.append((m, f"its checks failed unexpectedly: {type(exc).__name__}"))
            continue
        b = (over_budget(m, in_flight, [*reserved, *ok], cfg, unreadable) if why is None
             else None)
        if b is not None:  # within the budgets but for the reserved: say what holds it
            why = b.why if over_budget(m, in_flight, ok, cfg, unreadable) is not None else (
                f"{b.why}, held for {held_for(reserved)}")
        rationed = frag_left is not None and m.trigger is Trigger.FRAGMENTATION
        if why is None and rationed and frag_left is not None and frag <= 0:
            why = frag_left[1]
        if why is not None:
            refused.append((m, why))
            continue
        ok.append(m)
        if rationed:
            frag -= 1
    return ok, refused


def held_for(reserved: Sequence[Move]) -> str:
    """The moves a slot is held for, in words (the log's "not started: ...")."""
    return "; ".join(f"{m.trigger} of {m.service} {m.source_host} -> {m.target_host} "
                     f"({m.reason}), which waits for it" for m in reserved)
