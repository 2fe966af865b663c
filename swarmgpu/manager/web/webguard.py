"""The daemon's HTTP handler: GET only (and the sign-in page's POSTs), who is asking, a
Host allow-list, and browser security headers.

Who may read what is ``webauth``'s: beyond loopback, a manager certificate (a
connection whose first byte is a TLS handshake is served over HTTPS on the same port),
the bearer token or its session cookie; ``/healthz`` is open, and answered even on the
guard's reserved slots, so slow or hostile clients never make the healthcheck fail.

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
import socket
import ssl
import time
from http import HTTPStatus
from typing import Any

from loguru import logger

from swarmgpu.core.forwarded import BadForwarded, request_client
from swarmgpu.core.httpguard import (
    HEAD_DEADLINE_S,
    PLAIN,
    OneRequestHandler,
    Throttle,
    host_allowed,
)
from swarmgpu.core.peertext import peer_text
from swarmgpu.manager.web.webauth import (
    OPEN_PATHS,
    Answer,
    Caller,
    WebAuth,
    cookie_name,
    refused,
    too_many,
)
from swarmgpu.manager.web.webgzip import GzipMemo, encoded
from swarmgpu.manager.web.weblogin import (
    LOGIN_PATH,
    LOGIN_SCRIPT,
    LOGOUT_PATH,
    address_refused,
    cross_origin,
    forbidden,
    login_answer,
    login_page,
    login_script,
    logout_answer,
)
from swarmgpu.swarm.identity import PeerName, peer_name

TLS_HANDSHAKE = 0x16  # the first byte of a TLS record carrying a handshake
_HOST_REFUSED = Throttle()

SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "
        # no DOM sink takes a string (app.js builds nodes): one that did would throw
        "require-trusted-types-for 'script'; trusted-types 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
# The sign-in page alone may submit a form, and only to this origin (weblogin).
LOGIN_PAGE_HEADERS = {"Content-Security-Policy": SECURITY_HEADERS[
    "Content-Security-Policy"].replace("form-action 'none'", "form-action 'self'")}


class GuardedHandler(OneRequestHandler):
    """One GET per connection, head within a deadline (httpguard), HTTPS or HTTP on one
    port, the caller judged (``auth``), Host checked, security headers added.
    Subclasses implement ``answer(path, query) -> (status, content type, body)``."""

    allowed_hosts: frozenset[str] = frozenset({"localhost"})
    always_headers = SECURITY_HEADERS
    post_paths = frozenset({LOGIN_PATH, LOGOUT_PATH})  # the sign-in page's forms (weblogin)
    post_only_paths = frozenset({LOGOUT_PATH})  # a GET is weblogin's 405: a link signs no one out
    server_version = "swarmgpu"
    auth: WebAuth | None = None  # None: everyone (tests of the handler alone)
    # Whether this request's caller may read what is not open (set by ``respond``): an
    # open answer (/healthz) keeps what names the cluster for such a caller.
    trusted = True
    # Large answers gzipped once per body for every client that takes it (webgzip).
    gzip_memo = GzipMemo()

    def answer(self, path: str, query: str) -> tuple[int, str, bytes]:
        raise NotImplementedError

    def log_message(self, format: str, *args: Any) -> None:
        return

    def version_string(self) -> str:
        # The Server header of every answer, 401s and /healthz too: not the
        # interpreter's exact version (BaseHTTPRequestHandler adds "Python/3.x.y").
        return self.server_version

    def setup(self) -> None:
        self.tls_peer: PeerName | None = None
        self.via_tls = False
        self._dropped = False
        ctx = self.auth.server_context() if self.auth is not None else None
        if ctx is not None:
            self._maybe_tls(ctx)
        super().setup()

    def _maybe_tls(self, ctx: ssl.SSLContext) -> None:
        """HTTPS when the first byte is a TLS handshake, plain HTTP otherwise; both within
        the head deadline (the handshake as long again, as on the agent)."""
        deadline = time.monotonic() + float(self.timeout or HEAD_DEADLINE_S)
        sock = self.request
        try:
            sock.settimeout(float(self.timeout or HEAD_DEADLINE_S))
            first = sock.recv(1, socket.MSG_PEEK)
        except OSError:
            return  # gone or silent: read_head ends it
        if first[:1] != bytes([TLS_HANDSHAKE]):
            return
        try:
            sock.settimeout(max(0.1, deadline - time.monotonic()) + HEAD_DEADLINE_S)
            self.request = ctx.wrap_socket(sock, server_side=True)
        except (OSError, ValueError) as exc:
            logger.debug("TLS handshake from {} failed: {}", self.client_address[0], exc)
            self._dropped = True
            return
        self.via_tls = True
        cert = self.request.getpeercert() if isinstance(self.request, ssl.SSLSocket) else None
        self.tls_peer = peer_name(cert)
        if self.auth is not None and self.auth.judge(
                Caller("/", "", tls_peer=self.tls_peer)).proved:
            self.peer_authenticated()  # a manager: never evicted while it sends its head

    def handle(self) -> None:
        if not self._dropped:
            super().handle()

    def respond(self) -> None:
        host = self.headers.get("Host")
        if not host_allowed(host, self.allowed_hosts):
            if n := _HOST_REFUSED.due():
                logger.warning("HTTP request for host {!r} refused (DNS rebinding?); add it "
                               "to http.allowed_hosts if it is a real name of this manager "
                               "({} such since the last line)", (host or "")[:100], n)
            self.send_answer(421, PLAIN, b"host not allowed; add it to http.allowed_hosts\n")
            return
        path, _, query = self.path.partition("?")
        self.open_on_reserve = path in OPEN_PATHS  # /healthz is never starved
        if self.auth is not None:
            caller = self._caller(path, self.auth)
            if caller is None:
                return
            if path in (LOGIN_PATH, LOGIN_SCRIPT, LOGOUT_PATH):  # a cookie, or none
                self._sign_in(path, query, caller, self.auth)
                return
            # A token is a guess until it matched: a client's wrong ones are limited
            # (guesslimit), on every path (a right one shows on /healthz's detail too).
            guess = self.auth.take_try(caller) if caller.authorization is not None else None
            if guess is not None and guess.wait_s:
                self._send(too_many(guess.wait_s))
                return
            verdict = self.auth.judge(caller)
            self.auth.tried(guess, verdict.how in ("token", "manager-certificate"))
            self.trusted = verdict.how != "open" or self.auth.sees_everything(caller)
            if verdict.proved:
                self.peer_authenticated()
            if not verdict.allowed:
                self._send(refused())
                return
        try:
            status, ctype, body = self.answer(path, query)
        except Exception:
            # The path alone, cleaned (the client's text): a query may hold a secret.
            logger.exception("HTTP {} failed", peer_text(path, 100))
            status, ctype, body = 500, PLAIN, b"internal error\n"
        body, how = encoded(body, self.headers.get("Accept-Encoding"), self.gzip_memo)
        with contextlib.suppress(OSError):
            self.send_answer(status, ctype, body, how)

    def _caller(self, path: str, auth: WebAuth) -> Caller | None:
        """Who this request shows it is; None when a trusted proxy's X-Forwarded-For
        names no one client (answered 400: core.forwarded)."""
        peer = str(self.client_address[0]) if self.client_address else ""
        try:
            client = request_client(peer, self.headers, auth.trusted_proxies)
        except BadForwarded as exc:
            self.send_answer(HTTPStatus.BAD_REQUEST, PLAIN, f"400: {exc}\n".encode())
            return None
        return Caller(path, peer, self.headers.get("Authorization"),
                      self.headers.get("Cookie"), self.tls_peer,
                      cookie_name(auth.secure_cookie(self.via_tls)),
                      client if client != peer else "")

    def _sign_in(self, path: str, query: str, caller: Caller, auth: WebAuth) -> None:
        """The sign-in page and its script (anyone's), and its forms' POSTs (weblogin)."""
        if path == LOGIN_SCRIPT:
            self._send(login_script())
        elif path == LOGOUT_PATH and self.command != "POST":
            self._send(logout_answer(self.command, False))
        elif self.command != "POST":
            page = login_page()
            self._send(address_refused() if query else
                       Answer(page.status, page.ctype, page.body, LOGIN_PAGE_HEADERS))
        elif why := cross_origin(self.headers.get("Origin"), self.headers.get("Sec-Fetch-Site"),
                                 self.headers.get("Host")):
            self._send(forbidden(why))
        elif path == LOGOUT_PATH:
            self._send(logout_answer("POST", auth.secure_cookie(self.via_tls)))
        else:
            guess = auth.take_try(caller, form=True)
            if guess is not None and guess.wait_s:
                self._send(too_many(guess.wait_s))
                return
            a = login_answer(self.body, self.headers.get("Content-Type"), auth.token,
                             auth.secure_cookie(self.via_tls))
            auth.tried(guess, a.status != 401, compared=a.status != 415)  # 415: none was
            if a.status == 303:
                self.peer_authenticated()
            elif a.status == 401:
                auth.note_refused(caller)
            self._send(a)

    def _send(self, a: Answer) -> None:
        with contextlib.suppress(OSError):
            self.send_answer(a.status, a.ctype, a.body, dict(a.headers))
