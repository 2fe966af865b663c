"""Agent identity from Swarm's own PKI, on the real test swarm (issues 13 and 25).

The harness's dockerds hold real swarm certificates under their data roots
(``swarm/certificates/swarm-node.{crt,key}``: CN = node ID, O = cluster ID, OU = role,
signed by the swarm root CA). With the shipped default config (systemd/config.yml, only
the addresses changed) and agents run as the shipped units run them: an agent serving
node A's certificate at node B's address is refused and B's labels stay as they were;
B's own agent is accepted; a client without a manager certificate cannot read /facts.
"""

from __future__ import annotations

import json
import shutil
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.gpu_nodes import (
    GPU_NODES,
    LOGS,
    cfg_file,
    kwargs_for_logs,
    labels_of,
    run_cli,
    start_agent,
    stop,
    swarmgpu_env,
    wait_port,
)
from support.paths import REPO
from support.swarm_harness import NodeHandle, SwarmCluster

from swarmgpu.core.config import AgentsConfig
from swarmgpu.manager.nodes import boundedhttp
from swarmgpu.manager.nodes.agent_client import fetch_facts
from swarmgpu.manager.rebalance.scrape import scrape_node
from swarmgpu.swarm.client import SwarmClient, SwarmNode
from swarmgpu.swarm.identity import (
    SwarmTLS,
    cert_file_name,
    client_context,
    default_cert_paths,
    load_server_context,
    read_token,
)

PORT = 9411  # beside the plain agents of other tests on 9401


def _agent(swarm: SwarmCluster, at: NodeHandle, serves: str, *extra: str) -> Any:
    """An agent listening on ``at``'s address, serving ``serves``'s capture."""
    LOGS.mkdir(parents=True, exist_ok=True)
    proc = swarm.exec_in_netns(at, GPU_NODES[serves].agent_argv(at.addr, PORT, *extra),
                               env=swarmgpu_env(),
                               **kwargs_for_logs(LOGS / f"agent-tls-{at.name}.log"))
    wait_port(at.addr, PORT)
    time.sleep(0.3)
    assert proc.poll() is None, f"agent on {at.name} exited; see {LOGS}"
    return proc


def _cert_args(node: NodeHandle) -> list[str]:
    crt, key, _ = default_cert_paths(str(node.data_root))
    assert crt.exists() and key.exists(), f"no swarm certificate under {node.data_root}"
    return ["--tls-cert", str(crt), "--tls-key", str(key)]


def _swarm_nodes(swarm: SwarmCluster) -> dict[str, SwarmNode]:
    return {n.hostname: n for n in SwarmClient(swarm.manager.docker_host).nodes()}


def _cluster(swarm: SwarmCluster) -> str:
    info = SwarmClient(swarm.manager.docker_host).info()
    return str(info["Swarm"]["Cluster"]["ID"])


def _ctx(swarm: SwarmCluster, as_node: NodeHandle | None = None) -> SwarmTLS:
    """What the daemon uses: the swarm root CA, this cluster's ID, and a node
    certificate to present (``as_node``'s, the manager's by default)."""
    who = as_node or swarm.manager
    crt, key, _ = default_cert_paths(str(who.data_root))
    return client_context(SwarmClient(swarm.manager.docker_host).trust_root(),
                          _cluster(swarm), crt, key)


def _bare_ctx(swarm: SwarmCluster) -> SwarmTLS:
    """A client that checks the agent but presents no certificate (Prometheus, curl)."""
    return client_context(SwarmClient(swarm.manager.docker_host).trust_root(),
                          _cluster(swarm))


