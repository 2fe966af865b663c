"""An entry the engine answers without an ID, read through the daemon's cache, and the
left-out entries two threads' lists each keep.

The lists leave such a node or service out alone (``swarm.unkeyed``). The cache
inspects what an event names: an answer without an ID failed the read, and the read
after it (the id stayed dirty), so every cycle failed whole until the timer's full list
(10 minutes), and again at the object's next event. Now the object is read as the list
reads it: a full list at once, which leaves it out and says it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from support.swarm_cache import cached

from swarmgpu.swarm import client
from swarmgpu.swarm.cache import EVENT_WAIT_S, SwarmCache
from swarmgpu.swarm.client import SwarmClient


def raw_service(sid: str | None, name: str) -> dict[str, Any]:
    """A service as Docker sends it, its ID left out where ``sid`` is None."""
    raw: dict[str, Any] = {"Version": {"Index": 3}, "Spec": {"Name": name}}
    if sid is not None:
        raw["ID"] = sid
    return raw


def raw_node(nid: str | None, host: str) -> dict[str, Any]:
    """A node as Docker sends it, its ID left out where ``nid`` is None."""
    raw: dict[str, Any] = {"Version": {"Index": 3},
                           "Spec": {"Role": "worker", "Availability": "active", "Labels": {}},
                           "Description": {"Hostname": host}, "Status": {"State": "ready"}}
    if nid is not None:
        raw["ID"] = nid
    return raw


class ProxyApi:
    """An engine behind a proxy that may drop an object's ID from every answer: the
    lists and the inspect of that ID (``objects``: its real ID -> its answer)."""

    def __init__(self, nodes: dict[str, Any], services: dict[str, Any]) -> None:
        self.n, self.s = nodes, services

    def nodes(self, filters: Any = None) -> list[Any]:
        return list(self.n.values())

    def services(self) -> list[Any]:
        return list(self.s.values())

    def inspect_node(self, node_id: str) -> Any:
        return self.n[node_id]

    def inspect_service(self, service_id: str) -> Any:
        return self.s[service_id]


def test_a_service_an_event_names_whose_answer_has_no_id_is_left_out_as_the_list_leaves_it(
        ) -> None:
    """train is listed with its ID, then the proxy drops it from every answer and
    train's event comes: the read failed (and the next), every cycle writing nothing.
    Now train is left out, said as the list says it, and the other service is read."""
    api = ProxyApi({"n1": raw_node("n1", "gpu-1")},
                   {"s1": raw_service("s1", "web"), "s2": raw_service("s2", "train")})
    sw, cache = cached(api)
    api.s["s2"] = raw_service(None, "train")
    cache.on_event({"Type": "service", "Actor": {"ID": "s2"}})
    for _ in range(2):  # (and the read after it)
        nodes, services = cache.read()
        assert [s.name for s in services] == ["web"]
        assert [n.id for n in nodes] == ["n1"]
        assert len(sw.unkeyed().services) == 1
        assert "(name 'train')" in sw.unkeyed().services[0]


def test_a_node_an_event_names_whose_answer_has_no_id_is_left_out_as_the_list_leaves_it(
        ) -> None:
    """As a service: gpu-2's event, its answer without an ID; the read goes on without
    it, the list's word on it said."""
    api = ProxyApi({"n1": raw_node("n1", "gpu-1"), "n2": raw_node("n2", "gpu-2")},
                   {"s1": raw_service("s1", "web")})
    sw, cache = cached(api)
    api.n["n2"] = raw_node(None, "gpu-2")
    cache.on_event({"Type": "node", "Actor": {"ID": "n2"}})
    nodes, services = cache.read()
    assert [n.id for n in nodes] == ["n1"] and [s.id for s in services] == ["s1"]
    assert len(sw.unkeyed().nodes) == 1 and "(hostname 'gpu-2')" in sw.unkeyed().nodes[0]
    assert cache.read()[0] == nodes  # (no id left dirty: nothing more inspected)


