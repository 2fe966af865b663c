"""The daemon's HTTP handler: GET only, a Host allow-list, and browser security headers.

The GPU map is read in a browser, so a hostile web page the operator visits could try to
read it. DNS rebinding (a name of the attacker's that turns into 127.0.0.1) passes the
browser's same-origin check; the Host header still names the attacker's domain, so only
known names are answered: IP literals (rebinding needs a name), localhost, this
machine's host name, the listen address and ``http.allowed_hosts``. Every answer carries
a Content-Security-Policy that allows only the map's own files, and nosniff /
no-referrer / no-framing headers.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import socket
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any

from loguru import logger

from swarmgpu.core.httpguard import HEAD_DEADLINE_S, WRITE_DEADLINE_S, HeadTooLarge, read_head

SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def allowed_hosts(listen: str, extra: str = "") -> frozenset[str]:
    """Host names (lower case, no port) the daemon answers to, besides IP literals."""
    names = {"localhost", socket.gethostname().lower()}
    host = listen.rpartition(":")[0].strip("[]").lower()
    if host and host not in ("0.0.0.0", "::"):  # noqa: S104  (a comparison, not a bind)
        names.add(host)
    names.update(h.strip().lower().rstrip(".") for h in extra.split(",") if h.strip())
    return frozenset(names)


def host_of(header: str) -> str:
    """The host part of a Host header, lower case, without port or trailing dot."""
    h = header.strip().lower()
    if h.startswith("["):
        return h[1:h.find("]")] if "]" in h else h
    name, sep, port = h.rpartition(":")
    if sep and port.isdigit():
        h = name
    return h.rstrip(".")


def host_allowed(header: str | None, allowed: frozenset[str]) -> bool:
    if header is None:
        return True  # HTTP/1.0 clients (curl -0, probes): browsers always send Host
    h = host_of(header)
    try:
        ipaddress.ip_address(h)
        return True
    except ValueError:
        return h in allowed


class GuardedHandler(BaseHTTPRequestHandler):
    """One GET per connection, head within a deadline, Host checked, headers added.
    Subclasses implement ``answer(path, query) -> (status, content type, body)``."""

    allowed_hosts: frozenset[str] = frozenset({"localhost"})
    server_version = "swarmgpu"
    protocol_version = "HTTP/1.1"

    def answer(self, path: str, query: str) -> tuple[int, str, bytes]:
        raise NotImplementedError

    def log_message(self, format: str, *args: Any) -> None:
        return

    def handle_one_request(self) -> None:
        self.close_connection = True
        self.command = ""
        self.request_version = "HTTP/1.0"
        try:
            head = read_head(self.connection, HEAD_DEADLINE_S)
        except HeadTooLarge as e:
            self.connection.settimeout(WRITE_DEADLINE_S)
            self.send_error(e.status)
            return
        if not head:
            return
        self.connection.settimeout(WRITE_DEADLINE_S)
        real = self.rfile
        self.rfile = io.BytesIO(head)
        try:
            self.raw_requestline = self.rfile.readline()
            if not self.parse_request():
                return
        finally:
            self.rfile = real
        self.close_connection = True
        if self.command not in ("GET", "HEAD"):
            self._send(405, "text/plain; charset=utf-8", b"only GET and HEAD\n",
                       {"Allow": "GET, HEAD"})
            return
        host = self.headers.get("Host")
        if not host_allowed(host, self.allowed_hosts):
            logger.warning("HTTP request for host {!r} refused (DNS rebinding?); add it to "
                           "http.allowed_hosts if it is a real name of this manager",
                           (host or "")[:100])
            self._send(421, "text/plain; charset=utf-8",
                       b"host not allowed; add it to http.allowed_hosts\n")
            return
        try:
            path, _, query = self.path.partition("?")
            status, ctype, body = self.answer(path, query)
        except Exception:
            logger.exception("HTTP {} failed", self.path[:100])
            status, ctype, body = 500, "text/plain; charset=utf-8", b"internal error\n"
        with contextlib.suppress(OSError):
            self._send(status, ctype, body)
            self.wfile.flush()

    def _send(self, status: int, ctype: str, body: bytes,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        for k, v in {**SECURITY_HEADERS, **(extra or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        status = HTTPStatus(code)
        self.request_version = "HTTP/1.1"
        with contextlib.suppress(OSError):
            self._send(status.value, "text/plain; charset=utf-8",
                       f"{status.value} {status.phrase}\n".encode())