def test_agent_with_another_nodes_certificate_is_refused_and_reported(
        swarm: SwarmCluster, tmp_path: Path) -> None:
    n1, n2 = swarm.node("gpu-node-1"), swarm.node("gpu-node-2")
    ctx = _ctx(swarm)
    cfg = AgentsConfig(port=PORT, url_template="https://{addr}:{port}", identity="swarm-pki",
                       timeout_s=5)
    nodes = _swarm_nodes(swarm)
    honest = _agent(swarm, n1, "gpu-node-1", *_cert_args(n1))
    # The impostor on gpu-node-2's address claims gpu-node-2's host name and serves
    # plausible facts, but can only present a certificate it got hold of: node 1's.
    impostor = _agent(swarm, n2, "gpu-node-2", *_cert_args(n1))
    try:
        ok = fetch_facts(nodes["gpu-node-1"], cfg, ctx)
        assert ok.facts is not None and ok.error is None, ok.error
        bad = fetch_facts(nodes["gpu-node-2"], cfg, ctx)
        assert bad.facts is None and bad.error
        assert "certificate of node" in bad.error and n1.node_id[:12] in bad.error, bad.error
        # The daemon, one cycle: node 1 synced, node 2 refused and reported (it carries
        # a swarmgpu label, so an agent is expected there).
        mgr_cli = swarm.client(swarm.manager).api
        spec = mgr_cli.inspect_node(n2.node_id)
        labels = {**(spec["Spec"].get("Labels") or {}), "swarmgpu.gpu.count": "8"}
        mgr_cli.update_node(n2.node_id, spec["Version"]["Index"],
                            {**spec["Spec"], "Labels": labels})
        before2 = labels_of(swarm, "gpu-node-2")
        path = cfg_file(tmp_path, swarm, agents={"port": PORT, "identity": "swarm-pki",
                                                 "url_template": "https://{addr}:{port}",
                                                 "timeout_s": 5},
                        placement={"enabled": False}, rebalance={"enabled": False})
        res = run_cli("run", "--config", str(path), "--once")
        assert res.returncode == 0, res.stderr
        assert "gpu-node-2" in res.stderr and "certificate of node" in res.stderr, res.stderr
        assert labels_of(swarm, "gpu-node-1").get("swarmgpu.gpu.count") == "8"
        assert labels_of(swarm, "gpu-node-2") == before2, "the impostor steered labels"
    finally:
        stop(honest)
        stop(impostor)


def test_plain_agent_behind_an_https_template_is_refused(swarm: SwarmCluster) -> None:
    n1 = swarm.node("gpu-node-1")
    ctx = _ctx(swarm)
    cfg = AgentsConfig(port=PORT, url_template="https://{addr}:{port}", identity="swarm-pki",
                       timeout_s=3)
    plain = _agent(swarm, n1, "gpu-node-1")
    try:
        res = fetch_facts(_swarm_nodes(swarm)["gpu-node-1"], cfg, ctx)
        # The plain agent reads the ClientHello as a (never-ending) request head: the
        # handshake fails or runs into the deadline; either way nothing is trusted.
        assert res.facts is None and res.error, res.error
        assert "TLS" in res.error or "timed out" in res.error, res.error
    finally:
        stop(plain)


def test_certificate_rotation_is_picked_up(swarm: SwarmCluster, tmp_path: Path) -> None:
    """The agent re-reads its files: swapping in a new pair (here node 2's, as a
    rotation would swap in a new one) changes what it presents, without a restart."""
    n1, n2 = swarm.node("gpu-node-1"), swarm.node("gpu-node-2")
    crt, key = tmp_path / "node.crt", tmp_path / "node.key"
    c1, k1, _ = default_cert_paths(str(n1.data_root))
    c2, k2, _ = default_cert_paths(str(n2.data_root))
    shutil.copy(c1, crt)
    shutil.copy(k1, key)
    ca = default_cert_paths(str(n1.data_root))[2]
    ctx = _ctx(swarm)
    cfg = AgentsConfig(port=PORT, url_template="https://{addr}:{port}", identity="swarm-pki",
                       timeout_s=5)
    node1 = _swarm_nodes(swarm)["gpu-node-1"]
    proc = _agent(swarm, n1, "gpu-node-1", "--tls-cert", str(crt), "--tls-key", str(key),
                  "--tls-ca", str(ca))
    try:
        assert fetch_facts(node1, cfg, ctx).facts is not None
        shutil.copy(c2, crt)
        shutil.copy(k2, key)
        deadline = time.monotonic() + 10
        while True:
            res = fetch_facts(node1, cfg, ctx)
            if res.error and "certificate of node" in res.error:
                break  # it now presents node 2's certificate: the files were re-read
            assert time.monotonic() < deadline, "the rotated certificate was never used"
            time.sleep(0.5)
    finally:
        stop(proc)


