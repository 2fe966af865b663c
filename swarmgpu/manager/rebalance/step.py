"""The rebalancer inside the daemon's cycle (leader only: the daemon runs steps only
when its engine leads). Scrape -> windows -> plan_moves -> mover.

``attach(daemon)`` adds the step and serves ``/api/rebalance`` (the cluster JSON
``{"proposed": [...], "recent": [...], ...}``) from the daemon's HTTP server.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from loguru import logger

from swarmgpu.manager.host import CycleHost
from swarmgpu.manager.placement import read_ledger
from swarmgpu.manager.placement_step import facts_by_node
from swarmgpu.manager.rebalance.context import Inputs
from swarmgpu.manager.rebalance.mover import Mover
from swarmgpu.manager.rebalance.moves import Proposal, moves_to_dicts, render_moves
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.scrape import for_moves, scrape_all
from swarmgpu.manager.rebalance.signals import Signals
from swarmgpu.manager.sync import Snapshot
from swarmgpu.swarm.identity import scrape_auth

ROUTE = "/api/rebalance"


class Rebalancer:
    def __init__(self, daemon: CycleHost) -> None:
        cfg = daemon.cfg
        self.cfg = cfg.rebalance
        self.prefix = cfg.sync.prefix
        self.signals = Signals(self.cfg)
        self.mover = Mover(daemon.swarm, self.cfg, prefix=self.prefix,
                           dry_run=cfg.dry_run or self.cfg.dry_run, metrics=daemon.metrics)
        self.last: Proposal | None = None
        self._warned: set[str] = set()

    def step(self, d: CycleHost, snap: Snapshot) -> None:
        fallback = {nid: r.facts for nid, r in d.book.records.items() if r.facts is not None}
        facts = facts_by_node(snap, fallback)
        auth = scrape_auth(d.cfg)
        scrapes = scrape_all(snap.nodes, self.cfg.metrics_url_template, self.cfg.scrape_timeout_s,
                             d.cfg.agents.parallel, auth.tls, auth.token)
        d.last_metrics = {nid: sc.result.samples_by_uuid for nid, sc in scrapes.items()
                          if sc.result}
        ledger = read_ledger(snap.nodes, self.prefix)
        hostnames = {n.id: n.hostname for n in snap.nodes}
        # Gate at the source: unauthenticated metrics inform the map (above), not moves.
        trusted = for_moves(scrapes, self.cfg.trust_unauthenticated_metrics)
        warnings = self.signals.observe(trusted, facts, hostnames, ledger, snap.taken_at)
        for w in warnings:  # say it once when it starts, not every cycle
            if w not in self._warned:
                logger.warning("rebalance: {}", w)
        self._warned = set(warnings)
        plan = d.last_placement
        pending = [sp.name for sp in getattr(plan, "services", []) if sp.status == "pending"]
        # The fragmentation policy judges moves against the workload placement expects
        # (its learned or pinned model); without placement, the services annotated now.
        model = d.planner.model if d.planner is not None else None
        inp = Inputs(nodes=snap.nodes, services=snap.services, tasks=snap.tasks, facts=facts,
                     ledger=ledger, gpus=self.signals.gpus, node_signals=self.signals.nodes,
                     cfg=self.cfg, now=snap.taken_at, pending=pending, prefix=self.prefix,
                     workload=model.typical() if model is not None else None)
        prop = plan_moves(inp)
        self.last = prop
        for m in prop.moves:
            logger.bind(service=m.service).debug("proposed {} -> {} ({}): {}", m.source_host,
                                                 m.target_host, m.trigger, m.reason)
        self.mover.run_cycle(prop.moves, snap.nodes, snap.services, snap.tasks)
        if not self.mover.dry_run and self.mover.records():
            # A move in flight progresses on the next cycle: make that one come soon.
            timer = threading.Timer(1.0, d.trigger)
            timer.daemon = True
            timer.start()

    def to_dict(self) -> dict[str, Any]:
        p = self.last
        out: dict[str, Any] = moves_to_dicts(p.moves if p else [], list(self.mover.recent))
        out["notes"] = list(p.notes) if p else []
        out["unknown_nodes"] = dict(p.unknown_nodes) if p else {}
        out["dry_run"] = self.mover.dry_run
        return out

    def render(self) -> str:
        p = self.last
        return render_moves(p.moves if p else [], list(self.mover.recent),
                            p.notes if p else [])


def attach(daemon: CycleHost) -> Rebalancer | None:
    """Add the rebalancing step to the daemon (after placement) and its HTTP route."""
    if not daemon.cfg.rebalance.enabled:
        return None
    rb = Rebalancer(daemon)
    daemon.extra_steps.append(rb.step)
    daemon.http_routes[ROUTE] = lambda: ("application/json",
                                         json.dumps(rb.to_dict(), indent=1).encode())
    return rb
