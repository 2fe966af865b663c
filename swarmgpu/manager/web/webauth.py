"""Who may read the daemon's HTTP: a manager certificate, the bearer token, or loopback.

``/api/v1/cluster`` names every node's address, every service and task, GPU UUIDs and
process IDs: what the agents give only to a swarm-manager certificate. So whenever the
daemon listens beyond loopback (``http.listen``; ``http.auth: auto``, the default),
everything but ``/healthz`` needs one of:

* a **swarm-manager certificate** of this swarm, over HTTPS on the same port (mutual
  TLS, as the agents ask: chain to the swarm root CA, O = this cluster, OU =
  swarm-manager, valid now). The daemon presents its manager's node certificate; a
  connection whose first byte is a TLS handshake is served over TLS, any other as plain
  HTTP;
* the **bearer token** of ``http.token_file`` (a Docker secret, at least
  MIN_TOKEN_CHARS): ``Authorization: Bearer <token>`` (Prometheus), compared in
  constant time; a client's wrong tokens are limited (``core.guesslimit``: then 429);
* the **session cookie** a browser gets by posting the token to ``/login`` (the sign-in
  form, ``weblogin``; HttpOnly, SameSite=Strict, Path=/; over HTTPS or with
  ``http.secure_cookie: always`` Secure and named ``__Host-swarmgpu_session``, the only
  name then read; its value is when it was issued and an HMAC of the token and that
  time, not the token, refused past SESSION_MAX_AGE_S); read before an
  ``Authorization`` header, as a manager certificate is: the header of a request with a
  valid session is not compared and takes no guess try;
* a **loopback** peer (the manager itself, an SSH tunnel to ``127.0.0.1:9402``), unless
  ``http.auth: required`` (behind a reverse proxy on the manager every client is
  loopback: require proof of everyone).

A daemon that listens on loopback only is open, as before. ``http.auth: off`` opens
everything (a warning at start).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from http import HTTPStatus
from pathlib import Path

from loguru import logger

from swarmgpu.core.config import HttpConfig
from swarmgpu.core.forwarded import parse_trusted
from swarmgpu.core.guesslimit import GuessLimit, Try
from swarmgpu.core.httpguard import Throttle
from swarmgpu.core.peertext import peer_text
from swarmgpu.swarm.identity import (
    MIN_TOKEN_CHARS,
    AgentAuth,
    IdentityError,
    PeerName,
    TokenRefused,
    is_manager_of,
    read_token,
    server_context_for_managers,
    token_matches,
)

AUTH_MODES = ("auto", "required", "off")
OPEN_PATHS = frozenset({"/healthz"})
SESSION_COOKIE = "swarmgpu_session"
# Its name where the browser sees HTTPS: __Host- cookies are kept only when Secure,
# Path=/ and without Domain, so no page on another of the host's names or ports over
# plain HTTP can set one the daemon would read (RFC 6265bis 4.1.3.2).
HOST_COOKIE = "__Host-" + SESSION_COOKIE
SESSION_MAX_AGE_S = 7 * 86400
_SESSION_CONTEXT = b"swarmgpu http session v2"
# A session issued this far ahead of the daemon's clock is still good: a clock stepped
# back (NTP) must not sign everyone out.
_SESSION_SKEW_S = 300
PLAIN = "text/plain; charset=utf-8"
UNAUTHORIZED_BODY = (
    b"401: this daemon answers only a swarm-manager certificate of its swarm (HTTPS on "
    b"this port, mutual TLS) or its bearer token (http.token_file): send "
    b"'Authorization: Bearer <token>', or sign in once at /login in a browser, "
    b"or reach it through an SSH tunnel to the manager's 127.0.0.1 (docs/security.md)\n")


def is_loopback(host: str) -> bool:
    """A loopback address or ``localhost`` (an IPv4-mapped ``::ffff:127.x`` too)."""
    h = host.strip("[]").lower()
    if h == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(h)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def listens_beyond_loopback(listen: str) -> bool:
    return not is_loopback(listen.rpartition(":")[0])


def auth_required(cfg: HttpConfig) -> bool:
    """Whether anything but /healthz needs proof: ``required``, or ``auto`` on a
    listen address that is not loopback."""
    if cfg.auth == "off":
        return False
    return cfg.auth == "required" or listens_beyond_loopback(cfg.listen)


def read_http_token(path: str) -> str:
    """``http.token_file``'s token: IdentityError when the file cannot be read,
    TokenRefused when it holds no token or one shorter than MIN_TOKEN_CHARS."""
    return read_token(path, min_chars=MIN_TOKEN_CHARS)


def token_file_problem(path: str) -> str | None:
    """Why ``http.token_file`` is refused when the configuration is loaded: this process
    reads it and it holds no token, or a short one. None when it is good, or cannot be
    read here (a Docker secret exists only in the container: the daemon says so at
    start, and answers no token)."""
    try:
        read_http_token(path)
    except TokenRefused as exc:
        return (f"http.token_file: {exc} (the stack's secret: docker secret rm "
                f"swarmgpu-http-token, then openssl rand -hex 32 | docker secret create "
                f"swarmgpu-http-token -; give Prometheus the same token)")
    except IdentityError:
        return None
    return None


def session_value(token: str, issued: int | None = None) -> str:
    """The cookie's value, ``<issued>.<HMAC>``: derived from the token (a new token ends
    every session), not the token itself (a cookie read off a browser is not
    Prometheus's token), and dated under the HMAC, so the daemon ends a session at
    SESSION_MAX_AGE_S itself (Max-Age binds only the browser, not a copied value)."""
    issued = int(time.time()) if issued is None else issued
    mac = hmac.new(token.encode(), _SESSION_CONTEXT + b"|" + str(issued).encode(),
                   hashlib.sha256).hexdigest()
    return f"{issued}.{mac}"


def cookie_values(header: str | None, name: str = SESSION_COOKIE) -> list[str]:
    """Every value of cookie ``name`` in a ``Cookie`` header."""
    out = []
    for part in (header or "").split(";"):
        k, sep, v = part.strip().partition("=")
        if sep and k.strip() == name:
            out.append(v.strip())
    return out


def cookie_name(secure: bool) -> str:
    """The session cookie's name: HOST_COOKIE where the browser sees HTTPS (the cookie
    is Secure), the plain name over plain HTTP (loopback, an SSH tunnel), where a
    browser would not keep a __Host- cookie."""
    return HOST_COOKIE if secure else SESSION_COOKIE


def cookie_matches(header: str | None, token: str, now: float | None = None,
                   name: str = SESSION_COOKIE) -> bool:
    """Exactly one session cookie ``name``, this token's (constant time), issued within
    SESSION_MAX_AGE_S. Another name is not read (over HTTPS the plain one is anyone's
    to set)."""
    values = cookie_values(header, name)
    if len(values) != 1:
        return False  # none, or two: ambiguous, refused
    issued, dot, _ = values[0].partition(".")
    if not dot or not issued.isascii() or not issued.isdigit() or len(issued) > 12:
        return False
    now = time.time() if now is None else now
    if not now - SESSION_MAX_AGE_S <= int(issued) <= now + _SESSION_SKEW_S:
        return False
    return hmac.compare_digest(values[0].encode(), session_value(token, int(issued)).encode())


@dataclass(frozen=True)
class Caller:
    """What one request shows about who sends it."""

    path: str
    peer_ip: str
    authorization: str | None = None
    cookie: str | None = None
    tls_peer: PeerName | None = None  # the verified client certificate (HTTPS only)
    cookie_name: str = SESSION_COOKIE  # the session's name on this connection (cookie_name)
    # The client a trusted proxy named (core.forwarded), "" for peer_ip: whose bucket
    # its tokens use; never who may read (a loopback peer is judged by peer_ip).
    client_ip: str = ""

    @property
    def guesser(self) -> str:
        """The address this request's tokens count against (guesslimit)."""
        return self.client_ip or self.peer_ip


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    how: str  # open | off | loopback | manager-certificate | token | cookie | "" (refused)

    @property
    def proved(self) -> bool:
        """The caller proved who it is (httpguard: never evicted, may use the reserve)."""
        return self.how in ("manager-certificate", "token", "cookie")


