"""Fact sources: where a node's GPU facts come from.

Every source turns into one ``FactSource`` whose ``read()`` returns a ``NodeFacts``.
A source never raises for a broken GPU or a missing driver: it returns what it
knows with ``errors`` filled in. It raises ``SourceError`` only for a spec that can
never work (unknown kind, unreadable or malformed file), naming the spec and the fix.

``registry`` turns a spec into a source: ``nvml`` (live, from the driver, over
``nvml_session``: the one NVML session; with ``nvml_xid``, the XID watcher, and
``nvml_sampler``, the sampler behind /metrics; ``nvml_vet``: answers the daemon
would refuse whole, failed on their GPU), ``gfd``
(GPU feature discovery labels), ``file`` (saved facts), ``topo`` (a saved ``nvidia-smi
topo -m``); ``naming`` (synthetic UUIDs, MIG profile names) is shared by them, and
``profile`` scripts GPU metrics for demos and tests.
"""

from __future__ import annotations

from typing import Protocol

from swarmgpu.core.model import FactsError, NodeFacts


class SourceError(FactsError):
    """A fact source that cannot be used as given."""


class FactSource(Protocol):
    spec: str

    def read(self) -> NodeFacts: ...
