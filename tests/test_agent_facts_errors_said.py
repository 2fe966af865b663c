"""The agent's log says when the facts it serves carry errors: a node without its driver
(NVML cannot initialise), a GPU it cannot read. They were served, in /facts and
/healthz ("degraded"), and said by the daemon on the manager, while the agent's own
log (journalctl -u swarmgpu-agent, the node's operator's first look) said only
"agent serving nvml", as on a healthy node. Said once a change, not every refresh."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.loglines import log_lines

from swarmgpu.agent.facts import SourceError
from swarmgpu.agent.factscache import FactsCache
from swarmgpu.core.model import NodeFacts

NO_NVML = "nvml: cannot initialise NVML (NVMLError_LibraryNotFound)"


class Source:
    spec = "nvml"

    def __init__(self) -> None:
        self.errors: tuple[str, ...] = (NO_NVML,)

    def read(self) -> NodeFacts:
        return NodeFacts(hostname="gpu-a", source="nvml", errors=self.errors)


@pytest.fixture
def said() -> Iterator[list[str]]:
    yield from log_lines("INFO")


def test_facts_with_errors_are_said_once_a_change(said: list[str]) -> None:
    src = Source()
    cache = FactsCache(src, refresh_s=10)
    cache.refresh_once()
    cache.refresh_once()  # the same errors: not said again
    warned = [ln for ln in said if "WARNING" in ln]
    assert len(warned) == 1, said
    assert f"facts from nvml are served with 1 error: {NO_NVML}" in warned[0], said
    src.errors = ()
    cache.refresh_once()
    assert any("facts from nvml are served with no error again" in ln for ln in said), said
    cache.refresh_once()
    assert len(said) == 2, said


def test_facts_without_errors_are_not_said(said: list[str]) -> None:
    src = Source()
    src.errors = ()
    cache = FactsCache(src, refresh_s=10)
    cache.refresh_once()
    assert said == [], said


class Refused:
    """A facts (GFD) file the reader refuses, then another refusal, then readable."""

    spec = "gfd:/etc/gfd/features"

    def __init__(self) -> None:
        self.why: str | None = "gfd:/etc/gfd/features:3:1: not valid YAML: ..."

    def read(self) -> NodeFacts:
        if self.why is not None:
            raise SourceError(self.why)
        return NodeFacts(hostname="gpu-a", source="gfd")


def test_a_refused_facts_file_is_said_once_a_refusal_not_every_refresh(
        said: list[str]) -> None:
    # Before, each refresh (every 30 s) logged the same refusal: 2,880 lines a day.
    src = Refused()
    cache = FactsCache(src, refresh_s=10)
    cache.refresh_once()
    cache.refresh_once()
    cache.refresh_once()
    assert len(said) == 1 and "features:3:1: not valid YAML" in said[0], said
    src.why = "gfd:/etc/gfd/features: is a directory"  # another refusal: said
    cache.refresh_once()
    cache.refresh_once()
    assert len(said) == 2 and "is a directory" in said[1], said
    src.why = None  # readable again: said, once
    cache.refresh_once()
    cache.refresh_once()
    assert len(said) == 3 and "readable again" in said[2], said
    src.why = "gfd:/etc/gfd/features: is a directory"  # back: said again
    cache.refresh_once()
    assert len(said) == 4 and "is a directory" in said[3], said
    assert cache.view().refresh_failures == 6  # (each failed read still counted: /healthz)
