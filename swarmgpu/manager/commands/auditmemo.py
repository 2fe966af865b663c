"""audit's model-server findings of each GPU service, kept while what they read stays.

The daemon audits every service each cycle (its map takes the findings), and reading a
server's flags (``auditservers.server_findings``: render's rules) cost 0.25 ms a GPU
service, 14 to 40 ms for a hostile spec (benchmarks/bench_audit_specs.py), though a
spec seldom changes. So the findings are kept per service ID with the fields they were
read from, and read again once any of those differs: the prefix, the name, the labels
(whole: parsing the request to compare it cost a fifth of the reading), the image,
entrypoint, command, env and the mounts as ``devshm`` reads them. Not the spec's
version: a service the daemon holds in memory with labels of its own (a tenant's
request as enforced) keeps the version it was read with. Bounded (``MAX_SERVICES``:
full, it takes in no other service), and a service no longer listed is dropped at each
audit of the whole list.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from swarmgpu.manager.commands.auditnodes import Finding
from swarmgpu.manager.commands.auditservers import container_of, server_findings
from swarmgpu.manager.commands.devshm import spec_mounts
from swarmgpu.swarm.client import SwarmService

# Services kept at most: past it the ones kept stay and the rest are read each cycle,
# as before the memo (a cluster of more services).
MAX_SERVICES = 4096
_OTHER = object()  # an entrypoint or command of another shape: read as none (``_words``)


def _words(v: object) -> object:
    """An entrypoint or command as ``model_servers`` reads it (a list's words as text),
    immutable: a list kept is not one the caller may change."""
    if isinstance(v, list):
        return (tuple(str(x) for x in v)
                if all(isinstance(x, str | int | float) for x in v) else _OTHER)
    return v if v is None or isinstance(v, str) else _OTHER


def read_from(svc: SwarmService, prefix: str) -> tuple[Any, ...]:
    """The fields ``server_findings`` reads of ``svc``: equal, its findings are too."""
    cs = container_of(svc.spec)
    return (prefix, svc.name, tuple(svc.labels.items()), str(cs.get("Image", "")),
            _words(cs.get("Command")), _words(cs.get("Args")), svc.env,
            tuple(spec_mounts(cs.get("Mounts"))))


class ServerMemo:
    """``server_findings`` of each service, read again only where a field read changed.
    Safe from several threads (the daemon audits from one, a cycle at a time)."""

    def __init__(self, max_services: int = MAX_SERVICES) -> None:
        self.max_services = max_services
        self._kept: dict[str, tuple[tuple[Any, ...], tuple[Finding, ...]]] = {}
        self._lock = threading.Lock()

    def findings(self, svc: SwarmService, prefix: str,
                 classes: Mapping[str, int] | None = None) -> list[Finding]:
        key = (*read_from(svc, prefix), tuple(sorted((classes or {}).items())))
        with self._lock:
            kept = self._kept.get(svc.id)
        if kept is not None and kept[0] == key:
            return list(kept[1])
        found = tuple(server_findings(svc, prefix, classes))
        with self._lock:
            # Full, a service not kept is not taken in: the daemon lists them in the same
            # order each cycle, and putting out the one kept longest put out the next one
            # listed, so every service was read every cycle. A service gone frees its
            # room at the next audit of the whole list (``keep_only``).
            if svc.id in self._kept or len(self._kept) < self.max_services:
                self._kept[svc.id] = (key, found)
        return list(found)

    def keep_only(self, ids: Iterable[str]) -> None:
        """Drop every service but ``ids`` (the services listed now)."""
        listed = set(ids)
        with self._lock:
            for gone in [k for k in self._kept if k not in listed]:
                del self._kept[gone]

    def ids(self) -> set[str]:
        with self._lock:
            return set(self._kept)

