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
import ipaddress
import socket
from typing import Any

from loguru import logger

from swarmgpu.core.httpguard import PLAIN, OneRequestHandler

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


class GuardedHandler(OneRequestHandler):
    """One GET per connection, head within a deadline (httpguard), Host checked, security
    headers added. Subclasses implement ``answer(path, query) -> (status, content type,
    body)``."""

    allowed_hosts: frozenset[str] = frozenset({"localhost"})
    always_headers = SECURITY_HEADERS
    server_version = "swarmgpu"

    def answer(self, path: str, query: str) -> tuple[int, str, bytes]:
        raise NotImplementedError

    def log_message(self, format: str, *args: Any) -> None:
        return

    def respond(self) -> None:
        host = self.headers.get("Host")
        if not host_allowed(host, self.allowed_hosts):
            logger.warning("HTTP request for host {!r} refused (DNS rebinding?); add it to "
                           "http.allowed_hosts if it is a real name of this manager",
                           (host or "")[:100])
            self.send_answer(421, PLAIN, b"host not allowed; add it to http.allowed_hosts\n")
            return
        try:
            path, _, query = self.path.partition("?")
            status, ctype, body = self.answer(path, query)
        except Exception:
            logger.exception("HTTP {} failed", self.path[:100])
            status, ctype, body = 500, PLAIN, b"internal error\n"
        with contextlib.suppress(OSError):
            self.send_answer(status, ctype, body)
            self.wfile.flush()
