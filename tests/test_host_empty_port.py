"""A Host with an empty port (``localhost:``, ``127.0.0.1:``, ``gpu-a.:``) is the host
alone: RFC 3986 3.2.3 (``port = *DIGIT``, "URI producers and normalizers should omit
the port component and its ':' delimiter if port is empty"); nginx reads it so, and
``httphead.host_fault`` takes it. The name check read ``localhost:`` as a name of its
own, and a served name (an IP address too) was answered 421 (DNS rebinding?)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.plain_agent import plain_agent
from support.webauth import raw

from swarmgpu.core.httpguard import allowed_hosts, host_allowed, host_of


@pytest.mark.parametrize(("header", "host"), [
    ("localhost:", "localhost"), ("LocalHost.:", "localhost"), ("127.0.0.1:", "127.0.0.1"),
    ("gpu_a.example:", "gpu_a.example"), ("[::1]:", "::1"), ("localhost:09401", "localhost"),
    # an unbracketed IPv6 address (an allowed-hosts entry) keeps its last colon
    ("fe80::", "fe80::"), ("::", "::")])
def test_an_empty_port_is_no_part_of_the_host(header: str, host: str) -> None:
    assert host_of(header) == host


def test_a_served_name_with_an_empty_port_is_served() -> None:
    allowed = allowed_hosts("0.0.0.0:9402", "map.example.com")
    for header in ("localhost:", "127.0.0.1:", "map.example.com.:", "MAP.example.com:"):
        assert host_allowed(header, allowed), header
    assert not host_allowed("other.example:", allowed)


@pytest.fixture
def agent_port() -> Iterator[int]:
    """An agent without token or TLS: it answers only the names it is called by."""
    with plain_agent() as port:
        yield port


def test_the_agent_answers_a_host_with_an_empty_port(agent_port: int) -> None:
    for host in (b"localhost:", b"127.0.0.1:", b"gpu-a.:", b"[::1]:"):
        got = raw(agent_port, b"GET /healthz HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 200"), (host, got[:80])
    got = raw(agent_port, b"GET /healthz HTTP/1.1\r\nHost: rebound.example:\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 421"), got[:80]
