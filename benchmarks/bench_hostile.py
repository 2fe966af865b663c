"""How long an honest node takes to sync while five hostile agents run beside it.

Six agents on loopback (one address each, 127.0.0.10-15): one real swarmgpu agent
serving the RTX 4090 capture, and five hostile stand-ins from tests/support/hostile_agent.py
(drip one byte a second, hang, 200,000 nested brackets, a 500-GPU claim, an endless
body). The daemon's fetch of all six (``agent_client.fetch_all``, as a cycle does) is
timed beside the reference: the same fetch with six honest agents, in the same run.

    python benchmarks/bench_hostile.py [--rounds 5] [--timeout 3] [--flood-rounds 20]

The honest node's facts arrive with the honest reference's latency; the whole fetch is
bounded by one ``agents.timeout_s`` (each hostile agent is cut at its deadline).

Second part, slow-connection floods (tests/support/slowflood.py, in a child process: 400
connections that each send half a request head and are reopened as soon as the server
closes them): from ten addresses (127.0.0.20-29), and from the honest client's own
address (127.0.0.1, where the daemon's fetch comes from); then 2,000 of each, eight times
the servers' 256 connections, where every newcomer evicts a half-sent request. Under
each, the daemon's fetch of /facts (``agent_client.fetch_facts``) from a real agent, and
a GET of the map's ``/api/v1/cluster`` from the daemon's real HTTP server, are timed
beside the same figures without a flood, in the same run. One server is flooded at a
time.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO)]

from support import slowflood  # noqa: E402
from support.gpu_nodes import RTX4090  # noqa: E402

from swarmgpu.agent.server import build_server  # noqa: E402
from swarmgpu.core.config import AgentsConfig, load_config  # noqa: E402
from swarmgpu.core.httpguard import HEAD_DEADLINE_S, GuardedServer  # noqa: E402
from swarmgpu.manager.daemon import Daemon  # noqa: E402
from swarmgpu.manager.nodes.agent_client import fetch_all, fetch_facts  # noqa: E402
from swarmgpu.manager.web import webmap  # noqa: E402
from swarmgpu.swarm.client import SwarmNode  # noqa: E402

HOSTILE = ("drip", "hang", "deep-json", "too-many-gpus", "huge")
PORT = 19401
FLOOD_AGENT = "127.0.0.10"  # the flooded agent's address; the daemon fetches from 127.0.0.1
FLOODS = (("no flood", "", 0), ("400 from 10 addresses", "127.0.0.20-29", 40),
          ("400 from the daemon's own address", "127.0.0.1", 400),
          ("2000 from 10 addresses", "127.0.0.20-29", 200),
          ("2000 from the daemon's own address", "127.0.0.1", 2000))


class _Source:
    spec = "bench:honest"

    def read(self) -> Any:
        return replace(RTX4090.facts(), hostname="honest")


def p90(lat: list[float]) -> float:
    """The 90th percentile within the samples: ``quantiles``' default (exclusive) reaches
    past them (2 rounds: a p90 above the max), and needs two."""
    return statistics.quantiles(lat, n=10, method="inclusive")[-1] if len(lat) > 1 else lat[0]


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


class _NoSwarm:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the map benchmark makes no engine call ({name})")


def map_server(state_dir: str) -> tuple[Daemon, int]:
    """The daemon's own HTTP server (webguard + GuardedServer) with the GPU map's routes,
    serving the sample cluster document the map tests use."""
    cfg = load_config(None, env={"SWARMGPU_HTTP_LISTEN": "127.0.0.1:0",
                                 "SWARMGPU_STATE_DIR": state_dir})
    d = Daemon(cfg, swarm=_NoSwarm())  # type: ignore[arg-type]
    doc = json.loads((REPO / "tests" / "web_sample_cluster.json").read_text())
    webmap.register(d.http_routes, lambda: dict(doc))
    d._start_http()
    assert d._http is not None
    return d, d._http.server_address[1]


def get_cluster(port: int, timeout_s: float) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", webmap.CLUSTER_PATH)
        r = conn.getresponse()
        return r.status == 200 and b"swarmgpu.cluster" in r.read()
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def timed(call: Callable[[], bool], rounds: int) -> tuple[int, list[float]]:
    """(answered, latencies in seconds of every round, answered or not)."""
    ok, lat = 0, []
    for _ in range(rounds):
        t0 = time.monotonic()
        ok += call()
        lat.append(time.monotonic() - t0)
        time.sleep(0.05)  # a flood's reconnects get their turn between rounds
    return ok, lat


def flood_part(rounds: int, timeout_s: float) -> list[str]:
    agent = honest_agent(FLOOD_AGENT)
    cfg = AgentsConfig(port=PORT, timeout_s=timeout_s, identity="none")
    target = node(0, "honest")  # at FLOOD_AGENT
    with tempfile.TemporaryDirectory() as state:
        daemon, map_port = map_server(state)
        assert daemon._http is not None
        calls: dict[str, tuple[str, GuardedServer, Callable[[], bool]]] = {
            "/facts": (FLOOD_AGENT, agent,
                       lambda: fetch_facts(target, cfg).facts is not None),
            "/api/v1/cluster": ("127.0.0.1", daemon._http,
                                lambda: get_cluster(map_port, timeout_s)),
        }
        lines = [f"{'':52}{'answered':>9}{'median':>10}{'p90':>10}{'max':>10}  flood "
                 "connections closed by the server"]
        try:
            for what, (addr, server, call) in calls.items():
                port = server.server_address[1]
                for label, srcs, per_source in FLOODS:
                    proc = slowflood.start(port, srcs, per_source, 120.0, addr) \
                        if per_source else None
                    evicted = server.evicted_total
                    try:
                        if proc is not None:
                            time.sleep(1.0)  # the flood at full strength
                        ok, lat = timed(call, rounds)
                    finally:
                        if proc is not None:
                            slowflood.stop(proc)
                    lines.append(f"{what}, {label}:".ljust(52) + f"{ok:>5}/{rounds:<3}"
                                 f"{statistics.median(lat) * 1000:7.1f} ms"
                                 f"{p90(lat) * 1000:7.1f} ms{max(lat) * 1000:7.1f} ms  "
                                 f"{server.evicted_total - evicted}")
                    time.sleep(HEAD_DEADLINE_S + 0.5)  # the last flood's heads time out
        finally:
            agent.shutdown()
            assert daemon._http is not None
            daemon._http.shutdown()
            daemon._http.server_close()
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=3.0)
    ap.add_argument("--flood-rounds", type=int, default=20)
    args = ap.parse_args()
    cfg = AgentsConfig(port=PORT, timeout_s=args.timeout, identity="none")
    nodes = [node(0, "honest")] + [node(i + 1, "honest") for i in range(len(HOSTILE))]

    servers = [honest_agent(n.addr) for n in nodes]  # reference: six honest agents
    ref_whole, ref_honest = measure(nodes, cfg, args.rounds)
    for s in servers[1:]:
        s.shutdown()
    procs = [subprocess.Popen([sys.executable, str(REPO / "tests/support/hostile_agent.py"), mode,
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
    print()
    print(f"slow-connection floods (tests/support/slowflood.py), {args.flood_rounds} rounds each, "
          f"deadline {args.timeout}s per call; every figure from this run")
    for line in flood_part(args.flood_rounds, args.timeout):
        print(line)


if __name__ == "__main__":
    main()
