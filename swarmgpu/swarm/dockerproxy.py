"""A least-privilege door to the Docker socket: exactly the calls the daemon makes.

The docker group is root-equivalent (start a privileged container, own the host). The
daemon needs much less: read Swarm objects, and update node labels, service specs and
the swarm's own labels. ``swarmgpu docker-proxy`` listens on a unix socket (or loopback
TCP) and forwards a request to the engine only when its method and path are in
``ALLOWED_CALLS``; anything else gets 403 and never reaches the engine. The same list
is the table in docs/security.md and what ``swarmgpu/swarm/client.py`` calls, which
``tests/test_dockerproxy.py`` checks, so the three cannot drift apart.

One request per connection: the proxy forces ``Connection: close`` both ways, so a
keep-alive connection cannot carry a second, unchecked request. Request bodies need a
``Content-Length`` (the docker SDK sends one) and are capped; chunked bodies get 411.
The answer is streamed back as it comes (``GET /events`` is a long-lived stream).
"""

from __future__ import annotations

import contextlib
import re
import socket
import socketserver
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import unquote, urlsplit

from loguru import logger

_log = logger.bind(component="docker-proxy")

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 4 * 1024 * 1024  # a service spec is a few KiB; the swarm spec too
HEAD_DEADLINE_S = 10.0
_VERSION = re.compile(r"^/v[0-9]{1,2}\.[0-9]{1,3}(?=/)")
_ID = "[A-Za-z0-9][A-Za-z0-9_.-]{0,127}"  # node/service IDs and names


@dataclass(frozen=True)
class Call:
    """One Engine API call the daemon makes: method, path as the docs write it
    (``{id}`` for an object ID or name), the code in client.py that makes it (docker
    SDK ``APIClient`` methods, or the raw path it posts to), and why."""

    method: str
    path: str
    client: tuple[str, ...]
    why: str

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        return re.compile("^" + re.escape(self.path).replace(re.escape("{id}"), _ID) + "$")


# The single source of truth: the proxy allows these, docs/security.md tables them, and
# tests/test_dockerproxy.py checks that client.py makes no other call.
ALLOWED_CALLS: tuple[Call, ...] = (
    Call("GET", "/version", ("APIClient()",),
         "the docker SDK asks the engine's API version when it connects"),
    Call("GET", "/info", ("info",), "this engine's Swarm node ID, cluster ID, data root"),
    Call("GET", "/swarm", ("inspect_swarm",),
         "the swarm root CA agents' certificates must chain to; the workload model label"),
    Call("GET", "/nodes", ("nodes",), "snapshot"),
    Call("GET", "/nodes/{id}", ("inspect_node",), "leader check; read before write"),
    Call("GET", "/services", ("services",), "snapshot"),
    Call("GET", "/services/{id}", ("inspect_service",), "read before write"),
    Call("GET", "/tasks", ("tasks",), "snapshot (desired-state running)"),
    Call("GET", "/events", ("events",), "a cycle on every node or service change (stream)"),
    Call("POST", "/nodes/{id}/update", ("update_node",),
         "node labels under the prefix: facts, placement gates, the GPU ledger"),
    Call("POST", "/services/{id}/update", ("/services/{0}/update",),
         "placement and moves: swarmgpu.* service labels, the gate, the device env"),
    Call("POST", "/swarm/update", ("/swarm/update",),
         "the learned workload model, a label on the swarm object (swarmgpu.state.workload)"),
)


def allowed(method: str, target: str) -> Call | None:
    """The call ``method target`` is, when the daemon may make it (None: refuse).
    ``target`` is the request target: an optional /vX.Y prefix and a query are fine;
    an encoded slash or dot segment never matches."""
    path = urlsplit(target).path
    if unquote(path) != path or "/../" in path + "/" or "/./" in path + "/":
        return None
    path = _VERSION.sub("", path, count=1)
    for call in ALLOWED_CALLS:
        if call.method == method and call.pattern.match(path):
            return call
    return None


# --- the proxy server ------------------------------------------------------------


