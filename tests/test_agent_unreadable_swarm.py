"""A newcomer's first cluster on the real test swarm (issue 33, point 3): the agent on
gpu-node-1 finds no node certificate and falls back to plain HTTP (`--identity auto`, as
the unit runs it when the certificate is not where it looks); the daemon runs the
shipped default, agents.identity swarm-pki. The daemon gets a TLS handshake answered by
a plain-HTTP server: `run --once`, `audit` (exit 1) and `status` name the node, the
address, the cause and the fix; nothing says "no findings"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from support.gpu_nodes import LOGS, cfg_file, labels_of, run_cli, start_agent, stop
from support.swarm_harness import SwarmCluster

pytestmark = pytest.mark.swarm
NODE = "gpu-node-1"
CAUSE = "plain HTTP (the agent has no node certificate)"


@pytest.fixture(scope="module")
def first_cluster(swarm: SwarmCluster, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("unreadable")
    node = swarm.node(NODE)
    # A node as a newcomer has it: no swarmgpu label yet (put back afterwards).
    kept = {k: v for k, v in labels_of(swarm, NODE).items() if k.startswith("swarmgpu.")}
    for k in kept:
        swarm.cli(swarm.manager, "node", "update", "--label-rm", k, node.node_id)
    agent = start_agent(swarm, NODE, "--identity", "auto",
                        "--data-root", str(tmp / "no-docker-root"))
    try:
        yield {"cfg": cfg_file(tmp, swarm), "url": f"https://{node.addr}:9401/facts"}
    finally:
        stop(agent)
        for k, v in kept.items():
            swarm.cli(swarm.manager, "node", "update", "--label-add", f"{k}={v}", node.node_id)


def test_the_agent_fell_back_to_plain_http(first_cluster: dict[str, Any]) -> None:
    text = (LOGS / f"agent-{NODE}.log").read_text()
    assert "agent serves plain HTTP (no Swarm node certificate at" in text, text[-2000:]


def test_run_once_names_the_node_cause_and_fix(first_cluster: dict[str, Any]) -> None:
    res = run_cli("run", "--config", str(first_cluster["cfg"]), "--once")
    assert res.returncode == 0, res.stderr
    out = res.stdout + res.stderr
    assert "0 error(s)" not in out, out
    line = next(ln for ln in out.splitlines() if first_cluster["url"] in ln)
    assert "a plain-HTTP server answered it; fix: the agent serves plain HTTP" in line, line


def test_audit_exits_1_naming_node_cause_and_fix(first_cluster: dict[str, Any]) -> None:
    res = run_cli("audit", "--config", str(first_cluster["cfg"]), "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    (f,) = [f for f in doc["findings"] if f["subject"] == NODE]
    assert f["severity"] == "action"
    assert CAUSE in f["message"] and first_cluster["url"] in f["message"]
    assert "fix: the agent serves plain HTTP because it found no Swarm node certificate" \
        in f["message"]
    table = run_cli("audit", "--config", str(first_cluster["cfg"]))
    assert table.returncode == 1
    assert "No findings" not in table.stdout
    row = next(ln for ln in table.stdout.splitlines() if ln.startswith(NODE))
    assert row.split()[2] == "unreadable", row
    print("\n" + table.stdout)


def test_status_shows_the_same(first_cluster: dict[str, Any]) -> None:
    res = run_cli("status", "--config", str(first_cluster["cfg"]))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith(f"{NODE} "))
    assert f"agent unreadable ({CAUSE})" in lines[i], lines[i]
    assert lines[i + 1] == f"  agent at {first_cluster['url']}: {CAUSE}"
    assert lines[i + 2].startswith("  fix: the agent serves plain HTTP")
    doc = json.loads(run_cli("status", "--config", str(first_cluster["cfg"]),
                             "--json").stdout)  # the map's document (/api/v1/cluster)
    (n,) = [n for n in doc["nodes"] if n["hostname"] == NODE]
    assert n["agent"]["status"] == "unreadable" and n["agent"]["cause"] == CAUSE
    assert n["labels_state"] == "agent-unreadable"
    assert "fix: " in n["agent"]["error"]
    print("\n" + "\n".join(lines[i:i + 3]))
