"""A node's Swarm hostname is spliced into the agents' URLs only where it is a host name
(``agent_client.agent_base_url``, ``scrape.metrics_url``): the engine reports the name
each node's engine gives, which root on that node sets."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from support.plain_agent import plain_agent
from support.webauth import raw

from swarmgpu.core.config import AgentsConfig
from swarmgpu.manager.nodes.agent_client import fetch_facts
from swarmgpu.manager.nodes.nodeurl import node_url
from swarmgpu.manager.rebalance.scrape import scrape_node
from swarmgpu.swarm.client import SwarmNode


@pytest.fixture
def elsewhere() -> Iterator[socket.socket]:
    """A listener standing for a service only the manager reaches (its loopback)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.settimeout(0.3)
    yield s
    s.close()


def _node(hostname: str) -> SwarmNode:
    return SwarmNode("n0", hostname, "127.0.0.9", "worker", "ready", "active", {}, {}, 1,
                     {}, {})


def _reached(s: socket.socket) -> bool:
    try:
        conn, _ = s.accept()
    except TimeoutError:
        return False
    conn.close()
    return True


def _hostile(port: int) -> list[str]:
    return [f"127.0.0.1:{port}/#", f"127.0.0.1:{port}/x?", f"x@127.0.0.1:{port}/#",
            f"127.0.0.1:{port}\\", f"[::ffff:127.0.0.1]:{port}/#"]


def test_a_hostname_that_is_no_host_name_sends_no_facts_fetch_elsewhere(
        elsewhere: socket.socket) -> None:
    # 'http://{hostname}:{port}' with a node named '127.0.0.1:2375/#' was
    # 'http://127.0.0.1:2375/#:9401/facts': the daemon's GET went to whatever the node
    # named, the manager's own loopback too. Refused, naming the node and the key.
    port = elsewhere.getsockname()[1]
    cfg = AgentsConfig(identity="none", url_template="http://u:secret@{hostname}:{port}",
                       timeout_s=1)
    for name in _hostile(port):
        got = fetch_facts(_node(name), cfg)
        assert not _reached(elsewhere), name
        assert got.facts is None and got.error is not None, name
        assert "hostname" in got.error and "agents.url_template" in got.error, got.error
        assert "secret" not in got.url + got.error, got


def test_a_hostname_that_is_no_host_name_sends_no_scrape_elsewhere(
        elsewhere: socket.socket) -> None:
    port = elsewhere.getsockname()[1]
    for name in _hostile(port):
        got = scrape_node(_node(name), "http://{hostname}:9400/metrics", 1)
        assert not _reached(elsewhere), name
        assert got.result is None and got.error is not None, name
        assert "hostname" in got.error and "metrics_url_template" in got.error, got.error


def test_a_host_name_is_still_filled_in(elsewhere: socket.socket) -> None:
    port = elsewhere.getsockname()[1]
    cfg = AgentsConfig(identity="none", url_template=f"http://{{hostname}}:{port}",
                       timeout_s=0.5)
    for name in ("localhost", "LOCALHOST"):
        got = fetch_facts(_node(name), cfg)
        assert _reached(elsewhere), name
        assert got.facts is None and "hostname" not in (got.cause or ""), got
    # {addr} alone: the hostname is not read, whatever it is
    cfg = AgentsConfig(identity="none", url_template=f"http://{{addr}}:{port}", timeout_s=0.5)
    got = fetch_facts(SwarmNode("n0", "odd/name", "127.0.0.1", "worker", "ready", "active",
                                {}, {}, 1, {}, {}), cfg)
    assert _reached(elsewhere)


def test_a_hostname_with_a_trailing_dot_is_served_by_its_own_agent() -> None:
    # 'gpu-a.' is a host name {hostname} fills in (nodeurl keeps the dot): its agent,
    # without TLS or a token, read the Host without the dot and its own name with it,
    # and answered the daemon's fetch 421 (DNS rebinding?).
    with plain_agent("GPU-a.", spec="fake:dot") as port:
        for host in (b"gpu-a.", b"GPU-a.:%d" % port, b"gpu-a"):
            got = raw(port, b"GET /facts HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
            assert got.startswith(b"HTTP/1.1 200"), (host, got[:80])
        got = raw(port, b"GET /facts HTTP/1.1\r\nHost: other.example\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 421"), got[:80]


@pytest.mark.parametrize("name", [
    "ip-10-0-0-7.ec2.internal", "gpu_node_1", "GPU-Node1", "gpu-a.example.com.", "123.gpu",
    "10.0.0.7", "xn--bcher-kva.example", "a" * 63, ".".join(["b" * 63] * 3) + "." + "c" * 61,
])
def test_kernel_host_names_real_nodes_carry_are_filled_in(name: str) -> None:
    # Underscores (cloud VMs, docker-in-docker), upper case, a trailing dot, a label of
    # digits (not the last: '123' alone is 0.0.0.123 to the resolver, test_numeric_host_names),
    # punycode, an IPv4 address, 63-character labels, 253 characters: each a URL
    # host as Go's and curl's URL parsers take it, and each served before nodeurl.
    assert node_url("https://{hostname}:9401", _node(name), "agents.url_template") \
        == f"https://{name}:9401"
