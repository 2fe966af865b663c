"""The docker-proxy's edges read as a client would: the Host its loopback TCP listener
takes (as the agent's and the daemon's Host checks read one), and a request it will
not forward refused on its head, before any of its body is read or a turn taken.
The real proxy in front of the recording engine stand-in, over TCP and unix sockets."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.engine_stub import Engine, start_engine

from swarmgpu.manager.engine.proxy_policy import write_checks
from swarmgpu.swarm import dockerproxy
from swarmgpu.swarm.dockerproxy import ProxyServer, build_proxy


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    eng = start_engine(str(tmp_path / "engine.sock"))
    yield eng
    eng.shutdown()
    eng.server_close()


def _serving(listen: str, engine: Engine) -> ProxyServer:
    srv = build_proxy(listen, f"unix://{engine.server_address}", write_checks("swarmgpu."))
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return srv


@pytest.fixture
def tcp(engine: Engine) -> Iterator[tuple[int, Engine]]:
    srv = _serving("tcp://127.0.0.1:0", engine)
    yield srv.server_address[1], engine
    srv.shutdown()
    srv.server_close()


def _answer(sock: socket.socket, raw: bytes) -> bytes:
    sock.settimeout(20)
    sock.sendall(raw)
    got = b""
    while chunk := sock.recv(4096):
        got += chunk
    return got


def _get(port: int, host: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        return _answer(s, b"GET /v1.43/tasks HTTP/1.1\r\nHost: %s\r\n\r\n" % host)


@pytest.mark.parametrize(
    "host",
    [
        "localhost.:{port}",
        "localhost.",
        "LocalHost.:{port}",
        "localhost:",
        "127.0.0.1:",
        "[::1]:",
        "127.0.0.1.",
    ],
)
def test_a_loopback_host_written_as_rfc_3986_allows_is_served(tcp: Any, host: str) -> None:
    """``localhost.`` (the name with its root's dot) and an empty port (the host alone,
    RFC 3986 3.2.3) name loopback as the agent's and the daemon's Host checks read them
    (``httpguard.host_of``); the TCP listener answered them 421, as a rebound name."""
    port, engine = tcp
    got = _get(port, host.format(port=port).encode())
    assert got.startswith(b"HTTP/1.1 200 "), got
    assert len(engine.seen) == 1


@pytest.mark.parametrize(
    "host",
    [
        "localhost.example:{port}",
        "localhost..",
        "evil.localhost.:{port}",
        "127.0.0.1.nip.io",
        "user@localhost:{port}",
        "localhost:1:2",
        "[::1",
        "127.1:{port}",
        "0x7f.0.0.1",
        "2130706433",
        "127.0.0.2.:{port}",
        "localhost:{port}/x",
        "[::1]x",
    ],
)
def test_any_other_host_is_still_refused_over_tcp(tcp: Any, host: str) -> None:
    port, engine = tcp
    got = _get(port, host.format(port=port).encode())
    assert got.startswith((b"HTTP/1.1 421 ", b"HTTP/1.1 400 ")), got
    assert not engine.seen


def test_curl_and_http_client_are_served_over_tcp(tcp: Any) -> None:
    """Real clients' own requests, as they frame them (http.client always; curl where
    it is installed)."""
    import http.client

    port, engine = tcp
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    conn.request("GET", "/v1.43/version")
    assert conn.getresponse().status == 200
    conn.close()
    conn = http.client.HTTPConnection("localhost", port, timeout=20)
    conn.request(
        "POST", "/v1.43/containers/create", body=b"{}", headers={"Content-Type": "application/json"}
    )
    assert conn.getresponse().status == 403
    conn.close()
    curl = shutil.which("curl")
    if curl is not None:
        # (curl names its URL's host as Host; ``localhost.`` resolves nowhere here)
        for path, host, code in (
            ("version", f"127.0.0.1:{port}", "200"),
            ("version", f"localhost.:{port}", "200"),
            ("containers/json", f"127.0.0.1:{port}", "403"),
        ):
            out = subprocess.run(
                [
                    curl,
                    "--http1.1",
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "--max-time",
                    "20",
                    "-H",
                    f"Host: {host}",
                    f"http://127.0.0.1:{port}/v1.43/{path}",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            assert out.stdout == code, (path, host, out.stdout, out.stderr)
    assert all(b"containers" not in s for s in engine.seen)


@pytest.mark.parametrize(
    "head",
    [
        b"POST /v1.43/containers/create HTTP/1.1\r\nHost: d\r\nContent-Type: application/json"
        b"\r\nContent-Length: 100\r\n\r\n",
        b"POST /v1.43/exec/abc/start HTTP/1.1\r\nHost: d\r\nContent-Type: application/json"
        b"\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST /v1.43/nodes/a/update?version=1&force=1 HTTP/1.1\r\nHost: d\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n",
    ],
)
def test_a_call_not_made_is_refused_on_its_head_and_holds_no_turn(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, head: bytes
) -> None:
    """A POST the proxy will not forward was read to its body's end, in the turn every
    write and GET /swarm waits for: its head alone held the daemon's writes until the
    request deadline (then 408, not the 403 it is). Now 403 on the head, body unsent,
    while the turn stays free."""
    monkeypatch.setattr(dockerproxy, "REQUEST_DEADLINE_S", 2.0)
    srv = _serving(f"unix://{tmp_path / 'proxy.sock'}", engine)
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(tmp_path / "proxy.sock"))
            got = _answer(s, head)  # the body never comes
            assert got.startswith(b"HTTP/1.1 403 "), got
            assert not srv.whole.locked()
    finally:
        srv.shutdown()
        srv.server_close()
    assert not engine.seen


def test_a_tcp_host_that_is_refused_is_refused_before_a_body_is_read(
    tcp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dockerproxy, "REQUEST_DEADLINE_S", 2.0)
    port, engine = tcp
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        got = _answer(
            s,
            b"POST /v1.43/swarm/update?version=7 HTTP/1.1\r\nHost: evil.example"
            b"\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n",
        )
    assert got.startswith(b"HTTP/1.1 421 "), got
    assert not engine.seen


@pytest.mark.parametrize("listen", ["tcp://[::1]:0", "tcp://::1:0"])
def test_a_tcp_listen_on_ipv6_loopback_serves(engine: Engine, listen: str) -> None:
    """``::1`` is loopback as 127.0.0.1 is, and the option took it: ``tcp://::1:PORT``
    failed to bind (an IPv4 socket: 'Address family for hostname not supported') and
    ``tcp://[::1]:PORT``, as a URL writes it, was refused as beyond loopback."""
    srv = _serving(listen, engine)
    try:
        with socket.create_connection(("::1", srv.server_address[1]), timeout=20) as s:
            got = _answer(s, b"GET /v1.43/version HTTP/1.1\r\nHost: [::1]\r\n\r\n")
    finally:
        srv.shutdown()
        srv.server_close()
    assert got.startswith(b"HTTP/1.1 200 "), got
    assert len(engine.seen) == 1


