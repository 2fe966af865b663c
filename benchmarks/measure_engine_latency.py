"""Per-call latency of the engine calls the daemon makes, on the real test swarm.

Starts the test swarm of tests/support/swarm_harness.py (namespaced dockerds on this machine,
1 manager + W workers, no image pull), creates S services (replicas 0, so nothing
runs), and times, through swarmgpu's own SwarmClient, what a daemon cycle calls:

- ``update_node_labels`` and ``update_service_spec`` (each an inspect + an update: the
  read-modify-write the daemon does), one at a time and then K at once from a thread
  pool (different nodes / services, as a bounded parallel write would);
- the list calls of a snapshot: ``nodes()``, ``services()``, ``tasks()``;
- the single reads of the cache (swarm.cache) for an object an event named: ``node(id)``,
  ``service(id)``.

Needs root (network namespaces). Prints one JSON object; its ``median_ms`` figures are
the defaults of ``bench_scale.py --latency`` (see ENGINE_LATENCY_MS there).

``--via-proxy`` runs the same calls through ``swarmgpu docker-proxy`` (its own process,
as the stack runs it, on a unix socket in front of the manager's engine): what the
strict framing, a connection per call and a write's check against the current spec
(one more engine read) cost. The labels written are under ``swarmgpu.`` in both modes,
so both write the same.

    sudo .venv/bin/python benchmarks/measure_engine_latency.py --workers 3 --services 40
    sudo .venv/bin/python benchmarks/measure_engine_latency.py --via-proxy
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import os  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

from support.swarm_harness import SwarmCluster  # noqa: E402

from swarmgpu.swarm.client import SwarmClient  # noqa: E402


def timed(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def summary(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {"n": len(s), "median_ms": round(statistics.median(s) * 1e3, 2),
            "p90_ms": round(s[int(0.9 * (len(s) - 1))] * 1e3, 2),
            "max_ms": round(s[-1] * 1e3, 2)}


def parallel_rate(batches: list[list[Callable[[], Any]]], workers: int) -> dict[str, float]:
    """Wall time per call when ``workers`` run them at once (what a pool buys); each
    batch names different objects (no two writes to one object at once)."""
    t = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        for batch in batches:
            list(pool.map(lambda f: f(), batch))
    wall = time.perf_counter() - t
    calls = sum(len(b) for b in batches)
    return {"calls": calls, "workers": workers,
            "wall_ms_per_call": round(wall / calls * 1e3, 2)}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    cluster = SwarmCluster(managers=1, workers=args.workers,
                           log_dir=REPO / "artifacts" / "swarm")
    t0 = time.monotonic()
    cluster.start()
    out: dict[str, Any] = {"managers": 1, "workers": args.workers,
                           "start_s": round(time.monotonic() - t0, 1)}
    proxy = None
    try:
        endpoint = cluster.manager.docker_host
        if args.via_proxy:
            sock = Path(tempfile.mkdtemp(prefix="sgproxy")) / "docker.sock"
            proxy = subprocess.Popen(
                [sys.executable, "-m", "swarmgpu.cli", "docker-proxy", "--listen",
                 f"unix://{sock}", "--upstream", endpoint],
                env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE)
            deadline = time.monotonic() + 60  # its imports take seconds on a busy host
            while not sock.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            endpoint = f"unix://{sock}"
        out["via_proxy"] = bool(args.via_proxy)
        swarm = SwarmClient(endpoint)
        api = cluster.client(cluster.manager).api
        for j in range(args.services):
            # a label under the prefix: a service the proxy lets the daemon write
            api.create_service({"ContainerSpec": {"Image": "local/busybox:latest",
                                                  "Args": ["sleep", "1d"]}},
                               name=f"lat{j:03d}", labels={"swarmgpu.bench": "latency"},
                               mode={"Replicated": {"Replicas": 0}})
        nodes = [n.id for n in swarm.nodes()]
        services = [s.id for s in swarm.services()]
        counter = [0]

        def bump_node(nid: str) -> Callable[[], bool]:
            def go() -> bool:
                counter[0] += 1
                n = counter[0]
                return swarm.update_node_labels(nid, lambda cur: {**cur, "swarmgpu.bench-n":
                                                                      str(n)})
            return go

        def bump_service(sid: str) -> Callable[[], bool]:
            def go() -> bool:
                counter[0] += 1
                n = counter[0]
                return swarm.update_service_spec(
                    sid, lambda spec: {**spec, "Labels": {**(spec.get("Labels") or {}),
                                                          "swarmgpu.bench-n": str(n)}})
            return go

        r = args.repeats
        out["node_update"] = summary(
            [x for i in range(r) for x in timed(bump_node(nodes[i % len(nodes)]), 1)])
        out["service_update"] = summary(
            [x for i in range(r) for x in timed(bump_service(services[i % len(services)]), 1)])
        out["list_nodes"] = summary(timed(swarm.nodes, r))
        out["list_services"] = summary(timed(swarm.services, r))
        # What the cache (swarm.cache) reads for one object an event named.
        out["inspect_node"] = summary(timed(lambda: swarm.node(nodes[0]), r))
        out["inspect_service"] = summary(timed(lambda: swarm.service(services[0]), r))
        out["list_tasks"] = summary(timed(lambda: swarm.tasks({"desired-state": "running"}),
                                          r))
        out["node_update_parallel"] = parallel_rate(
            [[bump_node(n) for n in nodes] for _ in range(r // len(nodes))], len(nodes))
        out["service_update_parallel"] = parallel_rate(
            [[bump_service(s) for s in services]], args.parallel)
        out["services"] = len(services)
    finally:
        if proxy is not None:
            proxy.terminate()
            _, err = proxy.communicate(timeout=10)
            out["proxy_refused"] = err.count(b"refused")
        cluster.teardown()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--services", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--parallel", type=int, default=8, help="threads for the parallel rate")
    ap.add_argument("--via-proxy", action="store_true",
                    help="through swarmgpu docker-proxy (in this process)")
    args = ap.parse_args(argv)
    print(json.dumps(measure(args), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
