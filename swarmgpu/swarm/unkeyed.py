"""Entries of the engine's node or service list that cannot be keyed: no ``ID`` (or
one that is no non-empty text, or one named twice: ``answerjson``), or no JSON object.

Docker sends an ID with every node and service; a proxy, or an engine no docker CLI
talks to, may not. Such an entry failed the whole list, so every cycle wrote nothing.
Now it fails alone: it is left out of the list (everything the daemon keeps is keyed
by ID, so nothing can be written to it), and its message (``Unkeyed``) names its
position, whatever name or hostname it carries, and the fix, for the daemon's log and
for ``audit``, ``doctor`` and ``plan``. A list that is no list still fails whole: no
entry of it can be told from another.

An inspect answered with another object than the one asked for (``wrong_object``: a
proxy's) is refused too, naming both: before a write, that write alone.

Docker reads a node or service reference as a whole ID first, then as a name (a node's
hostname, a service's ``Spec.Name``), then as an ID prefix, refusing a prefix two
objects share (moby's daemon/cluster/helpers.go, ``getNode``, ``getService``). A node
gone whose ID is another node's hostname is so answered with that node: the client reads
it by its ID alone then (``by_id_alone``), so a move's node gone
reads as gone, said once, not refused every cycle.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from loguru import logger

from swarmgpu.core.peertext import quoted
from swarmgpu.swarm.answerjson import Repeated
from swarmgpu.swarm.errors import SwarmNotFound

UNKEYED_FIX = ("check the manager's Docker version (Docker sends an ID with every node "
               "and service), and any proxy in front of the engine")


@dataclass(frozen=True)
class Unkeyed:
    """The messages of the entries left out of the last full node and service lists
    (``SwarmClient.unkeyed``), one each."""

    nodes: tuple[str, ...] = ()
    services: tuple[str, ...] = ()

    def said(self) -> tuple[str, ...]:
        """Every message, the nodes' first."""
        return (*self.nodes, *self.services)


NONE_UNKEYED = Unkeyed()  # (every entry keyed)


def keyed(listed: list[Any], kind: str) -> tuple[list[Mapping[str, Any]], tuple[str, ...]]:
    """The entries of ``listed`` (the engine's list of ``kind``: "node" or "service")
    that can be keyed, and a message for each of the others (``Unkeyed``)."""
    out: list[Mapping[str, Any]] = []
    said: list[str] = []
    for pos, raw in enumerate(listed, 1):
        if _has_id(raw):
            out.append(raw)
        else:
            said.append(_said(raw, kind, f"the engine's answer lists {kind} {pos} of "
                                         f"{len(listed)}"))
    return out, tuple(said)


def inspected(raw: Any, kind: str, asked: str, refused: type[Exception],
              wrong: type[Exception]) -> Any:
    """``raw``, the engine's answer to an inspect of ``kind`` ``asked`` (an ID an event
    or a record named), unless it cannot be keyed: then ``refused`` (the client's
    ``SwarmUnkeyed``), its message worded as ``keyed`` words a list's. The lists leave
    such an object out; the cache, reading it so, leaves it out as they do. One that is
    another object (``wrong_object``): ``wrong``."""
    if not _has_id(raw):
        raise refused(_said(raw, kind, f"the engine answers {kind} {quoted(asked, 80)}"))
    said = wrong_object(raw, kind, asked)
    if said:
        raise wrong(said)
    return raw


WRONG_FIX = ("check the proxy in front of the engine (Docker answers an inspect with the "
             "object asked for)")
# Swarm's IDs (swarmkit's identity.NewID): 25 lowercase letters and digits, so a whole
# one is no other ID's prefix; Docker's inspect tries it as an ID first.
WHOLE_ID = re.compile(r"[0-9a-z]{25}")


