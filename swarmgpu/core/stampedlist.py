"""Lists of ``<service id>@<epoch second>`` entries, comma-separated, in a label on the
swarm object: the preemption's victims (``victimlist``), the mover's ended moves
(``endedlist``), the over-share restarts (``restartlist``). One reader and one rule for
what a write keeps, so each list reads a label edited by anyone the same way; each list
keeps its own bound and what it adds."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TypeVar

from swarmgpu.core.stamps import in_hour

T = TypeVar("T")

# entries at most, read and written (~150 kB of ``<25-char id>@<10 digits>``, well under
# the 1.5 MiB of one Swarm store transaction, swarmkit's ``MaxTransactionBytes``): past a
# list's own ``keep`` only a service's older entries go, so each service's newest of the
# hour stays until this many services have one
CAP = 4096


def stamped_entries(labels: Mapping[str, str], key: str, keep: int) -> list[tuple[str, float]]:
    """The (service id, second) entries of label ``key``, its last ``keep``; unreadable
    ones dropped (a label is anyone's text)."""
    out = []
    for part in labels.get(key, "").split(",")[-keep:]:
        sid, _, at = part.partition("@")
        try:
            t = float(at)
        except ValueError:
            continue
        if sid and math.isfinite(t):  # (inf, nan, 1e309: no clock's)
            out.append((sid, t))
    return out


def by_service(entries: Iterable[tuple[str, T]]) -> dict[str, frozenset[T]]:
    """Service id -> the times ``entries`` have it at."""
    out: dict[str, set[T]] = {}
    for sid, t in entries:
        out.setdefault(sid, set()).add(t)
    return {sid: frozenset(ts) for sid, ts in out.items()}


def hour_kept(labels: Mapping[str, str], key: str, keep: int, now: float) -> list[str]:
    """The entries of label ``key`` a write keeps: the last hour's (``in_hour``), as
    ``<id>@<whole second>``, oldest first, before the writer adds its own and bounds."""
    return [f"{sid}@{t:.0f}" for sid, t in stamped_entries(labels, key, keep)
            if in_hour(t, now)]


def bounded(entries: list[str], keep: int, keep_last: int = 0) -> list[str]:
    """``entries`` (``<id>@<second>``, oldest first) at most ``keep`` by dropping an entry
    of a service with a newer one (the last ``keep_last`` never so), then at most ``CAP``
    (the oldest dropped: ``overflows`` says when). Oldest first alone, one tenant's many
    restarts or moves pushed another's entry out within its cool-down, whose mark then
    cooled nothing; a service's older entry matches no mark the daemon stands by. Its
    newest went too, once about ``keep`` other services had one in the hour: a bound on
    entries, not on services."""
    return _deduped(entries, keep, keep_last)[-max(keep, CAP):]


def overflows(entries: list[str], keep: int, keep_last: int = 0) -> bool:
    """Whether ``bounded`` drops an entry that is its service's newest (past ``CAP``)."""
    return len(_deduped(entries, keep, keep_last)) > max(keep, CAP)


def _deduped(entries: list[str], keep: int, keep_last: int) -> list[str]:
    surplus = len(entries) - keep
    if surplus <= 0:
        return entries
    newest = {e.partition("@")[0]: i for i, e in enumerate(entries)}
    cut = len(entries) - keep_last
    out = []
    for i, e in enumerate(entries):
        if surplus > 0 and i < cut and newest[e.partition("@")[0]] != i:
            surplus -= 1
            continue
        out.append(e)
    return out
