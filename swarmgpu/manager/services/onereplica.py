"""The replica the over-share restart judges for a tenant that may not opt out: the one
on the node over its share, alone. The restart closes that node's gate and nothing
else, so whether the service is settled is asked of that node (one holding there, its
one task there running: ``rebalance.context.why_not_movable``), not of every replica:
a replica left waiting elsewhere (its queue at its max, no GPU free) kept each running
one from the restart for as long as it waited, an opt-out by scaling past the quota.

A task there that Swarm calls ``starting`` is judged running: Swarm holds a task so
until its container's health check first passes (moby#24545), for as long as the check's
interval or start period runs (hours, if its stack says so), while the container runs
and uses the GPU; read as not converged, such a health check was an opt-out too. So was
a ``start-first`` update whose new task it held so: Swarm keeps the old task running
until the new one runs, and two tasks there read as not converged. A task held
``starting`` beside one running, made longer than the mover's ``move_timeout_s`` ago (as
long as it waits for a task it made to run), is no update the restart waits for; so is
one beside an older task there itself held ``starting`` (a check that never ran: no
task there ``running``, two read as not converged, the update an opt-out again).

Judged so, the daemon's restart of one replica left the next free a cycle later while
the first one's replacement had not yet run: two replicas down at once. So within
``move_timeout_s`` of a restart of the service the daemon recorded (``restartlist``: its
owner cannot write there), a node it holds that runs no task of it holds the restart
back (``down_elsewhere``); past that, or down by no restart of the daemon's (a crash
loop), it does not, or a replica kept down were an opt-out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from swarmgpu.core.stamps import MAX_SKEW_S
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.services.coolmark import on_node
from swarmgpu.swarm.client import SwarmService, SwarmTask
from swarmgpu.swarm.taskstop import rfc3339_ns


def _started(t: SwarmTask) -> SwarmTask:
    """``t`` as the restart judges it: ``starting`` (its container runs) as running."""
    return (replace(t, state="running")
            if t.state == "starting" and t.desired_state == "running" else t)


def _held_starting(t: SwarmTask, now: float, bound_s: float) -> bool:
    """Whether ``t`` is held ``starting``, made more than ``bound_s`` before ``now`` (a
    making time that cannot be read: not)."""
    made = rfc3339_ns(t.created_at)
    return (t.state == "starting" and t.desired_state == "running" and made is not None
            and now - made / 10**9 > bound_s)


def _live(t: SwarmTask) -> bool:
    """Whether ``t`` is meant to run and its container runs (``starting`` too)."""
    return t.desired_state == "running" and t.state in ("running", "starting")


def _beside(t: SwarmTask, here: Sequence[SwarmTask]) -> bool:
    """Whether another task of ``here`` runs beside ``t``, or is live and older (the
    task a ``start-first`` update replaces, itself held ``starting``)."""
    made = rfc3339_ns(t.created_at)
    return any(o is not t and (
        (o.state == "running" and o.desired_state == "running")
        or (_live(o) and made is not None
            and (m := rfc3339_ns(o.created_at)) is not None and m < made))
        for o in here)


def down_elsewhere(s: SwarmService, tasks: Sequence[SwarmTask], held: Mapping[str, Holding],
                   node_id: str, now: float, bound_s: float,
                   restarts: Mapping[str, frozenset[float]]) -> str | None:
    """Why ``s``'s replica on ``node_id`` waits: a node it holds elsewhere runs no task
    of it (``starting`` counts) within ``bound_s`` of the daemon's last restart of it in
    ``restarts`` (by service id); None else."""
    last = max(restarts.get(s.id, ()), default=None)
    if last is None or not -MAX_SKEW_S <= now - last < bound_s:
        return None
    down = sorted(n for n in held if n != node_id
                  and not any(t.node_id == n and _live(t) for t in tasks))
    if not down:
        return None
    return (f"another replica restarted {max(now - last, 0):.0f}s ago has not run again "
            f"(node {', '.join(down)}); one replica down at a time")


def one_node(s: SwarmService, tasks: Sequence[SwarmTask], held: Mapping[str, Holding],
             node_id: str, now: float, bound_s: float,
             restarts: Mapping[str, frozenset[float]] | None = None,
             ) -> tuple[SwarmService, list[SwarmTask], dict[str, Holding], str | None]:
    """``s`` as one replica on ``node_id``: its tasks (``starting`` read as running; one
    so beside one running or an older live one, made over ``bound_s`` before ``now``,
    left out) and holding there alone, and a replicated service's replicas 1 (a global
    one counts its holdings: one); and why it waits for another replica the daemon
    restarted (``down_elsewhere``, by the daemon's ``restarts``), or None."""
    down = down_elsewhere(s, tasks, held, node_id, now, bound_s, restarts or {})
    one = replace(s, replicas=1) if s.mode == "replicated" else s
    here = on_node(tasks, node_id)
    here = [t for t in here if not (_held_starting(t, now, bound_s) and _beside(t, here))]
    return (one, [_started(t) for t in here],
            {n: h for n, h in held.items() if n == node_id}, down)
