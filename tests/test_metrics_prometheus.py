"""The agent's /metrics with dcgm-exporter's default counters, in a real Prometheus
(Debian's `prometheus`) and `promtool` (issue 33, point 4).

Two real agents on loopback, over the fake pynvml built from real captures: an HGX H100
box (every counter NVML gives, GPM included) and an H100 in MIG mode (four instances).
Prometheus scrapes both; every field of DCGM_FIELDS is stored, no series twice, the MIG
instances apart, and never a per-instance GPU_UTIL. promtool reads the same pages."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.fake_pynvml.builder import build_layout, with_uncaptured_counters
from support.gpu_nodes import LOGS, kwargs_for_logs, stop
from support.prometheus import promtool_check, wait_prometheus

from swarmgpu.agent.facts.nvml import NvmlSource
from swarmgpu.agent.facts.nvml_sampler import MIN_RATE_INTERVAL_S, read_utilisation
from swarmgpu.agent.metrics import DCGM_FIELDS
from swarmgpu.agent.server import build_server

MIG_PER_INSTANCE = {f.name for f in DCGM_FIELDS if f.mig}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _agent(layout: str, tmp: Path) -> Any:
    b = with_uncaptured_counters(build_layout(layout, tmp / layout))
    src = NvmlSource(hostname=layout, nvml_module=b.nvml, sysfs_root=b.sysfs)
    srv = build_server(src, "127.0.0.1:0", refresh_s=60,
                       sampler=lambda: read_utilisation(b.nvml))
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    return srv


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    doc = json.loads(_get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"))
    assert doc["status"] == "success", (expr, doc)
    return list(doc["data"]["result"])


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus missing: apt-get install prometheus (scripts/setup.sh does)"
    tmp = tmp_path_factory.mktemp("prom-counters")
    # Stopped in the finally also when the setup fails after them (Prometheus not
    # starting): else their facts-refresh threads outlive the session.
    agents: dict[str, Any] = {}
    proc: subprocess.Popen[bytes] | None = None
    try:
        agents.update((name, _agent(name, tmp)) for name in ("hgx_h100_nv18", "h100_mig"))
        targets = {name: f"127.0.0.1:{srv.server_address[1]}" for name, srv in agents.items()}
        port = _free_port()
        cfg = tmp / "prometheus.yml"
        cfg.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [{"job_name": "agents",
                                "static_configs": [{"targets": list(targets.values())}]}]}))
        proc = subprocess.Popen(
            [prometheus, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            **kwargs_for_logs(LOGS / "prom-counters.log"))
        yield {"base": f"http://127.0.0.1:{port}", "targets": targets}
    finally:
        if proc is not None:
            stop(proc)
        for srv in agents.values():
            srv.shutdown()


def test_promtool_reads_both_pages(prom: dict[str, Any]) -> None:
    for target in prom["targets"].values():
        _get(f"http://{target}/metrics")  # the rates need a previous scrape,
        time.sleep(MIN_RATE_INTERVAL_S + 0.2)  # at least this long before
        page = _get(f"http://{target}/metrics")
        promtool_check(page)
        assert b"DCGM_FI_PROF_GR_ENGINE_ACTIVE" in page


def test_prometheus_stores_every_field_once(prom: dict[str, Any]) -> None:
    base = prom["base"]
    want = {f.name for f in DCGM_FIELDS}
    mig = prom["targets"]["h100_mig"]

    def per_instance() -> set[str]:
        return {r["metric"]["__name__"] for r in _query(
            base, f'{{__name__=~"DCGM_.*", instance="{mig}", GPU_I_ID!=""}}')}

    # Wait for what is written last: the rates, which need two scrapes of each agent.
    wait_prometheus("every field in Prometheus", lambda: want <= {
        r["metric"]["__name__"] for r in _query(base, '{__name__=~"DCGM_.*"}')}
        and per_instance() == MIG_PER_INSTANCE)
    targets = json.loads(_get(f"{base}/api/v1/targets"))["data"]["activeTargets"]
    assert {t["health"] for t in targets} == {"up"}, targets
    assert all(t["lastError"] == "" for t in targets), targets
    # no series twice: every (name, GPU, instance) once per target
    dupes = _query(base, 'count by (__name__, instance, UUID, GPU_I_ID) '
                         '({__name__=~"DCGM_.*"}) > 1')
    assert dupes == [], dupes
    assert per_instance() == MIG_PER_INSTANCE  # and nothing else per instance
    gr = _query(base, f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{instance="{mig}"}}')
    assert len(gr) == 5 and {r["metric"].get("GPU_I_ID", "") for r in gr} >= {""}
    assert _query(base, f'DCGM_FI_DEV_GPU_UTIL{{instance="{mig}"}}') == []
    hgx = prom["targets"]["hgx_h100_nv18"]
    assert len(_query(base, f'DCGM_FI_DEV_SM_CLOCK{{instance="{hgx}"}}')) == 8
    energy = _query(base, f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{instance="{hgx}"}}')
    assert {r["value"][1] for r in energy} == {"319159391"}
