"""A failed GPU's clean window counts reads made after its failure, not the same old read
served again: an agent whose source hangs (NVML hung after an Xid 79, the GPU off the
bus) serves its last facts, dated by ``X-Swarmgpu-Facts-Age``."""

from __future__ import annotations

import pytest

from swarmgpu.core.config import HealthConfig
from swarmgpu.core.health import HealthSignals, XidEvent
from swarmgpu.core.model import Gpu, NodeFacts
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.gpuhealth import HealthBook
from swarmgpu.swarm.client import SwarmNode

P = "swarmgpu."


def _node() -> SwarmNode:
    return SwarmNode("n1", "gpu-node-1", "10.0.0.1", "worker", "ready", "active", {}, {}, 1,
                     {}, {})


def _facts(h0: HealthSignals) -> NodeFacts:
    return NodeFacts("gpu-node-1", gpus=(
        Gpu(0, "GPU-aaaa", "NVIDIA A100-SXM4-80GB", 81920, health=h0),
        Gpu(1, "GPU-bbbb", "NVIDIA A100-SXM4-80GB", 81920, health=HealthSignals()),
    ))


def _healthy(book: HealthBook, f: NodeFacts, now: float, age_s: float) -> list[bool]:
    res = FactsResult("n1", "gpu-node-1", "", f, None, now, True, facts_age_s=age_s)
    out = book.apply([_node()], {"n1": res}, now=now)["n1"].facts
    assert out is not None
    return [g.healthy for g in out.gpus]


def test_a_failed_gpu_stays_failed_while_its_agent_serves_the_read_before_its_clean_window(
        ) -> None:
    book = HealthBook(HealthConfig(clean_window_s=600), P)
    f = _facts(HealthSignals(xid_events=(XidEvent(79, 100.0),)))
    assert _healthy(book, f, 100.0, 0.0) == [False, True]
    # The agent's NVML hangs: the same read, older each cycle, past the clean window.
    for now in (400.0, 701.0, 2000.0):
        assert _healthy(book, f, now, now - 100.0) == [False, True]
    # A read made a clean window after the failure brings it back (the XID it lists again
    # is the one counted).
    assert _healthy(book, f, 2010.0, 5.0) == [True, True]


def test_a_read_made_within_the_window_does_not_end_it_early() -> None:
    book = HealthBook(HealthConfig(clean_window_s=600), P)
    f = _facts(HealthSignals(xid_events=(XidEvent(79, 100.0),)))
    assert _healthy(book, f, 100.0, 0.0) == [False, True]
    # Fetched past the window, but read 300 s after the failure: not clean for 600 s yet.
    assert _healthy(book, f, 800.0, 400.0) == [False, True]
    assert _healthy(book, f, 800.0, 0.0) == [True, True]



class _Clocks:
    """The daemon's clocks, as ``gpuhealth`` reads them (its ``time``): the wall clock,
    stepped by hand, and the monotonic one, which no step moves."""

    def __init__(self) -> None:
        self.wall, self.mono = 100.0, 5000.0

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def tick(self, s: float, step: float = 0.0) -> None:
        self.wall += s + step
        self.mono += s


def _stepped(monkeypatch: pytest.MonkeyPatch, step: float
             ) -> tuple[HealthBook, _Clocks, NodeFacts]:
    clocks = _Clocks()
    monkeypatch.setattr("swarmgpu.manager.nodes.gpuhealth.time", clocks)
    book = HealthBook(HealthConfig(clean_window_s=600), P)
    f = _facts(HealthSignals(xid_events=(XidEvent(79, 100.0),)))
    assert _cycle(book, f) == [False, True]
    clocks.tick(60.0, step)
    return book, clocks, f


def _cycle(book: HealthBook, f: NodeFacts) -> list[bool]:
    res = FactsResult("n1", "gpu-node-1", "", f, None, 0.0, True)
    out = book.apply([_node()], {"n1": res})["n1"].facts  # (its own clocks: the daemon's)
    assert out is not None
    return [g.healthy for g in out.gpus]


def test_a_wall_clock_step_forward_does_not_end_a_clean_window_early(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """NTP stepping the manager's clock an hour ahead (the daemon started before the time
    was synced: its unit orders after network-online, not time-sync) brought every failed
    GPU back at the next cycle, a minute into its ten-minute clean window."""
    book, clocks, f = _stepped(monkeypatch, 3600.0)
    assert _cycle(book, f) == [False, True]
    clocks.tick(600.0)
    assert _cycle(book, f) == [True, True]  # clean for 660 s of the daemon's time


def test_a_wall_clock_step_back_does_not_stretch_a_clean_window(
        monkeypatch: pytest.MonkeyPatch) -> None:
    book, clocks, f = _stepped(monkeypatch, -3600.0)
    assert _cycle(book, f) == [False, True]
    assert [r["for_s"] for r in book.view()] == [60.0]  # (its times moved with the clock)
    clocks.tick(545.0)
    assert _cycle(book, f) == [True, True]  # (an hour more, before)