def wrong_object(raw: Any, kind: str, asked: str, *, as_path: bool = False) -> str:
    """"" where ``raw``, the engine's answer to an inspect of ``kind`` ``asked``, is that
    object: its ID is ``asked``; else the message naming both and the fix. A proxy that
    answers another node's object had the daemon write this node's labels from that
    one's (its version too). An answer with no ID is ``inspected``'s (unkeyed) and the
    readers'.

    The daemon asks by ID only. Docker answers an object named ``asked`` (a service's
    ``Spec.Name``, a node's hostname) where none has that ID, and its update takes the
    name too: read so, a removed service's write went to the one named so. ``as_path``
    (the docker-proxy: a path a client wrote) takes what Docker's inspect and update
    resolve as it does: the object of that ID, else of that name (one shaped as a whole
    ID too: Docker answers it only where no object has that ID), else of that ID prefix
    (Docker refuses one two objects share; a whole ID is no other's prefix). The proxy
    writes the ID answered, so the engine acts on the object checked. Names and IDs
    match exactly, case too: swarmkit's name index folds case (for uniqueness alone),
    but its control API keeps only the exact matches (``filterContains``), so Docker
    answers /services/MYSVC with a 404 where only "mysvc" is."""
    got = raw.get("ID") if isinstance(raw, Mapping) else None
    if not isinstance(got, str) or not got or got == asked:
        return ""
    name = _name(raw, kind)
    if as_path and (name == asked or (not WHOLE_ID.fullmatch(asked) and got.startswith(asked))):
        return ""
    why = (f"no {kind} has the ID {quoted(asked, 80)} (Docker then answers one named so: "
           f"removed), or a proxy answered another" if name == asked else WRONG_FIX)
    return (f"{kind} {quoted(asked, 80)} was asked for, the engine answered {kind} "
            f"{quoted(got, 80)}{_named(raw, kind)}: nothing of it is read or written; "
            f"{why}")


def answered_by_prefix(raw: Any, asked: str, kind: str) -> bool:
    """The engine answered ``raw`` for ``asked`` as an ID prefix: neither its ID nor its
    name (``wrong_object`` with ``as_path`` took it so)."""
    got = raw.get("ID") if isinstance(raw, Mapping) else None
    return isinstance(got, str) and got != asked and _name(raw, kind) != asked \
        and got.startswith(asked)


# The ambiguous node references said (asked, answered): each once a process, not each
# cycle; bounded (then said afresh), as any ID a record names may come here.
_said_ambiguous: set[tuple[str, str]] = set()
_said_lock = threading.Lock()
SAID_MAX = 1024


def by_id_alone(raw: Any, asked: str, listed: Callable[[], list[Any]]) -> Any:
    """``raw``, the engine's answer to node ``asked``'s inspect; where it is another node
    whose hostname is ``asked`` (Docker's answer where no node has that ID), the node of
    that ID in ``listed()`` (the node list filtered by it: the filter matches IDs alone);
    none: ``SwarmNotFound`` (gone, as the engine's 404), the ambiguity said once,
    naming both nodes and the fix."""
    if not _has_id(raw) or raw["ID"] == asked or _name(raw, "node") != asked:
        return raw
    for entry in listed():
        if isinstance(entry, Mapping) and entry.get("ID") == asked:
            return entry
    other = str(raw["ID"])
    with _said_lock:
        fresh = (asked, other) not in _said_ambiguous
        if fresh:
            if len(_said_ambiguous) >= SAID_MAX:
                _said_ambiguous.clear()
            _said_ambiguous.add((asked, other))
    if fresh:
        logger.warning(
            "node reference {} is ambiguous: no node has that ID (removed: read as gone), "
            "and node {} has it as its hostname, which Docker answers for it; rename that "
            "host so its hostname is no node's ID (then restart its docker)",
            quoted(asked, 80), quoted(other, 80))
    raise SwarmNotFound(f"node {quoted(asked, 80)}: no node has the ID {quoted(asked, 80)} "
                        f"(Docker answers node {quoted(other, 80)}, its hostname so)")


def _has_id(raw: Any) -> bool:
    return isinstance(raw, Mapping) and isinstance(raw.get("ID"), str) and bool(raw["ID"])


def _said(raw: Any, kind: str, head: str) -> str:
    """One entry's message (``Unkeyed``): ``head`` names where it was answered."""
    what = ("naming its ID twice (which one is meant cannot be told)"
            if isinstance(raw, Repeated) and raw.id_twice else
            f"with ID {quoted(raw.get('ID'), 80)}, not a non-empty text"
            if isinstance(raw, Mapping) else
            f"as {type(raw).__name__} {quoted(raw, 80)}, not an object")
    return (f"{head}{_named(raw, kind)} {what}: it is left out, nothing is read of it "
            f"or written to it; {UNKEYED_FIX}")


def _name(raw: Any, kind: str) -> str | None:
    """What the entry calls itself: a node's hostname, a service's name; None if nothing."""
    if not isinstance(raw, Mapping):
        return None
    part, key = ("Description", "Hostname") if kind == "node" else ("Spec", "Name")
    got = raw.get(part)
    name = got.get(key) if isinstance(got, Mapping) else None
    return name if isinstance(name, str) and name else None


def _named(raw: Any, kind: str) -> str:
    """`` (hostname 'x')`` or `` (name 'x')``: what the entry calls itself, if anything."""
    name = _name(raw, kind)
    word = "hostname" if kind == "node" else "name"
    return f" ({word} {quoted(name, 80)})" if name is not None else ""
