"""The budget of defragmenting moves: per hour and per 100 placements. Owned by the mover.

A fragmentation move is speculative (nothing is pending or hot; it only makes later
placements likelier) and restarts a task, so it is rationed against the work that makes
fragmentation: ``fragmentation_moves_per_100_placements`` over the placements seen so far
(as ``simulate --rebalance-moves N`` counts moves per 100 arrived pods; the budget can
never be spent ahead), and at most ``fragmentation_moves_per_hour``.

Placements are GPU replicas that got a holding in the ledger (node labels), read from
Swarm each cycle; a move's new holding is not one. The daemon that starts leading counts
the replicas already placed as seen, and the moves finished within the last hour (the
``moved-at`` service labels, whatever their trigger) as spent this hour, so a restart or
a new leader cannot spend an hour's budget twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from swarmgpu.manager.placement import MOVE_STATE, Holding
from swarmgpu.manager.rebalance.context import MOVED_AT
from swarmgpu.swarm.client import SwarmService

HOUR_S = 3600.0


@dataclass
class FragBudget:
    per_hour: int
    per_100_placements: float
    placements: int = 0
    spent: int = 0  # fragmentation moves started since this daemon leads
    started: list[float] = field(default_factory=list)  # start times within the hour
    _seen: set[tuple[str, str, int]] | None = None

    def observe(self, ledger: Mapping[str, Mapping[str, Holding]],
                services: Sequence[SwarmService], prefix: str, now: float) -> int:
        """Count the replicas placed since the last look; returns how many were new."""
        moving = {s.name for s in services if prefix + MOVE_STATE in s.labels}
        # one per replica: a holding of replicas packed on one node counts each slot
        cur = {(svc, nid, slot) for svc, by in ledger.items() for nid, h in by.items()
               for slot in (h.per_slot() if h.packed else (0,))}
        if self._seen is None:
            new = len(cur)
            for s in services:  # moves finished within the hour count against it
                try:
                    at = float(s.labels[prefix + MOVED_AT])
                except (KeyError, ValueError):
                    continue
                if now - at < HOUR_S:
                    self.started.append(at)
        else:
            new = sum(1 for svc, _nid, _slot in cur - self._seen if svc not in moving)
        self._seen = cur
        self.placements += new
        return new

    def left(self, now: float) -> tuple[int, str]:
        """Fragmentation moves that may start now, and why none may when it is 0."""
        self.started = [t for t in self.started if now - t < HOUR_S]
        by_hour = self.per_hour - len(self.started)
        earned = int(self.placements * self.per_100_placements / 100 + 1e-9)
        by_placements = earned - self.spent
        if by_hour <= 0:
            return 0, (f"budget: {self.per_hour} fragmentation move(s) per hour "
                       f"({len(self.started)} in the last hour)")
        if by_placements <= 0:
            return 0, (f"budget: {self.per_100_placements:g} fragmentation move(s) per 100 "
                       f"placements ({self.spent} spent, {self.placements} placement(s) seen)")
        return min(by_hour, by_placements), ""

    def spend(self, now: float) -> None:
        self.spent += 1
        self.started.append(now)
