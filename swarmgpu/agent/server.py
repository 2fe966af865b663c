"""The node agent: a small read-only HTTP server with this node's GPU facts and metrics.

Endpoints (GET and HEAD only; other methods get 405, unknown paths 404):

* ``/facts``: ``NodeFacts.to_dict()`` as JSON. Facts are read by a background thread
  every ``refresh_s``; a request only ever reads the cache, so a hanging NVML call
  cannot block it. When the cache is stale (the last refresh failed, or is older
  than twice ``refresh_s``) the last good facts are still served, with a line in
  their ``errors`` list and the headers ``X-Swarmgpu-Facts-Stale: 1`` and
  ``X-Swarmgpu-Facts-Age``. (The JSON keeps exactly the ``NodeFacts`` schema so that
  ``NodeFacts.from_dict`` reads it.) Before the first good read: 503.
* ``/metrics``: Prometheus text (``text/plain; version=0.0.4``) with dcgm-exporter's
  names (see :mod:`swarmgpu.agent.metrics`) plus ``swarmgpu_agent_*`` self metrics.
* ``/healthz``: ``{"status": "ok"|"degraded", "facts_age_s": ..., "error_count": N}``,
  plus ``"errors": [...]`` and ``"source"`` for a caller who may read /facts; always
  HTTP 200 once facts exist (degraded is still serving), 503 before.

Who may read (``swarm-pki``, the agent's default where the node has its Swarm
certificate): ``/facts`` and ``/metrics`` with per-process series only a client with a
``swarm-manager`` certificate of this node's own cluster (the daemon); ``/metrics``
without per-process series a bearer token (``--token-file``: Prometheus); ``/healthz``
anyone. Without TLS a token, when set, is required on ``/facts`` and ``/metrics``. A
client's wrong tokens are limited, then 429 (``access``). Without either (``--identity
none``, no token) a browser reads it too, so only a request naming an IP literal,
localhost, this host's name (its own or its facts'), the listen address or
``--allowed-hosts`` is answered; any other ``Host`` is a DNS rebinding page's (421).

The facts are read and cached by ``factscache``; the GPU values, where they come from
and the deadline on each reading, are ``sampling``'s.

Bounds: one request per connection; request line and headers each at most 8 KiB
(414 / 431), sent within ``HEAD_DEADLINE_S`` (the TLS handshake has as long again; a
plain-HTTP request to the HTTPS agent gets a plain 400 saying so);
request bodies are never read; the answer has a write deadline; at most
``MAX_CONNECTIONS`` connections at once, and when all are taken a newcomer pushes out the
oldest half-sent request of the address holding the most (httpguard.GuardedServer), so
no flood of slow connections, from the daemon's own address or from many, keeps the
daemon from /facts; ``/healthz`` is answered on the guard's reserved slots too (the
container's healthcheck).
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import ssl
import threading
import time
from dataclasses import replace
from http import HTTPStatus
from typing import Any

from loguru import logger

from swarmgpu.agent import access
from swarmgpu.agent.facts import FactSource
from swarmgpu.agent.factscache import FactsCache
from swarmgpu.agent.metrics import CONTENT_TYPE, AgentStats, render_metrics
from swarmgpu.agent.procattr import Attributor
from swarmgpu.agent.sampling import GuardedSampler, Sampler, default_sampler, empty_samples
from swarmgpu.core.forwarded import BadForwarded, Network, request_client
from swarmgpu.core.guesslimit import GuessLimit
from swarmgpu.core.healthcheck import HTTPS_ONLY, HTTPS_ONLY_HEADER
from swarmgpu.core.httpguard import (
    HEAD_DEADLINE_S,
    PLAIN,
    GuardedServer,
    OneRequestHandler,
    Throttle,
    allowed_hosts,
    host_allowed,
    host_of,
    query_cut,
)
from swarmgpu.core.httphead import HeadTooLarge, TooManyEmptyLines, read_head
from swarmgpu.core.listenhost import host_problem, no_port_v6
from swarmgpu.core.model import FACTS_AGE_HEADER, NodeFacts
from swarmgpu.core.peertext import peer_text
from swarmgpu.core.samples import GpuSample
from swarmgpu.core.sdnotify import sd_notify, watchdog_s
from swarmgpu.swarm.identity import ReloadingServerContext, is_manager_of, peer_name

SOCKET_TIMEOUT_S = 5.0  # the answer's write
MAX_CONNECTIONS = 256
# Loopback unless told otherwise: the stack and the systemd unit pass --listen to expose
# it to the managers (with identity swarm-pki, the default, the daemon checks who answers
# and the agent checks who asks).
DEFAULT_LISTEN = "127.0.0.1:9401"

_log = logger.bind(component="agent")
_HOST_REFUSED = Throttle()
_TLS_HANDSHAKE = b"\x16"  # a TLS record's first byte: a ClientHello

# Moved to factscache and sampling; named here still for their callers.
__all__ = ["DEFAULT_LISTEN", "AgentServer", "FactsCache", "GuardedSampler", "ListenError",
           "Sampler", "build_server", "default_sampler", "empty_samples", "parse_listen",
           "serve"]


class ListenError(Exception):
    """The agent cannot listen where it was told (the address taken, not this node's)."""


# --- listen address ------------------------------------------------------------


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``[V6]:PORT`` -> (host, port). Port 0 = any free port."""
    if bad := no_port_v6(listen, "9401"):  # the daemon's http.listen reads it so too
        raise ValueError(f"listen address {bad}")
    host, sep, port_s = listen.rpartition(":")
    # ASCII digits: '²' and '٩' are digits to isdigit (int() raised, or read them)
    if not sep or not (port_s.isascii() and port_s.isdigit()) or int(port_s) > 65535:
        raise ValueError(
            f"listen address {listen!r}: expected HOST:PORT, e.g. 0.0.0.0:9401 or [::]:9401"
        )
    host = host.strip("[]")
    if bad := host_problem(host, port_s):
        raise ValueError(f"listen address {listen!r}: {bad}")
    return host or "0.0.0.0", int(port_s)  # noqa: S104


# --- HTTP ------------------------------------------------------------------------


class AgentServer(GuardedServer):
    """The agent's HTTP server; ``shutdown()`` also stops the facts refresh.

    Connections are capped, fairly when full (a newcomer evicts the greediest address's
    oldest half-sent request), and each request head must arrive within one short
    deadline (httpguard), so a slowloris cannot keep /facts from the daemon.
    """

    def __init__(
        self,
        address: tuple[str, int],
        cache: FactsCache,
        sampler: GuardedSampler,
    ) -> None:
        self.max_connections = MAX_CONNECTIONS
        self.cache = cache
        self.sampler = sampler
        self._closed = False
        # Identity (swarmgpu.swarm.identity): HTTPS with the node's Swarm certificate, re-read
        # on rotation, and/or a bearer token required on /facts and /metrics.
        self.tls: ReloadingServerContext | None = None
        self.token: str | None = None
        self.guesses = GuessLimit(server="agent")  # wrong tokens per client (access)
        # Reverse proxies whose X-Forwarded-For names that client (core.forwarded).
        self.trusted_proxies: tuple[Network, ...] = ()
        # A failing sampler is said per window, not per scrape: anyone who may ask for
        # /metrics would write the log at the rate of their requests.
        self.sampler_said = Throttle()
        # Host names served without credentials (httpguard.host_allowed), besides IP
        # literals and the facts' host name.
        self.allowed_hosts: frozenset[str] = frozenset({"localhost"})
        super().__init__(address, _Handler)

    def shutdown(self) -> None:
        """Stop ``serve_forever`` (running in another thread), then release everything."""
        super().shutdown()
        self.close()

    def close(self) -> None:
        """Stop the refresh thread and the sampler, close the socket; idempotent."""
        if self._closed:
            return
        self._closed = True
        self.cache.stop()
        self.sampler.close()
        self.server_close()

    # --- what the endpoints answer (kept here so they are testable without HTTP) ---

    def facts_response(self) -> tuple[HTTPStatus, dict[str, str], bytes]:
        v = self.cache.view()
        if v.facts is None:
            body = {"error": "no facts read yet", "last_error": v.last_error}
            return HTTPStatus.SERVICE_UNAVAILABLE, {"Retry-After": "5"}, _json(body)
        facts = v.facts
        headers = {FACTS_AGE_HEADER: f"{v.age_s or 0.0:.1f}",
                   "X-Swarmgpu-Facts-Stale": "1" if v.stale else "0"}
        if v.stale:
            why = v.last_error or "no refresh for longer than twice the refresh period"
            facts = facts.with_errors(f"agent: stale facts, {v.age_s or 0.0:.0f}s old ({why})")
        return HTTPStatus.OK, headers, _json(facts.to_dict())

    def metrics_response(self, per_process: bool = True
                         ) -> tuple[HTTPStatus, dict[str, str], bytes]:
        """The metrics page; without ``per_process`` (a token, not a manager) the GPU
        processes and the services they belong to are left out."""
        v = self.cache.view()
        facts = v.facts if v.facts is not None else NodeFacts(hostname=socket.gethostname())
        t0 = time.monotonic()
        samples, err = self.sampler.sample()
        if not per_process:
            samples = [replace(s, processes=()) if s.processes else s for s in samples]
        duration = time.monotonic() - t0
        stats = AgentStats(
            facts_errors=len(facts.errors) + (1 if v.stale else 0),
            facts_age_s=v.age_s,
            refresh_failures_total=v.refresh_failures,
            scrape_duration_s=duration,
            sampler_ok=err is None,
        )
        if err is not None and (n := self.sampler_said.due()):
            _log.warning("{} ({} scrape(s) since the last such line)", err, n)
        return HTTPStatus.OK, {}, render_metrics(facts, samples, stats)

    def health(self, detail: bool = True) -> tuple[HTTPStatus, dict[str, Any]]:
        """/healthz. Without ``detail`` (a caller that may not read /facts: /healthz is
        open to anyone who reaches the port) the errors are only counted: their texts
        name GPU UUIDs, NVML and file errors, and the source its facts path, which /facts
        tells only to a manager of this swarm (the daemon's /healthz does the same)."""
        v = self.cache.view()
        errors: list[str] = []
        if v.facts is None:
            errors.append("no facts read yet")
        else:
            errors.extend(v.facts.errors)
            errors.extend(f"GPU {g.index} ({g.uuid}) unhealthy: {g.error or 'no reason given'}"
                          for g in v.facts.gpus if not g.healthy)
        if v.last_error:
            errors.append(v.last_error)
        elif v.stale and v.facts is not None:
            errors.append(f"facts are {v.age_s or 0.0:.0f}s old (refresh every "
                          f"{self.cache.refresh_s}s)")
        if self.sampler.inner_error:
            errors.append(self.sampler.inner_error)
        body: dict[str, Any] = {
            "status": "ok" if not errors else "degraded",
            "facts_age_s": None if v.age_s is None else round(v.age_s, 3),
            "error_count": len(errors),
        }
        if detail:
            body["errors"] = errors
            body["source"] = self.cache.source.spec
        code = HTTPStatus.OK if v.facts is not None else HTTPStatus.SERVICE_UNAVAILABLE
        return code, body


def _json(obj: Any) -> bytes:
    return json.dumps(obj, indent=1, sort_keys=False).encode() + b"\n"


class _Handler(OneRequestHandler):
    server: AgentServer
    timeout = HEAD_DEADLINE_S  # the TLS handshake's, and the request head's (httpguard)
    write_deadline_s = SOCKET_TIMEOUT_S
    always_headers = {"Cache-Control": "no-store"}
    error_detail = True

    def version_string(self) -> str:
        return "swarmgpu-agent"

    def setup(self) -> None:
        self._refused = self._plain = False
        self._client = ""  # whose wrong tokens a request counts as (respond)
        if self.server.tls is not None:
            # The handshake runs in this connection's thread, within the head deadline.
            deadline = time.monotonic() + float(self.timeout or HEAD_DEADLINE_S)
            self.request.settimeout(float(self.timeout or HEAD_DEADLINE_S))
            try:
                first = self.request.recv(1, socket.MSG_PEEK)
                if first and first != _TLS_HANDSHAKE:
                    # Plain HTTP (scheme: http): told so in plain text (handle), where a
                    # failed handshake closed it without a word.
                    self._plain = True
                    super().setup()
                    return
                self.request.settimeout(max(0.1, deadline - time.monotonic()))
                self.request = self.server.tls.get().wrap_socket(self.request,
                                                                 server_side=True)
            except (OSError, ValueError) as exc:
                _log.debug("TLS handshake from {} failed: {}", self.client_address[0], exc)
                self._refused = True
            else:
                tls = self.server.tls
                if tls.mutual and isinstance(self.request, ssl.SSLSocket) and \
                        is_manager_of(peer_name(self.request.getpeercert()), tls.cluster_id):
                    self.peer_authenticated()  # the daemon: never evicted (httpguard)
        super().setup()

    def handle(self) -> None:
        if self._plain:
            self._tell_plain_to_use_https()
        elif not self._refused:
            super().handle()

    def _tell_plain_to_use_https(self) -> None:
        """A 400 in plain text, once its head is in (read, so closing sends no reset that
        could destroy the answer before it is read); nothing of the node's."""
        self.close_connection = True
        self.command, self.request_version = "", "HTTP/1.1"
        self.requestline = "(plain HTTP to the HTTPS port)"
        with contextlib.suppress(HeadTooLarge, TooManyEmptyLines):
            read_head(self.connection, float(self.timeout or HEAD_DEADLINE_S))
        self.connection.settimeout(self.write_deadline_s)
        with contextlib.suppress(OSError):  # the client has gone; nothing to tell it
            self.send_answer(HTTPStatus.BAD_REQUEST, PLAIN,
                             f"400 {HTTPS_ONLY}: call it with https:// (Prometheus: scheme: "
                             "https)\n".encode(), headers={HTTPS_ONLY_HEADER: "1"})

    def _access(self, path: str) -> access.Access:
        """What this request may read of ``path`` (``access.judge``): a manager
        certificate, else the bearer token, its client's wrong tokens limited."""
        tls = self.server.tls
        mutual = tls is not None and tls.mutual
        manager = mutual and tls is not None and isinstance(self.request, ssl.SSLSocket) \
            and is_manager_of(peer_name(self.request.getpeercert()), tls.cluster_id)
        got = access.judge(path, authorization=self.headers.get("Authorization"),
                           manager=manager, mutual=mutual, token=self.server.token,
                           guesses=self.server.guesses, client_ip=self._client)
        if got.proved:
            self.peer_authenticated()  # the daemon, Prometheus: may use httpguard's reserve
        return got

    def _host_served(self) -> bool:
        """Whether the Host is one this agent serves on, where that matters: with TLS or a
        token a caller proves itself with what a browser cannot send, but without either
        a page whose name was rebound to this address (DNS rebinding) reads everything."""
        srv = self.server
        if srv.tls is not None or srv.token is not None:
            return True
        facts = srv.cache.view().facts
        # As a Host is read (host_of): lower case, no trailing dot ('gpu-a.' was 421)
        names = srv.allowed_hosts | ({host_of(facts.hostname)} if facts else set())
        return host_allowed(self.headers.get("Host"), names)

    def respond(self) -> None:
        path = self.path.split("?", 1)[0]
        # /healthz is small and quick: answered on the guard's reserved slots too, so
        # the container's healthcheck is never starved by slots busy answering others.
        self.open_on_reserve = path == "/healthz"
        if not self._host_served():
            if n := _HOST_REFUSED.due():
                _log.warning("request for host {!r} refused (DNS rebinding?); if it is a name "
                             "of this node, start the agent with --allowed-hosts NAME ({} "
                             "such since the last line)", peer_text(self.headers.get("Host")
                                                                   or "", 100), n)
            self.send_answer(HTTPStatus.MISDIRECTED_REQUEST, PLAIN,
                             b"host not served (DNS rebinding?); call the agent by IP address, "
                             b"localhost or its host name, or start it with --allowed-hosts "
                             b"NAME\n")
            return
        peer = str(self.client_address[0]) if self.client_address else ""
        try:
            self._client = request_client(peer, self.headers, self.server.trusted_proxies)
        except BadForwarded as exc:  # a trusted proxy's header names no one client
            self.send_answer(HTTPStatus.BAD_REQUEST, PLAIN, f"400: {exc}\n".encode())
            return
        got = self._access(path)
        if got.wait_s:
            status, ctype, body, headers = access.too_many(got.wait_s)
            self.send_answer(status, ctype, body, headers)
            return
        if not got.allowed:
            if self.server.token is not None and path == "/metrics":
                self.send_answer(HTTPStatus.UNAUTHORIZED, PLAIN, b"bearer token required\n",
                                 {"WWW-Authenticate": "Bearer"})
            elif self.server.tls is not None and self.server.tls.mutual:
                self.send_answer(HTTPStatus.FORBIDDEN, PLAIN,
                                 b"a swarm-manager certificate of this swarm is required\n")
            else:
                self.send_answer(HTTPStatus.UNAUTHORIZED, PLAIN, b"bearer token required\n",
                                 {"WWW-Authenticate": "Bearer"})
            return
        self._route(got.per_process)
        self.wfile.flush()

    def _route(self, per_process: bool = True) -> None:
        path = self.path.split("?", 1)[0]
        try:
            if path == "/facts":
                status, headers, body = self.server.facts_response()
                self.send_answer(status, "application/json", body, headers)
            elif path == "/metrics":
                status, headers, body = self.server.metrics_response(per_process)
                self.send_answer(status, CONTENT_TYPE, body, headers)
            elif path == "/healthz":
                # the detail to a caller who may read /facts (a limited one: none)
                code, h = self.server.health(detail=self._access("/facts").allowed)
                self.send_answer(code, "application/json", _json(h))
            else:
                self.send_answer(HTTPStatus.NOT_FOUND, PLAIN,
                                 b"not found; try /facts, /metrics or /healthz\n")
        except OSError:  # the client has gone; nothing to tell it
            return
        except Exception:  # a bug must not kill the agent; the client sees 500
            _log.exception("request {} failed", peer_text(path, 100))
            self.send_answer(HTTPStatus.INTERNAL_SERVER_ERROR, PLAIN, b"internal error\n")

    def log_message(self, format: str, *args: Any) -> None:
        # The request line is anyone's text (up to 8 KiB): cut and without control
        # characters, so no escape sequence reaches the operator's terminal (the
        # standard library's own log_message escapes them; this override must too),
        # and without its query, which may hold a secret.
        _log.debug("{} {}", self.client_address[0], peer_text(query_cut(format % args)))


# --- entry points ----------------------------------------------------------------


class _Attributed:
    """A sampler whose processes are named by ``attribute``; keeps the inner sampler's
    own ``error`` visible to GuardedSampler."""

    def __init__(self, base: Sampler, attribute: Attributor) -> None:
        self.base, self.attribute = base, attribute

    @property
    def error(self) -> str | None:
        owner = getattr(self.base, "__self__", self.base)
        err = getattr(owner, "error", None)
        return err if isinstance(err, str) else None

    def __call__(self) -> list[GpuSample]:
        # the clock before NVML lists the processes: a PID younger is a reused one
        listed_at = self.attribute.boot_clock()
        return self.attribute(self.base(), listed_at)


def build_server(
    source: FactSource,
    listen: str = DEFAULT_LISTEN,
    *,
    sampler: Sampler | None = None,
    refresh_s: float = 30.0,
    sample_timeout_s: float = 2.0,
    attribute: Attributor | None = None,
    tls: ReloadingServerContext | None = None,
    token: str | None = None,
    extra_hosts: str = "",
    trusted_proxies: tuple[Network, ...] = (),
) -> AgentServer:
    """Bind the server and start the facts refresh; call ``serve_forever()`` next.
    ``attribute`` names the owner of each GPU process (swarmgpu.agent.procattr), inside the
    sampler's deadline; ``extra_hosts`` (comma-separated) are names it answers to without
    credentials besides its own (``--allowed-hosts``); ``trusted_proxies``
    (``core.forwarded.parse_trusted``): reverse proxies whose X-Forwarded-For names
    whose wrong tokens a request counts as (``--trusted-proxies``)."""
    cache = FactsCache(source, refresh_s)
    chosen = sampler or default_sampler(source, lambda: cache.view().facts)
    if attribute is not None:
        chosen = _Attributed(chosen, attribute)
    guarded = GuardedSampler(chosen, sample_timeout_s)
    try:
        server = AgentServer(parse_listen(listen), cache, guarded)
    except OSError as exc:  # bind: said with the option and the fix, not a traceback
        raise ListenError(f"--listen {listen}: cannot listen there ({exc.strerror or exc}); "
                          "give a free port, or an address of this node (e.g. "
                          "0.0.0.0:9401)") from None
    server.tls, server.token = tls, token
    server.allowed_hosts = allowed_hosts(listen, extra_hosts)
    server.trusted_proxies = trusted_proxies
    cache.start()
    guarded.prime()
    return server


def serve(
    source: FactSource,
    listen: str = DEFAULT_LISTEN,
    *,
    sampler: Sampler | None = None,
    refresh_s: float = 30.0,
    stop_event: threading.Event | None = None,
    attribute: Attributor | None = None,
    tls: ReloadingServerContext | None = None,
    token: str | None = None,
    extra_hosts: str = "",
    trusted_proxies: tuple[Network, ...] = (),
) -> None:
    """Serve until ``stop_event`` is set (or forever); for ``swarmgpu agent``."""
    server = build_server(source, listen, sampler=sampler, refresh_s=refresh_s,
                          attribute=attribute, tls=tls, token=token,
                          extra_hosts=extra_hosts, trusted_proxies=trusted_proxies)
    host, port = server.server_address[:2]
    _log.info("agent serving {} on {}://{}:{} (refresh every {}s{})", source.spec,
              "https" if tls else "http", host, port, refresh_s,
              ", bearer token required" if token else "")
    _notify_systemd(server.cache, refresh_s)
    if stop_event is None and threading.current_thread() is threading.main_thread():
        # As PID 1 in a container the kernel gives SIGTERM no default action: without a
        # handler every stop would wait out the grace period and end in SIGKILL.
        stop_event = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop_event.set() if stop_event else None)
    if stop_event is not None:
        def _watch() -> None:
            stop_event.wait()
            server.shutdown()

        threading.Thread(target=_watch, name="agent-stop", daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        sd_notify("STOPPING=1")
        server.close()
        _log.info("agent stopped")


def _notify_systemd(cache: FactsCache, refresh_s: float) -> None:
    """Type=notify with a watchdog (systemd/swarmgpu-agent.service): READY=1 once the
    server is bound and the first facts read completed (or was refused: a file's error,
    served by /facts until fixed, which restarts would not mend), WATCHDOG=1 after every
    such read of the refresher, so a read hung in NVML lets systemd restart the agent.
    Nothing is sent outside systemd."""
    ready = threading.Event()

    def read() -> None:
        if not ready.is_set():
            ready.set()
            sd_notify("READY=1")
        sd_notify("WATCHDOG=1")

    cache.on_read = read
    if cache.view().facts is not None or cache.refused:  # (read before the hook was set)
        read()
    dog = watchdog_s()
    if dog is not None and dog < 2 * refresh_s + 30:
        _log.warning("WatchdogSec={:g}s is short for a refresh every {:g}s: a slow read "
                     "restarts the agent; use at least {:g}s", dog, refresh_s,
                     2 * refresh_s + 30)
