"""Every node's GPU metrics page, read once per cycle (``rebalance.scrape``).

The rebalancer's signals and the map both read this cycle's pages from here: one scrape
of each node per cycle, where ``rebalance.metrics_url_template`` points (the agents'
/metrics by default), with the agents' identity when they have one. Which pages may
trigger moves is the rebalancer's call (``scrape.for_moves``). A stopping daemon starts
no further scrape (``engine.stop``): the step ends with ``Stopped`` and so does the cycle,
before any step reads the pages half scraped. Under ``agents.identity: none`` a node Swarm
names no host of is not read: its facts are refused (``agent_client``), so its page would
match no GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

from loguru import logger

from swarmgpu.core.saidonce import SaidOnce
from swarmgpu.manager.cycle.host import CycleHost
from swarmgpu.manager.cycle.pipeline import Step
from swarmgpu.manager.cycle.session import CycleSession, Slot
from swarmgpu.manager.rebalance.scrape import scrape_all
from swarmgpu.swarm.client import SwarmNode
from swarmgpu.swarm.identity import scrape_auth


class ScrapeStep(Step):
    name = "metrics"
    requires = frozenset({Slot.SNAPSHOT})
    provides = frozenset({Slot.METRICS})

    def __init__(self, host: CycleHost) -> None:
        self.cfg = host.cfg
        self.stop = host.stop_event
        self.unnamed: SaidOnce[str] = SaidOnce()  # the nodes not read for no hostname

    def run(self, session: CycleSession) -> None:
        cfg = self.cfg
        auth = scrape_auth(cfg)
        nodes = session.snapshot.nodes
        if cfg.agents.identity == "none":
            nodes = self._told(nodes)
        session.scrapes = scrape_all(nodes, cfg.rebalance.metrics_url_template,
                                     cfg.rebalance.scrape_timeout_s, cfg.agents.parallel,
                                     auth.tls, auth.token, self.stop)

    def _told(self, nodes: Sequence[SwarmNode]) -> list[SwarmNode]:
        """The nodes with a hostname: without a node certificate it is the only sign of
        whose facts an agent answers, and a node of none has them refused; each ready one
        left out said once while it lasts."""
        self.unnamed.begin()
        for n in nodes:
            if not n.hostname and n.state == "ready" and self.unnamed.fresh(n.id):
                logger.warning(
                    "metrics of Swarm node {} not read: it reports no hostname and "
                    "agents.identity is none, so its facts are refused and its page would "
                    "match no GPU; give it a hostname and restart its Docker engine, or "
                    "serve the agents with their node certificates (agents.identity: "
                    "swarm-pki)", n.id)
        self.unnamed.end()
        return [n for n in nodes if n.hostname]
