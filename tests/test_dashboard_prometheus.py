"""The Grafana dashboard's queries and docs/deploy.md's scrape configuration, in a real
Prometheus (Debian's `prometheus`) scraping real agents and a real daemon on the test
swarm.

Prometheus discovers the nodes through `dockerswarm_sd_configs` with the manager's
engine socket, using the configuration printed in docs/deploy.md (only the socket path
and the intervals changed). gpu-node-1 carries the operator's `gpu=true` node label,
gpu-node-2 only the `swarmgpu.gpu.present` label the daemon writes (how a node marked
by an engine label is found: Prometheus sees no engine labels). A one-GPU service is
placed, so the per-service panels have rows. Then every panel's expression is
evaluated through the HTTP API: no error anywhere, and a result wherever the agents or
the daemon serve the series.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from support.dashboard import DCGM_REST, serve_page
from support.deploy_docs import scrape_config
from support.gpu_nodes import (
    GPU_NODES,
    LOGS,
    kwargs_for_logs,
    labels_of,
    start_agent,
    stop,
    swarmgpu_env,
)
from support.gpu_nodes import cfg_file as _cfg_file
from support.paths import FIXTURES, REPO
from support.prometheus import wait_prometheus
from support.swarm_harness import SwarmCluster

pytestmark = pytest.mark.swarm
DASHBOARD = json.loads((REPO / "stacks" / "grafana-dashboard.json").read_text())
SERVICE = "promdash"
OLD_EXPORTER_PAGE = (FIXTURES / "captures"
                     / "dcgm_tesla-t4_x1_drv460_Hostname_datadog-fixture-excerpt.txt")
OLD_HOST = "424773df46e0"  # its Hostname label
PROFILE = {"default": {"util_pct": 40, "fb_used_mib": 1000, "mem_copy_util_pct": 10,
                       "temp_c": 50, "power_w": 200, **DCGM_REST}}
# Panels whose series exist only once something happens that this test does not cause.
MAY_BE_EMPTY = {
    "swarmgpu_errors_total": "no daemon error happens here",
    "swarmgpu_moves_total": "no rebalancing move happens here",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(base: str, path: str, **params: str) -> Any:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else base + path
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    doc = _get(base, "/api/v1/query", query=expr)
    assert doc["status"] == "success", (expr, doc)
    result = doc["data"]["result"]
    assert isinstance(result, list), (expr, doc)
    return result


def _prometheus_config(swarm: SwarmCluster, old_exporter: str, tmp: Any) -> dict[str, Any]:
    cfg = scrape_config()
    cfg["global"] = {"scrape_interval": "1s", "scrape_timeout": "1s",
                     "evaluation_interval": "1s"}
    for job in cfg["scrape_configs"]:  # type: ignore[attr-defined]
        if "tls_config" in job:  # the agents: the swarm root CA and their token, as documented
            job["tls_config"]["ca_file"] = str(tmp / "swarm-root-ca.crt")
            job["authorization"]["credentials_file"] = str(tmp / "agent-token")
        elif job["job_name"] == "swarmgpu-daemon":  # the daemon's token (cfg_file's)
            job["authorization"]["credentials_file"] = str(tmp / "http-token")
        for sd in job["dockerswarm_sd_configs"]:
            sd["host"] = swarm.manager.docker_host
            sd["refresh_interval"] = "2s"
    # An older dcgm-exporter beside the agents: its host label is `Hostname`.
    cfg["scrape_configs"].append(  # type: ignore[attr-defined]
        {"job_name": "dcgm-exporter-old", "static_configs": [{"targets": [old_exporter]}]})
    return cfg


@contextlib.contextmanager
def _old_dcgm_exporter() -> Iterator[str]:
    """A real dcgm-exporter page (the T4 capture, `Hostname=...`) served on loopback."""
    srv, t = serve_page(OLD_EXPORTER_PAGE.read_bytes())
    try:
        yield f"127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        t.join(5)


@pytest.fixture(scope="module")
def stack(swarm: SwarmCluster, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Any]]:
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus missing: apt-get install prometheus (scripts/setup.sh does)"
    tmp = tmp_path_factory.mktemp("promdash")
    mgr = swarm.manager
    procs: list[Any] = []
    node1 = swarm.node("gpu-node-1")
    stack_ctx = contextlib.ExitStack()
    try:
        profile = tmp / "profile.yml"
        profile.write_text(json.dumps(PROFILE))
        # The agents as shipped (HTTPS, their Swarm certificates) with a token for Prometheus.
        (tmp / "agent-token").write_text("prometheus-token-0123456789\n")
        (tmp / "swarm-root-ca.crt").write_text(swarm.cli(mgr, "swarm", "ca").stdout)
        procs += [start_agent(swarm, h, "--metrics-profile", str(profile), "--token-file",
                              str(tmp / "agent-token")) for h in GPU_NODES]
        swarm.cli(mgr, "node", "update", "--label-add", "gpu=true", node1.node_id)
        cfg = _cfg_file(tmp, swarm, http={"listen": f"{mgr.addr}:9402"})
        procs.append(swarm.exec_in_netns(
            mgr, [sys.executable, "-m", "swarmgpu.cli", "run", "--config", str(cfg)],
            env=swarmgpu_env(), **kwargs_for_logs(LOGS / "promdash-daemon.log")))
        swarm.cli(mgr, "service", "create", "--detach", "--no-resolve-image", "--name",
                  SERVICE, "--label", "swarmgpu.gpus=1", "--stop-grace-period", "1s",
                  "local/busybox:latest", "sleep", "3600")
        port = _free_port()
        old_exporter = stack_ctx.enter_context(_old_dcgm_exporter())
        prom_cfg = tmp / "prometheus.yml"
        prom_cfg.write_text(yaml.safe_dump(_prometheus_config(swarm, old_exporter, tmp)))
        procs.append(subprocess.Popen(
            [prometheus, f"--config.file={prom_cfg}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            **kwargs_for_logs(LOGS / "promdash-prometheus.log")))
        yield {"base": f"http://127.0.0.1:{port}", "mgr": mgr}
    finally:
        with contextlib.suppress(Exception):  # not created
            swarm.cli(mgr, "service", "rm", SERVICE)
        for p in reversed(procs):
            stop(p)
        stack_ctx.close()
        _strip_test_labels(swarm, node1)


def _strip_test_labels(swarm: SwarmCluster, node1: Any) -> None:
    """Nothing left behind in the shared swarm: the gpu label and this service's ledger."""
    api = swarm.client(swarm.manager).api
    for n in swarm.nodes:
        spec = api.inspect_node(n.node_id)
        labels = dict(spec["Spec"].get("Labels") or {})
        keep = {k: v for k, v in labels.items()
                if SERVICE not in k and not (n is node1 and k == "gpu")}
        if keep != labels:
            api.update_node(n.node_id, spec["Version"]["Index"], {**spec["Spec"], "Labels": keep})


