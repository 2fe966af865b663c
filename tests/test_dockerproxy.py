"""The docker socket proxy (swarmgpu docker-proxy): one list of calls, and only those.

``ALLOWED_CALLS`` is what the proxy lets through, what docs/security.md tables and what
swarmgpu/swarm/client.py calls: the first tests check that the three agree, the rest
run the real proxy in front of a recording stand-in for the engine's socket. On the
real swarm, the daemon's full cycles through it: tests/test_dockerproxy_swarm.py.
"""

from __future__ import annotations

import ast
import re
import socket
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from paths import REPO

from swarmgpu.swarm.dockerproxy import ALLOWED_CALLS, allowed, build_proxy

CLIENT = REPO / "swarmgpu" / "swarm" / "client.py"
SECURITY = REPO / "docs" / "security.md"
# APIClient's own plumbing, not Engine calls: how client.py posts what the SDK lacks.
_PLUMBING = {"_url", "_post_json", "_raise_for_status", "_result", "_get"}


def _doc_rows() -> set[tuple[str, str]]:
    """(method, path) of every row of the Engine-calls table in docs/security.md."""
    text = SECURITY.read_text()
    section = text.split("## The Docker socket is root-equivalent", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(GET|POST|PUT|DELETE|HEAD) ([^`]+)` \|", section, re.M)
    return {(m, p) for m, p in rows}


def _client_calls() -> set[str]:
    """What client.py asks the engine for: APIClient methods on ``self._api`` and the
    raw paths it builds with ``_url``, plus the SDK's own version query (APIClient())."""
    tree = ast.parse(CLIENT.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and \
                node.value.attr == "_api" and node.attr not in _PLUMBING:
            out.add(node.attr)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "_url" and node.args and \
                isinstance(node.args[0], ast.Constant):
            out.add(str(node.args[0].value))
        if isinstance(node, ast.Attribute) and node.attr in ("APIClient", "from_env"):
            out.add("APIClient()")
    return out


def test_docs_table_is_the_allow_list() -> None:
    assert _doc_rows() == {(c.method, c.path) for c in ALLOWED_CALLS}


def test_client_code_makes_exactly_the_listed_calls() -> None:
    listed = {name for c in ALLOWED_CALLS for name in c.client}
    assert _client_calls() == listed


@pytest.mark.parametrize(("method", "target", "ok"), [
    ("GET", "/version", True),
    ("GET", "/v1.43/nodes", True),
    ("GET", "/v1.43/nodes/abc123", True),
    ("POST", "/v1.43/nodes/abc123/update?version=12", True),
    ("POST", "/v1.43/services/svc_1/update?version=3", True),
    ("POST", "/v1.43/swarm/update?version=9&rotateWorkerToken=false", True),
    ("GET", "/v1.43/tasks?filters=%7B%7D", True),
    ("GET", "/v1.43/events?filters=x", True),
    ("POST", "/v1.43/containers/create", False),
    ("GET", "/v1.43/containers/json", False),
    ("DELETE", "/v1.43/nodes/abc123", False),
    ("POST", "/v1.43/nodes/abc123", False),
    ("GET", "/v1.43/swarm/unlockkey", False),
    ("POST", "/v1.43/swarm/leave", False),
    ("GET", "/v1.43/secrets", False),
    ("POST", "/v1.43/services/create", False),
    ("GET", "/v1.43/nodes/../containers/json", False),
    ("GET", "/v1.43/nodes/a%2F..%2Fb", False),
    ("GET", "/v1.43/services/x/logs", False),
    ("POST", "/v1.43/exec/abc/start", False),
])
def test_allow_list(method: str, target: str, ok: bool) -> None:
    assert (allowed(method, target) is not None) is ok


class _Engine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    seen: list[bytes]


class _EngineHandler(socketserver.BaseRequestHandler):
    server: _Engine

    def handle(self) -> None:
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            buf += chunk
        self.server.seen.append(buf)
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[Path, _Engine]]:
    engine_sock = tmp_path / "engine.sock"
    engine = _Engine(str(engine_sock), _EngineHandler)
    engine.seen = []
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    path = tmp_path / "proxy.sock"
    srv = build_proxy(f"unix://{path}", f"unix://{engine_sock}")
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    yield path, engine
    srv.shutdown()
    srv.server_close()
    engine.shutdown()
    engine.server_close()


def _send(path: Path, raw: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(str(path))
        s.sendall(raw)
        out = b""
        while chunk := s.recv(4096):
            out += chunk
        return out


def test_proxy_forwards_listed_calls_and_refuses_the_rest(proxy: tuple[Path, _Engine]
                                                          ) -> None:
    path, engine = proxy
    got = _send(path, b"GET /v1.43/nodes HTTP/1.1\r\nHost: docker\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"ok")
    body = b'{"Labels": {}}'
    got = _send(path, b"POST /v1.43/swarm/update?version=3 HTTP/1.1\r\nHost: docker\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(body), body))
    assert got.startswith(b"HTTP/1.1 200")
    assert len(engine.seen) == 2 and b"Connection: close" in engine.seen[1]
    for raw in (b"POST /v1.43/containers/create HTTP/1.1\r\nHost: d\r\nContent-Length: 0"
                b"\r\n\r\n",
                b"GET /v1.43/secrets HTTP/1.1\r\nHost: d\r\n\r\n",
                b"DELETE /v1.43/nodes/abc HTTP/1.1\r\nHost: d\r\n\r\n"):
        got = _send(path, raw)
        assert got.startswith(b"HTTP/1.1 403"), got
    assert len(engine.seen) == 2, "a refused call reached the engine"


def test_a_second_request_on_one_connection_never_reaches_the_engine(
        proxy: tuple[Path, _Engine]) -> None:
    """Keep-alive cannot smuggle an unchecked call behind a listed one."""
    path, engine = proxy
    got = _send(path, b"GET /v1.43/nodes HTTP/1.1\r\nHost: d\r\nConnection: keep-alive\r\n\r\n"
                b"POST /v1.43/containers/create HTTP/1.1\r\nHost: d\r\nContent-Length: 0"
                b"\r\n\r\n")
    assert got.count(b"HTTP/1.1") == 1
    assert len(engine.seen) == 1 and b"containers" not in engine.seen[0]
    assert b"keep-alive" not in engine.seen[0]


def test_chunked_bodies_and_tcp_beyond_loopback_are_refused(proxy: tuple[Path, _Engine]
                                                          ) -> None:
    path, engine = proxy
    got = _send(path, b"POST /v1.43/nodes/a/update?version=1 HTTP/1.1\r\nHost: d\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 411") and not engine.seen
    with pytest.raises(ValueError, match="loopback"):
        build_proxy("tcp://0.0.0.0:2375", "unix:///var/run/docker.sock")
