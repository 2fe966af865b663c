"""A preemption's victims moved instead of stopped (``preemption.Preempter._move``) whose
move ended rolled back: the victim holds the node it left again, so its move preempted
nothing and it does not cool down (``victim_cooldown_s``). A move counted as started
whose spec write came back cut is rolled back so (``rebalance.mover.Mover.recover``).

Its second of the hour (``max_per_hour``, its preemptor's tenant's) is given back too
where the task list shows no task of it stopped: each task it was meant to run on the
node it left when the move was counted is meant to run still (``undone``). The budget
counts evictions; a move undone before any task stopped evicted no one. One whose task
there was replaced meanwhile (Swarm's list no longer has it meant to run) stays counted:
the move label or the record says nothing of that, the tasks do. So is a victim of a stop
half made (its spec written, its gate write's outcome unknown: counted, the safe side)
judged the next cycle: still holding the node (the one write that removes its ledger
entry and gate never landed) with its tasks there running, it was never stopped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from loguru import logger

from swarmgpu.manager.cycle.preempt_budget import SpentHour
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.swarm.client import SwarmService, SwarmTask


@dataclass(frozen=True)
class VictimSpent:
    """A victim moved, or stopped half made, as the hour counted it: the second (wall
    clock) and the preemptor's tenant ("": none) it was spent at, and the ids of the
    victim's tasks then meant to run on the node it left."""

    at: float
    tenant: str
    tasks: frozenset[str]


def ran_on(tasks: Sequence[SwarmTask], service_id: str, node_id: str) -> frozenset[str]:
    """The ids of ``service_id``'s tasks meant to run on ``node_id``."""
    return frozenset(t.id for t in tasks if t.service_id == service_id
                     and t.node_id == node_id and t.desired_state == "running")


def rolled_back(left: Mapping[str, tuple[str, str]], in_move: AbstractSet[str],
                holdings: Mapping[str, Mapping[str, Holding]],
                services: list[SwarmService]) -> set[str]:
    """Of the victims moved (``left``: name -> its service id, the node it left), the ids
    of those whose move is no longer in flight (``in_move``) and that hold the node they
    left (``holdings``: node -> service -> holding, as this cycle reads it): rolled back
    (for the victims of a stop half made, none in flight: never stopped). By id, as the
    cooldown is kept: a service later created under the name is not it."""
    ids = {s.name: s.id for s in services}
    return {sid for name, (sid, node) in left.items()
            if name not in in_move and ids.get(name) == sid
            and name in holdings.get(node, {})}


def undone(hour: SpentHour, left: Mapping[str, tuple[str, str]], back: AbstractSet[str],
           spent: Mapping[str, VictimSpent], tasks: Sequence[SwarmTask]) -> None:
    """Give back to ``hour`` each victim of ``left`` (name -> its id, the node it left)
    that holds that node again or still (``back``: ids, ``rolled_back``) whose tasks its
    count saw there (``spent``) are all meant to run still (``tasks``: this cycle's
    list). None seen: kept (no proof nothing stopped)."""
    for name, (sid, node) in left.items():
        m = spent.get(name)
        if sid not in back or m is None or not m.tasks \
                or not m.tasks <= ran_on(tasks, sid, node):
            continue
        hour.release(m.at, m.tenant, 1)
        logger.bind(service=name).info(
            "preemption: {} holds the node it was taken from again (its move rolled back) "
            "or still (its stop's gate write never landed), no task of it stopped: no "
            "eviction, its count in the preemption hour given back", name)


class MovedBack:
    """The victims (by service id) whose preemption move rolled back, and when (``clock``'s
    monotonic time): preempted again within ``rebalance.cooldown_s`` they are stopped, not
    moved (``Preempter._move``). The roll-back's ``<p>state.moved-at`` mark, which makes
    the mover refuse a move in its cooldown, is a label on the victim's own spec, which
    its stack rewrites on each deploy: taken away, the victim was moved again after each
    roll-back (its target's task never running), never stopped, its preemptor never
    placed, each move holding a slot of the move budget for ``move_timeout_s``. Kept in
    memory: a new leader reads the mark alone."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}

    def note(self, back: AbstractSet[str], mono: float, cooldown_s: float) -> None:
        """``back``: the ids rolled back as of this cycle (``rolled_back``); those past
        ``cooldown_s`` are forgotten, and with none (0) none is kept: the mark cools
        nothing then, and the victim is moved again as it allows."""
        self.at = {i: at for i, at in self.at.items() if mono - at < cooldown_s}
        if cooldown_s > 0:
            self.at.update(dict.fromkeys(back, mono))

    def __contains__(self, service_id: object) -> bool:
        return service_id in self.at
