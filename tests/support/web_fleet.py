"""A fleet-sized cluster document for the GPU map, made by the real planner.

Nodes are DGX A100s (MIG on GPU 0) and 8x RTX 4090 boxes from the recorded `topo -m`
captures (the cluster `benchmarks/bench_scale.py` plans); services with mixed requests
are placed by `make_plan`, their holdings written to node labels by `apply_plan`, and
`cluster_view.build_cluster` reads it all back, so the document shows only states the
planner can produce. Metrics (utilisation, memory, temperature, power, XID/ECC) are
synthetic but follow the holdings: held GPUs are busy, free ones idle.
"""

from __future__ import annotations

import dataclasses
import random
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "benchmarks") not in sys.path:
    sys.path.append(str(REPO / "benchmarks"))

from fake_cluster import FakeSwarm, build_cluster  # noqa: E402
from loguru import logger  # noqa: E402

from swarmgpu.core.config import Config, SyncConfig  # noqa: E402
from swarmgpu.core.metrics_in import FB_USED, GPU_TEMP, POWER, UTIL, GpuMetrics  # noqa: E402
from swarmgpu.core.model import NodeFacts  # noqa: E402
from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics  # noqa: E402
from swarmgpu.manager.cycle.placement import apply_plan, make_plan  # noqa: E402
from swarmgpu.manager.nodes.agent_client import FactsResult  # noqa: E402
from swarmgpu.manager.nodes.agentbook import AgentBook  # noqa: E402
from swarmgpu.manager.nodes.sync import LabelSync, Snapshot  # noqa: E402
from swarmgpu.manager.web.cluster_view import ECC_DBE, ECC_SBE, XID  # noqa: E402
from swarmgpu.manager.web.cluster_view import build_cluster as build_doc  # noqa: E402


def _snap(fake: FakeSwarm, facts: dict[str, NodeFacts]) -> Snapshot:
    return Snapshot(fake.nodes(), fake.services(), fake.tasks(), {
        nid: FactsResult(nid, f.hostname, "fake", f, None, time.time())
        for nid, f in facts.items()})


def fleet_doc(nodes: int, services: int | None = None, seed: int = 7) -> dict[str, Any]:
    """The cluster document of ``nodes`` x 8 GPUs and 5 services per node (about a
    third stay pending)."""
    n_svc = services if services is not None else max(4, nodes * 5)
    swarm_nodes, svcs, facts = build_cluster(nodes, n_svc, seed=seed)
    rng = random.Random(seed)
    # a few GPUs fail (XID 79): the planner must steer around them
    for nid, f in list(facts.items()):
        if rng.random() < 0.02:
            i = rng.randrange(1, len(f.gpus))
            gpus = list(f.gpus)
            gpus[i] = dataclasses.replace(gpus[i], healthy=False,
                                          error="XID 79: GPU has fallen off the bus")
            facts[nid] = dataclasses.replace(f, gpus=tuple(gpus))
    fake = FakeSwarm(swarm_nodes, svcs)
    cfg = Config(sync=SyncConfig(interval_s=30))
    logger.disable("swarmgpu")  # a line per label write and placement is noise here
    try:
        LabelSync(fake, cfg, DaemonMetrics(), AgentBook()).cycle(  # type: ignore[arg-type]
            _snap(fake, facts))
        first = _snap(fake, facts)
        plan = make_plan(first, cfg)
        apply_plan(fake, plan, dry_run=False,  # type: ignore[arg-type]
                   services=first.services)
    finally:
        logger.enable("swarmgpu")
    snap = _snap(fake, facts)
    plan = make_plan(snap, cfg)  # what the daemon sees next cycle: holdings in labels
    metrics = synthetic_metrics(build_doc(snap, plan), rng)
    return build_doc(snap, plan, metrics=metrics)


def synthetic_metrics(doc: dict[str, Any], rng: random.Random
                      ) -> dict[str, dict[str, GpuMetrics]]:
    out: dict[str, dict[str, GpuMetrics]] = {}
    for n in doc["nodes"]:
        per: dict[str, GpuMetrics] = {}
        for g in n["gpus"]:
            held = bool(g["holders"]) or any(m["holder"] for m in g["mig"])
            if not g["healthy"]:
                per[g["uuid"]] = GpuMetrics(g["uuid"], g["index"], values={XID: 79.0,
                                            ECC_DBE: 2.0, ECC_SBE: 14.0})
                continue
            util = rng.uniform(35, 99) if held else rng.uniform(0, 4)
            vals = {UTIL: round(util), GPU_TEMP: round(30 + util * 0.55 + rng.uniform(0, 6)),
                    POWER: round(60 + util * 3.2, 1), XID: 0.0, ECC_SBE: 0.0, ECC_DBE: 0.0}
            if not g["mig"]:
                vals[FB_USED] = round(g["memory_mib"] * (rng.uniform(0.4, 0.97) if held
                                                         else 0.01))
            per[g["uuid"]] = GpuMetrics(g["uuid"], g["index"], values=vals)
        out[n["id"]] = per
    return out


if __name__ == "__main__":
    import json

    t = time.monotonic()
    from swarmgpu.manager.web.cluster_view import document_problems

    d = fleet_doc(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
    print(json.dumps({"s": round(time.monotonic() - t, 2), "nodes": len(d["nodes"]),
                      "bytes": len(json.dumps(d)), "problems": document_problems(d)[:10]}))
