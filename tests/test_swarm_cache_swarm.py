"""swarm.cache on the real test swarm: fed by the engine's own event stream, after
random changes (services created, relabelled, scaled and removed by a user through the
CLI; node labels and service specs written by swarmgpu's client) its view is what a full
list says, kept so by events alone, without a re-list."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from support.swarm_harness import IMAGE, SwarmCluster

from swarmgpu.swarm.cache import SwarmCache, follow
from swarmgpu.swarm.client import SwarmClient, SwarmNode, SwarmService

pytestmark = pytest.mark.swarm


def views(nodes: list[SwarmNode], services: list[SwarmService]
          ) -> tuple[dict[str, SwarmNode], dict[str, tuple[int, SwarmService]]]:
    return ({n.id: n for n in nodes},
            {s.id: (s.version, s) for s in services})


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
                op = rng.choice(("create", "create", "label", "scale", "remove", "node",
                                 "write"))
                if op == "create" or not names:
                    name = f"cache{rnd}x{k}"
                    swarm.cli(mgr, "service", "create", "--detach", "--no-resolve-image",
                              "--name", name, "--replicas", "0", "--label", f"r={rnd}",
                              IMAGE, "sleep", "1d")
                    names.append(name)
                elif op == "label":
                    swarm.cli(mgr, "service", "update", "--detach", "--label-add",
                              f"k{k}=v{rnd}", rng.choice(names))
                elif op == "scale":
                    swarm.cli(mgr, "service", "update", "--detach", "--replicas-max-per-node",
                              str(rng.randint(1, 3)), rng.choice(names))
                elif op == "remove":
                    swarm.cli(mgr, "service", "rm", names.pop(rng.randrange(len(names))))
                elif op == "node":  # a user's node label (the CLI)
                    swarm.cli(mgr, "node", "update", "--label-add", f"cachetest={rnd}.{k}",
                              rng.choice(node_ids))
                else:  # swarmgpu's own writes, through its client
                    client.update_node_labels(rng.choice(node_ids), lambda cur, v=f"{rnd}.{k}":
                                              {**cur, "cachetest.w": v})
                    pick = rng.choice(names)
                    sid = next(s.id for s in client.services() if s.name == pick)
                    client.update_service_spec(sid, lambda spec, v=str(rnd): {
                        **spec, "Labels": {**(spec.get("Labels") or {}), "w": v}})
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
            client.update_node_labels(nid, lambda cur: {
                k: v for k, v in cur.items() if not k.startswith("cachetest")})
