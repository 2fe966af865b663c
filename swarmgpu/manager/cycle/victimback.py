"""A preemption's victims moved instead of stopped (``preemption.Preempter._move``) whose
move ended rolled back: the victim holds the node it left again, so its move preempted
nothing and it does not cool down (``victim_cooldown_s``). A move counted as started
whose spec write came back cut is rolled back so (``rebalance.mover.Mover.recover``)."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet

from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.swarm.client import SwarmService


def rolled_back(left: Mapping[str, tuple[str, str]], in_move: AbstractSet[str],
                holdings: Mapping[str, Mapping[str, Holding]],
                services: list[SwarmService]) -> set[str]:
    """Of the victims moved (``left``: name -> its service id, the node it left), the ids
    of those whose move is no longer in flight (``in_move``) and that hold the node they
    left (``holdings``: node -> service -> holding, as this cycle reads it): rolled back.
    By id, as the cooldown is kept: a service later created under the name is not it."""
    ids = {s.name: s.id for s in services}
    return {sid for name, (sid, node) in left.items()
            if name not in in_move and ids.get(name) == sid
            and name in holdings.get(node, {})}
