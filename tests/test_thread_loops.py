"""Loops that run in a thread of their own and must outlive one exception, saying it
with its traceback: an exception that ends such a thread goes to stderr alone (not the
service's log), and what the thread fed stops for good with nothing in /healthz.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from support.loglines import log_lines
from support.swarm_cache import Source, event

from swarmgpu.agent.facts.file import FileSource
from swarmgpu.agent.factscache import FactsCache
from swarmgpu.swarm.cache import SwarmCache, follow

FACTS = ("node: {hostname: n1}\ngpus:\n  - {index: 0, uuid: GPU-1, "
         "product: NVIDIA A100-SXM4-80GB, memory_mib: 81920}\n")


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    yield from log_lines("WARNING")


def test_a_fault_in_the_event_watcher_is_said_with_its_traceback(
        warnings: list[str]) -> None:
    """A bug of ours under ``on_event`` (a wrong call: a ``TypeError``) was said by its
    message alone, at every event, as if the stream had failed: nothing to find it by."""
    stop = threading.Event()
    opens: list[int] = []

    def stream(on_open: Callable[[], None]) -> Iterator[Mapping[str, Any]]:
        opens.append(1)
        on_open()
        if len(opens) == 2:
            stop.set()
        yield event("node", "n0")

    def on_event(_e: Mapping[str, Any]) -> None:
        raise TypeError("trigger() missing 1 required positional argument: 'why'")

    follow(stream, SwarmCache(Source()), stop, on_event=on_event, max_backoff_s=0.0)
    said = [w for w in warnings if "event watcher" in w]
    assert len(said) == 1, warnings
    assert "Traceback" in said[0] and "TypeError: trigger() missing" in said[0]


def test_the_facts_refresher_outlives_a_hook_that_raises(
        tmp_path: Path, warnings: list[str]) -> None:
    """An exception outside the source's read (the ``on_read`` hook, the errors' line)
    ended the refresher's thread: the agent served its last facts for good, their age
    growing, and only stderr had the traceback."""
    path = tmp_path / "facts.yml"
    path.write_text(FACTS)
    cache = FactsCache(FileSource(path), refresh_s=0.001)
    reads: list[int] = []
    enough = threading.Event()

    def hook() -> None:
        reads.append(1)
        if len(reads) >= 3:
            enough.set()
        if len(reads) == 1:
            raise RuntimeError("a hook's fault")

    cache.on_read = hook
    cache.start()
    try:
        assert enough.wait(30), "the refresher stopped after the hook raised"
    finally:
        cache.stop()
    said = [w for w in warnings if "a hook's fault" in w]
    assert len(said) == 1 and "Traceback" in said[0], warnings
    assert "facts refresh failed unexpectedly" in said[0]
