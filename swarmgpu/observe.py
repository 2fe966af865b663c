"""The daemon's view for people: the cluster document behind the GPU map and
`/api/v1/cluster`, and per-service GPU use as Prometheus gauges."""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

from loguru import logger
from prometheus_client import Gauge

from swarmgpu import webmap
from swarmgpu.audit import audit
from swarmgpu.cluster_view import SCHEMA, build_cluster, gpu_metrics
from swarmgpu.sync import Snapshot

if TYPE_CHECKING:
    from swarmgpu.daemon import Daemon


def attach(daemon: Daemon) -> None:
    cfg = daemon.cfg
    lock = threading.Lock()
    state: dict[str, Any] = {"doc": {"schema": SCHEMA, "generated_at": 0.0, "leader": False,
                                     "nodes": [], "services": [], "pending": [],
                                     "moves": {"proposed": [], "recent": []}}}
    r = daemon.metrics.registry
    util = Gauge("swarmgpu_service_gpu_util", "GPU utilisation (%) of GPUs a service holds",
                 ["service", "node", "gpu"], registry=r)
    mem = Gauge("swarmgpu_service_gpu_memory_used_mib",
                "GPU memory used (MiB) on GPUs a service holds", ["service", "node", "gpu"],
                registry=r)

    def step(d: Daemon, snap: Snapshot) -> None:
        moves = d.moves_view
        doc = build_cluster(
            snap, d.last_placement, prefix=cfg.sync.prefix,
            # The rebalancer scraped every node this cycle already: use its pages.
            metrics=d.last_metrics if d.last_metrics is not None
            else gpu_metrics(snap.nodes, cfg),
            saved_agents={k: v.to_dict() for k, v in d.book.records.items()},
            findings=audit(snap, prefix=cfg.sync.prefix), moves=moves() if moves else None,
            leader=d.leader,
        )
        util.clear()
        mem.clear()
        for n in doc["nodes"]:
            for g in n["gpus"]:
                for h in g["holders"]:
                    labels = (h["service"], n["hostname"], str(g["index"]))
                    if g["util_pct"] is not None:
                        util.labels(*labels).set(g["util_pct"])
                    if g["memory_used_mib"] is not None:
                        mem.labels(*labels).set(g["memory_used_mib"])
        with lock:
            state["doc"] = doc

    def current() -> dict[str, Any]:
        with lock:
            doc = dict(state["doc"])
        doc["leader"] = daemon.leader
        return doc

    daemon.extra_steps.append(step)
    daemon.cluster_doc = current
    webmap.register(daemon.http_routes, current)
    logger.debug("GPU map at / and {} ({} bytes of assets)", webmap.CLUSTER_PATH,
                 len(json.dumps(current())))
