"""The budget of defragmenting moves: per hour and per 100 placements. Owned by the mover.

A fragmentation move is speculative (nothing is pending or hot; it only makes later
placements likelier) and restarts a task, so it is rationed against the work that makes
fragmentation: ``fragmentation_moves_per_100_placements`` over the placements seen so far
(as ``simulate --rebalance-moves N`` counts moves per 100 arrived pods; the budget can
never be spent ahead), and at most ``fragmentation_moves_per_hour``.

Placements are GPU replicas that got a holding in the ledger (node labels), read from
Swarm each cycle; a move's new holding is not one. The daemon that starts leading counts
the replicas already placed as seen, and the moves finished within the last hour (the
mover's own list on the swarm object, ``FINISHED``, whatever their trigger) and those in
flight started within it (their records) as spent this hour, so a restart or a new leader
cannot spend an hour's budget twice. Services' own
``moved-at`` labels are not read here: a stack can write them, and would ration every
other service's moves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from swarmgpu.core.stamps import HOUR_S as HOUR_S
from swarmgpu.core.stamps import in_hour
from swarmgpu.manager.placement import Holding

FINISHED = "state.moves-finished"  # swarm-object label: epoch seconds of recent finishes
FINISHED_KEEP = 64  # more than any sane per-hour budget; bounds the label


def finished_times(labels: Mapping[str, str], prefix: str) -> list[float]:
    """The mover's list of recent finish times (unreadable entries dropped)."""
    return times_in(labels, prefix + FINISHED, FINISHED_KEEP)


def times_in(labels: Mapping[str, str], key: str, keep: int) -> list[float]:
    """A swarm-object list of epoch seconds (comma-separated), its last ``keep`` entries;
    unreadable entries dropped (a label is anyone's text)."""
    out = []
    for part in labels.get(key, "").split(",")[-keep:]:
        try:
            t = float(part)
        except ValueError:
            continue
        if t == t and abs(t) != float("inf"):
            out.append(t)
    return out


def with_time(times: Iterable[float], at: float, now: float, keep: int) -> str:
    """The list with ``at`` added, only the last hour's (by ``now``: ``in_hour``, a time
    further ahead than the skew is left out), at most ``keep``."""
    kept = [t for t in times if in_hour(t, now)] + [at]
    return times_text(kept[-keep:])


def times_text(times: Iterable[float]) -> str:
    """A list of epoch seconds as ``times_in`` reads it (whole seconds)."""
    return ",".join(f"{t:.0f}" for t in times)


def with_finished(times: Iterable[float], now: float) -> str:
    """The list with ``now`` added, only the last hour's, at most FINISHED_KEEP."""
    return with_time(times, now, now, FINISHED_KEEP)


@dataclass
class FragBudget:
    per_hour: int
    per_100_placements: float
    placements: int = 0
    spent: int = 0  # fragmentation moves started since this daemon leads
    started: list[float] = field(default_factory=list)  # start times within the hour
    _seen: set[tuple[str, str, int]] | None = None

    def observe(self, ledger: Mapping[str, Mapping[str, Holding]], moving: AbstractSet[str],
                finished: Sequence[float], now: float) -> int:
        """Count the replicas placed since the last look; returns how many were new.
        ``moving``: services with a move in flight (the daemon's records); ``finished``:
        the times of the hour's moves before this daemon, the mover's recent finish times
        and the start times of the moves in flight (read on the first look only; a time
        further ahead than the skew is not counted: ``core.stamps.in_hour``)."""
        # one per replica: a holding of replicas packed on one node counts each slot
        cur = {(svc, nid, slot) for svc, by in ledger.items() for nid, h in by.items()
               for slot in (h.per_slot() if h.packed else (0,))}
        if self._seen is None:
            new = len(cur)
            self.started += [at for at in finished if in_hour(at, now)]
        else:
            new = sum(1 for svc, _nid, _slot in cur - self._seen if svc not in moving)
        self._seen = cur
        self.placements += new
        return new

    def left(self, now: float) -> tuple[int, str]:
        """Fragmentation moves that may start now, and why none may when it is 0."""
        self.started = [t for t in self.started if in_hour(t, now)]
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