def test_token_mode(swarm: SwarmCluster, tmp_path: Path) -> None:
    n1 = swarm.node("gpu-node-1")
    tok = tmp_path / "token"
    tok.write_text("s3cret-token-0123456789\n")
    node1 = _swarm_nodes(swarm)["gpu-node-1"]
    cfg = AgentsConfig(port=PORT, timeout_s=3, identity="none")
    proc = _agent(swarm, n1, "gpu-node-1", "--token-file", str(tok))
    try:
        assert fetch_facts(node1, cfg, None, read_token(tok)).facts is not None
        for wrong in (None, "wrong"):
            res = fetch_facts(node1, cfg, None, wrong)
            assert res.facts is None and res.error and "HTTP 401" in res.error, res.error
            assert "s3cret" not in res.error
    finally:
        stop(proc)


def test_swarm_root_ca_file_matches_the_api(swarm: SwarmCluster) -> None:
    _, _, ca = default_cert_paths(str(swarm.manager.data_root))
    api = SwarmClient(swarm.manager.docker_host).trust_root()
    if not ca.exists():
        pytest.fail(f"no swarm-root-ca.crt under {swarm.manager.data_root}")
    assert ca.read_text().strip() == api.strip()


def test_manager_key_with_raft_headers_loads(swarm: SwarmCluster) -> None:
    """A manager's swarm-node.key carries raft-dek PEM headers OpenSSL refuses as is."""
    crt, key, _ = default_cert_paths(str(swarm.manager.data_root))
    text = key.read_text()
    ctx = load_server_context(crt, key)
    assert ctx is not None
    print(f"\nmanager key has PEM headers: {'raft-dek' in text}")


def test_metrics_scrape_checks_the_same_identity(swarm: SwarmCluster) -> None:
    """Fake metrics cannot steer the rebalancer: scrapes verify the node, as fetches do."""
    n1, n2 = swarm.node("gpu-node-1"), swarm.node("gpu-node-2")
    ctx = _ctx(swarm)
    nodes = _swarm_nodes(swarm)
    honest = _agent(swarm, n1, "gpu-node-1", *_cert_args(n1))
    impostor = _agent(swarm, n2, "gpu-node-2", *_cert_args(n1))
    tmpl = f"https://{{addr}}:{PORT}/metrics"
    try:
        ok = scrape_node(nodes["gpu-node-1"], tmpl, 5, ctx)
        assert ok.result is not None and ok.result.samples_by_uuid, ok.error
        bad = scrape_node(nodes["gpu-node-2"], tmpl, 5, ctx)
        assert bad.result is None and bad.error and "certificate of node" in bad.error
    finally:
        stop(honest)
        stop(impostor)


# --- issue 25: the shipped defaults, end to end ------------------------------------------


def _shipped_config(tmp: Path, swarm: SwarmCluster) -> Path:
    """systemd/config.yml as shipped, but for what differs on the test swarm: the engine
    socket, the state directory, the map's port and a fast cycle."""
    cfg = yaml.safe_load((REPO / "systemd" / "config.yml").read_text())
    assert cfg["agents"]["identity"] == "swarm-pki" and not cfg["agents"]["url_template"]
    cfg["docker_host"] = swarm.manager.docker_host
    cfg["state_dir"] = str(tmp / "state")
    cfg["http"]["listen"] = "127.0.0.1:0"
    cfg["sync"]["interval_s"] = 1
    path = tmp / "config.yml"
    path.write_text(json.dumps(cfg))
    return path


