"""Label sync on a real local Swarm: fact-change-to-label latency and writes per cycle.

    sudo .venv/bin/python benchmarks/bench_label_sync.py [--interval 30] [--watch 5] [--changes 5]

Starts mgr-1 + two GPU workers (real captures), agents refreshing facts every second,
then (1) runs 20 in-process steady-state cycles counting write calls, and (2) runs the
real daemon (`swarmgpu run`) and changes a node's facts file N times, timing each change
until the label is visible through the manager's API.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO)]

from support.gpu_nodes import (  # noqa: E402
    DGX_A100,
    GPU_NODES,
    labels_of,
    start_agent,
    swarmgpu_env,
    wait_port,
)
from support.swarm_harness import SwarmCluster, gpu_resource_args  # noqa: E402

from swarmgpu.core.config import load_config  # noqa: E402
from swarmgpu.manager.daemon import Daemon  # noqa: E402
from swarmgpu.swarm.client import SwarmClient  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--interval", type=float, default=30.0, help="daemon sync.interval_s")
    ap.add_argument("--watch", type=float, default=5.0, help="daemon agents.watch_s (0: off)")
    ap.add_argument("--changes", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-sync-"))
    cluster = SwarmCluster(managers=1, workers=2, log_dir=tmp / "logs", extra_args={
        h: gpu_resource_args(n.uuids()) for h, n in GPU_NODES.items()}).start()
    procs = []
    try:
        procs.append(start_agent(cluster, "gpu-node-2"))
        facts = DGX_A100.facts().to_dict()
        path = tmp / "facts.json"
        path.write_text(json.dumps(facts))
        n1 = cluster.node("gpu-node-1")
        procs.append(cluster.exec_in_netns(n1, [
            sys.executable, "-m", "swarmgpu.cli", "agent", "--source", f"file:{path}",
            "--hostname", "gpu-node-1", "--listen", f"{n1.addr}:9401", "--refresh-s", "1",
            "--identity", "swarm-pki", "--data-root", str(n1.data_root)],
            env=swarmgpu_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(n1.addr, 9401)
        cfg_path = tmp / "config.yml"
        cfg_path.write_text(json.dumps({
            "docker_host": cluster.manager.docker_host, "state_dir": str(tmp / "state"),
            "sync": {"interval_s": args.interval}, "agents": {"watch_s": args.watch},
            "http": {"listen": "127.0.0.1:0"}}))
        cfg = load_config(cfg_path, env={})
        swarm = SwarmClient(cfg.docker_host)
        d = Daemon(cfg, swarm)
        d.cycle()  # first sync writes
        before = swarm.writes
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            d.cycle()
            times.append(time.perf_counter() - t0)
        print(f"steady state: {swarm.writes - before} write calls in 20 cycles "
              f"({(swarm.writes - before) / 20:.2f} per cycle); cycle time median "
              f"{statistics.median(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms "
              f"(3 nodes, 2 agents)")
        daemon = subprocess.Popen([sys.executable, "-m", "swarmgpu.cli", "run", "--config",
                                   str(cfg_path)], env=swarmgpu_env(),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(daemon)
        time.sleep(2)
        lat = []
        for i in range(args.changes):
            version = f"570.{i}.{int(time.time()) % 100}"
            facts["node"]["driver_version"] = version
            tmpf = path.with_suffix(".tmp")
            tmpf.write_text(json.dumps(facts))
            tmpf.replace(path)
            t0 = time.monotonic()
            while labels_of(cluster, "gpu-node-1").get("swarmgpu.driver.version.full") != version:
                time.sleep(0.05)
                if time.monotonic() - t0 > 2 * args.interval + 10:
                    raise TimeoutError("label never appeared")
            lat.append(time.monotonic() - t0)
            time.sleep(0.5 + (i % 3) * 0.7)  # spread changes over the interval
        print(f"fact change -> label visible, daemon mode (agent refresh 1 s, facts watch "
              f"{args.watch:g} s, interval {args.interval:g} s), {args.changes} changes: median "
              f"{statistics.median(lat):.2f} s, max {max(lat):.2f} s, all: "
              f"{', '.join(f'{x:.2f}' for x in lat)}")
        return 0
    finally:
        for p in procs:
            p.terminate()
        cluster.teardown()


if __name__ == "__main__":
    sys.exit(main())
