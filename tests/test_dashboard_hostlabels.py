"""The dashboard's node variable and per-node GPU panels in a real Prometheus (Debian's
`prometheus`), over both spellings of the host label, without a swarm.

Prometheus scrapes, on 127.0.0.1, a real agent (`topo:` DGX A100 with GPU 0 cut into 7
MIG slices; lower-case `hostname`, as the agent and current dcgm-exporters write it) and
a real older dcgm-exporter page (the T4 capture; `Hostname`). The node variable must
list both hosts, and every per-node GPU panel, filtered to either host, must have rows
naming it in `hostname` (the legend's label) and no error. The full dashboard on the
test swarm: tests/test_dashboard_prometheus.py.
"""

from __future__ import annotations

import json
import re
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
from support.dashboard import DCGM_REST, serve_page
from support.paths import FIXTURES, REPO

from swarmgpu.agent.facts.profile import ProfileSampler
from swarmgpu.agent.facts.topo import TopoSource
from swarmgpu.agent.server import build_server

DASHBOARD = json.loads((REPO / "stacks" / "grafana-dashboard.json").read_text())
CAPTURES = FIXTURES / "captures"
OLD_PAGE = CAPTURES / "dcgm_tesla-t4_x1_drv460_Hostname_datadog-fixture-excerpt.txt"
OLD_HOST = "424773df46e0"  # the capture's Hostname
NEW_HOST = "dgx-a100"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", (expr, doc)
    return list(doc["data"]["result"])


def node_values(base: str) -> set[str]:
    """The node variable as Grafana computes a `query_result` variable: each result as
    `{labels} value ts` text, through the variable's regex (first group)."""
    (var,) = [v for v in DASHBOARD["templating"]["list"] if v["name"] == "node"]
    definition = var["definition"]
    assert definition.startswith("query_result(") and definition.endswith(")")
    regex = re.compile(var["regex"].strip("/"))
    out = set()
    for r in _query(base, definition.removeprefix("query_result(")[:-1]):
        m = regex.search("{" + ",".join(f'{k}="{v}"' for k, v in r["metric"].items()) + "}")
        if m:
            out.add(m.group(1))
    return out


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus missing: apt-get install prometheus (scripts/setup.sh does)"
    tmp = tmp_path_factory.mktemp("hostlabels")
    source = TopoSource(CAPTURES / "nvsmi_topo_a100-8x_nv12_stas00-mlengineering.txt",
                        hostname=NEW_HOST, product="NVIDIA A100-SXM4-80GB",
                        memory_mib=81920, mig_layout="0:1g.10gb*7")
    profile = tmp / "profile.yml"  # the agent's scripted values (`--metrics-profile`)
    profile.write_text(json.dumps({"default": {
        "util_pct": 40, "fb_used_mib": 1000, "mem_copy_util_pct": 10, "temp_c": 50,
        "power_w": 200, **DCGM_REST}}))
    agent = build_server(source, "127.0.0.1:0", refresh_s=60,
                         sampler=ProfileSampler(profile, source.read()).sample)
    agent_thread = threading.Thread(target=agent.serve_forever,
                                    kwargs={"poll_interval": 0.05}, daemon=True)
    agent_thread.start()
    old, old_thread = serve_page(OLD_PAGE.read_bytes())
    port = _free_port()
    cfg = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                      "evaluation_interval": "1s"},
           "scrape_configs": [
               {"job_name": "swarmgpu-agent",
                "static_configs": [{"targets": [f"127.0.0.1:{agent.server_address[1]}"]}]},
               {"job_name": "dcgm-exporter-old",
                "static_configs": [{"targets": [f"127.0.0.1:{old.server_address[1]}"]}]}]}
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    log = (tmp / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'db'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if {NEW_HOST, OLD_HOST} <= node_values(base):
                    break
            except OSError:
                pass
            assert proc.poll() is None, Path(log.name).read_text()
            assert time.monotonic() < deadline, "both exporters never scraped"
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
        agent.shutdown()
        old.shutdown()
        agent_thread.join(5)
        old_thread.join(5)


def _gpu_panels() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in DASHBOARD["panels"]
            for t in p.get("targets", []) if "DCGM_FI_DEV_" in t["expr"]]


def test_node_variable_lists_both_host_labels(prometheus: str) -> None:
    assert node_values(prometheus) == {NEW_HOST, OLD_HOST}


@pytest.mark.parametrize("node", [NEW_HOST, OLD_HOST])
def test_every_gpu_panel_has_rows_for_either_host_label(prometheus: str, node: str) -> None:
    panels = _gpu_panels()
    assert len(panels) == 10
    for title, expr in panels:
        result = _query(prometheus, expr.replace("$node", node))
        assert result, (title, node)
        assert {r["metric"].get("hostname") for r in result} == {node}, (title, result)


def test_memory_panel_keeps_every_mig_slice_apart(prometheus: str) -> None:
    (expr,) = [e for t, e in _gpu_panels() if t == "GPU memory used"]
    rows = _query(prometheus, expr.replace("$node", NEW_HOST))
    gpu0 = [r["metric"] for r in rows if r["metric"]["gpu"] == "0"]
    assert len(gpu0) == 7 and len({m["GPU_I_ID"] for m in gpu0}) == 7
    assert len(rows) == 7 + 7  # GPUs 1-7 whole


def test_all_nodes_is_the_union(prometheus: str) -> None:
    for title, expr in _gpu_panels():
        hosts = {r["metric"].get("hostname")
                 for r in _query(prometheus, expr.replace("$node", ".*"))}
        assert OLD_HOST in hosts, title