def judge(caller: Caller, *, required: bool, loopback_open: bool, token: str | None,
          cluster_id: str | None) -> Verdict:
    """Whether ``caller`` may read its path. Pure: the rules of the module docstring."""
    if is_manager_of(caller.tls_peer, cluster_id):
        return Verdict(True, "manager-certificate")
    if token is not None:
        # The session first, as a certificate: its header then is not read (``take_try``)
        if cookie_matches(caller.cookie, token, name=caller.cookie_name):
            return Verdict(True, "cookie")
        if token_matches(caller.authorization, token):
            return Verdict(True, "token")
    if caller.path in OPEN_PATHS:
        return Verdict(True, "open")
    if not required:
        return Verdict(True, "off")
    if loopback_open and is_loopback(caller.peer_ip):
        return Verdict(True, "loopback")
    return Verdict(False, "")


@dataclass(frozen=True)
class Answer:
    status: int
    ctype: str
    body: bytes
    headers: Mapping[str, str]


def refused() -> Answer:
    return Answer(HTTPStatus.UNAUTHORIZED, PLAIN, UNAUTHORIZED_BODY,
                  {"WWW-Authenticate": 'Bearer realm="swarmgpu"'})


def too_many(wait_s: int) -> Answer:
    """429: this client sent too many wrong tokens (guesslimit); its token is not read."""
    return Answer(
        HTTPStatus.TOO_MANY_REQUESTS, PLAIN,
        f"429: too many wrong tokens from this address: retry in {wait_s} s (the token "
        f"is not compared until then; a signed-in browser's session still works)\n"
        .encode(), {"Retry-After": str(wait_s)})


