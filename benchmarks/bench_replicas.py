"""What one service with very many replicas adds to a placement cycle.

The recorded-shape cluster of ``bench_scale.py`` (N nodes x 8 GPUs, M annotated
services) through swarmgpu's own client boundary (a fake SwarmClient), the daemon's
long-lived planner, until two steady cycles; then the same run again with one more
service of R replicas x 1 GPU whose tasks Swarm holds pending (R tasks, desired state
running, no node, one per slot: what Swarm creates for it), which the cluster cannot
hold. Printed side by side, from the same run: the cycle without it, with the same
service at N replicas (one per node: what the cluster holds of it), and at R; first
and steady cycles, plus what `plan --json` and `status --json` then carry. The
difference between the last two is what the replicas beyond the cluster cost.

    python benchmarks/bench_replicas.py     # 200 nodes, 1000 services, 100,000 replicas
    python benchmarks/bench_replicas.py --replicas 30000 --nodes 100 --services 500
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests"), str(HERE)]

from fake_cluster import FakeSwarm, build_cluster  # noqa: E402
from loguru import logger  # noqa: E402

from swarmgpu.core.config import Config, SyncConfig  # noqa: E402
from swarmgpu.manager.cycle.placement import apply_plan, make_plan, new_planner  # noqa: E402
from swarmgpu.manager.nodes.agent_client import FactsResult  # noqa: E402
from swarmgpu.manager.nodes.sync import Snapshot  # noqa: E402
from swarmgpu.manager.placement import env_template, gate_constraint  # noqa: E402
from swarmgpu.manager.web.cluster_view import build_cluster as status_doc  # noqa: E402
from swarmgpu.swarm.client import SwarmService, SwarmTask  # noqa: E402

P = "swarmgpu."


def big_service(replicas: int) -> tuple[SwarmService, list[SwarmTask]]:
    name = "big"
    labels = {P + "gpus": "1"}
    cons = (gate_constraint(P, name),)
    env = (env_template(P),)
    spec = {"Name": name, "Labels": dict(labels), "TaskTemplate": {
        "ContainerSpec": {"Image": "x", "Env": list(env)},
        "Placement": {"Constraints": list(cons)}},
        "Mode": {"Replicated": {"Replicas": replicas}}}
    s = SwarmService("sid-big", name, labels, cons, env, "replicated", replicas, None, 1, spec)
    tasks = [SwarmTask(f"t{k:07d}", s.id, "", k, "pending", "running", env,
                       message="no suitable node (scheduling constraints not satisfied on "
                       "every node)") for k in range(1, replicas + 1)]
    return s, tasks


def run(args: argparse.Namespace, replicas: int) -> dict[str, Any]:
    nodes, services, facts = build_cluster(args.nodes, args.services)
    tasks: list[SwarmTask] = []
    with_big = replicas > 0
    if with_big:
        big, tasks = big_service(replicas)
        services.append(big)
    fake = FakeSwarm(nodes, services)
    cfg = Config(sync=SyncConfig(interval_s=30))
    planner = new_planner(cfg, fake, services)
    results = {nid: FactsResult(nid, f.hostname, "fake", f, None, time.time())
               for nid, f in facts.items()}
    cycles: list[float] = []
    steady = 0
    plan = None
    snap = None
    for _ in range(args.cycles):
        before = fake.writes
        snap = Snapshot(fake.nodes(), fake.services(), tasks, results)
        t = time.perf_counter()
        plan = make_plan(snap, cfg, planner=planner)
        apply_plan(fake, plan, dry_run=False,  # type: ignore[arg-type]
                   services=snap.services)
        cycles.append(time.perf_counter() - t)
        if fake.writes == before:
            steady += 1
            if steady >= 2:
                break
    assert plan is not None and snap is not None
    out: dict[str, Any] = {"first_cycle_s": round(cycles[0], 4),
                           "steady_cycle_s": round(min(cycles[1:] or cycles), 4),
                           "cycles": len(cycles)}
    if with_big:
        sp = next(sp for sp in plan.services if sp.name == "big")
        t = time.perf_counter()
        plan_json = json.dumps([x.to_dict() for x in plan.services])
        doc = status_doc(snap, plan, prefix=P)
        status_json = json.dumps(doc)
        out.update({
            "big_status": sp.status, "big_placements": len(sp.placements),
            "big_reason": (sp.reason or "")[:160],
            "big_plan_json_chars": len(json.dumps(sp.to_dict())),
            "plan_json_chars": len(plan_json), "status_json_chars": len(status_json),
            "plan_and_status_json_s": round(time.perf_counter() - t, 4)})
    else:
        t = time.perf_counter()
        plan_json = json.dumps([x.to_dict() for x in plan.services])
        status_json = json.dumps(status_doc(snap, plan, prefix=P))
        out.update({"plan_json_chars": len(plan_json), "status_json_chars": len(status_json),
                    "plan_and_status_json_s": round(time.perf_counter() - t, 4)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--replicas", type=int, default=100_000)
    ap.add_argument("--cycles", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the fastest counts")
    args = ap.parse_args()
    logger.remove()  # one line per placement written would drown the figures
    def best(replicas: int) -> dict[str, Any]:
        """The fastest of ``--repeat`` runs (other load on the machine only slows)."""
        runs = [run(args, replicas) for _ in range(args.repeat)]
        out = dict(runs[0])
        for k in ("first_cycle_s", "steady_cycle_s", "plan_and_status_json_s"):
            out[k] = min(r[k] for r in runs)
        return out

    ref, held, big = best(0), best(args.nodes), best(args.replicas)
    print(json.dumps({
        "nodes": args.nodes, "gpus": args.nodes * 8, "services": args.services,
        "replicas": args.replicas, "reference": ref, f"with_{args.nodes}_replicas": held,
        f"with_{args.replicas}_replicas": big,
        "added_first_cycle_s": round(big["first_cycle_s"] - ref["first_cycle_s"], 4),
        "added_steady_cycle_s": round(big["steady_cycle_s"] - ref["steady_cycle_s"], 4),
        "beyond_cluster_first_cycle_s": round(big["first_cycle_s"] - held["first_cycle_s"], 4),
        "beyond_cluster_steady_cycle_s": round(
            big["steady_cycle_s"] - held["steady_cycle_s"], 4),
    }, indent=1))


if __name__ == "__main__":
    main()
