"""The over-share restarts the daemon made, kept on the swarm object: what a service's
cool-down mark is checked against.

The restart marks its service ``<p>state.moved-at`` (its cool-down), a label its stack
can write too. For a tenant that may not opt out, a restart's mark counts only where
this list, ``<p>state.restarts`` (``<service id>@<epoch s>`` entries, the last hour's,
past ``KEEP`` a service's older entries dropped, its newest kept up to ``stampedlist.CAP``,
and a restart whose entry would push another's out not made: ``stampedlist.bounded``; written once
the mark landed, before the gate closes; managers alone write the swarm object), has
this service's restart in its second, and its task on the node judged was made after
it (``coolmark.borne_out``). A task made after the mark alone, its owner's ``docker
service update --force`` makes too: it had its cool-down at a restart's cost. An entry
names its service, so a mark copied from another service's restart buys nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from swarmgpu.core.config import Config
from swarmgpu.core.stampedlist import (
    CAP,
    bounded,
    by_service,
    hour_kept,
    overflows,
    stamped_entries,
)
from swarmgpu.core.stamps import MAX_SKEW_S
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.rebalance.budget import finished_times
from swarmgpu.manager.rebalance.endedlist import ended_times, unnamed
from swarmgpu.manager.services.coolmark import MarkRecords
from swarmgpu.swarm.client import SwarmError

RESTARTS = "state.restarts"  # under the prefix, on the swarm object's labels
# entries past which a service's older ones go (~10 kB; its newest stay: ``CAP``): over
# twice the restarts an hour at the default budgets (one a 30 s cycle)
KEEP = 256


def restart_times(labels: Mapping[str, str], prefix: str) -> dict[str, frozenset[float]]:
    """Service id -> the times of its restarts the list keeps."""
    return by_service(stamped_entries(labels, prefix + RESTARTS, CAP))


def mark_records(labels: Mapping[str, str], prefix: str, cfg: Config) -> MarkRecords:
    """The daemon's records a cool-down mark is read against, from the swarm object's
    ``labels``: the mover's finished moves (by service: ``endedlist``; those of the
    unnamed list no entry names, an earlier version's, for any) and this list. A move
    ends once its target's
    task runs, rolled back past ``move_timeout_s`` (a repin's old task waited twice
    that), the mover looking each cycle; the managers' clocks may differ by
    ``MAX_SKEW_S``: its task was made at most that ``span_s`` before its end."""
    span = 2 * cfg.rebalance.move_timeout_s + cfg.sync.interval_s + MAX_SKEW_S
    ended = ended_times(labels, prefix)
    return MarkRecords(unnamed(finished_times(labels, prefix), ended), span,
                       restart_times(labels, prefix), ended)


def record_restart(writes: Writes, prefix: str, service_id: str, at: str,
                   now: float) -> str:
    """Add ``service_id``'s restart at ``at`` (its mark's text) to the list, once its
    mark landed and before its gate closes; why not where it cannot be stored ("" when
    stored): no restart is made then, whose mark the daemon could not tell from its
    owner's (the mark is taken back, the restart tried again next cycle). Stored after
    the mark, a restart cut between the two leaves a mark that cools nothing: the
    neighbours' side."""
    key = prefix + RESTARTS
    full: list[bool] = []  # (the list holds CAP services' restarts of the hour)

    def add(cur: Mapping[str, str]) -> Mapping[str, str] | None:
        entries = [*hour_kept(cur, key, CAP, now), f"{service_id}@{at}"]
        # refused rather than another service's newest entry (its cool-down) pushed out
        full[:] = [overflows(entries, KEEP)]
        return None if full[0] else {**cur, key: ",".join(bounded(entries, KEEP))}

    try:
        writes.swarm_labels(add)
    except SwarmError as exc:
        return f"its record cannot be stored on the swarm object ({exc})"
    if full and full[0]:
        return (f"the list of the hour's restarts ({prefix}{RESTARTS}) holds {CAP} "
                "services' restarts, each its service's cool-down")
    return ""
