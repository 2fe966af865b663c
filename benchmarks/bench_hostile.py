"""How long an honest node takes to sync while five hostile agents run beside it.

Six agents on loopback (one address each, 127.0.0.10-15): one real swarmgpu agent
serving the RTX 4090 capture, and five hostile stand-ins from tests/hostile_agent.py
(drip one byte a second, hang, 200,000 nested brackets, a 500-GPU claim, an endless
body). The daemon's fetch of all six (``agent_client.fetch_all``, as a cycle does) is
timed beside the reference: the same fetch with six honest agents, in the same run.

    python benchmarks/bench_hostile.py [--rounds 5] [--timeout 3]

The honest node's facts arrive with the honest reference's latency; the whole fetch is
bounded by one ``agents.timeout_s`` (each hostile agent is cut at its deadline).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO)]

from gpu_nodes import RTX4090  # noqa: E402

from swarmgpu.agent.server import build_server  # noqa: E402
from swarmgpu.core.config import AgentsConfig  # noqa: E402
from swarmgpu.manager.agent_client import fetch_all, fetch_facts  # noqa: E402
from swarmgpu.swarm.client import SwarmNode  # noqa: E402

HOSTILE = ("drip", "hang", "deep-json", "too-many-gpus", "huge")
PORT = 19401


class _Source:
    spec = "bench:honest"

    def read(self) -> Any:
        return replace(RTX4090.facts(), hostname="honest")


def node(i: int, host: str) -> SwarmNode:
    return SwarmNode(f"n{i}", host, f"127.0.0.{10 + i}", "worker", "ready", "active", {}, {},
                     1, {}, {})


def honest_agent(addr: str) -> Any:
    srv = build_server(_Source(), f"{addr}:{PORT}", refresh_s=60)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    return srv


def measure(nodes: list[SwarmNode], cfg: AgentsConfig, rounds: int) -> tuple[float, float]:
    """(median time of the whole fetch, median time until the honest node's facts)."""
    whole, honest = [], []
    for _ in range(rounds):
        t0 = time.monotonic()
        res = fetch_all(nodes, cfg)
        whole.append(time.monotonic() - t0)
        assert res["n0"].facts is not None, res["n0"].error
        t0 = time.monotonic()
        assert fetch_facts(nodes[0], cfg).facts is not None
        honest.append(time.monotonic() - t0)
    return statistics.median(whole), statistics.median(honest)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=3.0)
    args = ap.parse_args()
    cfg = AgentsConfig(port=PORT, timeout_s=args.timeout)
    nodes = [node(0, "honest")] + [node(i + 1, "honest") for i in range(len(HOSTILE))]

    servers = [honest_agent(n.addr) for n in nodes]  # reference: six honest agents
    ref_whole, ref_honest = measure(nodes, cfg, args.rounds)
    for s in servers[1:]:
        s.shutdown()
    procs = [subprocess.Popen([sys.executable, str(REPO / "tests" / "hostile_agent.py"), mode,
                               n.addr, str(PORT), "honest"])
             for mode, n in zip(HOSTILE, nodes[1:], strict=True)]
    try:
        time.sleep(1.0)
        whole, honest = measure(nodes, cfg, args.rounds)
        res = fetch_all(nodes, cfg)
        refused = sum(r.facts is None for r in res.values())
    finally:
        for p in procs:
            p.terminate()
        servers[0].shutdown()
    print(f"agents.timeout_s {args.timeout}, {args.rounds} rounds, medians")
    print(f"honest node's own fetch, 6 honest agents:      {ref_honest * 1000:8.1f} ms")
    print(f"honest node's own fetch, 5 hostile still busy: {honest * 1000:8.1f} ms")
    print(f"whole fetch_all, 6 honest agents (reference):  {ref_whole * 1000:8.1f} ms")
    print(f"whole fetch_all, 1 honest + 5 hostile agents:  {whole * 1000:8.1f} ms "
          f"({refused} of {len(HOSTILE)} hostile refused; the honest node's labels are "
          "planned when this ends: at most one agents.timeout_s)")


if __name__ == "__main__":
    main()
