"""The daemon's view for people: the cluster document behind the GPU map and
`/api/v1/cluster`, and per-service GPU use as Prometheus gauges."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from loguru import logger
from prometheus_client import Gauge

from swarmgpu.manager import overshare, webmap
from swarmgpu.manager.audit import audit
from swarmgpu.manager.cluster_view import SCHEMA, build_cluster, gpu_metrics
from swarmgpu.manager.history import History
from swarmgpu.manager.host import CycleHost
from swarmgpu.manager.placement_step import facts_by_node
from swarmgpu.manager.sync import Snapshot


def attach(daemon: overshare.WatchHost) -> None:
    cfg = daemon.cfg
    lock = threading.Lock()
    state: dict[str, Any] = {"doc": {"schema": SCHEMA, "generated_at": 0.0, "leader": False,
                                     "nodes": [], "services": [], "pending": [],
                                     "moves": {"proposed": [], "recent": []}}}
    history = History(cfg.history)  # bounded: history.samples x history.max_gpus
    r = daemon.metrics.registry
    util = Gauge("swarmgpu_service_gpu_util", "GPU utilisation (%) of GPUs a service holds",
                 ["service", "node", "gpu"], registry=r)
    mem = Gauge("swarmgpu_service_gpu_memory_used_mib",
                "GPU memory used (MiB) by a service's processes on a GPU it holds (where the "
                "agent lists processes; elsewhere the GPU's used memory)",
                ["service", "node", "gpu"], registry=r)
    share_mem = Gauge("swarmgpu_service_gpu_memory_share_mib",
                      "GPU memory (MiB) a service's share of a GPU is worth (share x memory)",
                      ["service", "node", "gpu"], registry=r)
    stray = Gauge("swarmgpu_unattributed_gpu_memory_mib",
                  "GPU memory (MiB) used by processes no task Swarm runs on that node "
                  "accounts for (counted for no service)", ["node", "gpu"], registry=r)

    watch = daemon.overshare
    primed: list[Callable[[], None]] = [lambda: None]  # webmap.register's, below

    def step(d: CycleHost, snap: Snapshot) -> None:
        moves = d.moves_view
        # The rebalancer scraped every node this cycle already: use its pages.
        metrics = d.last_metrics if d.last_metrics is not None else gpu_metrics(snap.nodes, cfg)
        att = overshare.attribution_now(snap, facts_by_node(snap), metrics, cfg.sync.prefix)
        uses = att.uses
        watch.update(uses, att.unattributed)
        saved = {k: v.to_dict() for k, v in d.book.records.items()}
        doc = build_cluster(
            snap, d.last_placement, prefix=cfg.sync.prefix, metrics=metrics,
            saved_agents=saved,
            # The same audit as `swarmgpu audit`/`status`: with the agents' records, a node
            # whose agent is lost past the grace is node-failing on the map too.
            findings=audit(snap, prefix=cfg.sync.prefix, saved_agents=saved,
                           generic_resource_kind=cfg.placement.generic_resource_kind,
                           node_lost_grace_s=cfg.health.node_lost_grace_s, metrics=metrics)
            + overshare.findings(uses, att.unattributed),
            moves=moves() if moves else None, leader=d.leader,
            zone_label=cfg.placement.zone_label, ungranted=d.last_ungranted,
        )
        overshare.annotate(doc, uses, att.unattributed)
        history.record(doc)
        util.clear()
        mem.clear()
        share_mem.clear()
        stray.clear()
        for x in att.unattributed:
            stray.labels(x.hostname, str(x.gpu)).inc(x.used_mib)
        for n in doc["nodes"]:
            for g in n["gpus"]:
                for h in g["holders"]:
                    labels = (h["service"], n["hostname"], str(g["index"]))
                    if g["util_pct"] is not None:
                        util.labels(*labels).set(g["util_pct"])
                    own = h.get("memory_used_mib", g["memory_used_mib"])
                    if own is not None:
                        mem.labels(*labels).set(own)
                    if "memory_share_mib" in h:
                        share_mem.labels(*labels).set(h["memory_share_mib"])
                    elif g.get("memory_mib"):
                        share_mem.labels(*labels).set(g["memory_mib"] * h["share_milli"]
                                                      // 1000)
        with lock:
            state["doc"] = doc
        primed[0]()  # the light map document, encoded now rather than at a page's first poll

    def current() -> dict[str, Any]:
        with lock:
            doc = dict(state["doc"])
        doc["leader"] = daemon.leader
        return doc

    daemon.extra_steps.append(step)
    daemon.cluster_doc = current
    primed[0] = webmap.register(daemon.http_routes, current,
                                query_routes=daemon.http_query_routes, history=history)
    logger.debug("GPU map at / and {} ({} bytes of assets)", webmap.CLUSTER_PATH,
                 len(json.dumps(current())))
