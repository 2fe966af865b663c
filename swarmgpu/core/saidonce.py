"""A note said once while it lasts: said when it first appears or changes, said again
only after it went away and came back (a problem that lasts is not logged every cycle).

Each cycle the caller opens a round (``begin``), asks ``fresh`` of every note it has
this cycle, and closes the round (``end``): what was not seen in it is forgotten. A
round that raises before ``end`` leaves the memory as the last round closed it (the
next ``begin`` drops what it saw), as does a cycle that never asks.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class SaidOnce(Generic[K]):
    """The notes said in the last round closed, each with the value it was said with."""

    def __init__(self) -> None:
        self._said: dict[K, object] = {}  # the last round closed: what is said now
        self._seen: dict[K, object] = {}  # the round open: what it saw

    def begin(self) -> None:
        """Open a round; what a round left open (it raised) saw is dropped."""
        self._seen = {}

    def fresh(self, key: K, value: object = None) -> bool:
        """Note ``key`` (with ``value``) seen in this round; True when it is to be said:
        not said in the last round, or said with another value. Each ask of a round is
        answered against the last round, not against the asks before it in this one."""
        self._seen[key] = value
        return key not in self._said or self._said[key] != value

    def fresh_between(self, key: K, value: object = None) -> bool:
        """``fresh`` asked between rounds (a note made outside a cycle: simulate's
        arrivals): True as there, and kept as said by the last round closed, so a later
        ask between rounds and the next round do not say it again; a round that does not
        see it forgets it."""
        said = key not in self._said or self._said[key] != value
        self._said[key] = value
        return said

    def forget(self, key: K) -> None:
        """This round's ``key`` is not kept: said again the next time it is seen."""
        self._seen.pop(key, None)

    def end(self) -> None:
        """Close the round: its notes are the ones said; the others are forgotten."""
        self._said, self._seen = self._seen, {}

    def __iter__(self) -> Iterator[K]:
        """The notes said, as the last round closed left them."""
        return iter(self._said)

    def __len__(self) -> int:
        return len(self._said)
