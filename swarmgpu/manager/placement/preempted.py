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


def recorded_cooling(services: Sequence[SwarmService], tasks: Sequence[SwarmTask],
                     prefix: str, now: float, cooldown_s: float, stopped: Iterable[float],
                     holders: Mapping[str, Mapping[str, object]],
                     victims: Mapping[str, AbstractSet[int]]) -> set[str]:
    """The services whose record says they were preempted less than ``cooldown_s``
    before ``now`` (wall clock), as a new leader knows its victims' cooldowns. The
    record is a label on the victim's own spec, which its stack writes: it counts only
    when the hour on the swarm object (``stopped``: its seconds, written by managers
    alone) has a victim stopped in that second, so a record a stack made up (a time far
    ahead, or refreshed by each re-deploy) buys no immunity; and only where the victim
    no longer holds the node it names (``holders``: node -> the services its ledger
    holds, as this cycle reads it): there its spec write landed but its gate never
    closed (a gate write that failed, a later victim's spec write that did), its task
    never stopped. Where it holds another node (placed again; one replica stopped of
    several) it counts only when each of its live tasks was made after that stop
    (``made_after``): a genuine record copied from a preempted service of its stack onto
    one that had run all along (added again each time placement takes it off) bought
    that one a cooldown; and only where the preemption's list of its victims
    (``victims``: service id -> seconds, ``victimlist``) has it stopped in that second: a
    genuine record copied so, then its tasks made anew by its owner's force-update,
    bought it the rest of that stop's cooldown. Both checks stand: a job's spec write
    runs it anew, so tasks made after the stop do not show a gate closed. A second of the
    hour no entry of ``victims`` has, before the first that one has, is an earlier
    version's stop (it wrote no list): counted for the victim whose record has it, or a
    rolling upgrade took every victim placed again since its cooldown (as
    ``rebalance.endedlist.unnamed`` reads the mover's finishes). Only before: a victim
    counted without a write of its own (a move the mover's dry run made none of) is
    unnamed in this version too."""
    seconds = hour_seconds(stopped)
    named = {t for ts in victims.values() for t in ts}
    unnamed = {t for t in seconds if t < min(named, default=t + 1)} - named
    held = {svc for per in holders.values() for svc in per}
    live: dict[str, list[SwarmTask]] = {}
    for t in tasks:
        if t.desired_state not in STOPPING_STATES:
            live.setdefault(t.service_id, []).append(t)
    out: set[str] = set()
    for s in services:
        st = preempted_state(s.labels, prefix)
        if st is None or now - st.at >= cooldown_s or s.name in holders.get(st.node_id, {}):
            continue
        if stopped_then(st, seconds) and (s.name not in held or (
                stopped_then(st, victims.get(s.id, frozenset()) | unnamed)
                and made_after(s, st, live.get(s.id, ())))):
            out.add(s.name)
    return out


def made_after(s: SwarmService, st: Preempted, live: Sequence[SwarmTask]) -> bool:
    """Whether each of ``live`` (``s``'s tasks still meant to run) was made after the stop
    ``st`` records (less ``MAX_SKEW_S``: managers' clocks), as a victim's are once it is
    placed again; of a job, the tasks of its current run (the preemption's write started
    it). A task whose making time cannot be read proves nothing."""
    after = (st.at - MAX_SKEW_S) * 10**9
    made = [rfc3339_ns(t.created_at) for t in live
            if t.job_iteration is None or t.job_iteration == s.job_iteration]
    return all(m is not None and m >= after for m in made)


def hour_seconds(stopped: Iterable[float]) -> frozenset[int]:
    """The whole seconds of the stops the preemption hour on the swarm object counts
    (``preempt_budget.SpentHour.all``), as ``stopped_then`` reads them."""
    return frozenset(round(t) for t in stopped)


def stopped_then(st: Preempted, seconds: AbstractSet[int]) -> bool:
    """Whether the hour (``seconds``: ``hour_seconds``) has a stop in the second of
    ``st``, a record its own victim's stack may have written: the hour on the swarm
    object only managers write, so the record of a preemption swarmgpu made. Stored to
    the millisecond, a stop's time reads back as the second after the hour's (half a
    millisecond before the half second of an odd second: round() takes x.5 to the even
    one); either second the hour may hold counts."""
    near = {math.floor(st.at), math.ceil(st.at)} if st.at % 1 == 0.5 else set()
    return bool(seconds & ({round(st.at)} | near))


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
