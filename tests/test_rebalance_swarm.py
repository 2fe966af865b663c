"""Rebalancing on the real test swarm: agents serving scripted metrics profiles, the
daemon (real CLI) moving one replica; containers checked for their new devices."""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.gpu_nodes import (
    GPU_NODES,
    HTTP_AUTH,
    LOGS,
    cfg_file,
    eventually,
    start_agent,
    start_daemon,
    stop,
)
from support.swarm_harness import SwarmCluster
from support.swarm_rebalance import IDLE, P, holder_gpu, hot, labels, node_labels, where
from support.swarm_services import (
    container_env,
    deploy,
    removed_tasks_stopped,
    tasks_running,
    wait_running,
)

from swarmgpu.swarm.client import SwarmClient
from swarmgpu.swarm.identity import client_context, default_cert_paths

pytestmark = pytest.mark.swarm


@pytest.fixture(scope="module")
def rb(swarm: SwarmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("rebalance")
    profiles = {h: tmp / f"{h}.yml" for h in GPU_NODES}
    for p in profiles.values():
        p.write_text(json.dumps(IDLE))
    agents = {h: start_agent(swarm, h, "--metrics-profile", str(profiles[h])) for h in GPU_NODES}
    # hot_window_s: the flat key of earlier releases, still read (rebalance.hotspot.window_s)
    cfg = cfg_file(tmp, swarm, sync={"interval_s": 1}, rebalance={
        "dry_run": False, "policies": "hotspot", "hot_window_s": 4, "max_gap_s": 3,
        "min_samples": 3, "cooldown_s": 600, "move_timeout_s": 60})
    state: dict[str, Any] = {"cfg": cfg, "tmp": tmp, "profiles": profiles}

    def start(config: Path = cfg, **env: str) -> Any:
        state["proc"] = start_daemon(swarm, config, LOGS / "rebalance-daemon.log", **env)
        return state["proc"]

    state["start"] = start
    start()
    yield state
    # The module's last stacks go while its daemon still runs, which releases their GPUs:
    # the swarm is shared, and a later module must find every GPU free.
    for old in state.get("stacks", ["rb", "rc"]):
        swarm.cli(swarm.manager, "stack", "rm", old, check=False)
    swarm.wait_for(lambda: not any(k.startswith(f"{P}assign.")
                                   for h in GPU_NODES for k in node_labels(swarm, h)),
                   60, "the module's GPUs released")
    stop(state["proc"])
    for a in agents.values():
        stop(a)


def test_hot_spot_moves_exactly_one_replica_and_spike_moves_none(
        swarm: SwarmCluster, rb: dict[str, Any]) -> None:
    frac = {"labels": {"swarmgpu.gpu-fraction": "0.5"}}
    deploy(swarm, rb["tmp"], "rb", {"a": frac, "b": frac})
    wait_running(swarm, "rb_a", 1)
    wait_running(swarm, "rb_b", 1)
    host, uuid = holder_gpu(swarm, "rb_a")
    assert holder_gpu(swarm, "rb_b") == (host, uuid)  # packed on one GPU
    other = next(h for h in GPU_NODES if h != host)
    # A 2 s spike (window 4 s): nothing moves.
    hot(rb["profiles"][host], uuid)
    time.sleep(2)
    hot(rb["profiles"][host], None)
    time.sleep(6)
    assert all(f"{P}state.moved-at" not in labels(swarm, s) for s in ("rb_a", "rb_b"))
    # Sustained: exactly one move, of rb_a (equal shares go by name), to the other node.
    hot(rb["profiles"][host], uuid)
    swarm.wait_for(lambda: f"{P}state.moved-at" in labels(swarm, "rb_a"), 60, "rb_a moved")
    new_host, new_uuid = holder_gpu(swarm, "rb_a")
    assert new_host == other
    assert where(swarm, "rb_a") == {other: new_uuid}
    # the moved task is told its share of the target GPU (swarmgpu.manager.services.sharing)
    mem = next(g.memory_mib for g in GPU_NODES[other].facts().gpus if g.uuid == new_uuid)
    (moved,) = tasks_running(swarm, "rb_a")
    assert container_env(swarm, moved)["CUDA_DEVICE_MEMORY_LIMIT"] == f"{mem // 2}m"
    assert where(swarm, "rb_b") == {host: uuid}
    time.sleep(5)  # still hot, but b holds the GPU alone now and a is cooling down
    assert f"{P}state.moved-at" not in labels(swarm, "rb_b")
    assert len(tasks_running(swarm, "rb_a")) == 1
    # the move's `done` line follows the label the test waited for: waited for too
    def logged() -> None:
        log = (LOGS / "rebalance-daemon.log").read_text()
        assert log.count("service=rb_a move") >= 2  # started + done, with the reason
        assert "above 85% util" in log

    eventually(logged, 30, "the move's started and done lines")


def test_killed_mid_move_finishes_or_rolls_back(swarm: SwarmCluster, rb: dict[str, Any]) -> None:
    _host, _uuid = holder_gpu(swarm, "rb_b")
    frac = {"labels": {"swarmgpu.gpu-fraction": "0.5"}}
    stop(rb["proc"])  # the next daemon places c on b's hot GPU, then dies mid-move
    proc = rb["start"](SWARMGPU_TEST_CRASH_AFTER="move-step-1")
    deploy(swarm, rb["tmp"], "rc", {"c": frac})
    assert proc.wait(60) == 137
    moving = [s for s in ("rb_b", "rc_c") if f"{P}state.move" in labels(swarm, s)]
    assert len(moving) == 1
    rb["start"]()
    (svc,) = moving
    swarm.wait_for(lambda: f"{P}state.move" not in labels(swarm, svc), 60, "move ended")
    for s in ("rb_b", "rc_c"):
        (_t,) = wait_running(swarm, s, 1)
        h, u = holder_gpu(swarm, s)
        assert where(swarm, s) == {h: u}
    spec = swarm.client(swarm.manager).api.inspect_service(svc)["Spec"]
    assert spec["Mode"]["Replicated"]["Replicas"] == 1


# --- rollback and broken metrics: daemons with their own settings -------------------------

API_PORT = 9402  # the test daemons below serve HTTP on the manager's bridge address


def variant(rb: dict[str, Any], name: str, swarm: SwarmCluster, **rebalance: Any) -> Path:
    """The fixture's daemon config with other rebalance settings, HTTP reachable from here."""
    cfg = json.loads(Path(rb["cfg"]).read_text())
    cfg["rebalance"].update(rebalance)
    cfg["http"]["listen"] = f"{swarm.manager.addr}:{API_PORT}"  # its token kept
    path = Path(rb["tmp"]) / f"{name}.yml"
    path.write_text(json.dumps(cfg))
    return path


def api(swarm: SwarmCluster, route: str) -> str:
    req = urllib.request.Request(f"http://{swarm.manager.addr}:{API_PORT}{route}",
                                 headers=HTTP_AUTH)
    with urllib.request.urlopen(req, timeout=3) as resp:
        return str(resp.read().decode())


def log_size() -> int:
    return (LOGS / "rebalance-daemon.log").stat().st_size


def log_since(offset: int) -> str:
    """The daemons' log from ``offset`` on (this test's part of the shared file)."""
    with open(LOGS / "rebalance-daemon.log", "rb") as fh:
        fh.seek(offset)
        return fh.read().decode("utf-8", "replace")


def fresh_pair(swarm: SwarmCluster, rb: dict[str, Any], stack: str) -> tuple[str, str]:
    """Earlier stacks removed, all GPUs idle; two half-GPU services packed on one GPU
    (placed by the fixture's daemon). Returns that GPU's (hostname, UUID)."""
    for p in rb["profiles"].values():
        p.write_text(json.dumps(IDLE))
    for old in rb.setdefault("stacks", ["rb", "rc"]):
        # check=False: removing the stack's network can fail while its tasks still stop;
        # the services are gone, which is all that matters here (the wait below).
        swarm.cli(swarm.manager, "stack", "rm", old, check=False)
    rb["stacks"] = [stack]
    swarm.wait_for(lambda: not any(k.startswith(f"{P}assign.")
                                   for h in GPU_NODES for k in node_labels(swarm, h)),
                   60, "the GPUs of earlier stacks released")
    removed_tasks_stopped(swarm)  # their GPUs are held while their tasks stop
    frac = {"labels": {"swarmgpu.gpu-fraction": "0.5"}}
    deploy(swarm, rb["tmp"], stack, {"x": frac, "y": frac})
    for s in ("x", "y"):
        wait_running(swarm, f"{stack}_{s}", 1)
    at = holder_gpu(swarm, f"{stack}_x")
    assert holder_gpu(swarm, f"{stack}_y") == at
    return at


def test_move_whose_target_never_runs_rolls_back(swarm: SwarmCluster, rb: dict[str, Any]) -> None:
    host, uuid = fresh_pair(swarm, rb, "rr")
    mark = log_size()
    other = next(h for h in GPU_NODES if h != host)
    before = {s: tasks_running(swarm, s)[0]["ID"] for s in ("rr_x", "rr_y")}
    # A daemon that dies right after writing the move intent (step 1, target not open).
    stop(rb["proc"])
    proc = rb["start"](SWARMGPU_TEST_CRASH_AFTER="move-step-1")
    hot(rb["profiles"][host], uuid)
    assert proc.wait(60) == 137
    svc = "rr_x"  # equal shares go by name
    st = json.loads(labels(swarm, svc)[f"{P}state.move"])
    assert (st["source_host"], st["target_host"]) == (host, other)
    # The target can no longer start anything: a daemon taking the move up sees it paused
    # before any task runs there and rolls the move back that cycle (as past its
    # timeout, which is short here too, in case the pause is read late).
    swarm.cli(swarm.manager, "node", "update", "--availability", "pause", other)
    try:
        rb["start"](variant(rb, "rollback", swarm, move_timeout_s=10))
        swarm.wait_for(lambda: f"{P}state.move" not in labels(swarm, svc), 30, "rolled back")
        spec = swarm.client(swarm.manager).api.inspect_service(svc)["Spec"]
        assert spec["Mode"]["Replicated"]["Replicas"] == 1
        assert "MaxReplicas" not in spec["TaskTemplate"]["Placement"]
        lab = spec["Labels"]
        src_id, dst_id = swarm.node(host).node_id, swarm.node(other).node_id
        assert lab[f"{P}devices.{src_id}"] == uuid and f"{P}devices.{dst_id}" not in lab
        assert f"{P}state.moved-at" in lab  # the cooldown holds after a rollback too

        # The nodes' labels, the metric, /api/rebalance and the log are written around
        # the move label's removal the test waited for: each waited for, with a deadline.
        def nodes_rolled_back() -> None:
            assert not any(svc in k for k in node_labels(swarm, other))
            src = node_labels(swarm, host)
            assert src[f"{P}assign.{svc}"] == f"{uuid}@500"
            assert src[f"{P}service.{svc}"] == "true"

        eventually(nodes_rolled_back, 30, "the nodes' labels rolled back")
        # No duplicate: the surge task that never ran is gone, and the original task on
        # the source kept running throughout (same task, same devices).
        swarm.wait_for(lambda: len(swarm.client(swarm.manager).api.tasks(
            filters={"service": svc, "desired-state": "running"})) == 1, 30, "surge task gone")
        assert [t["ID"] for t in tasks_running(swarm, svc)] == [before[svc]]
        assert where(swarm, svc) == {host: uuid}
        assert [t["ID"] for t in tasks_running(swarm, "rr_y")] == [before["rr_y"]]

        def reported() -> None:
            assert 'swarmgpu_moves_total{outcome="rolled-back"} 1.0' in api(swarm, "/metrics")
            recent = json.loads(api(swarm, "/api/rebalance"))["recent"]
            assert [(r["service"], r["from"], r["to"], r["outcome"]) for r in recent] == \
                [(svc, host, other, "rolled-back")]
            log = log_since(mark)
            assert f"service={svc} move {host} -> {other} rolled-back: {host} GPU" in log
            assert f"({other} is ready/pause)" in log  # the pause, not the timeout

        eventually(reported, 30, "the rollback in /metrics, /api/rebalance and the log")
    finally:
        swarm.cli(swarm.manager, "node", "update", "--availability", "active", other)
        for p in rb["profiles"].values():
            p.write_text(json.dumps(IDLE))
        stop(rb["proc"])
        rb["start"]()


class _Pages(BaseHTTPRequestHandler):
    """/<hostname>/metrics: garbage for the hosts in ``bad``, else the node's agent page."""

    bad: set[str] = set()
    addrs: dict[str, str] = {}
    tls: ssl.SSLContext | None = None  # the manager's, as the agents ask (swarm-pki)

    def do_GET(self) -> None:
        host = self.path.strip("/").split("/")[0]
        if host in self.bad:
            body, code = b"<html><body><h1>502 Bad Gateway</h1></body></html>\n", 200
        else:
            try:
                with urllib.request.urlopen(f"https://{self.addrs[host]}:9401/metrics",
                                            timeout=2, context=self.tls) as resp:
                    body, code = resp.read(), 200
            except (OSError, KeyError):
                body, code = b"no agent\n", 502
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_garbage_metrics_make_a_node_unknown_no_move_one_warning(
        swarm: SwarmCluster, rb: dict[str, Any]) -> None:
    host, uuid = fresh_pair(swarm, rb, "rg")
    mark = log_size()
    other = next(h for h in GPU_NODES if h != host)
    assert swarm.subnet is not None
    gateway = str(next(swarm.subnet.hosts()))  # the host's address on the swarm bridge
    _Pages.addrs = {n.hostname: n.addr for n in swarm.nodes}
    _Pages.bad = {other}
    mgr = SwarmClient(swarm.manager.docker_host)
    crt, key, _ = default_cert_paths(str(swarm.manager.data_root))
    _Pages.tls = client_context(mgr.trust_root(), str(mgr.info()["Swarm"]["Cluster"]["ID"]),
                                crt, key)
    server = ThreadingHTTPServer((gateway, 0), _Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://{gateway}:{server.server_port}/{{hostname}}/metrics"
    stop(rb["proc"])
    try:
        # Pages served over plain HTTP here: trusted explicitly, as a config must say to
        # let unauthenticated metrics move anything (docs/security.md).
        rb["start"](variant(rb, "garbage", swarm, metrics_url_template=url,
                            trust_unauthenticated_metrics=True))
        hot(rb["profiles"][host], uuid)

        def stuck() -> dict[str, Any] | None:
            doc: dict[str, Any] = json.loads(api(swarm, "/api/rebalance"))
            return doc if any("no verified-free target" in n for n in doc["notes"]) else None

        # The hot spot is seen (its window held), but its only possible target is UNKNOWN.
        doc = swarm.wait_for(stuck, 40, "the hot spot seen, with no target")
        assert doc["proposed"] == [] and doc["recent"] == []
        assert "unusable" in doc["unknown_nodes"][other]
        assert host not in doc["unknown_nodes"]
        time.sleep(3)  # a few more cycles: still nothing
        for s in ("rg_x", "rg_y"):
            lab = labels(swarm, s)
            assert f"{P}state.move" not in lab and f"{P}state.moved-at" not in lab
        assert where(swarm, "rg_x") == {host: uuid}
        bad_url = url.replace("{hostname}", other)
        warned = [ln for ln in log_since(mark).splitlines()
                  if f"rebalance: {other}: metrics at {bad_url} unusable" in ln]
        assert len(warned) == 1, warned  # said once, not every cycle
        assert "WARNING" in warned[0] and "node is UNKNOWN, no move from or to it" in warned[0]
        # Good pages again: once its window is covered the node is a target, and the move
        # the garbage held back is made.
        _Pages.bad = set()
        swarm.wait_for(lambda: f"{P}state.moved-at" in labels(swarm, "rg_x"), 60, "rg_x moved")
        assert holder_gpu(swarm, "rg_x")[0] == other
    finally:
        server.shutdown()
        for p in rb["profiles"].values():
            p.write_text(json.dumps(IDLE))
        stop(rb["proc"])
        rb["start"]()
