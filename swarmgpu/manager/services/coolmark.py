"""Whether a service's cool-down mark (``<p>state.moved-at``) is borne out by Swarm, for
the over-share restart of a tenant that may not opt out (``Tenants.enforced``). The mark
is a label on the service's own spec, which its stack writes; what bears it out is what
a restart or a move leaves on the node judged:

* a restart's mark is written before its gate closes: the replacement task on that node
  is made after it;
* a move's mark is written at its end, after the task it started on its target (made
  during the move, within ``MoveEnds.span_s`` before the end), and the mover's list of
  finished moves on the swarm object (managers' alone) has that end.

Only the tasks on the node judged bear the mark out: a fresh task of another replica
(its own code ended it, Swarm made a new one) proves nothing of this one. The finished
list names no service: a mark copied from another service's move matches it, so the
task there must also be one a move ending then could have made.

The mark is one per service, written anew by each restart or move of any replica: one
borne out on another node only (``kept``) cools this node from its own task's making,
as that task's restart or move did, never longer than the mark would; dropped, the
daemon's restart of one replica took another's cool-down away, restarted again within
``rebalance.cooldown_s`` of its last."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from swarmgpu.core.config import Config
from swarmgpu.core.stamps import MAX_SKEW_S
from swarmgpu.swarm.client import SwarmTask
from swarmgpu.swarm.taskstop import STOPPING_STATES, rfc3339_ns  # (not placement.keys: a cycle)


@dataclass(frozen=True)
class MoveEnds:
    """The mover's finished moves in the hour (``budget.finished_times``: epoch seconds)
    and the most a move's task may have been made before its end (``span_s``)."""

    times: frozenset[float] = frozenset()
    span_s: float = 0.0

    @classmethod
    def of(cls, times: Iterable[float], cfg: Config) -> MoveEnds:
        """A move ends once its target's task runs, rolled back past ``move_timeout_s``
        (a repin's old task waited twice that), the mover looking each cycle; the
        managers' clocks may differ by ``MAX_SKEW_S``."""
        span = 2 * cfg.rebalance.move_timeout_s + cfg.sync.interval_s + MAX_SKEW_S
        return cls(frozenset(times), span)


NO_MOVES = MoveEnds()  # (none finished)


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


def kept(mark: str, here: Sequence[SwarmTask], elsewhere: Sequence[SwarmTask],
         moved: MoveEnds) -> str | None:
    """The cool-down mark the node of ``here`` (the service's tasks there) is judged by:
    ``mark`` where they bear it out; where only ``elsewhere`` (its tasks on other nodes)
    do, the time its task here was made (epoch seconds, the earliest); else None."""
    if borne_out(mark, here, moved):
        return mark
    made = _made(here)
    if not made or not borne_out(mark, elsewhere, moved):
        return None
    return f"{min(made) / 10**9:.0f}"  # (before the mark: it was not borne out here)


def borne_out(mark: str, tasks: Sequence[SwarmTask], moved: MoveEnds) -> bool:
    """Whether ``mark`` (epoch seconds, the stack's text) is a restart's or a move's on
    the node whose ``tasks`` (those of the service there) are given. False for a mark
    that is no finite time, or tasks whose making time cannot be read."""
    try:
        at = float(mark)
    except ValueError:
        return False
    if not math.isfinite(at):
        return False
    made = _made(tasks)
    if any(m >= (at - MAX_SKEW_S) * 10**9 for m in made):
        return True  # a restart's replacement (the managers' clocks may differ)
    return at in moved.times and any(m >= (at - moved.span_s) * 10**9 for m in made)