def session_cookie(token: str | None, secure: bool) -> str:
    """The Set-Cookie of a session: the whole host (Path=/, no Domain), never for a
    script (HttpOnly), never sent by another site's request (SameSite=Strict); Secure
    and __Host- prefixed where the browser sees HTTPS (``cookie_name``). None: the
    session cleared (sign out), in the same scope, or the browser keeps it."""
    value, age = ((session_value(token), SESSION_MAX_AGE_S) if token is not None
                  else ("", 0))
    return (f"{cookie_name(secure)}={value}; Path=/; HttpOnly; SameSite=Strict; "
            f"Max-Age={age}" + ("; Secure" if secure else ""))


class WebAuth:
    """The daemon's HTTP identity: its mode, the token, and the HTTPS context that asks
    for manager certificates (built from the manager's own certificate and the swarm
    root CA once the daemon has read them: ``update``)."""

    def __init__(self, cfg: HttpConfig) -> None:
        self.cfg = cfg
        self.required = auth_required(cfg)
        self.loopback_open = cfg.auth == "auto"
        if cfg.auth == "off" and listens_beyond_loopback(cfg.listen):
            logger.warning("http.auth is off and the daemon listens on {}: anyone who "
                           "reaches it reads the cluster; set http.auth: auto", cfg.listen)
        self.token: str | None = None
        if cfg.token_file:
            try:
                self.token = read_http_token(cfg.token_file)
            except IdentityError as exc:
                logger.error("http.token_file: {}; the daemon's HTTP answers no token "
                             "(only manager certificates{})", exc,
                             ", loopback" if self.loopback_open else "")
        self._lock = threading.Lock()
        self._ctx: ssl.SSLContext | None = None
        self._cluster_id: str | None = None
        self._stamp: tuple[object, ...] | None = None
        self._last_error: str | None = None
        self._refused = Throttle()
        self.guesses = GuessLimit()  # wrong tokens per client address (core.guesslimit)
        # Proxies whose X-Forwarded-For names the client (checked at config load).
        self.trusted_proxies = parse_trusted(cfg.trusted_proxies)

    # --- the HTTPS side ------------------------------------------------------

    def server_context(self) -> ssl.SSLContext | None:
        with self._lock:
            return self._ctx if self.required else None

    @property
    def cluster_id(self) -> str | None:
        with self._lock:
            return self._cluster_id

    def update(self, auth: AgentAuth) -> None:
        """Rebuild the HTTPS context when the manager's certificate, key, the root CA or
        the cluster ID changed (Swarm rotation); a failure keeps the last good one."""
        if not self.required or auth.tls is None or auth.cert is None or auth.key is None:
            return
        try:
            stamp = (_file_stamp(auth.cert), _file_stamp(auth.key), auth.trust_root,
                     auth.tls.cluster_id)
            if stamp == self._stamp:
                return
            ctx = server_context_for_managers(auth.cert, auth.key, auth.trust_root)
        except (IdentityError, OSError) as exc:
            self.failed(str(exc))
            return
        with self._lock:
            first = self._ctx is None
            self._ctx, self._cluster_id, self._stamp = ctx, auth.tls.cluster_id, stamp
            self._last_error = None
        if first:
            logger.info("HTTP: HTTPS on the same port for swarm-manager certificates of "
                        "cluster {} (the daemon presents {})", auth.tls.cluster_id[:12],
                        auth.cert)

    def failed(self, why: str) -> None:
        """The manager's certificate cannot be used now: say so once per reason."""
        if why != self._last_error:
            self._last_error = why
            logger.warning("HTTP: no HTTPS for manager certificates ({}); the token{} "
                           "still open the map and the API", why,
                           " and loopback" if self.loopback_open else "")

    # --- per request -----------------------------------------------------------

    def secure_cookie(self, via_tls: bool) -> bool:
        """Whether the session cookie is Secure: over the daemon's own HTTPS, or always
        where the operator says HTTPS ends at a proxy in front (``http.secure_cookie``).
        A request's X-Forwarded-Proto is not read: any client may send one."""
        return via_tls or self.cfg.secure_cookie == "always"

    def judge(self, caller: Caller) -> Verdict:
        v = judge(caller, required=self.required, loopback_open=self.loopback_open,
                  token=self.token, cluster_id=self.cluster_id)
        if not v.allowed:
            self.note_refused(caller)
        return v

    def take_try(self, caller: Caller, form: bool = False) -> Try | None:
        """A token try of ``caller`` (an Authorization header, a sign-in POST) from its
        address's bucket (guesslimit), or None where tries are not counted: no token to
        guess, or the caller is let in without one (auth off or loopback-only, a
        loopback client under auto), or a manager certificate or a session cookie
        proves the caller (read first, the header then not compared: a manager or a
        signed-in browser is never limited by its address's wrong tokens, nor uses them
        up with a stray header). Not so the sign-in ``form``'s token, compared whatever
        cookie comes with it: a cookie copied off a browser (days) must not buy unlimited
        guesses of the token. A Try with ``wait_s`` is answered ``too_many``."""
        if self.token is None or not self.required or (
                self.loopback_open and is_loopback(caller.peer_ip)) or \
                is_manager_of(caller.tls_peer, self.cluster_id) or (not form and cookie_matches(
                    caller.cookie, self.token, name=caller.cookie_name)):
            return None
        return self.guesses.take(caller.guesser)

    def tried(self, t: Try | None, right: bool, compared: bool = True) -> None:
        """The try's token was right (or not ``compared``): given back, and a right one
        keeps its client a bucket of its own (guesslimit). A wrong one stays taken."""
        if t is not None and right:
            self.guesses.give_back(t, proved=compared)

    def sees_everything(self, caller: Caller) -> bool:
        """Whether ``caller`` may read what is not open (no log line): an open path such
        as /healthz tells only such a caller what the cycle's errors name (nodes, agent
        addresses), which is /api/v1/cluster's to tell."""
        return judge(replace(caller, path="/"), required=self.required,
                     loopback_open=self.loopback_open, token=self.token,
                     cluster_id=self.cluster_id).allowed

    def note_refused(self, caller: Caller) -> None:
        """A refused request, logged (throttled)."""
        if n := self._refused.due():
            # The path is anyone's to write: cleaned (an escape sequence in it would reach
            # the operator's terminal through the log), as all peer input is.
            logger.warning("HTTP {} from {} refused (401: no manager certificate, token or "
                           "session); {} refused since the last such line",
                           peer_text(caller.path, 80), caller.guesser, n)

    def describe(self) -> str:
        """One line for the start-up log: who may read what."""
        if self.cfg.auth == "off":
            return "http.auth is off: open to anyone who reaches it"
        if not self.required:
            return "loopback only: open to local clients (an SSH tunnel from elsewhere)"
        ways = ["a swarm-manager certificate (HTTPS)"]
        if self.token is not None:
            ways.append("the bearer token of http.token_file (the /login form in a browser)")
        if self.loopback_open:
            ways.append("loopback clients")
        return "everything but /healthz needs " + ", or ".join(ways)


def _file_stamp(path: Path) -> tuple[float, int, int]:
    st = os.stat(path)
    return st.st_mtime, st.st_ino, st.st_size
