"""Scale figures for the daemon: cycle time, writes per cycle, time to converge, memory.

Fake mode (default): the planner and label sync driven through swarmgpu's own client
boundary -- a fake SwarmClient with the same methods (no docker SDK) -- holding a
recorded-shape cluster: N nodes x 8 GPUs (DGX A100 / RTX 4090 `topo -m` captures) and
5 annotated services per node (1/2/4/8-GPU, nvlink/numa, MIG, fractions; about a
quarter can not fit and stay pending). Agents are replaced by their facts (no HTTP).
The fake and the cluster are benchmarks/fake_cluster.py's; this script runs and prints.

Each size runs twice. First with free engine calls: the first and the steady cycle
(CPU), the writes of each cycle against the minimum (one per service whose spec must
change, one per node whose labels must change: what the converged state differs in
from the start), and how many cycles it takes to converge. Then with every engine
call taking what it takes on the real test swarm (ENGINE_LATENCY_MS, measured by
benchmarks/measure_engine_latency.py): the time to converge. Beside them, the same
run's reference decision cost (FGD's median decision in the allocator-level replay).
Each cycle's line splits its writes into node and service writes. The cycle is the
daemon's with placement on: label sync's node writes folded into placement's, and the
gates whose tasks carry their device map opened in the same cycle. ``--tasks`` gives
the fake engine Swarm's tasks (FakeSwarm's ``model_tasks``); without it the task list
is empty, as in the figures measured before it existed. Each cycle ends with the
grants check (cycle.grants: the image env of every service on a GPU node, cached);
``--images N`` gives the services N distinct images (default: all one), pinned by digest
as Swarm pins them (``--image-tags``: by tag only), each read from the fake engine at a
list and an inspect's latency. Its cost shows with ``--tasks`` only (without tasks no
service is on a GPU node, and no image is read).

    python benchmarks/bench_scale.py                          # 1,000, 2,000, 5,000 nodes
    python benchmarks/bench_scale.py --tasks                  # with Swarm's tasks
    python benchmarks/bench_scale.py --sizes 200 --cycles 3
    python benchmarks/bench_scale.py --nodes 1000 --services 5000 --profile
    python benchmarks/bench_scale.py --nodes 1000 --tasks --images 2000  # image reads

Real-swarm mode: the largest swarm this machine holds (1 manager + W workers, real
dockerd per node, agents serving captures), S annotated replicas-0 services, the real
daemon cycle against the real engine.

    python benchmarks/bench_scale.py --real-swarm --workers 8 --services 300
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import io
import json
import os
import pstats
import resource
import sys
import time
import tracemalloc
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from fake_cluster import (  # noqa: E402
    IMAGE_ENV,
    REQUESTS,
    FakeSwarm,
    P,
    build_cluster,
    image_refs,
)

from swarmgpu.core.config import Config, SyncConfig  # noqa: E402
from swarmgpu.core.model import NodeFacts  # noqa: E402
from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics  # noqa: E402
from swarmgpu.manager.cycle.grants import ImageEnvs  # noqa: E402
from swarmgpu.manager.cycle.grants import find as find_ungranted  # noqa: E402
from swarmgpu.manager.cycle.heap import CycleCollector  # noqa: E402
from swarmgpu.manager.cycle.placement import apply_plan, make_plan, new_planner  # noqa: E402
from swarmgpu.manager.engine.writes import WRITE_PARALLEL  # noqa: E402
from swarmgpu.manager.nodes.agent_client import FactsResult  # noqa: E402
from swarmgpu.manager.nodes.agentbook import AgentBook  # noqa: E402
from swarmgpu.manager.nodes.sync import LabelSync, Snapshot  # noqa: E402
from swarmgpu.manager.placement import env_template, gate_constraint  # noqa: E402
from swarmgpu.swarm.cache import SwarmCache  # noqa: E402
from swarmgpu.swarm.client import SwarmNode, SwarmService  # noqa: E402

# --- what the fake's engine calls cost ------------------------------------------------------

# What each engine call costs on the real test swarm (benchmarks/measure_engine_latency.py
# --workers 3 --services 40, run once on the 2-core development machine: medians of 40
# calls; every update is the client's inspect + update round trip). A list call costs
# its fixed part plus a share per object returned; the share is the difference between
# listing 40 services and 4 nodes, an extrapolation to thousands of objects.
ENGINE_LATENCY_MS: dict[str, float] = {
    "node_update": 25.3, "service_update": 23.4, "list": 3.9, "list_per_object": 0.1,
    # One node or service read by id (the cache's read of a changed object): medians
    # 22.6 / 16.5 ms (node / service) in one loaded run of measure_engine_latency.py.
    "inspect": 20.0,
}


def run_cycles(nodes: list[SwarmNode], services: list[SwarmService],
               facts: dict[str, NodeFacts], max_cycles: int,
               latency_ms: Mapping[str, float] | None = None,
               profile: bool = False, model_tasks: bool = False,
               cache: bool = True, image_envs: Mapping[str, tuple[str, ...]] | None = None,
               ) -> dict[str, Any]:
    """The daemon's cycle (one snapshot, label sync, placement) until four cycles in a
    row write nothing, or ``max_cycles``. The first of them is the settle cycle (the
    planner re-reads what it wrote), the others are steady. ``profile``: cProfile's top
    entries of the settle cycle and of the last steady one (their times then include
    the profiler's). ``cache``: nodes and services come from the daemon's cache
    (swarm.cache) fed by the fake engine's events, its stream open from the start;
    without it every snapshot lists them all, as before the cache. With it, once
    converged, one more cycle after a gap in the events (the stream cut and reopened:
    a full re-list) says what a missed event costs."""
    fake = FakeSwarm(nodes, services, latency_ms, model_tasks, image_envs)
    swarm_cache = SwarmCache(fake) if cache else None
    if swarm_cache is not None:
        fake.on_write = swarm_cache.invalidate
        fake.listeners.append(swarm_cache.on_event)
        swarm_cache.opened()
    cfg = Config(sync=SyncConfig(interval_s=30))
    sync = LabelSync(fake, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]
    planner = new_planner(cfg, fake, services)  # the daemon keeps one across cycles
    collector = CycleCollector()  # as the daemon: garbage collection between cycles
    # The grants check's image cache, on a clock a sync interval on per cycle (the
    # daemon's timer; events bring cycles sooner), so its TTL runs as in a daemon.
    cycle_no = [0]
    images = ImageEnvs(fake,  # type: ignore[arg-type]
                       clock=lambda: cycle_no[0] * cfg.sync.interval_s)
    start_nodes, start_specs = fake.state()
    cycles: list[dict[str, Any]] = []
    out: dict[str, Any] = {}
    t_start = time.monotonic()
    converged_s = 0.0

    def one_cycle(c: int, prof: cProfile.Profile | None) -> tuple[dict[str, Any], float]:
        cycle_no[0] = c
        before, calls0, insp0 = fake.writes, fake.calls, fake.inspects
        reads0 = fake.image_reads
        fake.image_reads_at_once = 0
        nw0, sw0 = fake.node_writes, fake.service_writes
        relists0 = swarm_cache.stats.relists if swarm_cache is not None else 0
        if prof is not None:
            prof.enable()
        gc.disable()
        t = time.monotonic()
        listed = (swarm_cache.read() if swarm_cache is not None
                  else (fake.nodes(), fake.services()))
        snap = Snapshot(listed[0], listed[1], fake.tasks(), {
            nid: FactsResult(nid, f.hostname, "fake", f, None, time.time())
            for nid, f in facts.items()})
        t_snap = time.monotonic()
        report = sync.cycle(snap, hold=True)  # as the daemon with placement on
        t_labels = time.monotonic()
        planner.cluster.timings = []
        plan = make_plan(snap, cfg, planner=planner)
        t_plan = time.monotonic()
        decisions = sorted(planner.cluster.timings)
        # Label sync's node writes folded into placement's (one write per node), and
        # the gates whose tasks already carry their device map opened in the same cycle.
        apply_plan(fake, plan, dry_run=False, services=snap.services,  # type: ignore[arg-type]
                   held=sync.held, prefix=P)
        sync.flush()
        t_apply = time.monotonic()
        ungranted = find_ungranted(cfg, snap, plan, images)  # the daemon's grants step
        t_end = time.monotonic()
        if prof is not None:
            prof.disable()
        gc.enable()
        collector.after_cycle()
        t_collect = time.monotonic() - t_end
        return {
            "cycle": c + 1, "total_s": round(t_end - t, 3),
            "snapshot_s": round(t_snap - t, 3), "label_sync_s": round(t_labels - t_snap, 3),
            "plan_s": round(t_plan - t_labels, 3), "apply_s": round(t_apply - t_plan, 3),
            "grants_s": round(t_end - t_apply, 3), "image_reads": fake.image_reads - reads0,
            "image_reads_at_once": fake.image_reads_at_once, "ungranted": len(ungranted),
            "collect_after_s": round(t_collect, 3), "label_writes": report.writes,
            "writes": fake.writes - before, "node_writes": fake.node_writes - nw0,
            "service_writes": fake.service_writes - sw0,
            "engine_calls": fake.calls - calls0,
            "relists": (swarm_cache.stats.relists - relists0) if swarm_cache is not None
            else 1,
            "inspects": fake.inspects - insp0,
            "services_with_placements": sum(1 for sp in plan.services if sp.placements),
            "pending": sum(1 for sp in plan.services if sp.status == "pending"),
            "decisions": len(decisions),
            "decision_median_ms": round(decisions[len(decisions) // 2] * 1e3, 3)
            if decisions else None,
        }, t_end

    for c in range(max_cycles):
        prof = cProfile.Profile() if profile else None  # kept for the quiet cycles only
        cyc, t_end = one_cycle(c, prof)
        cycles.append(cyc)
        print(json.dumps(cycles[-1]), flush=True)
        if prof is not None and not cycles[-1]["writes"]:
            quiet = quiet_run(cycles)
            out["profile_settle" if quiet == 1 else "profile_steady"] = profile_top(prof)
        if cycles[-1]["writes"]:
            converged_s = t_end - t_start
        elif quiet_run(cycles) == 4:
            break  # converged: the settle cycle and three steady ones measured
    end_nodes, end_specs = fake.state()
    # The least any daemon could write to get from the start to where this one ended.
    minimum = (sum(1 for i, labels in end_nodes.items() if labels != start_nodes[i])
               + sum(1 for i, spec in end_specs.items() if spec != start_specs[i]))
    writing = [c["writes"] for c in cycles if c["writes"]]
    quiet = quiet_run(cycles)
    still = sorted(c["total_s"] for c in cycles[len(cycles) - quiet + 1:])
    converged = quiet > 0
    if swarm_cache is not None and converged:
        swarm_cache.gap("bench: the stream was cut")
        swarm_cache.opened()
        gap_cycle, _ = one_cycle(len(cycles), None)
        print(json.dumps({"after_gap": gap_cycle}), flush=True)
        out["after_gap_cycle_s"] = gap_cycle["total_s"]
        out["after_gap_snapshot_s"] = gap_cycle["snapshot_s"]
        out["after_gap_writes"] = gap_cycle["writes"]
    out.update({
        "cycles": cycles, "first_cycle_s": cycles[0]["total_s"],
        "settle_cycle_s": cycles[len(cycles) - quiet]["total_s"] if quiet else None,
        "steady_cycle_s": still[(len(still) - 1) // 2] if still else None,
        "steady_snapshot_s": sorted(c["snapshot_s"] for c in cycles[len(cycles) - quiet + 1:])[
            (len(still) - 1) // 2] if still else None,
        "steady_grants_s": sorted(c["grants_s"] for c in cycles[len(cycles) - quiet + 1:])[
            (len(still) - 1) // 2] if still else None,
        "writes_per_cycle": writing, "writes": sum(writing), "minimum_writes": minimum,
        "cycles_to_converge": len(writing) if converged else None,
        "converge_s": round(converged_s, 2)})
    return out


def quiet_run(cycles: list[dict[str, Any]]) -> int:
    """How many cycles at the end wrote nothing."""
    n = 0
    for c in reversed(cycles):
        if c["writes"]:
            break
        n += 1
    return n


def profile_top(prof: cProfile.Profile, n: int = 15) -> list[str]:
    """The ``n`` entries with the most time of their own, as pstats prints them."""
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(n)
    lines = buf.getvalue().splitlines()
    head = next(i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls"))
    return [line.replace(str(REPO) + "/", "") for line in lines[head:head + n + 1]]


def fake_size(args: argparse.Namespace, n_nodes: int, n_services: int) -> dict[str, Any]:
    t0 = time.monotonic()
    refs = image_refs(args.images, digests=not args.image_tags) if args.images else None
    envs = dict.fromkeys(refs or (), IMAGE_ENV)
    nodes, services, facts = build_cluster(n_nodes, n_services, images=refs)
    build_s = time.monotonic() - t0
    if args.tracemalloc:
        tracemalloc.start()
    print(f"# {n_nodes} nodes, {n_services} services: free engine calls", flush=True)
    free = run_cycles(nodes, services, facts, args.cycles, profile=args.profile,
                      model_tasks=args.tasks, cache=not args.no_cache, image_envs=envs)
    peak = tracemalloc.get_traced_memory()[1] if args.tracemalloc else 0
    tracemalloc.stop()
    gc.collect()
    out: dict[str, Any] = {
        "nodes": n_nodes, "gpus": n_nodes * 8, "services": n_services,
        "images": args.images or 1, "image_digests": bool(args.images) and not args.image_tags,
        "build_s": round(build_s, 2),
        **{k: free[k] for k in ("first_cycle_s", "settle_cycle_s", "steady_cycle_s",
                                "writes_per_cycle", "writes", "minimum_writes",
                                "cycles_to_converge")},
        "cycles": free["cycles"],
    }
    for k in ("profile_settle", "profile_steady"):
        if k in free:
            out[k] = free[k]
            print(f"# {k}\n" + "\n".join(free[k]), flush=True)
    if not args.no_latency:
        print(f"# {n_nodes} nodes: engine calls at {ENGINE_LATENCY_MS} ms", flush=True)
        slow = run_cycles(nodes, services, facts, args.cycles, latency_ms=ENGINE_LATENCY_MS,
                          model_tasks=args.tasks, cache=not args.no_cache, image_envs=envs)
        out["latency_ms"] = dict(ENGINE_LATENCY_MS)
        out["converge_s_at_latency"] = slow["converge_s"]
        out["cycles_at_latency"] = [c["total_s"] for c in slow["cycles"]]
        out["steady_cycle_s_at_latency"] = slow["steady_cycle_s"]
        out["steady_snapshot_s_at_latency"] = slow["steady_snapshot_s"]
        out["steady_grants_s_at_latency"] = slow["steady_grants_s"]
        for k in ("after_gap_cycle_s", "after_gap_snapshot_s"):
            if k in slow:
                out[k + "_at_latency"] = slow[k]
    ref = reference_decision_ms()
    out["reference_sim_decision_ms"] = ref
    out["first_cycle_in_reference_decisions"] = round(out["first_cycle_s"] * 1e3 / ref)
    out["tracemalloc_peak_mib"] = round(peak / 2**20, 1) if peak else None
    out["max_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def fake_mode(args: argparse.Namespace) -> dict[str, Any]:
    if args.nodes is not None:
        sizes = [(args.nodes, args.services or args.per_node * args.nodes)]
    else:
        sizes = [(n, args.per_node * n) for n in args.sizes]
    runs = [fake_size(args, n, s) for n, s in sizes]
    print_table(runs)
    return {"mode": "fake", "write_parallel": WRITE_PARALLEL, "cache": not args.no_cache,
            "sizes": runs}


def print_table(runs: list[dict[str, Any]]) -> None:
    print("\n| nodes | services | first cycle s | settle cycle s | steady cycle s "
          "| steady s per 1,000 nodes | writes per cycle | minimum writes "
          "| cycles to converge | converge s at latency | reference decision ms |")
    print("|" + "---|" * 11)
    for r in runs:
        steady = r["steady_cycle_s"]
        per = f"{steady * 1000 / r['nodes']:.3f}" if steady is not None else "-"
        print(f"| {r['nodes']:,} | {r['services']:,} | {r['first_cycle_s']} "
              f"| {r['settle_cycle_s']} | {steady} | {per} "
              f"| {', '.join(f'{w:,}' for w in r['writes_per_cycle'])} "
              f"| {r['minimum_writes']:,} | {r['cycles_to_converge']} "
              f"| {r.get('converge_s_at_latency', '-')} | {r['reference_sim_decision_ms']} |")
    if any("steady_cycle_s_at_latency" in r for r in runs):
        print("\n| nodes | services | images | steady cycle s at latency "
              "| of it the snapshot s | of it the grants check s "
              "| cycle after a gap in the events s | of it the snapshot s |")
        print("|" + "---|" * 8)
        for r in runs:
            print(f"| {r['nodes']:,} | {r['services']:,} | {r['images']:,}"
                  f"{' by digest' if r['image_digests'] else ''} "
                  f"| {r.get('steady_cycle_s_at_latency', '-')} "
                  f"| {r.get('steady_snapshot_s_at_latency', '-')} "
                  f"| {r.get('steady_grants_s_at_latency', '-')} "
                  f"| {r.get('after_gap_cycle_s_at_latency', '-')} "
                  f"| {r.get('after_gap_snapshot_s_at_latency', '-')} |")


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
    from support.gpu_nodes import DGX_A100, RTX4090, swarmgpu_env
    from support.swarm_harness import SwarmCluster, gpu_resource_args

    from swarmgpu.core.config import load_config
    from swarmgpu.manager.cycle.placement import PlacementStep
    from swarmgpu.manager.daemon import Daemon
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
        d.use([PlacementStep(d)])
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
    ap.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")],
                    default=[1000, 2000, 5000], help="node counts (default 1000,2000,5000)")
    ap.add_argument("--per-node", type=int, default=5, help="services per node")
    ap.add_argument("--nodes", type=int, help="one size instead of --sizes")
    ap.add_argument("--services", type=int, help="with --nodes (default: --per-node each)")
    ap.add_argument("--cycles", type=int, default=8,
                    help="at most; stops after four cycles without writes")
    ap.add_argument("--no-latency", action="store_true",
                    help="skip the run with the engine's measured call latency")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile's top entries of a steady cycle at each size")
    ap.add_argument("--tasks", action="store_true",
                    help="model Swarm's tasks (pending behind their gate, replaced by a "
                         "force update, running once it opens) instead of an empty list")
    ap.add_argument("--no-cache", action="store_true",
                    help="list every node and service in each snapshot (the daemon before "
                         "its event-fed cache, swarm.cache)")
    ap.add_argument("--images", type=int, default=0,
                    help="distinct images of the services, pinned by digest (default: all "
                         "one); the grants check reads them (with --tasks)")
    ap.add_argument("--image-tags", action="store_true",
                    help="with --images: by tag only, no digest")
    ap.add_argument("--tracemalloc", action="store_true", help="peak Python heap (slow)")
    ap.add_argument("--real-swarm", action="store_true")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args(argv)
    from loguru import logger

    logger.remove()  # per-service log lines would dominate the timing
    logger.add(sys.stderr, level="ERROR")
    if args.real_swarm and args.services is None:
        args.services = 300
    result = real_mode(args) if args.real_swarm else fake_mode(args)
    if args.real_swarm:
        print(json.dumps({k: v for k, v in result.items() if k != "cycles"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