def _gpu_count_label(swarm: SwarmCluster, node: NodeHandle, value: str | None) -> None:
    api = swarm.client(swarm.manager).api
    spec = api.inspect_node(node.node_id)
    labels = dict(spec["Spec"].get("Labels") or {})
    if value is None:
        labels.pop("swarmgpu.gpu.count", None)
    else:
        labels["swarmgpu.gpu.count"] = value
    api.update_node(node.node_id, spec["Version"]["Index"], {**spec["Spec"], "Labels": labels})


def test_shipped_defaults_refuse_a_borrowed_certificate_and_accept_the_node_itself(
        swarm: SwarmCluster, tmp_path: Path) -> None:
    n1, n2 = swarm.node("gpu-node-1"), swarm.node("gpu-node-2")
    # The subject of a real node certificate is what the checks compare.
    name = cert_file_name(default_cert_paths(str(n2.data_root))[0])
    assert (name.cn, name.o, name.ou) == (n2.node_id, _cluster(swarm), "swarm-worker")
    _gpu_count_label(swarm, n2, "8")  # an agent is expected on node 2
    before2 = labels_of(swarm, "gpu-node-2")
    path = _shipped_config(tmp_path, swarm)
    honest = start_agent(swarm, "gpu-node-1")  # its own certificate, from its data root
    impostor = start_agent(swarm, "gpu-node-2", "--identity", "swarm-pki",
                           *_cert_args(n1))  # node 1's certificate at node 2's address
    try:
        res = run_cli("run", "--config", str(path), "--once")
        assert res.returncode == 0, res.stderr
        assert "gpu-node-2" in res.stderr and "certificate of node" in res.stderr, res.stderr
        assert labels_of(swarm, "gpu-node-1").get("swarmgpu.gpu.product") == \
            "NVIDIA-A100-SXM4-40GB"
        assert labels_of(swarm, "gpu-node-2") == before2, "the impostor steered labels"
        stop(impostor)
        impostor = start_agent(swarm, "gpu-node-2")  # node 2's own agent
        res = run_cli("run", "--config", str(path), "--once")
        assert res.returncode == 0, res.stderr
        got = labels_of(swarm, "gpu-node-2")
        assert got.get("swarmgpu.gpu.product") == "NVIDIA-GeForce-RTX-4090", res.stderr
        assert "certificate of node" not in res.stderr
        assert "identity is none" not in res.stderr
        audit = run_cli("audit", "--config", str(path), "--json")
        kinds = {f["kind"] for f in json.loads(audit.stdout)["findings"]}
        assert "agent-identity" not in kinds, audit.stdout
    finally:
        stop(honest)
        stop(impostor)
        _gpu_count_label(swarm, n2, None)


def test_only_a_manager_certificate_reads_facts(swarm: SwarmCluster) -> None:
    """Mutual TLS against a shipped-default agent: no certificate, or a worker's (a
    node's own, of this very swarm), gets no /facts; the manager's does."""
    n2 = swarm.node("gpu-node-2")
    proc = start_agent(swarm, "gpu-node-2")
    url = f"https://{n2.addr}:9401"
    try:
        def get(path: str, ctx: ssl.SSLContext) -> int:
            return boundedhttp.get(url + path, timeout_s=5, max_bytes=1 << 22,
                                   tls=ctx).status

        assert get("/facts", _ctx(swarm)) == 200
        assert get("/metrics", _ctx(swarm)) == 200
        assert get("/facts", _bare_ctx(swarm)) == 403
        assert get("/metrics", _bare_ctx(swarm)) == 403
        assert get("/facts", _ctx(swarm, swarm.node("gpu-node-1"))) == 403  # a worker
        assert get("/healthz", _bare_ctx(swarm)) == 200
    finally:
        stop(proc)
