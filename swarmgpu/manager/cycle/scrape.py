"""Every node's GPU metrics page, read once per cycle (``rebalance.scrape``).

The rebalancer's signals and the map both read this cycle's pages from here: one scrape
of each node per cycle, where ``rebalance.metrics_url_template`` points (the agents'
/metrics by default), with the agents' identity when they have one. Which pages may
trigger moves is the rebalancer's call (``scrape.for_moves``). A stopping daemon starts
no further scrape (``engine.stop``): the step ends with ``Stopped`` and so does the cycle,
before any step reads the pages half scraped.
"""

from __future__ import annotations

from swarmgpu.manager.cycle.host import CycleHost
from swarmgpu.manager.cycle.pipeline import Step
from swarmgpu.manager.cycle.session import CycleSession, Slot
from swarmgpu.manager.rebalance.scrape import scrape_all
from swarmgpu.swarm.identity import scrape_auth


class ScrapeStep(Step):
    name = "metrics"
    requires = frozenset({Slot.SNAPSHOT})
    provides = frozenset({Slot.METRICS})

    def __init__(self, host: CycleHost) -> None:
        self.cfg = host.cfg
        self.stop = host.stop_event

    def run(self, session: CycleSession) -> None:
        cfg = self.cfg
        auth = scrape_auth(cfg)
        session.scrapes = scrape_all(session.snapshot.nodes, cfg.rebalance.metrics_url_template,
                                     cfg.rebalance.scrape_timeout_s, cfg.agents.parallel,
                                     auth.tls, auth.token, self.stop)
