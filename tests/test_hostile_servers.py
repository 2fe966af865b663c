"""Servers under hostile clients (issue 13, part 2): the agent and the daemon's HTTP.

Attackers connect from other loopback addresses (127.0.0.2...), the honest client
from 127.0.0.1, as a node's daemon and a neighbour would come from different hosts.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpu_nodes import RTX4090
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import REPO

from swarmgpu.agent.server import DEFAULT_LISTEN, AgentServer, build_server
from swarmgpu.core.config import load_config
from swarmgpu.core.httpguard import HEAD_DEADLINE_S, GuardedServer
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.webguard import allowed_hosts, host_allowed, host_of


class _Source:
    spec = "fake:hostile"

    def read(self) -> Any:
        return RTX4090.facts()


@pytest.fixture
def agent() -> Iterator[tuple[AgentServer, int]]:
    srv = build_server(_Source(), "127.0.0.1:0", refresh_s=60)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    yield srv, srv.server_address[1]
    srv.shutdown()


class _NoSwarm:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected engine call {name}")


@pytest.fixture
def daemon_http(tmp_path: Path) -> Iterator[tuple[GuardedServer, int]]:
    cfg = load_config(None, env={"SWARMGPU_HTTP_LISTEN": "127.0.0.1:0",
                                 "SWARMGPU_STATE_DIR": str(tmp_path)})
    d = Daemon(cfg, swarm=_NoSwarm())  # type: ignore[arg-type]
    d._start_http()
    assert d._http is not None
    yield d._http, d._http.server_address[1]
    d._http.shutdown()
    d._http.server_close()


def get(port: int, path: str, host: str | None = None, timeout: float = 5
        ) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.putrequest("GET", path, skip_host=host is not None)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def slowloris(port: int, n: int, src: str = "127.0.0.2") -> list[socket.socket]:
    socks = []
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2,
                                         source_address=(src, 0))
            s.sendall(b"GET /facts HTTP/1.1\r\nX-a: ")
            socks.append(s)
        except OSError:
            break
    return socks


def test_agent_loopback_by_default() -> None:
    assert DEFAULT_LISTEN.startswith("127.0.0.1:")
    stack = (REPO / "stacks" / "swarmgpu.yml").read_text()
    assert "--listen\", \"0.0.0.0:9401\"" in stack


def test_agent_slowloris_neither_holds_a_slot_past_its_deadline_nor_blocks_facts(
        agent: tuple[AgentServer, int]) -> None:
    _, port = agent
    socks = slowloris(port, 40)  # more than the whole cap, from one neighbour
    try:
        t0 = time.monotonic()
        status, _, body = get(port, "/facts")
        assert status == 200 and b"swarmgpu.facts/v1" in body
        assert time.monotonic() - t0 < 3, "the honest client waited on the slowloris"
        # One header byte every second: the head deadline (5 s) ends it regardless.
        dripper = socks[0]
        closed_at = None
        t0 = time.monotonic()
        while time.monotonic() - t0 < 15:
            try:
                dripper.sendall(b"a")
                dripper.settimeout(1)
                if dripper.recv(100) == b"":
                    closed_at = time.monotonic() - t0
                    break
            except TimeoutError:
                continue
            except OSError:
                closed_at = time.monotonic() - t0
                break
        assert closed_at is not None and closed_at < 10, closed_at
    finally:
        for s in socks:
            s.close()


def test_daemon_http_caps_threads_and_bounds_half_requests(
        daemon_http: tuple[GuardedServer, int]) -> None:
    _, port = daemon_http
    before = threading.active_count()
    socks = []
    for i in range(2, 12):  # 400 half-sent requests from ten addresses
        socks += slowloris(port, 40, src=f"127.0.0.{i}")
    try:
        time.sleep(0.5)
        grown = threading.active_count() - before
        assert grown <= GuardedServer.max_connections + 2, grown
        # Every slot may be held by the ten hosts at once; each frees by the head deadline.
        t0 = time.monotonic()
        while True:
            try:
                assert get(port, "/healthz")[0] == 200
                break
            except (OSError, http.client.HTTPException):
                assert time.monotonic() - t0 < HEAD_DEADLINE_S + 5, \
                    "the daemon stopped answering under 400 half-sent requests"
                time.sleep(0.2)
        assert threading.active_count() - before <= GuardedServer.max_connections + 2
    finally:
        for s in socks:
            s.close()


def test_daemon_http_host_allow_list_and_security_headers(
        daemon_http: tuple[GuardedServer, int]) -> None:
    _, port = daemon_http
    for host in (f"127.0.0.1:{port}", "localhost", f"localhost:{port}", "[::1]:9402",
                 socket.gethostname()):
        status, headers, _ = get(port, "/healthz", host=host)
        assert status == 200, host
    status, headers, body = get(port, "/healthz", host="evil.example:9402")
    assert status == 421 and b"allowed_hosts" in body
    status, headers, _ = get(port, "/healthz", host="127.0.0.1")
    assert status == 200
    csp = headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"


def test_stack_opts_in_to_exposing_the_daemon() -> None:
    stack = (REPO / "stacks" / "swarmgpu.yml").read_text()
    i = stack.index("SWARMGPU_HTTP_LISTEN=0.0.0.0:9402")
    assert "opt" in stack[i - 400:i].lower()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_prop_only_ip_literals_and_known_names_pass(host: str) -> None:
    allowed = allowed_hosts("127.0.0.1:9402", "gpu-map.example")
    if host_allowed(host, allowed):
        h = host_of(host)
        try:
            ipaddress.ip_address(h)
        except ValueError:
            assert h in allowed, host
    assert host_allowed("evil.example", allowed) is False
    assert host_allowed("GPU-MAP.example.:80", allowed) is True


def test_daemon_http_answers_an_oversized_head(daemon_http: tuple[GuardedServer, int]) -> None:
    # The daemon shares the agent's request reading (httpguard.OneRequestHandler), so a
    # too-long request line or header block gets 414 / 431 with the security headers.
    _, port = daemon_http
    for head, code in ((b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", b"414"),
                       (b"GET / HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n", b"431")):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(head)
            resp = b""
            while chunk := s.recv(65536):
                resp += chunk
        assert resp.startswith(b"HTTP/1.1 " + code), resp[:80]
        assert b"X-Content-Type-Options: nosniff" in resp
