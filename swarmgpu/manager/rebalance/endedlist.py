"""The mover's finished moves by service, kept on the swarm object: what a move's
cool-down mark is checked against (``services.coolmark.borne_out``).

``<p>state.moves-finished`` (``budget.FINISHED``) has the seconds moves ended in, for
the fragmentation budget, and names no service: a genuine ``moved-at`` mark copied from
another service's move, with its owner's own ``docker service update --force`` just
before that move's end (its task made within the move's span), bought a cool-down at
a self-restart's cost. ``<p>state.moves-ended`` has ``<service id>@<second>`` entries,
the last hour's, at most ``KEEP`` (a service's older ones dropped first: ``_bounded``),
written in the same write (``record.drop_record``);
managers alone write the swarm object.

A second of the unnamed list that no entry here has is an earlier version's finish (it
named none): counted for any service, as before, so a rolling upgrade keeps the
cool-downs of the moves an old leader finished; within the hour every finish is named.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from swarmgpu.core.stamps import in_hour
from swarmgpu.manager.rebalance.budget import FINISHED_KEEP

ENDED = "state.moves-ended"  # under the prefix, on the swarm object's labels
# entries, oldest dropped first (~10 kB): at least ``budget.FINISHED_KEEP``, so each
# finish this version wrote to the unnamed list is named here too (else read as an
# earlier version's, anyone's)
KEEP = 256


def _entries(labels: Mapping[str, str], prefix: str) -> list[tuple[str, float]]:
    """The list's (service id, second) entries, the last ``KEEP``; unreadable ones
    dropped (a label is anyone's text)."""
    out = []
    for part in labels.get(prefix + ENDED, "").split(",")[-KEEP:]:
        sid, _, at = part.partition("@")
        try:
            t = float(at)
        except ValueError:
            continue
        if sid and math.isfinite(t):
            out.append((sid, t))
    return out


def ended_times(labels: Mapping[str, str], prefix: str) -> dict[str, frozenset[float]]:
    """Service id -> the seconds the list has its moves ended in."""
    out: dict[str, set[float]] = {}
    for sid, t in _entries(labels, prefix):
        out.setdefault(sid, set()).add(t)
    return {sid: frozenset(ts) for sid, ts in out.items()}


def unnamed(finished: Iterable[float], ended: Mapping[str, frozenset[float]]
            ) -> frozenset[float]:
    """Those of ``finished`` (the unnamed list's seconds) no entry of ``ended`` has: an
    earlier version's finishes."""
    named = {t for ts in ended.values() for t in ts}
    return frozenset(t for t in finished if t not in named)


def _bounded(entries: list[str]) -> list[str]:
    """``entries`` (``<id>@<second>``, oldest first) at most ``KEEP``: an entry of a
    service with a newer one dropped first, then the oldest; the last ``FINISHED_KEEP``
    (the unnamed list's seconds, which an unnamed one would let count for any service)
    kept. Oldest first alone, a tenant's services moved again and again (their
    ``moved-at`` its to remove) pushed another's move out within its cool-down, whose
    mark then cooled nothing; a service's older end matches no mark it bears."""
    surplus = len(entries) - KEEP
    if surplus <= 0:
        return entries
    newest = {e.partition("@")[0]: i for i, e in enumerate(entries)}
    cut = len(entries) - FINISHED_KEEP
    out = []
    for i, e in enumerate(entries):
        if surplus > 0 and i < cut and newest[e.partition("@")[0]] != i:
            surplus -= 1
            continue
        out.append(e)
    return out[-KEEP:]


def with_ended(labels: Mapping[str, str], prefix: str, service_id: str, now: float) -> str:
    """The list with ``service_id``'s move ended ``now`` added (the last hour's kept, at
    most ``KEEP``: ``_bounded``), as the unnamed list is written in the same write."""
    kept = [f"{sid}@{t:.0f}" for sid, t in _entries(labels, prefix) if in_hour(t, now)]
    return ",".join(_bounded([*kept, f"{service_id}@{now:.0f}"]))
