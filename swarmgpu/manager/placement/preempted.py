"""The ``<p>state.preempted`` record (a service label): who preempted a service, at what
priority, when and where. The actuator (``swarmgpu.manager.cycle.preemption``) writes
it; placement reads it back as a waiting service's reason and removes it once the
service is placed again (``preempted_mark``); ``plan``, ``status`` and ``audit`` show it."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from swarmgpu.core.stamps import MAX_SKEW_S
from swarmgpu.manager.placement.keys import STOPPING_STATES
from swarmgpu.swarm.client import SwarmService, SwarmTask
from swarmgpu.swarm.taskstop import rfc3339_ns

PREEMPTED_STATE = "state.preempted"  # service label: JSON {by, priority, at, node, by_id, held}
MAX_STATE_CHARS = 1024  # a longer label is not swarmgpu's: not read


@dataclass(frozen=True)
class Preempted:
    """What ``<p>state.preempted`` says: who preempted this service, when, where."""

    by: str
    priority: int
    at: float
    node_id: str
    # ``by``'s service id ("": a record from before it was written): a service listed by
    # that name with another id was created under it since (``recorded_nominations``)
    by_id: str = ""
    # the GPUs of this victim on ``node_id`` its preemptor's hold names (``Preemption.held``;
    # None: a record from before it was written, read as all of them): a one-shot spares
    # those of its stopping task for the preemptor, as the daemon's hold does
    # (``recorded_nominations``)
    held: tuple[str, ...] | None = None

    def reason(self) -> str:
        return f"preempted by {self.by} (priority {self.priority})"

    def to_json(self) -> str:
        d: dict[str, object] = {"by": self.by, "priority": self.priority,
                                "at": round(self.at, 3), "node": self.node_id}
        if self.by_id:
            d["by_id"] = self.by_id
        text = json.dumps(d, sort_keys=True)
        if self.held is None:
            return text
        full = json.dumps({**d, "held": list(self.held)}, sort_keys=True)
        # (past the limit the whole record went unread: its reason and cooldown lost;
        # without ``held`` a one-shot spares all its GPUs, as before)
        return full if len(full) <= MAX_STATE_CHARS else text


def preempted_state(labels: Mapping[str, str], prefix: str) -> Preempted | None:
    text = labels.get(prefix + PREEMPTED_STATE)
    if not text or len(text) > MAX_STATE_CHARS:
        return None
    try:
        d = json.loads(text)
        st = Preempted(str(d["by"])[:200], int(d["priority"]), float(d["at"]),
                       str(d.get("node", ""))[:64], str(d.get("by_id") or "")[:64],
                       _held(d.get("held")))
    except (ValueError, KeyError, TypeError, OverflowError):
        return None
    # JSON reads Infinity, NaN and 1e999 too: no preemption happened at such a time
    return st if math.isfinite(st.at) else None


def recorded_victims(services: Sequence[SwarmService], tasks: Sequence[SwarmTask],
                     holders: AbstractSet[str], stopped: Iterable[float], now: float,
                     cooldown_s: float, prefix: str) -> set[str]:
    """The services whose ``<p>state.preempted`` record keeps them from being victims now:
    the cooldown a daemon that did not make the stop (a new leader) reads from Swarm. A
    record counts within ``cooldown_s`` of ``now`` when a victim was stopped in its second
    (``stopped``: the times of the swarm object's hour, which managers alone write). It is
    a label on the victim's own spec, which its stack writes: on a service that holds
    GPUs (``holders``: names, the ledger as the snapshot read it) it counts only when each
    of its live tasks was made after that stop (less ``MAX_SKEW_S``: managers' clocks), as
    a victim's are once it is placed again (a job's new run too). Before, a record copied
    from a preempted service of the stack onto another that had run all along (added
    again each time placement takes it off) bought that one a cooldown; a task whose
    making time cannot be read proves nothing."""
    seconds = {round(t) for t in stopped}
    live: dict[str, list[SwarmTask]] = {}
    for t in tasks:
        if t.desired_state not in STOPPING_STATES:
            live.setdefault(t.service_id, []).append(t)
    out = set()
    for s in services:
        st = preempted_state(s.labels, prefix)
        if st is None or now - st.at >= cooldown_s or round(st.at) not in seconds:
            continue
        after = (st.at - MAX_SKEW_S) * 10**9
        # (a job's tasks of its current run: the preemption's write started it)
        made = [rfc3339_ns(t.created_at) for t in live.get(s.id, ())
                if t.job_iteration is None or t.job_iteration == s.job_iteration]
        if s.name not in holders or all(m is not None and m >= after for m in made):
            out.add(s.name)
    return out


def _held(got: object) -> tuple[str, ...] | None:
    """A record's ``held``: a list of GPU UUIDs, else None (absent, or not swarmgpu's:
    all of its task's GPUs, as a record from before it was written)."""
    if not isinstance(got, list) or not all(isinstance(u, str) for u in got):
        return None
    return tuple(u[:64] for u in got)


def preempted_mark(s: SwarmService, prefix: str, waits: bool, placed: bool,
                   ) -> tuple[str | None, str | None]:
    """A preempted service that waits (``waits``: pending, nothing placed) says why
    first in its reason; once ``placed`` again, its record goes (written with the
    placement): (that reason, or None; the label to remove, or None)."""
    key = prefix + PREEMPTED_STATE
    if key not in s.labels:
        return None, None
    st = preempted_state(s.labels, prefix)
    if waits and st is not None:
        return st.reason(), None
    return None, key if placed else None