def _read_head(sock: socket.socket) -> tuple[bytes, bytes] | None:
    """(head, the body bytes already read), or None when no whole head came in time."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEAD_BYTES:
            return None
        chunk = sock.recv(16 * 1024)
        if not chunk:
            return None
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def _answer(sock: socket.socket, status: str, text: str) -> None:
    body = text.encode() + b"\n"
    sock.sendall(f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: "
                 f"{len(body)}\r\nConnection: close\r\n\r\n".encode() + body)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while chunk := src.recv(64 * 1024):
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


class _Handler(socketserver.BaseRequestHandler):
    server: ProxyServer
    request: socket.socket

    def handle(self) -> None:
        sock = self.request
        sock.settimeout(HEAD_DEADLINE_S)
        try:
            got = _read_head(sock)
            if got is None:
                return
            head, rest = got
            lines = head.split(b"\r\n")
            parts = lines[0].decode("latin-1").split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                _answer(sock, "400 Bad Request", "not an HTTP/1.x request")
                return
            method, target, _ = parts
            call = allowed(method, target)
            if call is None:
                self.server.refused += 1
                _log.warning("refused {} {} (not a call swarmgpu makes; "
                             "docs/security.md)", method[:10], target[:200])
                _answer(sock, "403 Forbidden", f"swarmgpu docker-proxy: {method[:10]} "
                        f"{urlsplit(target).path[:200]} is not a call the daemon makes")
                return
            headers, length, chunked = self._headers(lines[1:])
            if chunked:
                _answer(sock, "411 Length Required", "chunked request bodies are refused")
                return
            if length > MAX_BODY_BYTES:
                _answer(sock, "413 Payload Too Large", f"bodies above {MAX_BODY_BYTES} bytes")
                return
            body = rest
            while len(body) < length:
                chunk = sock.recv(min(64 * 1024, length - len(body)))
                if not chunk:
                    return
                body += chunk
            self._forward(sock, lines[0], headers, body[:length], call)
        except (OSError, ValueError, UnicodeError):
            return

    @staticmethod
    def _headers(lines: list[bytes]) -> tuple[list[bytes], int, bool]:
        out: list[bytes] = []
        length, chunked = 0, False
        for line in lines:
            name, sep, value = line.partition(b":")
            key = name.strip().lower()
            if not sep:
                raise ValueError("malformed header")
            if key in (b"connection", b"keep-alive", b"proxy-connection"):
                continue  # replaced: one request per connection
            if key == b"content-length":
                length = int(value.strip())
            if key == b"transfer-encoding":
                chunked = True
            out.append(line)
        return out, length, chunked

    def _forward(self, sock: socket.socket, request_line: bytes, headers: list[bytes],
                 body: bytes, call: Call) -> None:
        up = self.server.connect_upstream()
        try:
            up.sendall(b"\r\n".join([request_line, *headers, b"Connection: close"])
                       + b"\r\n\r\n" + body)
            sock.settimeout(None)  # an events stream stays open as long as the engine's
            up.settimeout(None)
            self.server.forwarded += 1
            _pipe(up, sock)
        finally:
            up.close()


class ProxyServer(socketserver.ThreadingMixIn, socketserver.BaseServer):
    """Shared by the unix and TCP flavours (``serve`` picks one)."""

    daemon_threads = True
    connect_upstream: Callable[[], socket.socket]
    refused = 0
    forwarded = 0


class _UnixProxy(ProxyServer, socketserver.UnixStreamServer):
    pass


class _TcpProxy(ProxyServer, socketserver.TCPServer):
    allow_reuse_address = True


def upstream_connector(upstream: str) -> Callable[[], socket.socket]:
    """A function that opens a connection to the engine (``unix://PATH``)."""
    if not upstream.startswith("unix://"):
        raise ValueError(f"upstream {upstream!r}: use unix:///var/run/docker.sock")
    path = upstream.removeprefix("unix://")

    def connect() -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(path)
        return s

    return connect


def build_proxy(listen: str, upstream: str) -> ProxyServer:
    """Bind (``unix://PATH`` or ``tcp://127.0.0.1:PORT``); call ``serve_forever`` next."""
    connect = upstream_connector(upstream)
    server: ProxyServer
    if listen.startswith("unix://"):
        import os

        path = listen.removeprefix("unix://")
        if os.path.exists(path):
            os.unlink(path)  # a stale socket of a previous run
        old = os.umask(0o117)  # owner and group only, like the engine's own socket
        try:
            server = _UnixProxy(path, _Handler)
        finally:
            os.umask(old)
    elif listen.startswith("tcp://"):
        host, _, port = listen.removeprefix("tcp://").rpartition(":")
        if host not in ("127.0.0.1", "localhost", "::1") or not port.isdigit():
            raise ValueError(f"listen {listen!r}: TCP only on loopback, e.g. "
                             "tcp://127.0.0.1:2375 (the proxy has no authentication)")
        server = _TcpProxy((host, int(port)), _Handler)
    else:
        raise ValueError(f"listen {listen!r}: use unix://PATH or tcp://127.0.0.1:PORT")
    server.connect_upstream = connect
    return server


def serve(listen: str, upstream: str, stop: threading.Event | None = None) -> None:
    server = build_proxy(listen, upstream)
    _log.info("docker-proxy on {} -> {}: {} calls allowed, everything else 403", listen,
              upstream, len(ALLOWED_CALLS))
    if stop is not None:
        def _watch() -> None:
            stop.wait()
            server.shutdown()

        threading.Thread(target=_watch, daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
