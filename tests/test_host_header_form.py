"""A Host field value is ``uri-host [ ":" port ]`` (RFC 9110 7.2, RFC 3986 3.2.2); one
that is not (userinfo, two ports, a path, an unclosed bracket) is answered 400 (RFC 9112
3.2: a server MUST), whoever the server would have served it to: a proxy in front reads
such a Host its own way (``user@a`` as the host ``a``, ``a:1:2`` as ``a:1``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.plain_agent import plain_agent
from support.webauth import raw

from swarmgpu.core.httphead import host_fault

BAD = ["user@localhost", "user:pw@127.0.0.1:9401", "localhost:9401:9401", "localhost/x",
       "[::1", "[::1]x", "[localhost]", "::1", "local host", "localhost:94a1", "a\\b",
       "[::1]:9401:1", '"localhost"', "localhost?x", "", " ", ":9401"]
GOOD = ["localhost", "LOCALHOST:9401", "127.0.0.1", "127.0.0.1:9401", "[::1]", "[::1]:9401",
        "[2001:DB8::7]:443", "gpu-a.", "gpu-a.:9401", "gpu_node_1.example.com",
        "xn--bcher-kva.example",
        "map.example.com:", "[fe80::1%25eth0]:9401", "[::ffff:10.0.0.5]"]


@pytest.mark.parametrize("host", BAD)
def test_a_host_that_is_no_host_and_port_is_a_fault(host: str) -> None:
    assert host_fault(host) is not None


@pytest.mark.parametrize("host", GOOD)
def test_hosts_that_clients_send_are_no_fault(host: str) -> None:
    # what curl, Prometheus, Go and browsers send: a name or address, its port maybe
    assert host_fault(host) is None


@pytest.fixture
def agent_port() -> Iterator[int]:
    """An agent without token or TLS (``plain_agent``): a Host's form is checked first."""
    with plain_agent() as port:
        yield port


def test_a_malformed_host_is_answered_400(agent_port: int) -> None:
    # (an http URI's host is never empty, RFC 9110 4.2.1: nor is its Host)
    for host in (b"user@localhost", b"localhost:1:2", b"[::1", b"", b":9401"):
        got = raw(agent_port, b"GET /healthz HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 400"), (host, got[:80])
        assert b"Host" in got
    # as the authority of an absolute-form target too: it becomes the Host read
    got = raw(agent_port, b"GET http://u@localhost/healthz HTTP/1.1\r\nHost: u@localhost\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 400"), got[:80]
    for host in (b"localhost", b"[::1]:%d" % agent_port, b"gpu-a."):
        got = raw(agent_port, b"GET /healthz HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 200"), (host, got[:80])
