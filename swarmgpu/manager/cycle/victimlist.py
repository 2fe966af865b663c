"""The preemption's own list of its victims, kept on the swarm object beside its hour
(``preempt_budget``): ``<p>state.preempted-victims``, ``<service id>@<second>``
entries, the last hour's, written in the hour's own write before the victims' writes
(``preempt_hour.HourStore.reserve``). Managers alone write the swarm object.

A victim's cooldown under a new leader is its ``<p>state.preempted`` record, a label on
its own spec, which its stack writes too (``placement.preempted.recorded_cooling``).
The hour's seconds name no victim: a genuine record of any service's stop, copied onto
a holder that had run all along, then its tasks made anew by its owner's ``docker
service update --force`` (after the stop, as a victim placed again has them), bought
that holder the rest of the stop's cooldown. An entry names its victim, so a copied
record buys nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from swarmgpu.core.stamps import in_hour

VICTIMS = "state.preempted-victims"  # under the prefix, on the swarm object's labels
KEEP = 1024  # entries, as the hour keeps (a budget larger than that is as good as none)


def _entries(labels: Mapping[str, str], key: str) -> list[tuple[str, float]]:
    """The list's (service id, second) entries, the last ``KEEP``; unreadable ones
    dropped (a label is anyone's text)."""
    out = []
    for part in labels.get(key, "").split(",")[-KEEP:]:
        sid, _, at = part.partition("@")
        try:
            t = float(at)
        except ValueError:
            continue
        if sid and math.isfinite(t):
            out.append((sid, t))
    return out


def victim_seconds(labels: Mapping[str, str], prefix: str) -> dict[str, frozenset[int]]:
    """Service id -> the whole seconds the list has it stopped at (as the hour's:
    ``preempted.stopped_then`` reads both)."""
    out: dict[str, set[int]] = {}
    for sid, t in _entries(labels, prefix + VICTIMS):
        out.setdefault(sid, set()).add(round(t))
    return {sid: frozenset(ts) for sid, ts in out.items()}


def with_victims(labels: Mapping[str, str], prefix: str, ids: Iterable[str],
                 now: float) -> dict[str, str]:
    """``labels`` with ``ids`` stopped at ``now`` added to the list (the last hour's
    kept, at most ``KEEP``)."""
    key = prefix + VICTIMS
    kept = [f"{sid}@{t:.0f}" for sid, t in _entries(labels, key) if in_hour(t, now)]
    new = [f"{sid}@{round(now)}" for sid in ids]
    return {**labels, key: ",".join([*kept, *new][-KEEP:])}
