"""A spec's fields read as Docker sends them, or refused naming the field.

Docker sends a service's or a task's spec as objects and whole numbers; a proxy (or an
engine API call no docker CLI makes) may send a string where an object goes, or
``"lots"`` for ``NanoCPUs``. Read as nothing, such a field undercounted what the spec
reserves (a service seemed to reserve no CPU, and a move or a preemptor was sent where
Swarm has no room); read unguarded, it raised an AttributeError that failed a whole
cycle. ``UnreadSpec`` names the field, for the caller to fail that one spec with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swarmgpu.core.peertext import quoted

_EMPTY: Mapping[str, Any] = {}
_SERVICE_FIX = ("check any proxy, or re-create the service with docker service create / "
                "docker stack deploy")


class UnreadSpec(ValueError):
    """A spec's field that is not what Docker sends; the message names it."""


def spec_object(value: Any, where: str, fix: str = "",
                required: bool = False) -> Mapping[str, Any]:
    """``value`` as an object (absent or null: empty), else ``UnreadSpec``; ``fix``:
    what to do, where the thing read is no service's spec (a node's); ``required``: one
    Docker always sends (a Spec), absent or null unread too: read as empty, what it
    holds would seem gone."""
    if value is None:
        if required:
            raise UnreadSpec(f"{where} is null or missing, not an object (Docker sends one; "
                             f"{fix or _SERVICE_FIX})")
        return _EMPTY
    if not isinstance(value, Mapping):
        raise UnreadSpec(f"{where} is {type(value).__name__} {quoted(value)}, not an object "
                         f"(Docker sends one; {fix or _SERVICE_FIX})")
    return value


def spec_count(value: Any, where: str, fix: str = "") -> int:
    """``value`` as a whole number, not negative (absent or null: 0), else
    ``UnreadSpec``: never 0 for what cannot be read; ``fix`` as for ``spec_object``."""
    n: int | None = None
    if value is None:
        return 0
    if isinstance(value, int | str | float) and not isinstance(value, bool):
        try:
            n = int(value)
        except (ValueError, OverflowError):
            n = None
    if n is None or n < 0:
        what = "the service's reservation" if "Reservations" in where else "the service"
        raise UnreadSpec(f"{where} is {quoted(value)}, not a whole number (Docker sends "
                         f"one; {fix or 'check any proxy, or update ' + what})")
    return n


def spec_list(value: Any, where: str) -> list[Any]:
    """``value`` as a list (absent or null: none), else ``UnreadSpec``: a text read as
    one would be read as its letters."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise UnreadSpec(f"{where} is {type(value).__name__} {quoted(value)}, not a list "
                         "(Docker sends one; check any proxy, or re-create the service)")
    return value


def spec_texts(value: Any, where: str) -> tuple[str, ...]:
    """``value`` as a list of texts (absent or null: none), else ``UnreadSpec``."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(x, str) for x in value):
        raise UnreadSpec(f"{where} is {quoted(value)}, not a list of texts (Docker sends "
                         f"one; {_SERVICE_FIX})")
    return tuple(value)


def spec_labels(value: Any, where: str) -> dict[str, str]:
    """``value`` as labels, texts by texts (absent or null: none), else ``UnreadSpec``."""
    labels = spec_object(value, where)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise UnreadSpec(f"{where} is {quoted(value)}, not texts by texts (Docker sends "
                         "them so; check any proxy, or update the service's labels)")
    return dict(labels)


def spec_maybe_count(value: Any, where: str) -> int | None:
    """``spec_count``, absent or null read as None (not set) rather than 0."""
    return None if value is None else spec_count(value, where)


def spec_text(value: Any, where: str) -> str:
    """``value`` as a text (absent or null: ""), else ``UnreadSpec``."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise UnreadSpec(f"{where} is {quoted(value)}, not a text (Docker sends one; check "
                         "any proxy, or re-create the service)")
    return value


def job_iteration(raw: Mapping[str, Any]) -> int:
    """A service's ``JobStatus.JobIteration.Index``: the run a job is on (0: none)."""
    status = spec_object(raw.get("JobStatus"), "JobStatus")
    return spec_count(spec_object(status.get("JobIteration"), "JobStatus.JobIteration")
                      .get("Index"), "JobStatus.JobIteration.Index")


def reservations(spec: Mapping[str, Any]) -> tuple[int, int]:
    """(CPU milli, memory MiB) a service or task spec reserves on its node, rounded up
    (a node's capacity is rounded down): Swarm compares nanoCPUs and bytes, so a sum
    that fits here fits there. ``UnreadSpec`` (naming the field) where a part is not what
    Docker sends: never 0 for a reservation that cannot be read (an undercount)."""
    tt = spec.get("TaskTemplate", spec)
    where = "TaskTemplate.Resources" if tt is not spec else "Resources"
    res = spec_object(spec_object(spec_object(tt, "TaskTemplate").get("Resources"), where)
                      .get("Reservations"), where + ".Reservations")
    cpu = spec_count(res.get("NanoCPUs"), where + ".Reservations.NanoCPUs")
    mem = spec_count(res.get("MemoryBytes"), where + ".Reservations.MemoryBytes")
    return (-(-cpu // 1_000_000), -(-mem // (1 << 20)))


def held_reservations(spec: Mapping[str, Any]) -> tuple[int, int] | None:
    """``reservations`` for a pass over every holder (preemption's room, the rebalance
    policies' CPU count); None where the spec cannot be read (``UnreadSpec``: Resources
    not a mapping, NanoCPUs not a number; a spec no docker CLI makes): its holder counts
    its node's whole CPU and memory (none counted oversubscribed it). Placement fails it
    alone (isolate); raised, one such holder failed every preemption and rebalance policy
    (health's), each cycle."""
    try:
        return reservations(spec)
    except (AttributeError, TypeError, UnreadSpec):
        return None
