"""Request lines and POST lengths both HTTP servers (agent and daemon) read as the most
careful server would (``core.httphead``, ``core.httpguard``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.webauth import raw, web_daemon

from swarmgpu.agent.server import build_server
from swarmgpu.core.model import NodeFacts


class _Source:
    spec = "fake:line"

    def read(self) -> Any:
        return NodeFacts(hostname="node-a", source="fake:line")


@pytest.fixture
def ports(tmp_path: Path) -> Iterator[tuple[int, int]]:
    """(the daemon's HTTP port, an agent's port)."""
    d = web_daemon(tmp_path)
    agent = build_server(_Source(), "127.0.0.1:0", refresh_s=60)
    threading.Thread(target=agent.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    assert d._http is not None
    yield d._http.server_address[1], agent.server_address[1]
    agent.shutdown()
    d._http.shutdown()
    d._http.server_close()


HOST = b"\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.mark.parametrize("line", [
    b"GET\xa0/healthz\xa0HTTP/1.1",  # NBSP, which str.split() reads as a space
    b"GET\x85/healthz HTTP/1.1",  # NEL, the same
    b"GET\x1f/healthz\x1fHTTP/1.1",  # a unit separator, the same
    b"GET\t/healthz\tHTTP/1.1",
    b"GET  /healthz HTTP/1.1",
    b" GET /healthz HTTP/1.1",
    b"GET /healthz HTTP/1.1 ",
    b"GET /healthz HTTP/01.1",
    b"GET /healthz HTTP/1.10",
    b"GET /healthz HTTP/00.9",  # 0.9 to no reader but answered as 1.1
    b"GET /heal\xffthz HTTP/1.1",
])
def test_a_request_line_of_other_separators_or_version_digits_is_refused(
        ports: tuple[int, int], line: bytes) -> None:
    # RFC 9112 3: method SP request-target SP HTTP/DIGIT.DIGIT. The standard library
    # splits the line at any whitespace str.split() knows (NBSP, NEL, \x1c-\x1f, runs of
    # them, around it) and reads 01.1, 1.10, 00.9 as versions: each was answered 200,
    # where Go's net/http (or a proxy in front) reads another method, target or nothing.
    for port in ports:
        resp = raw(port, line + HOST)
        assert resp.startswith(b"HTTP/1.1 400"), (port, line, resp[:80])
        assert b"200 OK" not in resp and b"facts_age_s" not in resp, resp


def test_a_plain_request_line_is_still_answered(ports: tuple[int, int]) -> None:
    for port in ports:
        for version in (b"HTTP/1.1", b"HTTP/1.0"):
            resp = raw(port, b"GET /healthz?x=1 " + version + HOST)
            assert resp.startswith(b"HTTP/1.1 200"), (port, version, resp[:80])
        assert raw(port, b"GET /healthz\r\n\r\n").startswith(b"HTTP/1.1 505"), port
        assert raw(port, b"GET /healthz HTTP/2.0" + HOST).startswith(b"HTTP/1.1 505")


@pytest.mark.parametrize("length", [b"9" * 5000, b"1" + b"0" * 4400])
def test_a_content_length_of_thousands_of_digits_is_answered_413(
        ports: tuple[int, int], length: bytes) -> None:
    # int() of more than 4,300 digits raises ValueError: the sign-in POST, which anyone
    # reaching the port may send, was dropped unanswered and its traceback logged.
    resp = raw(ports[0], b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                         b"application/x-www-form-urlencoded\r\nContent-Length: "
                         + length + b"\r\n\r\ntoken=x")
    assert resp.startswith(b"HTTP/1.1 413"), resp[:80]


def test_leading_zeros_are_still_a_content_length(ports: tuple[int, int]) -> None:
    # RFC 9110 8.6: 1*DIGIT; zeros first are its value still (7), however many.
    resp = raw(ports[0], b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                         b"application/x-www-form-urlencoded\r\nContent-Length: "
                         + b"0" * 4400 + b"7\r\n\r\ntoken=x")
    assert resp.startswith(b"HTTP/1.1 "), resp[:80]
    assert not resp.startswith((b"HTTP/1.1 413", b"HTTP/1.1 400")), resp[:80]


@pytest.mark.parametrize("target", [
    b"/healthz?a=%20b+c&q=%zz",  # escapes, a '+', a broken escape: the handler's to read
    b"/healthz?a=[1]&b=|^{}`",  # visible ASCII curl -g, wget and Chromium send raw
    b"http://127.0.0.1/healthz?x=1",  # absolute-form: curl -x, a forward proxy
])
def test_what_real_clients_send_is_still_answered(ports: tuple[int, int], target: bytes) -> None:
    # Request lines as curl 7.88 (-g, -x), wget, busybox wget, requests/urllib3 and
    # headless Chromium sent them to both servers (each answered 200 there too).
    for port in ports:
        resp = raw(port, b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"User-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n")
        assert resp.startswith(b"HTTP/1.1 200"), (port, target, resp[:80])
