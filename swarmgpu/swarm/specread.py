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


class UnreadSpec(ValueError):
    """A spec's field that is not what Docker sends; the message names it."""


def spec_object(value: Any, where: str) -> Mapping[str, Any]:
    """``value`` as an object (absent or null: empty), else ``UnreadSpec``."""
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise UnreadSpec(f"{where} is {type(value).__name__} {quoted(value)}, not an object "
                         "(Docker sends one; check any proxy, or re-create the service "
                         "with docker service create / docker stack deploy)")
    return value


def spec_count(value: Any, where: str) -> int:
    """``value`` as a whole number, not negative (absent or null: 0), else
    ``UnreadSpec``: never 0 for what cannot be read."""
    n: int | None = None
    if value is None:
        return 0
    if isinstance(value, int | str | float) and not isinstance(value, bool):
        try:
            n = int(value)
        except (ValueError, OverflowError):
            n = None
    if n is None or n < 0:
        fix = "the service's reservation" if "Reservations" in where else "the service"
        raise UnreadSpec(f"{where} is {quoted(value)}, not a whole number (Docker sends "
                         f"one; check any proxy, or update {fix})")
    return n
