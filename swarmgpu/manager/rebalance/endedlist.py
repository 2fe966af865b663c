"""The mover's finished moves by service, kept on the swarm object: what a move's
cool-down mark is checked against (``services.coolmark.borne_out``).

``<p>state.moves-finished`` (``budget.FINISHED``) has the seconds moves ended in, for
the fragmentation budget, and names no service: a genuine ``moved-at`` mark copied from
another service's move, with its owner's own ``docker service update --force`` just
before that move's end (its task made within the move's span), bought a cool-down at
a self-restart's cost. ``<p>state.moves-ended`` has ``<service id>@<second>`` entries,
the last hour's, past ``KEEP`` a service's older ones dropped, its newest kept up to
``stampedlist.CAP`` (``stampedlist.bounded``),
written in the same write (``record.drop_record``);
managers alone write the swarm object.

A second of the unnamed list that no entry here has is an earlier version's finish (it
named none): counted for any service, as before, so a rolling upgrade keeps the
cool-downs of the moves an old leader finished; within the hour every finish is named.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from loguru import logger

from swarmgpu.core.stampedlist import (
    CAP,
    bounded,
    by_service,
    hour_kept,
    overflows,
    stamped_entries,
)
from swarmgpu.manager.rebalance.budget import FINISHED_KEEP

ENDED = "state.moves-ended"  # under the prefix, on the swarm object's labels
# entries past which a service's older ones go (~10 kB; its newest stay: ``CAP``): at
# least ``budget.FINISHED_KEEP``, so each finish this version wrote to the unnamed list
# is named here too (else read as an earlier version's, anyone's)
KEEP = 256


def ended_times(labels: Mapping[str, str], prefix: str) -> dict[str, frozenset[float]]:
    """Service id -> the seconds the list has its moves ended in."""
    return by_service(stamped_entries(labels, prefix + ENDED, CAP))


def unnamed(finished: Iterable[float], ended: Mapping[str, frozenset[float]]
            ) -> frozenset[float]:
    """Those of ``finished`` (the unnamed list's seconds) no entry of ``ended`` has: an
    earlier version's finishes."""
    named = {t for ts in ended.values() for t in ts}
    return frozenset(t for t in finished if t not in named)


def with_ended(labels: Mapping[str, str], prefix: str, service_id: str, now: float) -> str:
    """The list with ``service_id``'s move ended ``now`` added (the last hour's kept, at
    most ``KEEP`` but each service's newest: ``stampedlist.bounded``, the last
    ``FINISHED_KEEP`` kept), as the unnamed list is written in the same write. Oldest
    first alone, a tenant's services
    moved again and again (their ``moved-at`` its to remove) pushed another's move out
    within its cool-down, whose mark then cooled nothing; the last ``FINISHED_KEEP`` are
    the unnamed list's seconds, which an unnamed one would let count for any service."""
    entries = [*hour_kept(labels, prefix + ENDED, CAP, now), f"{service_id}@{now:.0f}"]
    if overflows(entries, KEEP, FINISHED_KEEP):  # (the move has ended: said, not refused)
        logger.warning("{}{} holds {} services' moves ended this hour: the oldest's entry "
                       "goes, and its cool-down mark counts no more", prefix, ENDED, CAP)
    return ",".join(bounded(entries, KEEP, FINISHED_KEEP))
