"""A node's ``{addr}`` in the agents' and exporters' URLs is Swarm's ``Status.Addr``: the
host part of the address the node's connection came from (swarmkit's dispatcher,
``net.SplitHostPort``), so an IPv6 node's is bare (``2001:db8::7``), and a URL needs it
in brackets (RFC 3986 3.2.2 IP-literal)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from support.plain_agent import plain_agent

from swarmgpu.core.config import AgentsConfig
from swarmgpu.manager.nodes.agent_client import agent_base_url, fetch_facts
from swarmgpu.manager.nodes.nodeurl import node_url
from swarmgpu.manager.rebalance.scrape import metrics_url
from swarmgpu.swarm.client import SwarmNode
from swarmgpu.swarm.swarmnode import node_from_api


def _node(addr: str) -> SwarmNode:
    return SwarmNode("n0", "gpu-a", addr, "worker", "ready", "active", {}, {}, 1, {}, {})


@pytest.mark.parametrize(("addr", "host"), [
    ("2001:db8::7", "2001:db8::7"), ("::1", "::1"), ("fe80::1%eth0", "fe80::1%eth0"),
    ("10.0.0.7", "10.0.0.7"),
])
def test_the_default_templates_reach_an_ipv6_node(addr: str, host: str) -> None:
    # 'http://{addr}:{port}' with '2001:db8::7' was 'http://2001:db8::7:9401': no URL
    # (its port 'db8::7:9401'), every fetch of an IPv6 node failed each cycle.
    for url in (agent_base_url(_node(addr), AgentsConfig(identity="none")),
                agent_base_url(_node(addr), AgentsConfig(identity="swarm-pki")),
                metrics_url(_node(addr), "http://{addr}:9400/metrics")):
        parts = urlsplit(url)
        assert parts.hostname == host and parts.port, url


def test_a_template_that_brackets_addr_itself_is_filled_bare() -> None:
    assert node_url("http://[{addr}]:9400", _node("2001:db8::7"), "k") == \
        "http://[2001:db8::7]:9400"
    assert node_url("http://{addr}:9400", _node("2001:db8::7"), "k") == \
        "http://[2001:db8::7]:9400"


def test_a_managers_raft_address_is_read_without_its_brackets() -> None:
    # A manager that reports Status.Addr 0.0.0.0 is read at its raft address,
    # '[2001:db8::1]:2377' for an IPv6 one: that was read '[2001:db8::1]', an address
    # no node.ip constraint matched and a URL bracketed twice.
    node = node_from_api({"ID": "m1", "Spec": {"Role": "manager"},
                          "Status": {"State": "ready", "Addr": "0.0.0.0"},
                          "ManagerStatus": {"Addr": "[2001:db8::1]:2377"}})
    assert node.addr == "2001:db8::1"
    node = node_from_api({"ID": "m1", "Spec": {"Role": "manager"},
                          "Status": {"State": "ready", "Addr": "0.0.0.0"},
                          "ManagerStatus": {"Addr": "10.0.0.1:2377"}})
    assert node.addr == "10.0.0.1"


@pytest.mark.parametrize("unspecified", ["::", "0:0:0:0:0:0:0:0", "0.0.0.0"])
def test_a_manager_reporting_an_unspecified_ipv6_address_is_read_at_its_raft_address(
        unspecified: str) -> None:
    # '::' is what '0.0.0.0' is, on an IPv6 listener: no node's address. It was kept,
    # and 'http://[::]:9401' is this host to Linux's connect(): the daemon reached its own
    # host's agent, refused its answer as another node's, and never read that manager.
    node = node_from_api({"ID": "m1", "Spec": {"Role": "manager"},
                          "Status": {"State": "ready", "Addr": unspecified},
                          "ManagerStatus": {"Addr": "[2001:db8::1]:2377"}})
    assert node.addr == "2001:db8::1"


@pytest.fixture
def agent6() -> Iterator[int]:
    """A listener on ::1 standing for an IPv6 node's agent: answers 404 to anything."""
    try:
        s = socket.socket(socket.AF_INET6)
        s.bind(("::1", 0))
    except OSError:  # no IPv6 loopback here: the URL tests above still hold
        pytest.fail("no IPv6 loopback on this machine")
    s.listen(4)
    s.settimeout(5)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = s.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                             b"Connection: close\r\n\r\n")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield s.getsockname()[1]
    stop.set()
    s.close()


def test_an_ipv6_nodes_agent_is_reached(agent6: int) -> None:
    cfg = AgentsConfig(identity="none", port=agent6, timeout_s=2)
    got = fetch_facts(_node("::1"), cfg)
    # it got there: the agent's 404 is the error, not a URL that could not be built
    assert got.error is not None and "404" in got.error, got.error


def test_a_link_local_nodes_fetch_sends_no_zone_in_host() -> None:
    # RFC 6874 4: a zone (fe80::1%eth0) has meaning on the sending host alone, and no
    # client sends it in Host; the agent answers such a Host 400 (httphead.host_fault).
    with plain_agent(listen="[::1]:0", spec="fake:zone") as port:
        cfg = AgentsConfig(identity="none", port=port, timeout_s=5)
        got = fetch_facts(_node(f"::1%{socket.if_nametoindex('lo')}"), cfg)
        assert got.facts is not None, got.error
