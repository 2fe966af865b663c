"""The docker-proxy's bound on replicas: one above the owner's count, not one per write.

The daemon raises a service's ``Mode.Replicated.Replicas`` in one place: a
make-before-break move's surge (``rebalance.mover``: replicas + 1 with the move's
first write, back with its last). The write check alone (``proxy_policy``) compares a
write with the current spec, so a daemon that raised a service could raise it again
with the next write, and again. ``SurgeBook`` keeps, per service ID, the count this
proxy let the daemon raise it to and the spec version that raise was checked at, and
refuses a raise from that very count: the daemon's raises never stack, while the
owner's own scaling (any other count) still gets its one surge.

An entry is dropped only once the engine is known to be past the raise's version at
another count (a later check's read, or a 2xx to a write checked after the raise):
from then on that raise can never apply (the engine takes an update only at its
version), so no count the engine holds is one the daemon raised it to. A raise
checked at an older version than the entry's is refused (the engine refuses it too):
it must not overwrite what a newer raise recorded. The book lives in the proxy's
memory, at most ``MAX_SURGES`` entries; when full, a raise that needs a new one is
refused, never an entry dropped early (an entry dropped early is one raise more).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from swarmgpu.swarm.jsonstrict import sub_object

MAX_SURGES = 4096  # services raised and not seen lowered since; a move ends in minutes


def replicas(spec: Any) -> int | None:
    """A replicated service's count (the engine's default: 1); None for any other mode or a
    count that is not a whole number (the write check refuses those)."""
    rep = sub_object(spec, "Mode", "Replicated")
    got = rep.get("Replicas", 1) if rep is not None else None
    return got if isinstance(got, int) and not isinstance(got, bool) else None


class SurgeRefused(ValueError):
    """A raise the book refuses: the message names the field and why."""


@dataclass(frozen=True)
class _Raise:
    to: int
    version: int


class SurgeBook:
    """Per service ID, the raise this proxy let through (thread-safe: one lock)."""

    def __init__(self, cap: int = MAX_SURGES) -> None:
        self.cap = cap
        self._raised: dict[str, _Raise] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._raised)

    def admit(self, service: str, version: int, cur: int | None, new: int | None) -> None:
        """Check a service write (checked at ``version``, the engine's count ``cur``,
        asking ``new``) and note it when it raises; SurgeRefused when it may not."""
        with self._lock:
            self._seen(service, version, cur)
            if cur is None or new is None or new <= cur:
                return
            had = self._raised.get(service)
            if had is not None and version < had.version:
                raise SurgeRefused(
                    f"this service update raises Mode.Replicated.Replicas "
                    f"at version {version}, older than the raise at "
                    f"{had.version}: read the service again"
                )
            if had is not None and cur == had.to:
                raise SurgeRefused(
                    f"this service update raises Mode.Replicated.Replicas "
                    f"from {cur} to {new}, and {cur} is the count this "
                    "proxy let the daemon raise it to already: the daemon "
                    "adds one replica above the owner's count (a "
                    "make-before-break move's surge), not one per write"
                )
            if had is None and len(self._raised) >= self.cap:
                raise SurgeRefused(
                    f"this service update raises Mode.Replicated.Replicas, "
                    f"and the proxy already tracks {self.cap} raised "
                    "services (none seen lowered since): restart the proxy "
                    "once the moves in flight have ended"
                )
            self._raised[service] = _Raise(new, version)

    def applied(self, service: str, version: int, new: int | None) -> None:
        """The engine took a write checked at ``version``: it holds ``new`` now, at a
        later version."""
        with self._lock:
            self._seen(service, version + 1, new)

    def _seen(self, service: str, version: int, count: int | None) -> None:
        had = self._raised.get(service)
        if had is not None and version > had.version and count != had.to:
            del self._raised[service]
