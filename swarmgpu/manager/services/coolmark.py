"""Whether a service's cool-down mark (``<p>state.moved-at``) is borne out, for the
over-share restart of a tenant that may not opt out (``Tenants.enforced``). The mark is
a label on the service's own spec, which its stack writes; it counts only where both the
daemon's own records on the swarm object (managers' alone) and Swarm's tasks on the node
judged bear it out:

* a restart's: the restarter's list (``restartlist``: ``<service id>@<second>``) has this
  service's restart in the mark's second, and its task on that node was made after the
  mark (the mark is written before the gate closes: the replacement follows it);
* a move's: the mover's list of finished moves by service (``rebalance.endedlist``)
  has this service's move ended in that second (or the unnamed list one no entry names:
  an earlier version's), and its task on that node was made during the move (within
  ``MarkRecords.span_s`` before its end, and not after it but for the managers' skew:
  the mark is written at the end, after the task the move started).

Either alone was a tenant's way to a cool-down: a task made after the mark, its owner's
own ``docker service update --force`` makes too (after a move's mark copied, too); a
recorded restart's or a finished move's mark copied onto a share that ran all along
matches a list that names no service (as the finished list alone did: with a
force-restart just before another service's move ended, its span bore it out). Only
the tasks on the node
judged bear the mark out: a fresh task of another replica (its own code ended it, Swarm
made a new one) proves nothing of this one.

The mark is one per service, written anew by each restart or move of any replica: one
borne out (by the same rule: the daemon's list and its task there) on another node only
(``kept``) cools this node from its own task's making, as that task's restart or move
did, and from the mark at the latest (a task here made after a move's end bears out no
move: it is no reason to cool longer); dropped, the daemon's restart of one replica took
another's cool-down away, restarted again within ``rebalance.cooldown_s`` of its last."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from swarmgpu.core.stamps import MAX_SKEW_S
from swarmgpu.swarm.client import SwarmTask
from swarmgpu.swarm.taskstop import STOPPING_STATES, rfc3339_ns  # (not placement.keys: a cycle)


@dataclass(frozen=True)
class MarkRecords:
    """The daemon's records a mark is read against: the mover's finished moves in the
    hour that name no service (``moves``: epoch seconds, an earlier version's), the most
    a move's task may have been made before its end (``span_s``), the restarter's
    restarts (``restarts``: by service id) and the mover's finished moves (``ended``: by
    service id); read from the swarm object by ``restartlist.mark_records``."""

    moves: frozenset[float] = frozenset()
    span_s: float = 0.0
    restarts: Mapping[str, frozenset[float]] = field(default_factory=dict)
    ended: Mapping[str, frozenset[float]] = field(default_factory=dict)


NO_RECORDS = MarkRecords()  # (none kept)


def on_node(tasks: Iterable[SwarmTask], node_id: str) -> list[SwarmTask]:
    """Those of ``tasks`` on ``node_id``."""
    return [t for t in tasks if t.node_id == node_id]


def off_node(tasks: Iterable[SwarmTask], node_id: str) -> list[SwarmTask]:
    """Those of ``tasks`` on another node (one not yet placed on any bears out no
    restart: a restart's replacement runs where its gate reopened)."""
    return [t for t in tasks if t.node_id and t.node_id != node_id]


def _made(tasks: Iterable[SwarmTask]) -> list[int]:
    """When each of ``tasks`` still meant to run was made (ns), those readable."""
    return [m for t in tasks if t.desired_state not in STOPPING_STATES
            and (m := rfc3339_ns(t.created_at)) is not None]


def kept(mark: str, service_id: str, here: Sequence[SwarmTask],
         elsewhere: Sequence[SwarmTask], recs: MarkRecords) -> str | None:
    """The cool-down mark the node of ``here`` (service ``service_id``'s tasks there) is
    judged by: ``mark`` where they bear it out; where only ``elsewhere`` (its tasks on
    other nodes) do, the time its task here was made (epoch seconds, the earliest), or
    the mark's if that is earlier; else None."""
    if borne_out(mark, service_id, here, recs):
        return mark
    made = _made(here)
    if not made or not borne_out(mark, service_id, elsewhere, recs):
        return None
    since = min(made) / 10**9
    # Not borne out here, its task may still be younger than the mark (made after a
    # move's end: its owner's force-restart): never a cool-down past the mark's own.
    return mark if since >= float(mark) else f"{since:.0f}"


def borne_out(mark: str, service_id: str, tasks: Sequence[SwarmTask],
              recs: MarkRecords) -> bool:
    """Whether ``mark`` (epoch seconds, the stack's text) is a restart's or a move's of
    service ``service_id`` on the node whose ``tasks`` (those of the service there) are
    given. False for a mark that is no finite time, or tasks whose making time cannot
    be read."""
    try:
        at = float(mark)
    except ValueError:
        return False
    if not math.isfinite(at):
        return False
    made = _made(tasks)
    # a restart's replacement (the managers' clocks may differ)
    restart = at in recs.restarts.get(service_id, frozenset()) and any(
        m >= (at - MAX_SKEW_S) * 10**9 for m in made)
    # a move's task, made before its end: one made after (its owner's force-restart) is
    # no move's, though the mark be a genuine move's, copied
    moved = at in recs.moves or at in recs.ended.get(service_id, frozenset())
    return restart or (moved and any(
        (at - recs.span_s) * 10**9 <= m <= (at + MAX_SKEW_S) * 10**9 for m in made))