@pytest.mark.parametrize(
    "listen",
    ["tcp://[::2]:0", "tcp://[::]:0", "tcp://[::1:0", "tcp://::ffff:127.0.0.1:0", "tcp://[::1]x:0"],
)
def test_no_other_ipv6_address_is_listened_on(listen: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        build_proxy(listen, "unix:///var/run/docker.sock", write_checks("swarmgpu."))


def test_a_stalled_client_blocks_no_read(engine: Engine, tmp_path: Path) -> None:
    """One client stalled in its head, another holding the write turn with its body
    unsent: a third client's read is answered meanwhile (each connection its own
    thread; only writes and GET /swarm take turns)."""
    path = tmp_path / "proxy.sock"
    srv = _serving(f"unix://{path}", engine)
    try:
        with socket.socket(socket.AF_UNIX) as head, socket.socket(socket.AF_UNIX) as turn:
            head.connect(str(path))
            head.sendall(b"GET /v1.43/nodes HTTP/1.1\r\nHo")
            turn.connect(str(path))
            turn.sendall(
                b"POST /v1.43/swarm/update?version=7 HTTP/1.1\r\nHost: d\r\n"
                b"Content-Type: application/json\r\nContent-Length: 50\r\n\r\n{"
            )
            for _ in range(400):  # until the proxy's thread for it took the turn
                if srv.whole.locked():
                    break
                time.sleep(0.025)
            assert srv.whole.locked()
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(path))
                got = _answer(s, b"GET /v1.43/tasks HTTP/1.1\r\nHost: d\r\n\r\n")
            assert got.startswith(b"HTTP/1.1 200 "), got
            assert srv.whole.locked()  # the write still holds its turn
    finally:
        srv.shutdown()
        srv.server_close()
    assert [r.split(b" ", 2)[1] for r in engine.seen] == [b"/v1.43/tasks"]


def test_a_write_that_is_no_json_is_refused_on_its_head(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its Content-Type is in its head: a form or text/plain write is refused (400)
    before its body is read or the turn taken (before: 408 at the deadline)."""
    monkeypatch.setattr(dockerproxy, "REQUEST_DEADLINE_S", 2.0)
    srv = _serving(f"unix://{tmp_path / 'proxy.sock'}", engine)
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(tmp_path / "proxy.sock"))
            got = _answer(
                s,
                b"POST /v1.43/swarm/update?version=7 HTTP/1.1\r\nHost: d\r\n"
                b"Content-Type: text/plain\r\nContent-Length: 50\r\n\r\n",
            )
            assert not srv.whole.locked()
    finally:
        srv.shutdown()
        srv.server_close()
    assert got.startswith(b"HTTP/1.1 400 ") and b"application/json" in got, got
    assert not engine.seen


@pytest.mark.parametrize("listen", ["tcp://LOCALHOST:0", "tcp://localhost.:0",
                                    "tcp://LocalHost.:0", "tcp://127.0.0.1.:0"])
def test_a_tcp_listen_reads_its_host_as_the_host_check_does(engine: Engine,
                                                           listen: str) -> None:
    """One rule for a loopback name: the listen host read as ``httpguard.host_of`` reads
    a Host (lower case, one root dot). Before: the Host ``LocalHost.`` was served and the
    listen ``tcp://LocalHost.:PORT`` refused as beyond loopback."""
    srv = _serving(listen, engine)
    try:
        with socket.create_connection(("127.0.0.1", srv.server_address[1]), timeout=20) as s:
            got = _answer(s, b"GET /v1.43/version HTTP/1.1\r\nHost: localhost\r\n\r\n")
    finally:
        srv.shutdown()
        srv.server_close()
    assert got.startswith(b"HTTP/1.1 200 "), got
