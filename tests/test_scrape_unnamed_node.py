"""Under ``agents.identity: none`` the daemon refuses the facts of a node Swarm names no
host of (``agent_client``: without a node certificate nothing tells whose they are), so
that node's metrics page matches no GPU. The scrape read it all the same, each cycle: a
request to whatever answers there, for nothing. Now such a node is not read, and why is
said once while it lasts. Pure: the scrape of a node is recorded, never made."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from loguru import logger
from support.forged import sw_node

from swarmgpu.core.config import AgentsConfig, Config
from swarmgpu.manager.cycle import scrape as scrape_step
from swarmgpu.manager.cycle.scrape import ScrapeStep
from swarmgpu.manager.cycle.session import CycleSession
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.rebalance import scrape
from swarmgpu.manager.rebalance.scrape import NodeScrape
from swarmgpu.swarm.client import SwarmNode


def _cycles(monkeypatch: pytest.MonkeyPatch, identity: str, cycles: int = 2
            ) -> tuple[list[str], list[str]]:
    """The nodes scraped and the warnings said over ``cycles`` cycles of one daemon."""
    read: list[str] = []

    def recorded(node: SwarmNode, *_a: Any, **_k: Any) -> NodeScrape:
        read.append(node.id)
        return NodeScrape(node.id, node.hostname, "u", 0.0, None, "not read here")

    monkeypatch.setattr(scrape, "scrape_node", recorded)
    assert scrape_step.scrape_all is scrape.scrape_all  # (the step's read is the patched)
    cfg = Config(agents=AgentsConfig(identity=identity))
    step = ScrapeStep(SimpleNamespace(cfg=cfg, stop_event=threading.Event()))  # type: ignore[arg-type]
    said: list[str] = []
    sink = logger.add(lambda m: said.append(m.record["message"]), level="WARNING")
    try:
        for _ in range(cycles):
            session = CycleSession(Snapshot([sw_node("n-named", "gpu-1"),
                                             sw_node("n-unnamed", "")], [], [], {}))
            session.enter(step.name, step.requires, step.provides)
            step.run(session)
            session.leave()
    finally:
        logger.remove(sink)
    return read, said


def test_a_node_of_no_hostname_is_not_scraped_under_identity_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    read, said = _cycles(monkeypatch, "none")
    assert sorted(read) == ["n-named", "n-named"], read
    (line,) = [s for s in said if "n-unnamed" in s]
    assert "no hostname" in line and "agents.identity" in line, line


def test_with_node_certificates_a_node_of_no_hostname_is_scraped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (its certificate names its node ID: its facts, and so its page, are told)
    read, said = _cycles(monkeypatch, "swarm-pki", cycles=1)
    assert sorted(read) == ["n-named", "n-unnamed"], read
    assert not [s for s in said if "n-unnamed" in s], said


def test_a_one_shots_metrics_skip_a_node_of_no_hostname_under_identity_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (`status`'s and audit's reads, ``cluster_view.gpu_metrics``)
    from swarmgpu.manager.web.cluster_view import gpu_metrics
    read: list[str] = []
    monkeypatch.setattr(scrape, "scrape_node", lambda node, *_a, **_k: read.append(node.id)
                        or NodeScrape(node.id, node.hostname, "u", 0.0, None, "x"))
    nodes = [sw_node("n-named", "gpu-1"), sw_node("n-unnamed", "")]
    gpu_metrics(nodes, Config(agents=AgentsConfig(identity="none")))
    assert read == ["n-named"], read
