"""Until when a task Swarm's constraint enforcer rejected may still run on its node.

When a node no longer meets a task's constraints (swarmgpu closed its gate: a repin's
step 2, a preemption's victim, a move's source), swarmkit's constraint enforcer
(manager/orchestrator/constraintenforcer) sets the task's observed state to
``rejected``, with its own message and error and the time, and the orchestrator then
sets it desired ``shutdown``. Swarm's scheduler frees its reservations at once, but its
container runs on its GPUs until the worker stops it: its stop grace period at most
(``ContainerSpec.StopGracePeriod``, nanoseconds; docker's default 10 s). The dispatcher
never moves a status back, so the task stays ``rejected`` after the container stopped:
only the time bounds it. Read strictly: another message, a timestamp that is not RFC
3339, or a wrong grace period is no stop time (a wrong grace period, the default)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime

# swarmkit constraint_enforcer.go, rejectNoncompliantTasks: Status.Message and Status.Err
ENFORCER_MESSAGE = "task rejected by constraint enforcer"
ENFORCER_ERR = "assigned node no longer meets constraints"
# The desired states of a task Swarm is stopping (a scale-down, an update's old task, a
# removed service's): its container runs on until it stops, its stop grace period at most.
STOPPING_STATES = ("remove", "shutdown")  # (sorted: the task list's filter, as sent)
DEFAULT_GRACE_S = 10  # docker's stop timeout when the spec sets no StopGracePeriod
MAX_GRACE_S = 300  # a longer one is held this long: a hold outliving it blocks too much
# Go's RFC3339Nano as the engine writes it (up to nine fraction digits, "Z" or an offset)
_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?"
                      r"(Z|[+-]\d\d:\d\d)", re.ASCII)


def rfc3339_epoch(text: object) -> float | None:
    """Epoch seconds of an RFC 3339 time; None for anything else."""
    at = _instant(text)
    return None if at is None else at[0] + at[1] / 1e9


def rfc3339_ns(text: object) -> int | None:
    """Nanoseconds since the epoch of an RFC 3339 time, exact; None for anything else.
    Times are ordered by it, never by their text: Go's RFC3339Nano drops trailing zeros,
    so as text "...00.5Z" sorts after "...00.55Z", though it is earlier."""
    at = _instant(text)
    return None if at is None else at[0] * 10**9 + at[1]


def _instant(text: object) -> tuple[int, int] | None:
    """(whole epoch seconds, nanoseconds past them) of an RFC 3339 time; None for
    anything else."""
    m = _RFC3339.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        return None
    y, mo, d, h, mi, s = (int(x) for x in m.groups()[:6])
    zone = m.group(8)
    try:
        at = datetime(y, mo, d, h, mi, s, tzinfo=UTC)
    except ValueError:  # month 13, second 60 (Go writes no leap second)
        return None
    offset = 0
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        oh, om = int(zone[1:3]), int(zone[4:6])
        if oh > 23 or om > 59:
            return None
        offset = sign * (oh * 3600 + om * 60)
    # (in seconds, not on the datetime: year 9999 with a negative offset is past its range)
    return int(at.timestamp()) - offset, int((m.group(7) or "0").ljust(9, "0"))


def stop_grace_s(spec: object) -> float:
    """A task's stop grace period in seconds (``Spec.ContainerSpec.StopGracePeriod``),
    at most ``MAX_GRACE_S``; ``DEFAULT_GRACE_S`` when none is set, or one that is not a
    whole number of nanoseconds of zero or more."""
    cs = spec.get("ContainerSpec") if isinstance(spec, Mapping) else None
    ns = cs.get("StopGracePeriod") if isinstance(cs, Mapping) else None
    if type(ns) is not int or ns < 0:
        return DEFAULT_GRACE_S
    # (compared as ints: one past a float's range would raise in the division)
    return MAX_GRACE_S if ns >= MAX_GRACE_S * 10**9 else ns / 1e9


def rejected_until(status: object, spec: object) -> float | None:
    """Epoch seconds until which a task the constraint enforcer rejected (its ``Status``,
    its ``Spec``) may still run: its status time plus its stop grace period; None for
    any other status, or one whose time is not read."""
    if not isinstance(status, Mapping) or status.get("State") != "rejected":
        return None
    if status.get("Message") != ENFORCER_MESSAGE or status.get("Err") != ENFORCER_ERR:
        return None
    at = rfc3339_epoch(status.get("Timestamp"))
    return None if at is None else at + stop_grace_s(spec)


def updated_at(value: object) -> float | None:
    """Epoch seconds of a task's ``UpdatedAt`` (the Swarm leader's clock: every change to
    the task, its desired state's too, sets it); None when absent, null, Go's zero time
    (the engine's for a time never set) or not an RFC 3339 time (a proxy's: never read as
    some other time)."""
    # Unknown, not refused: it only dates a stop a reader first sees, whose hold is then
    # timed from that sight (the longer hold); refused, one such task failed the whole
    # task list, so every cycle, as ``rejected_until`` reads an odd status time too.
    at = rfc3339_epoch(value) if value is not None else None
    if at is None:
        return None
    return at if at > 0 else None  # (no swarm ran before 1970: the zero time, unset)
