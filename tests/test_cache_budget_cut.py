"""The facts watch reads the swarm's nodes from the cache within its own budget
(``agents.watch_s``): where that budget cuts the cache's full list (``BudgetCut``), the
cache stays stale (the next read lists) and that list still compares what changed with
no event named it (the stall check, ``watch_verdict``). Before, the list tried again
after a cut was taken as a failed one and compared nothing: a stalled stream the cut
minute's list would have caught went unnoticed for another minute, every cycle reading
what the stream did not tell."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from swarmgpu.swarm.cache import SwarmCache
from swarmgpu.swarm.client import BudgetCut, SwarmNode, SwarmService
from swarmgpu.swarm.unkeyed import Unkeyed


class Source:
    """The engine's store, its lists counted; ``during_list`` runs in a list."""

    def __init__(self) -> None:
        self.n = {f"n{i}": SwarmNode(f"n{i}", f"host{i}", "10.0.0.1", "worker", "ready",
                                     "active", {}, {}, 1, {}, {}) for i in range(3)}
        self.s = {f"s{i}": SwarmService(f"s{i}", f"svc{i}", {}, (), (), "replicated", 1,
                                        None, 1) for i in range(4)}
        self.lists = 0
        self.during_list: Callable[[], None] | None = None

    def nodes(self) -> list[SwarmNode]:
        self.lists += 1
        if self.during_list is not None:
            self.during_list()
        return list(self.n.values())

    def services(self) -> list[SwarmService]:
        return list(self.s.values())

    def unkeyed(self) -> Unkeyed:
        return Unkeyed()

    def node(self, node_id: str) -> SwarmNode:
        return self.n[node_id]

    def service(self, service_id: str) -> SwarmService:
        return self.s[service_id]

    def bump(self, obj: str) -> None:
        store: dict[str, Any] = self.n if obj.startswith("n") else self.s
        store[obj] = dataclasses.replace(store[obj], version=store[obj].version + 1)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def event(kind: str, obj: str) -> dict[str, Any]:
    return {"Type": kind, "Action": "update", "Actor": {"ID": obj, "Attributes": {}}}


def same(cache: SwarmCache, src: Source) -> bool:
    nodes, services = cache.read()
    return ({n.id: n.version for n in nodes} == {n.id: n.version for n in src.n.values()}
            and {s.id: s.version for s in services}
            == {s.id: s.version for s in src.s.values()})


def _cut() -> None:
    raise BudgetCut("the cycle's engine budget has passed (test)")


def _cache(src: Source, clock: Clock, cuts: list[float]) -> SwarmCache:
    cache = SwarmCache(src, relist_s=600.0, clock=clock)
    cache.cut_with(lambda: cuts.append(clock.t))
    cache.opened()
    cache.read()
    src.lists = 0
    return cache


def test_a_silent_streams_list_cut_at_the_budget_still_checks_for_a_stall() -> None:
    src, clock, cuts = Source(), Clock(), list[float]()
    cache = _cache(src, clock, cuts)
    src.bump("s2")  # a change the stalled stream says nothing of
    clock.t = 60.0
    src.during_list = _cut  # the facts watch's read: its budget passes in the list
    with pytest.raises(BudgetCut):
        cache.read()
    src.during_list = None
    clock.t = 61.0
    assert same(cache, src) and src.lists == 2  # stale: the next read lists
    clock.t = 91.0
    assert same(cache, src)
    assert cuts == [91.0]  # the stall noticed, as had the list not been cut


def test_an_event_after_a_cut_list_is_no_change_unseen() -> None:
    src, clock, cuts = Source(), Clock(), list[float]()
    cache = _cache(src, clock, cuts)
    cache.on_event(event("node", "n0"))  # named before the cut list
    src.bump("n0")
    clock.t = 60.0
    src.during_list = _cut
    with pytest.raises(BudgetCut):
        cache.read()
    src.during_list = None
    src.bump("s2")
    cache.on_event(event("service", "s2"))  # its event, while the list is due again
    clock.t = 61.0
    assert same(cache, src)
    clock.t = 200.0
    assert same(cache, src)
    assert cuts == [] and "no event for a change" not in cache.stats.reasons
