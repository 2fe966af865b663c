"""Whether a service's cool-down mark (``<p>state.moved-at``) is borne out, for the
over-share restart of a tenant that may not opt out (``Tenants.enforced``). The mark is
a label on the service's own spec, which its stack writes; it counts only where both the
daemon's own records on the swarm object (managers' alone) and Swarm's tasks on the node
judged bear it out:

* a restart's: the restarter's list (``restartlist``: ``<service id>@<second>``) has this
  service's restart in the mark's second, and its task on that node was made after the
  mark (the mark is written before the gate closes: the replacement follows it);
* a move's: the mover's list of finished moves has one ended in that second, and its
  task on that node was made during the move (within ``MarkRecords.span_s`` before its
  end, and not after it but for the managers' skew: the mark is written at the end,
  after the task the move started).

Either alone was a tenant's way to a cool-down: a task made after the mark, its owner's
own ``docker service update --force`` makes too (after a move's mark copied, too); a
recorded restart's or a finished move's mark copied onto a share that ran all along
matches the list (the finished list names no service). Only the tasks on the node
judged count: a fresh task of another replica (its own code ended it, Swarm made a new
one) proves nothing of this one."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from swarmgpu.core.stamps import MAX_SKEW_S
from swarmgpu.manager.placement.keys import STOPPING_STATES
from swarmgpu.swarm.client import SwarmTask
from swarmgpu.swarm.taskstop import rfc3339_ns


@dataclass(frozen=True)
class MarkRecords:
    """The daemon's records a mark is read against: the mover's finished moves in the
    hour (``moves``: epoch seconds), the most a move's task may have been made before
    its end (``span_s``), and the restarter's restarts (``restarts``: by service id);
    read from the swarm object by ``restartlist.mark_records``."""

    moves: frozenset[float] = frozenset()
    span_s: float = 0.0
    restarts: Mapping[str, frozenset[float]] = field(default_factory=dict)


NO_RECORDS = MarkRecords()  # (none kept)


def on_node(tasks: Iterable[SwarmTask], node_id: str) -> list[SwarmTask]:
    """Those of ``tasks`` on ``node_id``."""
    return [t for t in tasks if t.node_id == node_id]


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
    made = [m for t in tasks if t.desired_state not in STOPPING_STATES
            and (m := rfc3339_ns(t.created_at)) is not None]
    # a restart's replacement (the managers' clocks may differ)
    restart = at in recs.restarts.get(service_id, frozenset()) and any(
        m >= (at - MAX_SKEW_S) * 10**9 for m in made)
    # a move's task, made before its end: one made after (its owner's force-restart) is
    # no move's, though the mark be a genuine move's, copied
    return restart or (at in recs.moves and any(
        (at - recs.span_s) * 10**9 <= m <= (at + MAX_SKEW_S) * 10**9 for m in made))