def test_scrape_config_finds_gpu_nodes_both_ways_and_the_daemon(
    swarm: SwarmCluster, stack: dict[str, Any]
) -> None:
    base = stack["base"]
    wait_prometheus("gpu-node-2 labelled by the daemon",
                    lambda: labels_of(swarm, "gpu-node-2").get("swarmgpu.gpu.present") == "true")
    assert "gpu" not in labels_of(swarm, "gpu-node-2")

    def up() -> dict[str, set[str]] | None:
        active = _get(base, "/api/v1/targets")["data"]["activeTargets"]
        got: dict[str, set[str]] = {}
        for t in active:
            if t["health"] == "up":
                got.setdefault(t["labels"]["job"], set()).add(t["labels"]["instance"])
        want_agents = {"gpu-node-1", "gpu-node-2"}
        return got if got.get("swarmgpu-agent") == want_agents and got.get(
            "swarmgpu-daemon") and got.get("dcgm-exporter-old") else None

    got = wait_prometheus("both agents and the daemon scraped", up)
    assert got["swarmgpu-daemon"] == {f"{stack['mgr'].addr}:9402"}
    assert got.get("dcgm-exporter-old")
    dropped = _get(base, "/api/v1/targets")["data"]["droppedTargets"]
    # mgr-1 has neither label: no agent target for it.
    assert any(t["discoveredLabels"].get("job") == "swarmgpu-agent"
               and t["discoveredLabels"].get("__meta_dockerswarm_node_hostname") == "mgr-1"
               for t in dropped), dropped


