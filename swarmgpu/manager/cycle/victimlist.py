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
record buys nothing. A second of the hour no entry names, before the first one named, is
an earlier version's stop (it wrote no list), counted for its record's victim
(``recorded_cooling``): a rolling upgrade keeps the old leader's victims' cooldowns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from swarmgpu.core.stampedlist import by_service, hour_kept, stamped_entries

VICTIMS = "state.preempted-victims"  # under the prefix, on the swarm object's labels
KEEP = 1024  # entries, as the hour keeps (a budget larger than that is as good as none)


def victim_seconds(labels: Mapping[str, str], prefix: str) -> dict[str, frozenset[int]]:
    """Service id -> the whole seconds the list has it stopped at (as the hour's:
    ``preempted.stopped_then`` reads both)."""
    entries = stamped_entries(labels, prefix + VICTIMS, KEEP)
    return by_service((sid, round(t)) for sid, t in entries)


def with_victims(labels: Mapping[str, str], prefix: str, ids: Iterable[str],
                 now: float) -> dict[str, str]:
    """``labels`` with ``ids`` stopped at ``now`` added to the list (the last hour's
    kept, at most ``KEEP``)."""
    key = prefix + VICTIMS
    kept = hour_kept(labels, key, KEEP, now)
    new = [f"{sid}@{round(now)}" for sid in ids]
    return {**labels, key: ",".join([*kept, *new][-KEEP:])}
