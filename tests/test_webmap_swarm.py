"""The GPU map as a person sees it: the real daemon (`swarmgpu run`) on the real test
swarm, agents serving the real captures, a stack with placed and pending requests, and
Debian's headless Chromium reading the page the daemon serves.
"""

from __future__ import annotations

import functools
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.browser import dump_dom, screenshot, text_of
from support.gpu_nodes import LOGS, cfg_file, stop, swarmgpu_env
from support.swarm_harness import SwarmCluster
from support.swarm_services import deploy, wait_running

pytestmark = pytest.mark.swarm


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http_said(log: Path, proc: subprocess.Popen[bytes]) -> str | None:
    text = log.read_text(errors="replace")
    if "serving /metrics, /healthz and the GPU map on" in text:
        return "up"
    return "not" if "cannot serve HTTP on" in text or proc.poll() is not None else None


def _start(swarm: SwarmCluster, tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    """The daemon on the host, like an operator's manager: its HTTP on this machine's
    loopback, at a port free when picked. Another process on the host may bind that
    port before the daemon does (the daemon then serves no HTTP): again on another."""
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / "webmap-daemon.log"
    for _ in range(5):
        port = free_port()
        cfg = cfg_file(tmp, swarm, sync={"interval_s": 2},
                       http={"listen": f"127.0.0.1:{port}"})
        proc = subprocess.Popen(
            [sys.executable, "-m", "swarmgpu.cli", "run", "--config", str(cfg)],
            env=swarmgpu_env(), stdout=open(log, "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT)
        if swarm.wait_for(functools.partial(_http_said, log, proc), 60,
                          "the daemon's HTTP") == "up":
            return proc, port
        stop(proc)
    raise AssertionError(f"the daemon served no HTTP on 5 free ports; see {log}")


@pytest.fixture(scope="module")
def daemon_url(swarm: SwarmCluster, agents: dict[str, Any],
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("webmap")
    proc, port = _start(swarm, tmp)
    deploy(swarm, tmp, "map", {
        "llm": {"labels": {"swarmgpu.gpus": "2", "swarmgpu.topology": "nvlink"}},
        "small": {"labels": {"swarmgpu.gpu-fraction": "0.5"}},
        "slice": {"labels": {"swarmgpu.mig": "2g.10gb"}},
        "huge": {"labels": {"swarmgpu.gpus": "1", "swarmgpu.gpu-memory": "80GiB"}},
    })
    try:
        for svc in ("map_llm", "map_small", "map_slice"):
            wait_running(swarm, svc, 1)
        url = f"http://127.0.0.1:{port}"

        def doc() -> dict[str, Any]:
            with urllib.request.urlopen(url + "/api/v1/cluster", timeout=5) as r:
                return dict(json.load(r))

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the daemon's next cycle sees them running
            d = doc()
            held = {h["service"] for n in d["nodes"] for g in n["gpus"] for h in g["holders"]}
            if {"map_llm", "map_small", "map_slice"} <= held and d["pending"]:
                break
            time.sleep(1)
        yield url
    finally:
        swarm.cli(swarm.manager, "stack", "rm", "map", check=False)
        stop(proc)


def test_api_is_the_status_document(daemon_url: str) -> None:
    with urllib.request.urlopen(daemon_url + "/api/v1/cluster", timeout=5) as r:
        doc = json.load(r)
    assert doc["schema"] == "swarmgpu.cluster/v1" and doc["leader"] is True
    hosts = {n["hostname"]: n for n in doc["nodes"]}
    assert set(hosts) == {"mgr-1", "gpu-node-1", "gpu-node-2"}
    assert hosts["gpu-node-1"]["labels_state"] == "in-sync"
    assert [p["service"] for p in doc["pending"]] == ["map_huge"]


def test_page_shows_nodes_gpus_holders_and_pending(chromium: str, daemon_url: str) -> None:
    dom = dump_dom(chromium, daemon_url + "/", budget_ms=6000)
    text = text_of(dom)
    for host in ("mgr-1", "gpu-node-1", "gpu-node-2"):
        assert host in text
    assert "NVIDIA A100-SXM4-40GB" in text and "NVIDIA GeForce RTX 4090" in text
    for svc in ("map_llm", "map_small", "map_slice"):
        assert svc in text, f"{svc} not shown as a GPU holder"
    assert "map_huge" in text and "best node" in text  # the pending request and its why
    assert "2g.10gb" in text  # the MIG slice drawn on GPU 0
    assert dom.count('class="gpu') >= 16 or dom.count("GPU ") >= 16
    for size, name in (("1366,768", "swarm-map-1366x768.png"),
                       ("1920,1080", "swarm-map-1920x1080.png")):
        shot = screenshot(chromium, daemon_url + "/", name, size)
        assert isinstance(shot, Path) and shot.exists()


def test_history_filter_and_service_view_on_the_real_daemon(chromium: str,
                                                            daemon_url: str) -> None:
    def get(path: str) -> dict[str, Any]:
        with urllib.request.urlopen(daemon_url + path, timeout=5) as r:
            return dict(json.load(r))

    deadline = time.monotonic() + 30
    while True:  # one sample per cycle (sync.interval_s 2): wait for a line's worth
        hist = get("/api/v1/history?node=gpu-node-1&window=10m&points=30")
        if hist["gpus"] and min(len(g["t"]) for g in hist["gpus"]) >= 2:
            break
        assert time.monotonic() < deadline, f"no history after 30 s: {hist}"
        time.sleep(1)
    assert hist["schema"] == "swarmgpu.history/v1"
    assert sorted(g["index"] for g in hist["gpus"]) == list(range(8))
    assert all(g["node"] == "gpu-node-1" for g in hist["gpus"])
    llm = get("/api/v1/history?service=map_llm")["gpus"]
    assert len(llm) == 2 and all("map_llm" in g["services"] for g in llm)
    bad = get("/api/v1/history?window=forever")
    assert "window 'forever' is not a duration" in bad["error"]

    dom = dump_dom(chromium, daemon_url + "/?service=map_llm", budget_ms=6000)
    focus = text_of(dom[dom.index('id="focus"'):dom.index('id="nodes"')])
    assert "Where it runs" in focus and "2 NVLink GPUs" in focus
    assert "gpu-node-1 GPU" in focus or "gpu-node-2 GPU" in focus
    dom = dump_dom(chromium, daemon_url + "/?q=service:map_small", budget_ms=6000)
    assert "1 of 3 nodes, 1 of " in text_of(dom)
    shot = screenshot(chromium, daemon_url + "/?service=map_llm", "swarm-map-service.png",
                      "1366,768")
    assert shot.exists()