def test_a_node_list_beside_a_service_list_keeps_the_services_left_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The facts watch lists the nodes on its own thread while the cycle lists the
    services (the stream down). The node list read the left-out entries and wrote them
    back with its own part: a service list between the two was lost, the snapshot read
    none left out, and the missing service's holdings were released as a gone one's
    (its GPUs given again while it ran). Each list now keeps its own part."""
    api = ProxyApi({"n1": raw_node("n1", "gpu-1")}, {"s2": raw_service(None, "train")})
    sw = SwarmClient.__new__(SwarmClient)
    sw.endpoint, sw._api = "unix:///test", api  # type: ignore[assignment]
    sw.on_write = sw.on_landed = None
    real, listed = dataclasses.replace, []

    def between(obj: Any, **changes: Any) -> Any:  # the other thread lists meanwhile
        if "nodes" in changes:
            listed.append(sw.services())
        return real(obj, **changes)

    # (where the node list reads and writes back the whole record, the services are
    # listed between its read and its write; where it does not, any time is the same)
    monkeypatch.setattr(client, "replace", between, raising=False)
    sw.nodes()
    if not listed:
        sw.services()
    assert len(sw.unkeyed().services) == 1 and "(name 'train')" in sw.unkeyed().services[0]



def _timer_list_after(change: Any, **more: dict[str, Any]) -> tuple[list[float], SwarmCache]:
    """web, train and db listed with their IDs (and ``more``), then ``change(api)`` with
    no event (Swarm's store published none), the timer's list, and a read
    ``EVENT_WAIT_S`` later: the stream's cuts, and the cache."""
    api = ProxyApi({"n1": raw_node("n1", "gpu-1")},
                   {"s1": raw_service("s1", "web"), "s2": raw_service("s2", "train"),
                    "s3": raw_service("s3", "db"), **more})
    sw = SwarmClient.__new__(SwarmClient)
    sw.endpoint, sw._api = "unix:///test", api  # type: ignore[assignment]
    sw.on_write = sw.on_landed = None
    now, cuts = [0.0], []
    cache = SwarmCache(sw, relist_s=600.0, clock=lambda: now[0])
    cache.cut_with(lambda: cuts.append(now[0]))
    cache.opened()
    cache.read()
    change(api)
    now[0] = 601.0
    cache.read()
    now[0] += EVENT_WAIT_S + 1.0
    cache.read()
    return cuts, cache


def test_a_service_newly_left_out_at_a_timers_list_is_no_removal_no_event_told_of(
        ) -> None:
    """The proxy drops train's ID and no event comes. The timer's list left it out: it
    was taken for a removal no event named, and with no event after it the open stream
    for stalled, then cut and reopened (every read listing meanwhile). One left out, one
    gone: none unseen."""
    def drop_id(api: ProxyApi) -> None:
        api.s["s2"] = raw_service(None, "train")

    cuts, cache = _timer_list_after(drop_id)
    assert [s.id for s in cache.read()[1]] == ["s1", "s3"]
    assert cuts == [] and "no event for a change" not in cache.stats.reasons


def test_more_services_gone_than_left_out_are_a_change_no_event_told_of() -> None:
    def drop_id_and_remove(api: ProxyApi) -> None:
        api.s["s2"] = raw_service(None, "train")
        del api.s["s3"]

    cuts, cache = _timer_list_after(drop_id_and_remove)
    assert len(cuts) == 1 and cache.stats.reasons["no event for a change"] >= 1


def test_a_service_left_out_all_along_does_not_hide_a_removal_no_event_told_of() -> None:
    """ml was left out by the first list too (its ID dropped all along): db removed with
    no event is a change the stream did not tell of. Before, one gone was taken for the
    one left out, so a stalled stream went unseen while any service stayed left out."""
    def remove(api: ProxyApi) -> None:
        del api.s["s3"]

    cuts, cache = _timer_list_after(remove, s4=raw_service(None, "ml"))
    assert len(cuts) == 1 and cache.stats.reasons["no event for a change"] >= 1


def test_a_service_listed_again_with_its_id_is_no_creation_no_event_told_of() -> None:
    """ml, left out until the proxy mends, is listed with its ID: no creation the stream
    missed (Swarm's store changed nothing). Before, it was taken for one: the open
    stream for stalled, and cut."""
    def mend(api: ProxyApi) -> None:
        api.s["s4"] = raw_service("s4", "ml")

    cuts, cache = _timer_list_after(mend, s4=raw_service(None, "ml"))
    assert [s.id for s in cache.read()[1]] == ["s1", "s2", "s3", "s4"]
    assert cuts == [] and "no event for a change" not in cache.stats.reasons


def test_a_service_left_out_in_place_of_one_listed_again_is_no_change_unseen() -> None:
    """ml regains its ID as train loses it: one left out before and after."""
    def swap(api: ProxyApi) -> None:
        api.s["s2"] = raw_service(None, "train")
        api.s["s4"] = raw_service("s4", "ml")

    cuts, cache = _timer_list_after(swap, s4=raw_service(None, "ml"))
    assert [s.id for s in cache.read()[1]] == ["s1", "s3", "s4"]
    assert cuts == [] and "no event for a change" not in cache.stats.reasons


def test_a_service_created_while_one_stays_left_out_is_a_change_no_event_told_of() -> None:
    def create(api: ProxyApi) -> None:
        api.s["s5"] = raw_service("s5", "new")

    cuts, cache = _timer_list_after(create, s4=raw_service(None, "ml"))
    assert len(cuts) == 1 and cache.stats.reasons["no event for a change"] >= 1
