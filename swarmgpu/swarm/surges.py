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
it must not overwrite what a newer raise recorded. A raise known not taken (never sent
whole, or refused by the engine's version check) is withdrawn; any other failure may
yet apply, and keeps its entry. The book lives in the proxy's memory, at most
``MAX_SURGES`` entries. The proxy never sees a service removed (a CI
stack gone mid-move): when full, ``admit_or_sweep`` asks the engine which booked
services it still lists and drops the rest (an ID is never reused), and applies the
rule above to those listed; a raise still full after that is refused, never an entry
dropped early (an entry dropped early is one raise more).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from swarmgpu.swarm.httpframe import Refused
from swarmgpu.swarm.jsonstrict import load_answer, sub_object

MAX_SURGES = 4096  # services raised and not seen lowered since; a move ends in minutes
SWEEP_BATCH = 64  # IDs per GET /services the sweep sends: a query of about 2 KiB
# The proxy's own GET of a path from the engine: (status, JSON, raw body).
Read = Callable[[str], tuple[int, Any, bytes]]


def replicas(spec: Any) -> int | None:
    """A replicated service's count (the engine's default: 1); None for any other mode or a
    count that is not a whole number (the write check refuses those)."""
    rep = sub_object(spec, "Mode", "Replicated")
    got = rep.get("Replicas", 1) if rep is not None else None
    return got if isinstance(got, int) and not isinstance(got, bool) else None


class SurgeRefused(ValueError):
    """A raise the book refuses: the message names the field and why."""


class BookFull(SurgeRefused):
    """A raise that needs a new entry, the book full (``admit_or_sweep`` sweeps)."""


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

    def admit(self, service: str, version: int, cur: int | None, new: int | None) -> bool:
        """Check a service write (checked at ``version``, the engine's count ``cur``,
        asking ``new``) and note it when it raises; SurgeRefused when it may not. True
        when this raise made the service's entry (``withdraw`` may undo it)."""
        with self._lock:
            self._seen(service, version, cur)
            if cur is None or new is None or new <= cur:
                return False
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
                raise BookFull(
                    f"this service update raises Mode.Replicated.Replicas, "
                    f"and the proxy already tracks {self.cap} raised "
                    "services the engine lists (none seen lowered since): restart "
                    "the proxy once the moves in flight have ended"
                )
            self._raised[service] = _Raise(new, version)
            return had is None

    def applied(self, service: str, version: int, new: int | None) -> None:
        """The engine took a write checked at ``version``: it holds ``new`` now, at a
        later version."""
        with self._lock:
            self._seen(service, version + 1, new)

    def withdraw(self, service: str, version: int) -> None:
        """The raise checked at ``version`` that made the service's entry is known not
        taken (it never reached the engine, or the engine's version check refused it):
        the entry goes. Any other failure may yet apply (a raft proposal that timed out
        can still commit): its entry stays."""
        with self._lock:
            had = self._raised.get(service)
            if had is not None and had.version == version:
                del self._raised[service]

    def booked(self) -> list[str]:
        """The IDs of the services the book holds a raise of."""
        with self._lock:
            return list(self._raised)

    def reconcile(
        self, asked: Collection[str], listed: Mapping[str, tuple[int, int | None]]
    ) -> None:
        """The engine's list of ``asked``: ``listed`` (ID -> its version and count). An
        asked service it does not list is gone (IDs are never reused): its entry goes;
        a listed one is seen as a later check's read would see it."""
        with self._lock:
            for service in asked:
                if service not in listed:
                    self._raised.pop(service, None)
                else:
                    self._seen(service, *listed[service])

    def _seen(self, service: str, version: int, count: int | None) -> None:
        had = self._raised.get(service)
        if had is not None and version > had.version and count != had.to:
            del self._raised[service]


def admit_or_sweep(
    book: SurgeBook, read: Read, service: str, version: int, cur: int | None, new: int | None
) -> bool:
    """``book.admit``; when the book is full, ``sweep`` it with ``read`` and admit again."""
    try:
        return book.admit(service, version, cur, new)
    except BookFull:
        sweep(book, read)
        return book.admit(service, version, cur, new)


def out_of_sequence(raw: bytes) -> bool:
    """The engine's 500 answer to an update is its version check's refusal (swarmkit's
    ErrSequenceConflict, "update out of sequence", raised before any raft proposal): the
    update was not applied, and never will be."""
    with contextlib.suppress(ValueError):
        got = load_answer(raw, "the engine's answer to a service update")
        message = got.get("message") if isinstance(got, dict) else None
        return isinstance(message, str) and message.endswith("update out of sequence")
    return False


def sweep(book: SurgeBook, read: Read) -> None:
    """Ask the engine which booked services it still lists (``SWEEP_BATCH`` IDs per
    ``GET /services``, each a whole ID: the engine's ``id`` filter matches a prefix, so a
    listed service is never left out) and reconcile the book with each answer. An answer
    that is not the list drops nothing: SurgeRefused, naming it."""
    ids = book.booked()
    for at in range(0, len(ids), SWEEP_BATCH):
        batch = ids[at : at + SWEEP_BATCH]
        path = "/services?" + urlencode({"filters": json.dumps({"id": batch})})
        book.reconcile(batch, _listed(read, path, book.cap))


def _listed(read: Read, path: str, cap: int) -> dict[str, tuple[int, int | None]]:
    """The services ``GET path`` lists: ID -> (version, count)."""
    why = (
        f"this service update raises Mode.Replicated.Replicas, the proxy tracks "
        f"{cap} raised services, and its GET /services for those the engine "
        "still lists"
    )
    try:
        status, got, raw = read(path)
    except (Refused, OSError) as exc:
        raise SurgeRefused(f"{why} failed ({exc}): try again") from None
    if status != 200 or not isinstance(got, list):
        raise SurgeRefused(f"{why} got {status} {raw[:200]!r}: try again")
    out: dict[str, tuple[int, int | None]] = {}
    for svc in got:
        ident = svc.get("ID") if isinstance(svc, dict) else None
        version = sub_object(svc, "Version")
        index = version.get("Index") if version is not None else None
        if not isinstance(ident, str) or not isinstance(index, int) or isinstance(index, bool):
            raise SurgeRefused(
                f"{why} lists a service without a string ID and a whole Version.Index "
                f"({str(svc)[:200]}): restart the proxy once the moves in flight have ended"
            )
        out[ident] = (index, replicas(svc.get("Spec")))
    return out
