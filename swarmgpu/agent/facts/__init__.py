"""Fact sources: where a node's GPU facts come from.

Every source turns into one ``FactSource`` whose ``read()`` returns a ``NodeFacts``.
A source never raises for a broken GPU or a missing driver: it returns what it
knows with ``errors`` filled in. It raises ``SourceError`` only for a spec that can
never work (unknown kind, unreadable or malformed file), naming the spec and the fix.
"""

from __future__ import annotations

from typing import Protocol

from swarmgpu.core.model import FactsError, NodeFacts


class SourceError(FactsError):
    """A fact source that cannot be used as given."""


class FactSource(Protocol):
    spec: str

    def read(self) -> NodeFacts: ...
