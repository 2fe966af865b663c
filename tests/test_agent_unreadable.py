"""A daemon that cannot read an agent says so (issue 33, point 3): the address, what
answered (plain HTTP, TLS, a certificate refused and which check failed, nothing) and
the one-line fix, in the fetch result the log, `audit`, `status` and the map read; and a
node whose agent answers but cannot be read is never "no findings".

Over real sockets on loopback: the real agent server (plain HTTP, or HTTPS with a
swarm-like PKI made with openssl in test_identity.py), the daemon's real fetch."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

from support.gpu_nodes import RTX4090
from support.identity import daemon_context, loopback_node

from swarmgpu.agent.server import build_server
from swarmgpu.core.config import AgentsConfig
from swarmgpu.manager.commands.audit import audit, exit_code, render_table
from swarmgpu.manager.nodes.agent_client import FactsResult, fetch_facts
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.web.cluster_view import build_cluster, render_status
from swarmgpu.swarm.client import SwarmNode
from swarmgpu.swarm.identity import ReloadingServerContext


class Source:
    spec = "fake:unreadable"

    def read(self) -> Any:
        return RTX4090.facts()


def _start(tls: Any) -> Any:
    srv = build_server(Source(), "127.0.0.1:0", refresh_s=60, sampler=None, tls=tls)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    return srv


def _plain_agent() -> Any:
    """The agent as it starts when it finds no node certificate: plain HTTP."""
    return _start(None)


def _serve(pki: dict[str, Path], cert: str) -> Any:
    """The agent serving HTTPS with the certificate ``cert`` of test_identity's PKI."""
    return _start(ReloadingServerContext(pki[cert], pki[cert].with_suffix(".key"), pki["ca"]))


def _https_cfg(port: int) -> AgentsConfig:
    return AgentsConfig(port=port, timeout_s=3)  # identity swarm-pki: https://


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_plain_http_agent_is_named_with_the_fix(pki: dict[str, Path]) -> None:
    srv = _plain_agent()
    try:
        port = srv.server_address[1]
        res = fetch_facts(loopback_node(), _https_cfg(port), daemon_context(pki))
    finally:
        srv.shutdown()
    assert res.facts is None and res.listening
    assert res.cause == "plain HTTP (the agent has no node certificate)"
    assert res.error is not None
    assert res.error.startswith(f"agent at https://127.0.0.1:{port}/facts unusable: TLS "
                                "handshake failed (")
    assert "a plain-HTTP server answered it; fix: the agent serves plain HTTP because it " \
           "found no Swarm node certificate" in res.error
    assert "agents.identity: none" in res.fix and "--tls-cert" in res.fix


def test_tls_agent_read_over_plain_http_is_named(pki: dict[str, Path]) -> None:
    srv = _serve(pki, "node1")
    try:
        port = srv.server_address[1]
        cfg = AgentsConfig(port=port, timeout_s=3, identity="none")
        res = fetch_facts(loopback_node(), cfg, None)
    finally:
        srv.shutdown()
    assert res.facts is None and res.listening
    assert res.cause == "TLS (the agent serves HTTPS)", res.error
    assert "remove agents.identity: none" in res.fix


def test_certificate_refused_names_the_check(pki: dict[str, Path]) -> None:
    cases = {
        "roguenode": "certificate refused: ",  # another CA: the chain check
        "badou": "certificate of another node",  # CN/O/OU: node_refusal names which
        "othercluster": "certificate of another node",
    }
    for cert, cause in cases.items():
        srv = _serve(pki, cert)
        try:
            port = srv.server_address[1]
            res = fetch_facts(loopback_node(), _https_cfg(port), daemon_context(pki))
        finally:
            srv.shutdown()
        assert res.facts is None and res.listening, cert
        assert res.cause.startswith(cause), (cert, res.cause)
        assert res.error and "; fix: " in res.error
    # which check failed is in the words
    srv = _serve(pki, "badou")
    try:
        port = srv.server_address[1]
        res = fetch_facts(loopback_node(), _https_cfg(port), daemon_context(pki))
    finally:
        srv.shutdown()
    assert res.error and "OU 'not-a-swarm-role'" in res.error


def test_an_agent_that_refuses_the_daemon_says_so(pki: dict[str, Path]) -> None:
    srv = _serve(pki, "node1")
    try:
        port = srv.server_address[1]
        res = fetch_facts(loopback_node(), _https_cfg(port), daemon_context(pki, None))
    finally:
        srv.shutdown()
    assert res.cause == "HTTP 403: refused the daemon" and res.listening
    assert "run the daemon on a manager of the same swarm" in res.fix


def test_nothing_listening_is_not_an_agent() -> None:
    port = _free_port()
    res = fetch_facts(loopback_node(), _https_cfg(port), None)
    assert res.facts is None and not res.listening
    assert res.cause == "nothing listens"


# --- what audit and status make of it ----------------------------------------------------