def test_every_panel_query_evaluates_and_has_data(stack: dict[str, Any]) -> None:
    base = stack["base"]
    # The service placed and its GPU's use exported by the daemon, and enough scrapes
    # for rate() over them.
    wait_prometheus(f"{SERVICE} in swarmgpu_service_gpu_util",
                    lambda: _query(base, f'swarmgpu_service_gpu_util{{service="{SERVICE}"}}'), 120)
    wait_prometheus("rate() over the daemon's counters",
                    lambda: _query(base, "rate(swarmgpu_cycles_total[5m]) > 0"))
    wait_prometheus("rate() over the agents' counters",
                    lambda: _query(base, "rate(swarmgpu_agent_facts_refresh_failures_total[5m])"))
    checked = 0
    for panel in DASHBOARD["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$service", ".*").replace("$node", ".*")
            result = _query(base, expr)
            checked += 1
            if not any(name in expr for name in MAY_BE_EMPTY):
                assert result, f"panel {panel['title']!r}: {expr} returned nothing"
    assert checked >= 20


def test_table_panel_queries_merge_on_service_node_gpu(stack: dict[str, Any]) -> None:
    (panel,) = [p for p in DASHBOARD["panels"] if p["title"] == "Per service, node and GPU"]
    # Grafana names the value columns "Value #A"/"Value #B" only for instant table
    # queries: the renames of the organize transform depend on it.
    assert all(t["format"] == "table" and t["instant"] is True for t in panel["targets"])
    renames = next(t for t in panel["transformations"]
                   if t["id"] == "organize")["options"]["renameByName"]
    assert set(renames) == {f"Value #{t['refId']}" for t in panel["targets"]}
    base = stack["base"]
    rows = []
    for t in panel["targets"]:
        result = _query(base, t["expr"].replace("$service", ".*").replace("$node", ".*"))
        rows.append({(r["metric"]["service"], r["metric"]["node"], r["metric"]["gpu"])
                     for r in result})
    assert rows[0] == rows[1] and any(s == SERVICE for s, _, _ in rows[0]), rows


def _variable_values(base: str, var: dict[str, Any]) -> set[str]:
    """A query variable's values as Grafana computes them: `label_values(M, L)` through
    the label API; `query_result(Q)` as each result's `{labels} value ts` text through
    the variable's regex (its first group)."""
    definition = var["definition"]
    if definition.startswith("label_values("):
        metric, label = definition.removeprefix("label_values(").rstrip(")").split(", ")
        doc = _get(base, f"/api/v1/label/{label}/values", **{"match[]": metric})
        assert doc["status"] == "success", (var["name"], doc)
        return set(doc["data"])
    assert definition.startswith("query_result("), definition
    regex = re.compile(var["regex"].strip("/"))
    out = set()
    for r in _query(base, definition.removeprefix("query_result(")[:-1]):
        text = "{" + ",".join(f'{k}="{v}"' for k, v in r["metric"].items()) + "}"
        m = regex.search(text)
        if m:
            out.add(m.group(1))
    return out


def test_template_variables_have_values(stack: dict[str, Any]) -> None:
    base = stack["base"]
    for var in DASHBOARD["templating"]["list"]:
        if var["type"] == "query":
            assert _variable_values(base, var), var["name"]
    assert DASHBOARD["__inputs"][0]["pluginId"] == "prometheus"
    ds = next(v for v in DASHBOARD["templating"]["list"] if v["type"] == "datasource")
    assert ds["current"]["value"] == "${" + DASHBOARD["__inputs"][0]["name"] + "}"


def test_node_variable_and_gpu_panels_read_both_host_labels(stack: dict[str, Any]) -> None:
    """The agents write `hostname`, an older dcgm-exporter `Hostname`: the node variable
    lists both kinds, and each per-node GPU panel, for either kind of node, has rows that
    carry the node in `hostname` (the legend's label)."""
    base = stack["base"]
    (var,) = [v for v in DASHBOARD["templating"]["list"] if v["name"] == "node"]
    values = wait_prometheus("both kinds of host label in the node variable",
                             lambda: (lambda v: v if {"gpu-node-1", OLD_HOST} <= v else None)(
                                 _variable_values(base, var)))
    assert {"gpu-node-1", "gpu-node-2", OLD_HOST} <= values
    panels = [(p["title"], t["expr"]) for p in DASHBOARD["panels"]
              for t in p.get("targets", []) if "DCGM_FI_DEV_" in t["expr"]]
    assert len(panels) == 10  # 5 targets before, 5 added (SM clock, enc, dec, NVLink, energy)
    for node in ("gpu-node-1", OLD_HOST):
        for title, expr in panels:
            result = _query(base, expr.replace("$node", node))
            assert result, (title, node)
            assert {r["metric"].get("hostname") for r in result} == {node}, (title, result)
