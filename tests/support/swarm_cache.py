"""A ``SwarmCache`` over a stand-in for docker's API, its stream open and first list read.

First written in tests/test_unkeyed_cache.py."""

from __future__ import annotations

from typing import Any

from swarmgpu.swarm.cache import SwarmCache
from swarmgpu.swarm.client import SwarmClient


def cached(api: Any) -> tuple[SwarmClient, SwarmCache]:
    """A client over ``api`` (no engine), and its cache after the first read."""
    sw = SwarmClient.__new__(SwarmClient)
    sw.endpoint, sw._api = "unix:///test", api
    sw.on_write = sw.on_landed = None
    cache = SwarmCache(sw)
    cache.opened()  # the stream is open: a read after an event inspects only what it named
    cache.read()  # the first read lists
    return sw, cache