def _bare(node_id: str = "n1", labels: dict[str, str] | None = None) -> SwarmNode:
    """A fresh node: no swarmgpu label yet, no generic resources."""
    return SwarmNode(node_id, RTX4090.hostname, "10.0.0.2", "worker", "ready", "active",
                     labels or {}, {}, 1, {}, {})


def _unreadable(node: SwarmNode) -> FactsResult:
    return FactsResult(node.id, node.hostname, "https://10.0.0.2:9401/facts", None,
                       "agent at https://10.0.0.2:9401/facts unusable: TLS handshake failed "
                       "(WRONG_VERSION_NUMBER): a plain-HTTP server answered it; fix: FIX",
                       1.0, True, "plain HTTP (the agent has no node certificate)", "FIX")


def test_audit_and_status_name_an_unreadable_first_agent() -> None:
    n = _bare()
    snap = Snapshot([n], [], [], {n.id: _unreadable(n)})
    found = audit(snap)
    (f,) = found
    assert f.kind == "unreadable" and not f.advisory and exit_code(found) == 1
    assert f.subject == RTX4090.hostname
    assert "https://10.0.0.2:9401/facts" in f.message
    assert "plain HTTP (the agent has no node certificate)" in f.message
    assert f.message.endswith("fix: FIX")
    table = render_table(found, snap, "swarmgpu.")
    assert "No findings" not in table
    assert f"{RTX4090.hostname:<16} worker   unreadable" in table
    doc = build_cluster(snap, None, findings=found)
    (node,) = doc["nodes"]
    assert node["agent"]["status"] == "unreadable"
    assert node["labels_state"] == "agent-unreadable"
    text = render_status(doc)
    assert "agent unreadable (plain HTTP (the agent has no node certificate))" in text
    assert "  agent at https://10.0.0.2:9401/facts: plain HTTP" in text
    assert "  fix: FIX" in text


def test_a_gpu_labelled_node_without_a_readable_agent_needs_action() -> None:
    n = _bare(labels={"gpu": "true"})
    gone = FactsResult(n.id, n.hostname, "https://10.0.0.2:9401/facts", None,
                       "agent at ... unusable: cannot connect; fix: start it", 1.0, False,
                       "nothing listens", "start it")
    found = audit(Snapshot([n], [], [], {n.id: gone}))
    assert [f.kind for f in found] == ["unreachable"] and exit_code(found) == 1
    # a CPU node with nothing on the port: nothing to say
    plain = _bare()
    assert audit(Snapshot([plain], [], [], {plain.id: gone})) == []


def test_a_node_advertising_the_configured_kind_is_a_gpu_node_on_the_map_and_audit() -> None:
    """A node whose engine advertises ``placement.generic_resource_kind`` (here "A100")
    is a GPU node to label sync and placement (``gpu_hint`` with the kind): the map and
    audit called ``gpu_hint`` without it, so its agent not answering showed as "no
    agent" (a node without GPUs) and audit found nothing."""
    from dataclasses import replace

    n = replace(_bare(), discrete_resources={"A100": 2})
    res = FactsResult(n.id, n.hostname, "https://10.0.0.2:9401/facts", None,
                      "agent at https://10.0.0.2:9401/facts: connection refused", 1.0)
    snap = Snapshot([n], [], [], {n.id: res})
    found = audit(snap, generic_resource_kind="A100")
    assert [f.kind for f in found] == ["unreachable"], found
    doc = build_cluster(snap, None, findings=found, generic_resource_kind="A100")
    (node,) = doc["nodes"]
    assert node["agent"]["status"] == "unreachable"
    assert node["labels_state"] == "agent-unreadable"
    # Without the kind configured, such a node is no GPU node (as label sync reads it).
    (node,) = build_cluster(snap, None)["nodes"]
    assert node["agent"]["status"] == "none"


def test_a_node_of_no_hostname_takes_an_answer_only_its_certificate_proves(
        pki: dict[str, Path]) -> None:
    """Swarm reports no hostname for node1: without a node certificate (agents.identity
    none) nothing tells whose facts answered (the host name was the only check), so they
    are refused, naming the node ID and the fix. Before: taken, whichever host's they
    were. With swarm-pki the certificate's CN is node1's ID: taken, as before."""
    from dataclasses import replace

    unnamed = replace(loopback_node(), hostname="")
    srv = _plain_agent()
    try:
        port = srv.server_address[1]
        res = fetch_facts(unnamed, AgentsConfig(port=port, timeout_s=3, identity="none"))
    finally:
        srv.shutdown()
    assert res.facts is None and res.listening, res
    assert res.error is not None and "Swarm node node1, which reports no hostname" in res.error
    assert f"(they name host {RTX4090.hostname!r}); refused" in res.error, res.error
    assert "give node node1 a hostname" in res.fix and "agents.identity: swarm-pki" in res.fix
    srv = _serve(pki, "node1")
    try:
        res = fetch_facts(unnamed, _https_cfg(srv.server_address[1]), daemon_context(pki))
    finally:
        srv.shutdown()
    assert res.error is None and res.facts is not None, res.error
