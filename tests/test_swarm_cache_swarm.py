"""swarm.cache on the real test swarm: fed by the engine's own event stream, after
random changes (services created, relabelled, scaled and removed by a user through the
CLI; node labels and service specs written by swarmgpu's client) its view is what a full
list says, kept so by events alone, without a re-list. And every write of swarmgpu's
that lands, one that changes nothing included, has its event: the deaf-engine rule
(``EVENT_WAIT_S``) holds on a real engine."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from support.swarm_harness import IMAGE, SwarmCluster

from swarmgpu.swarm.cache import EVENT_WAIT_S, WRITE_SLACK_S, SwarmCache, follow
from swarmgpu.swarm.client import SwarmClient, SwarmNode, SwarmService

pytestmark = pytest.mark.swarm


def views(
    nodes: list[SwarmNode], services: list[SwarmService]
) -> tuple[dict[str, SwarmNode], dict[str, tuple[int, SwarmService]]]:
    return ({n.id: n for n in nodes}, {s.id: (s.version, s) for s in services})


def converged(cache: SwarmCache, client: SwarmClient, timeout: float = 15.0) -> bool:
    """Events are asynchronous: the cache must agree with a full list within moments."""
    deadline = time.monotonic() + timeout
    while True:
        full = views(client.nodes(), client.services())
        if views(*cache.read()) == full:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def _create(swarm: SwarmCluster, mgr: Any, name: str, label: str) -> None:
    """A service of no replicas (nothing to run, the local image), labelled ``label``."""
    swarm.cli(mgr, "service", "create", "--detach", "--no-resolve-image", "--name", name,
              "--replicas", "0", "--label", label, IMAGE, "sleep", "1d")


def test_the_cache_is_a_full_list_after_random_changes(swarm: SwarmCluster) -> None:
    mgr = swarm.manager
    client = SwarmClient(mgr.docker_host)
    cache = SwarmCache(client)
    client.on_write = cache.invalidate
    stop = threading.Event()

    def events(on_open: Callable[[], None]) -> Iterator[Mapping[str, Any]]:
        return client.events(types=("node", "service"), on_open=on_open)

    threading.Thread(target=follow, args=(events, cache, stop), daemon=True).start()
    deadline = time.monotonic() + 10
    while not cache.stream_up:
        assert time.monotonic() < deadline, "the event stream did not open"
        time.sleep(0.05)
    cache.read()  # the list after the subscription
    relists = cache.stats.relists
    rng = random.Random(36)
    names: list[str] = []
    node_ids = [n.id for n in client.nodes()]
    try:
        for rnd in range(5):
            for k in range(rng.randint(3, 6)):
                op = rng.choice(("create", "create", "label", "scale", "remove", "node", "write"))
                if op == "create" or not names:
                    name = f"cache{rnd}x{k}"
                    _create(swarm, mgr, name, f"r={rnd}")
                    names.append(name)
                elif op == "label":
                    swarm.cli(
                        mgr,
                        "service",
                        "update",
                        "--detach",
                        "--label-add",
                        f"k{k}=v{rnd}",
                        rng.choice(names),
                    )
                elif op == "scale":
                    swarm.cli(
                        mgr,
                        "service",
                        "update",
                        "--detach",
                        "--replicas-max-per-node",
                        str(rng.randint(1, 3)),
                        rng.choice(names),
                    )
                elif op == "remove":
                    swarm.cli(mgr, "service", "rm", names.pop(rng.randrange(len(names))))
                elif op == "node":  # a user's node label (the CLI)
                    swarm.cli(
                        mgr,
                        "node",
                        "update",
                        "--label-add",
                        f"cachetest={rnd}.{k}",
                        rng.choice(node_ids),
                    )
                else:  # swarmgpu's own writes, through its client
                    client.update_node_labels(
                        rng.choice(node_ids), lambda cur, v=f"{rnd}.{k}": {**cur, "cachetest.w": v}
                    )
                    pick = rng.choice(names)
                    sid = next(s.id for s in client.services() if s.name == pick)
                    client.update_service_spec(
                        sid,
                        lambda spec, v=str(rnd): {
                            **spec,
                            "Labels": {**(spec.get("Labels") or {}), "w": v},
                        },
                    )
            assert converged(cache, client), f"round {rnd}: the cache differs from a list"
        # Events alone kept it current: no full list since the first one.
        assert cache.stats.relists == relists
        assert cache.stats.inspects > 0 and cache.stats.events > 0
        # swarmgpu's own write is seen by the very next read, before its event.
        client.update_node_labels(node_ids[0], lambda cur: {**cur, "cachetest.now": "1"})
        nodes, _ = cache.read()
        assert next(n for n in nodes if n.id == node_ids[0]).labels["cachetest.now"] == "1"
    finally:
        stop.set()
        for name in names:
            swarm.cli(mgr, "service", "rm", name, check=False)
        for nid in node_ids:
            client.update_node_labels(
                nid, lambda cur: {k: v for k, v in cur.items() if not k.startswith("cachetest")}
            )


def test_each_landed_write_has_its_event_so_the_engine_is_never_taken_for_deaf(
    swarm: SwarmCluster,
) -> None:
    """The cache takes a landed write of swarmgpu's that no event follows in
    ``EVENT_WAIT_S`` for a deaf engine (moby/moby#36834). On this engine each such write
    has its event, named by the object's own ID as ``on_event`` reads it: a label and a
    spec change, and an update that changes nothing (the engine stores it anyway, a new
    Version.Index, and publishes it). A write the client finds would change nothing is
    not made, so no event is expected for it. The wait is the cache's clock moved on."""
    mgr = swarm.manager
    client = SwarmClient(mgr.docker_host)
    skew = [0.0]
    cache = SwarmCache(client, clock=lambda: time.monotonic() + skew[0])
    client.on_write, client.on_landed = cache.invalidate, cache.wrote
    heard: list[tuple[str, str]] = []
    stop = threading.Event()

    def events(on_open: Callable[[], None]) -> Iterator[Mapping[str, Any]]:
        return client.events(types=("node", "service"), on_open=on_open)

    def took(event: Mapping[str, Any]) -> None:
        heard.append((str(event.get("Type")), str((event.get("Actor") or {}).get("ID"))))

    threading.Thread(target=follow, args=(events, cache, stop, took), daemon=True).start()
    deadline = time.monotonic() + 10
    while not cache.stream_up:
        assert time.monotonic() < deadline, "the event stream did not open"
        time.sleep(0.05)
    name = "deafcheck"
    _create(swarm, mgr, name, "w=0")
    sid = next(s.id for s in client.services() if s.name == name)
    nid = mgr.node_id
    api = swarm.client(mgr).api

    def then(kind: str, obj: str, write: Callable[[], bool], lands: bool) -> None:
        """``write`` lands (or not), its event (if any) comes, and after the wait the
        cache still reads from events."""
        heard.clear()
        writes = client.writes
        assert write() is lands
        assert lands or client.writes == writes, "the client posted a write of nothing"
        if lands:
            deadline = time.monotonic() + 10
            while (kind, obj) not in heard:
                assert time.monotonic() < deadline, f"no {kind} event for {obj}: {heard}"
                time.sleep(0.05)
        skew[0] += EVENT_WAIT_S + 1
        cache.read()
        assert "no event for a write" not in cache.stats.reasons, (kind, obj, heard)

    def same_again(kind: str, obj: str) -> bool:
        """The object posted back as read: an update that changes nothing."""
        raw = api.inspect_node(obj) if kind == "node" else api.inspect_service(obj)
        if kind == "node":
            api.update_node(obj, raw["Version"]["Index"], raw["Spec"])
        else:
            client._post_service_update(obj, raw, raw["Spec"])
        after = api.inspect_node(obj) if kind == "node" else api.inspect_service(obj)
        assert after["Spec"] == raw["Spec"]
        assert after["Version"]["Index"] > raw["Version"]["Index"]
        cache.wrote(kind, obj)  # as SwarmClient.on_landed says of a landed write
        return True

    try:
        cache.read()
        then(
            "node",
            nid,
            lambda: client.update_node_labels(nid, lambda cur: {**cur, "deafcheck": "1"}),
            lands=True,
        )
        then(
            "service",
            sid,
            lambda: client.update_service_spec(
                sid, lambda spec: {**spec, "Labels": {**spec["Labels"], "w": "1"}}
            ),
            lands=True,
        )
        then("node", nid, lambda: client.update_node_labels(nid, dict), lands=False)
        then("service", sid, lambda: client.update_service_spec(sid, dict), lands=False)
        then("node", nid, lambda: same_again("node", nid), lands=True)
        then("service", sid, lambda: same_again("service", sid), lands=True)
        assert converged(cache, client)
        # The wait is real to the cache: a landed write that no event follows (none
        # since shortly before it either) is taken for a deaf engine.
        skew[0] += WRITE_SLACK_S
        cache.wrote("node", nid)
        skew[0] += EVENT_WAIT_S + 1
        cache.read()
        assert cache.stats.reasons["no event for a write"] == 1
    finally:
        stop.set()
        swarm.cli(mgr, "service", "rm", name, check=False)
        client.update_node_labels(
            nid, lambda cur: {k: v for k, v in cur.items() if k != "deafcheck"}
        )
