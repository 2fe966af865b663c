"""A ``SwarmCache`` over a stand-in for docker's API, its stream open and first list read
(``cached``, first written in tests/test_unkeyed_cache.py); and ``Source``, a stand-in
for the cache's own four reads with each read counted, its ``Clock``, ``event`` and
``same`` (first written in tests/test_swarm_cache.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from swarmgpu.swarm.cache import SwarmCache
from swarmgpu.swarm.client import (
    SwarmClient,
    SwarmNode,
    SwarmNotFound,
    SwarmService,
    SwarmUnavailable,
)
from swarmgpu.swarm.unkeyed import Unkeyed


def cached(api: Any) -> tuple[SwarmClient, SwarmCache]:
    """A client over ``api`` (no engine), and its cache after the first read."""
    sw = SwarmClient.__new__(SwarmClient)
    sw.endpoint, sw._api = "unix:///test", api
    sw.on_write = sw.on_landed = None
    cache = SwarmCache(sw)
    cache.opened()  # the stream is open: a read after an event inspects only what it named
    cache.read()  # the first read lists
    return sw, cache


def mk_node(i: int, version: int = 1) -> SwarmNode:
    return SwarmNode(
        f"n{i}", f"host{i}", "10.0.0.1", "worker", "ready", "active", {}, {}, version, {}, {}
    )


def mk_service(i: int, version: int = 1) -> SwarmService:
    return SwarmService(f"s{i}", f"svc{i}", {}, (), (), "replicated", 1, None, version)


class Source:
    """The engine's store, with every read counted; ``during_list`` runs in a list."""

    def __init__(self, nodes: int = 3, services: int = 4) -> None:
        self.n = {f"n{i}": mk_node(i) for i in range(nodes)}
        self.s = {f"s{i}": mk_service(i) for i in range(services)}
        self.lists = 0
        self.inspects: list[str] = []
        self.during_list: Callable[[], None] | None = None
        self.fail_inspect: str | None = None

    def nodes(self) -> list[SwarmNode]:
        self.lists += 1
        if self.during_list is not None:
            self.during_list()
        return list(self.n.values())

    def services(self) -> list[SwarmService]:
        return list(self.s.values())

    def unkeyed(self) -> Unkeyed:
        return Unkeyed()  # every entry has its ID

    def node(self, node_id: str) -> SwarmNode:
        return self._get(self.n, node_id)

    def service(self, service_id: str) -> SwarmService:
        return self._get(self.s, service_id)

    def _get(self, store: dict[str, Any], obj: str) -> Any:
        self.inspects.append(obj)
        if obj == self.fail_inspect:
            raise SwarmUnavailable("engine unreachable")
        if obj not in store:
            raise SwarmNotFound(f"{obj}: no such object")
        return store[obj]

    def bump(self, obj: str) -> None:
        store: dict[str, Any] = self.n if obj.startswith("n") else self.s
        store[obj] = dataclasses.replace(store[obj], version=store[obj].version + 1)


def event(kind: str, obj: str, action: str = "update") -> dict[str, Any]:
    return {"Type": kind, "Action": action, "Actor": {"ID": obj, "Attributes": {}}}


def same(cache: SwarmCache, src: Source) -> bool:
    nodes, services = cache.read()
    return sorted(nodes, key=lambda n: n.id) == sorted(src.n.values(), key=lambda n: n.id) and {
        s.id: s.version for s in services
    } == {s.id: s.version for s in src.s.values()}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t
