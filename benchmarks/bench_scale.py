"""Scale figures for the daemon: cycle time, writes per cycle, memory.

Fake mode (default): the planner and label sync driven through swarmgpu's own client
boundary -- a fake SwarmClient with the same methods (no docker SDK) -- holding a
recorded-shape cluster: N nodes x 8 GPUs (DGX A100 / RTX 4090 `topo -m` captures) and
M annotated services (1/2/4/8-GPU, nvlink/numa, MIG, fractions; about a third can
not fit and stay pending). Agents are replaced by their facts (no HTTP).

    python benchmarks/bench_scale.py                     # 1000 nodes, 5000 services
    python benchmarks/bench_scale.py --nodes 200 --services 1000 --cycles 3

Real-swarm mode: the largest swarm this machine holds (1 manager + W workers, real
dockerd per node, agents serving captures), S annotated replicas-0 services, the real
daemon cycle against the real engine.

    python benchmarks/bench_scale.py --real-swarm --workers 8 --services 300
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import random
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from swarmgpu.agent.facts.topo import TopoSource  # noqa: E402
from swarmgpu.core.config import Config, SyncConfig  # noqa: E402
from swarmgpu.core.model import NodeFacts  # noqa: E402
from swarmgpu.manager.agent_client import FactsResult  # noqa: E402
from swarmgpu.manager.agentbook import AgentBook  # noqa: E402
from swarmgpu.manager.daemon_metrics import DaemonMetrics  # noqa: E402
from swarmgpu.manager.placement import env_template, gate_constraint  # noqa: E402
from swarmgpu.manager.placement_step import apply_plan, make_plan, new_planner  # noqa: E402
from swarmgpu.manager.sync import LabelSync, Snapshot  # noqa: E402
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask  # noqa: E402

P = "swarmgpu."


def _topology() -> Path:
    from paths import TOPOLOGY  # tests/paths.py: tests/fixtures/topology in the repo

    return TOPOLOGY


# --- the fake at swarmgpu's client boundary ------------------------------------------------

class FakeSwarm:
    """Same methods as swarmgpu.swarm.client.SwarmClient, state in memory, versions enforced."""

    def __init__(self, nodes: list[SwarmNode], services: list[SwarmService]) -> None:
        self._nodes = {n.id: n for n in nodes}
        self._services = {s.id: s for s in services}
        self.writes = 0

    def is_leader(self) -> bool:
        return True

    def nodes(self) -> list[SwarmNode]:
        return list(self._nodes.values())

    def node(self, node_id: str) -> SwarmNode:
        return self._nodes[node_id]

    def services(self) -> list[SwarmService]:
        return list(self._services.values())

    def service(self, service_id: str) -> SwarmService:
        return self._services[service_id]

    def tasks(self, filters: Mapping[str, Any] | None = None) -> list[SwarmTask]:
        return []  # replicas stay pending until their gate opens; the planner's input

    def events(self, *, types: tuple[str, ...] = ("node", "service")) -> Iterator[dict[str, Any]]:
        return iter(())

    def update_node_labels(self, node_id: str,
                           compute: Callable[[Mapping[str, str]], Mapping[str, str] | None],
                           *, attempts: int = 5) -> bool:
        n = self._nodes[node_id]
        new = compute(dict(n.labels))
        if new is None or dict(new) == dict(n.labels):
            return False
        self.writes += 1
        self._nodes[node_id] = dataclasses.replace(n, labels=dict(new), version=n.version + 1)
        return True

    def update_service_spec(self, service_id: str,
                            compute: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
                            *, attempts: int = 5) -> bool:
        s = self._services[service_id]
        new = compute(s.spec)
        if new is None or new == s.spec:
            return False
        self.writes += 1
        tt = new.get("TaskTemplate", {})
        self._services[service_id] = dataclasses.replace(
            s, spec=new, labels=dict(new.get("Labels") or {}),
            constraints=tuple((tt.get("Placement") or {}).get("Constraints") or ()),
            env=tuple((tt.get("ContainerSpec") or {}).get("Env") or ()), version=s.version + 1,
            force_update=int(tt.get("ForceUpdate") or 0))
        return True


# --- the recorded-shape cluster -----------------------------------------------------------

REQUESTS: list[dict[str, str]] = [
    {"gpus": "1"}, {"gpus": "1"}, {"gpus": "2", "topology": "nvlink"}, {"gpus": "4"},
    {"gpus": "8"}, {"gpus": "2", "topology": "numa"}, {"gpu-fraction": "0.5"},
    {"gpu-memory": "20GB"}, {"mig": "1g.5gb"}, {"gpus": "1", "gpu-product": "*4090*"},
]


def build_cluster(n_nodes: int, n_services: int, seed: int = 1
                  ) -> tuple[list[SwarmNode], list[SwarmService], dict[str, NodeFacts]]:
    topo = _topology()
    kinds = [
        ("topo_dgx_a100_nv12.txt", "NVIDIA A100-SXM4-40GB", 40960, "0:1g.5gb*7"),
        ("topo_pcie_8x_rtx4090_pix_sys.txt", "NVIDIA GeForce RTX 4090", 24564, None),
    ]
    nodes, facts = [], {}
    for i in range(n_nodes):
        cap, product, mem, mig = kinds[i % 2]
        host = f"gpu-{i:04d}"
        f = TopoSource(topo / cap, hostname=host, product=product, memory_mib=mem,
                       mig_layout=mig).read()
        nid = f"node{i:021d}"[:25]
        nodes.append(SwarmNode(nid, host, f"10.{i // 250}.{i % 250}.1", "worker", "ready",
                               "active", {"topology.zone": f"z{i % 4}", "team": "ml"}, {},
                               1, {"NVIDIA-GPU": tuple(g.uuid for g in f.gpus)}, {}))
        facts[nid] = f
    rng = random.Random(seed)
    services = []
    for j in range(n_services):
        name = f"svc{j:05d}"
        labels = {P + k: v for k, v in rng.choice(REQUESTS).items()}
        labels["owner"] = "bench"
        spec = {"Name": name, "Labels": dict(labels), "TaskTemplate": {
            "ContainerSpec": {"Image": "x", "Env": [env_template(P), "USER=1"]},
            "Placement": {"Constraints": [gate_constraint(P, name)]}},
            "Mode": {"Replicated": {"Replicas": 1}}}
        services.append(SwarmService(f"sid{j:022d}"[:25], name, labels,
                                     (gate_constraint(P, name),), (env_template(P), "USER=1"),
                                     "replicated", 1, None, 1, spec))
    return nodes, services, facts


def fake_mode(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.monotonic()
    nodes, services, facts = build_cluster(args.nodes, args.services)
    build_s = time.monotonic() - t0
    fake = FakeSwarm(nodes, services)
    cfg = Config(sync=SyncConfig(interval_s=30))
    book = AgentBook()
    sync = LabelSync(fake, cfg, DaemonMetrics(), book)  # type: ignore[arg-type]
    planner = new_planner(cfg, fake, services)  # the daemon keeps one across cycles
    if args.tracemalloc:
        tracemalloc.start()
    cycles = []
    steady = 0
    for c in range(args.cycles):
        before = fake.writes
        t = time.monotonic()
        snap = Snapshot(fake.nodes(), fake.services(), fake.tasks(), {
            nid: FactsResult(nid, f.hostname, "fake", f, None, time.time())
            for nid, f in facts.items()})
        t_snap = time.monotonic()
        report = sync.cycle(snap)
        t_labels = time.monotonic()
        snap2 = Snapshot(fake.nodes(), fake.services(), fake.tasks(), snap.facts)
        planner.cluster.timings = []
        plan = make_plan(snap2, cfg, planner=planner)
        t_plan = time.monotonic()
        decisions = sorted(planner.cluster.timings)
        apply_plan(fake, plan, dry_run=False)  # type: ignore[arg-type]
        t_end = time.monotonic()
        placed = sum(1 for sp in plan.services if sp.placements)
        pending = sum(1 for sp in plan.services if sp.status == "pending")
        cycles.append({
            "cycle": c + 1, "total_s": round(t_end - t, 3),
            "snapshot_s": round(t_snap - t, 3), "label_sync_s": round(t_labels - t_snap, 3),
            "plan_s": round(t_plan - t_labels, 3), "apply_s": round(t_end - t_plan, 3),
            "label_writes": report.writes, "writes": fake.writes - before,
            "services_with_placements": placed, "pending": pending,
            "decisions": len(decisions),
            "decision_median_ms": round(decisions[len(decisions) // 2] * 1e3, 3)
            if decisions else None,
        })
        print(json.dumps(cycles[-1]), flush=True)
        if fake.writes == before:
            steady += 1
            if steady >= 2:
                break  # converged: two steady cycles measured
    peak = tracemalloc.get_traced_memory()[1] if args.tracemalloc else 0
    tracemalloc.stop()
    gc.collect()
    ref = reference_decision_ms()
    first = cycles[0]["total_s"]
    still = [c["total_s"] for c in cycles if c["writes"] == 0]
    return {"mode": "fake", "nodes": args.nodes, "gpus": args.nodes * 8,
            "services": args.services, "build_s": round(build_s, 2), "cycles": cycles,
            "first_cycle_s": first, "steady_cycle_s": min(still) if still else None,
            "reference_sim_decision_ms": ref,
            "first_cycle_in_reference_decisions": round(first * 1e3 / ref) if ref else None,
            "tracemalloc_peak_mib": round(peak / 2**20, 1) if peak else None,
            "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def reference_decision_ms() -> float:
    """The same run's reference: the median decision of the allocator-level replay of
    the openb default trace (a baseline policy, FGD, over 1,213 nodes), which this
    machine's load slows down as much as the figures above."""
    from swarmgpu.sim.replay import replay
    from swarmgpu.sim.trace import load_nodes, load_pods
    from swarmgpu.sim.traces import bundled

    n, p = bundled("default")
    r = replay(load_nodes(n), load_pods(p)[:3000], "fgd", 42, inflate=0.5, timing=True)
    lat = sorted(r.decision_s)
    return round(lat[len(lat) // 2] * 1e3, 4)


# --- real swarm ----------------------------------------------------------------------------

def real_mode(args: argparse.Namespace) -> dict[str, Any]:
    from gpu_nodes import DGX_A100, RTX4090, swarmgpu_env
    from swarm_harness import SwarmCluster, gpu_resource_args

    from swarmgpu.core.config import load_config
    from swarmgpu.manager.daemon import Daemon
    from swarmgpu.manager.placement_step import attach
    from swarmgpu.swarm.client import SwarmClient

    kinds = [DGX_A100, RTX4090]
    def kind_of(i: int) -> Any:  # the agent's synthetic UUIDs follow its hostname
        return dataclasses.replace(kinds[(i - 1) % 2], hostname=f"gpu-node-{i}")

    extra = {f"gpu-node-{i}": gpu_resource_args(kind_of(i).uuids())
             for i in range(1, args.workers + 1)}
    t0 = time.monotonic()
    cluster = SwarmCluster(managers=1, workers=args.workers, extra_args=extra,
                           log_dir=REPO / "artifacts" / "swarm")
    cluster.start()
    out: dict[str, Any] = {"mode": "real-swarm", "managers": 1, "workers": args.workers,
                           "start_s": round(time.monotonic() - t0, 1)}
    procs = []
    tmp = Path(f"/tmp/sgbench{os.getpid()}")
    tmp.mkdir(exist_ok=True)
    try:
        for i in range(1, args.workers + 1):
            node = cluster.node(f"gpu-node-{i}")
            argv = kind_of(i).agent_argv(node.addr, 9401, data_root=node.data_root)
            procs.append(cluster.exec_in_netns(node, argv,
                                               env=swarmgpu_env(),
                                               stdout=open(tmp / f"agent{i}.log", "ab")))  # noqa: SIM115
        api = cluster.client(cluster.manager).api
        t1 = time.monotonic()
        for j in range(args.services):
            name = f"b{j:04d}"
            req = REQUESTS[j % len(REQUESTS)]
            api.create_service(
                {"ContainerSpec": {"Image": "local/busybox:latest", "Args": ["sleep", "1d"],
                                   "Env": [env_template(P)]},
                 "Placement": {"Constraints": [gate_constraint(P, name)]}},
                name=name, labels={P + k: v for k, v in req.items()},
                mode={"Replicated": {"Replicas": 0}})
        out["services"] = args.services
        out["create_services_s"] = round(time.monotonic() - t1, 1)
        cfg_path = tmp / "config.yml"
        cfg_path.write_text(json.dumps({
            "docker_host": cluster.manager.docker_host, "state_dir": str(tmp / "state"),
            "agents": {"timeout_s": 3}, "sync": {"interval_s": 30},
            "http": {"listen": "127.0.0.1:0"}}))
        time.sleep(2)  # agents' first read
        d = Daemon(load_config(cfg_path, env={}), SwarmClient(cluster.manager.docker_host))
        attach(d)
        cycles = []
        for c in range(args.cycles):
            w0 = d.swarm.writes
            t = time.monotonic()
            rep = d.cycle()
            cycles.append({"cycle": c + 1, "total_s": round(time.monotonic() - t, 3),
                           "writes": d.swarm.writes - w0, "label_writes": rep.writes,
                           "errors": len(rep.errors)})
            print(json.dumps(cycles[-1]), flush=True)
        out["cycles"] = cycles
        out["daemon_max_rss_mib"] = round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    finally:
        for p in procs:
            p.terminate()
        cluster.teardown()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--services", type=int, default=5000)
    ap.add_argument("--cycles", type=int, default=6,
                    help="at most; stops after two steady cycles")
    ap.add_argument("--tracemalloc", action="store_true", help="peak Python heap (slow)")
    ap.add_argument("--real-swarm", action="store_true")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args(argv)
    from loguru import logger

    logger.remove()  # per-service log lines would dominate the timing
    logger.add(sys.stderr, level="ERROR")
    if args.real_swarm and args.services == 5000:
        args.services = 300
    result = real_mode(args) if args.real_swarm else fake_mode(args)
    print(json.dumps({k: v for k, v in result.items() if k != "cycles"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
