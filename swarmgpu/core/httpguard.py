"""What both HTTP servers (agent and daemon) need to survive hostile clients.

* a connection cap that is fair when full (``GuardedServer``): a new connection is
  never refused while someone holds a half-sent request; the address holding the most
  connections loses its oldest half-sent one instead (``pick_victim``). So slow
  connections (slowloris), from one address or from hundreds, only ever push out each
  other, and the daemon scraping an agent or Prometheus scraping the daemon gets in;
* a reserve for authenticated peers: the handler calls ``peer_authenticated()`` once
  the peer has proved who it is (a manager certificate, the bearer token); such a
  connection is never evicted, and when every connection is busy answering, a few more
  are let in that answer only such a peer;
* a short whole-request deadline for the request head (``HEAD_DEADLINE_S``): each read
  waits at most what is left of it, so an idle connection, or one header byte every few
  seconds, ends at the deadline, not never;
* one write deadline for the whole answer (``WRITE_DEADLINE_S``, not per send): a
  client that never reads cannot hold a thread for longer; and when every connection is
  taken, an answer stuck in writing for ``STUCK_WRITE_S`` (its reader does not read) is
  closed to make room, like a half-sent request: complete requests whose answers are
  never read do not hold the slots (``pick_victim``);
* a handler may answer on a reserved slot without proof (``open_on_reserve``): the
  daemon's ``/healthz``, which the image's healthcheck reads, is never starved;
* one GET or HEAD per connection (``OneRequestHandler``), its head read and checked by
  ``httphead`` (a few empty lines before it ignored), HTTP/0.x 505 (0.9's answer has no
  status line, so a refusal would read as the page), other methods 405, an HTTP/1.1
  request without Host or any with two lines of a field read once (``READ_ONCE``: Host,
  Authorization, Cookie, Content-Length) 400, an absolute-form target served by its
  path, its authority the Host (``absolute_form``), a target with a fragment (``#``,
  which a client keeps: a link's ``#token=``) 400, unread and unlogged, and a request
  line or header lines two parsers read apart (``head_fault``: other separators than
  one space, a version not DIGIT.DIGIT; no colon, a space before it, folding, a bare
  CR, a control byte) 400, a Host that is no ``host[:port]`` (``host_fault``) 400; a
  POST only to a path the handler names (``post_paths``: the daemon's sign-in form), its
  body short (``MAX_BODY_BYTES``, a longer Content-Length
  413 however many digits), with one Content-Length, and in within the head's deadline
  (a 100 Continue only then, once its head is taken: never to a request whose body is
  not read);
* the Host a request names (``host_allowed``): where a browser may read without
  credentials, a name that is not an IP literal or one of the server's own is a DNS
  rebinding page's (421);
* ``Throttle``: at most one log line per 10 s for refusals anyone can cause; a request
  line is logged with its query cut (``query_cut``).

The standard library's ``BaseHTTPRequestHandler`` has only a per-read timeout.
"""

from __future__ import annotations

import contextlib
import errno
import io
import ipaddress
import queue
import re
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from loguru import logger

from swarmgpu.core.httphead import (
    MAX_EMPTY_LINES,
    READ_ONCE,
    HeadTooLarge,
    TargetRefused,
    TlsToPlain,
    TooManyEmptyLines,
    absolute_form,
    head_fault,
    host_fault,
    read_head_and_rest,
)
from swarmgpu.core.loopbackbind import bound_host
from swarmgpu.core.servererrors import LoggedErrors

# errno of a socket the guard closed (evicted) or the peer dropped mid-request.
_PEER_GONE = frozenset({errno.EBADF, errno.ENOTCONN, errno.ECONNRESET, errno.EPIPE})

# An honest client sends its request head in one packet, within a round trip or two of
# connecting (a TLS handshake is a deadline of its own, as long); a slower one is not
# worth a thread.
HEAD_DEADLINE_S = 2.0
WRITE_DEADLINE_S = 10.0
# An answer that fits the socket buffers is written in microseconds; one still being
# written after this long waits on a reader that does not read (or reads a few bytes a
# second), and may be closed for a newcomer when every slot is taken.
STUCK_WRITE_S = 0.5
WRITE_CHUNK = 64 * 1024
MAX_BODY_BYTES = 4 * 1024  # a sign-in form: one token (identity.MAX_TOKEN_BYTES) and its name
PLAIN = "text/plain; charset=utf-8"


# A query in a request line, up to the next blank or quote (log_request quotes the line).
_QUERY = re.compile(r"\?[^\s\"']*")


def query_cut(text: str) -> str:
    """``text`` (a log line made of request lines) with each query cut to ``?...``: a
    query may hold a secret a client put there, and the path says what was asked."""
    return _QUERY.sub("?...", text)


def allowed_hosts(listen: str, extra: str = "") -> frozenset[str]:
    """Host names (lower case, no port) a server answers to, besides IP literals:
    localhost, this machine's name, the listen address's host and ``extra``
    (comma-separated)."""
    names = {"localhost", host_of(socket.gethostname())}  # as a Host is read
    # (no trailing dot, as a Host is read; not host_of: a bare '::1' has no port)
    host = listen.rpartition(":")[0].strip("[]").lower().removesuffix(".")
    if host and host not in ("0.0.0.0", "::"):  # noqa: S104  (a comparison, not a bind)
        names.add(host)
    # As a Host header is read (no port, no trailing dot): a name given with its port
    # would never match.
    names.update(host_of(h) for h in extra.split(",") if h.strip())
    return frozenset(names)


# A host name: RFC 1123 labels, '_' too (Linux host names may hold it), either case (ASCII
# only: under re.IGNORECASE alone the Kelvin sign would match 'k'). The agent and metrics
# URLs' ``{hostname}`` and the allowed Host names are both judged by it.
_HOST_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
HOST_NAME = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*", re.IGNORECASE | re.ASCII)


def host_of(header: str) -> str:
    """The host part of a Host header, lower case, without port or trailing dot."""
    h = header.strip().lower()
    if h.startswith("["):
        # "[IPv6]" or "[IPv6]:port" (RFC 3986 3.2.2); more after "]" is no literal, kept
        # whole so that no IP or name matches it
        inside, close, after = h[1:].partition("]")
        return inside if close and re.fullmatch(r"(?::[0-9]*)?", after) else h
    name, sep, port = h.rpartition(":")
    # An empty port is the host alone (RFC 3986 3.2.3, as nginx reads it: 'localhost:'
    # was a name of its own, 421); a bare IPv6 address ('fe80::') keeps its colon.
    if sep and (port.isdigit() or (not port and ":" not in name)):
        h = name
    return h.rstrip(".")


def host_allowed(header: str | None, allowed: frozenset[str]) -> bool:
    """Whether a request naming ``header`` is no DNS rebinding page's: an IP literal
    (rebinding needs a name) or a name in ``allowed``."""
    if header is None:
        return True  # HTTP/1.0 clients (curl -0, probes): browsers always send Host
    h = host_of(header)
    try:
        ipaddress.ip_address(h)
        return True
    except ValueError:
        return h in allowed


class Throttle:
    """At most one log line per ``every_s``, carrying how many events it stands for: a
    scan or a flood cannot flood the log."""

    def __init__(self, every_s: float = 10.0) -> None:
        self.every_s = every_s
        self._lock = threading.Lock()
        self._at = -1e18
        self._n = 0

    def due(self) -> int:
        """0: stay quiet; else the number of events since the last line."""
        now = time.monotonic()
        with self._lock:
            self._n += 1
            if now - self._at < self.every_s:
                return 0
            n, self._n, self._at = self._n, 0, now
            return n


class OneRequestHandler(BaseHTTPRequestHandler):
    """One GET or HEAD per connection, which keeps each connection bounded: the head is
    read within one deadline (the handler's ``timeout`` if set, else HEAD_DEADLINE_S),
    parsed, and other methods get 405 (a POST to ``post_paths`` is read, its short
    body within the same deadline). Subclasses answer in ``respond()`` with
    ``send_answer``; ``always_headers`` go on every answer, errors included. A subclass
    that authenticates its peer calls ``peer_authenticated()`` (GuardedServer's reserve)."""

    protocol_version = "HTTP/1.1"
    write_deadline_s: float = WRITE_DEADLINE_S
    always_headers: ClassVar[dict[str, str]] = {}
    # Set by ``respond`` for an answer any caller may have on a reserved slot (small and
    # quick, such as /healthz): the reserve then never starves it.
    open_on_reserve = False
    # Echo parse_request's reason (cut to 200 characters) in error bodies, or only the phrase.
    error_detail = False
    # Paths that also take a POST (a short form, its body in ``self.body``).
    post_paths: ClassVar[frozenset[str]] = frozenset()
    # Of those, the ones whose GET and HEAD the subclass answers 405 too: another
    # method's 405 then names POST alone in its Allow.
    post_only_paths: ClassVar[frozenset[str]] = frozenset()
    body = b""

    def respond(self) -> None:
        raise NotImplementedError

    def handle_one_request(self) -> None:
        self.close_connection = True
        self.command = ""
        self.request_version = "HTTP/1.0"
        deadline = time.monotonic() + float(self.timeout or HEAD_DEADLINE_S)
        try:
            head, rest = read_head_and_rest(self.connection, deadline)
        except HeadTooLarge as e:
            self.requestline = "(too large)"  # send_response logs it
            self.connection.settimeout(self.write_deadline_s)
            self.send_error(e.status)
            return
        except TooManyEmptyLines:
            self.requestline = "(empty lines)"
            self.connection.settimeout(self.write_deadline_s)
            with contextlib.suppress(OSError):
                self.send_answer(HTTPStatus.BAD_REQUEST, PLAIN, (
                    f"400: more than {MAX_EMPTY_LINES} empty lines before the request line: "
                    "send the request line first\n").encode())
            return
        except TlsToPlain:
            self.requestline = "(a TLS handshake)"
            self.connection.settimeout(self.write_deadline_s)
            self.send_error(HTTPStatus.BAD_REQUEST, "this server speaks plain HTTP, not TLS")
            return
        if not head:
            return  # gone, or too slow: nothing is owed to it
        # A POST's body is still to come: its connection stays evictable until it is in.
        posting = head.startswith(b"POST ")
        if isinstance(self.server, GuardedServer) and not posting:
            self.server.note_head_complete()  # no longer a candidate for eviction
        self.connection.settimeout(self.write_deadline_s)  # the answer's write deadline
        real_rfile = self.rfile
        self.rfile = io.BytesIO(head)  # parse_request reads the headers from rfile
        try:
            self.raw_requestline = self.rfile.readline()
            if not self.parse_request():
                return
        finally:
            self.rfile = real_rfile
        if self.request_version.startswith("HTTP/0."):
            # 0.9 has no status line: its answer would be the body alone, a 401 or 421
            # read as the page. send_error writes one.
            self.send_error(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED,
                            f"{self.request_version} is not served: send HTTP/1.1 or 1.0")
            return
        if (fault := head_fault(head)) is not None:
            self.send_error(HTTPStatus.BAD_REQUEST, fault)
            return
        for name in READ_ONCE:
            if len(self.headers.get_all(name) or ()) > 1:
                # This server reads the first; a proxy in front may have judged or framed
                # by another (RFC 9112 3.2, 6.3: 400).
                self.send_answer(HTTPStatus.BAD_REQUEST, PLAIN,
                                 f"400: send one {name} header, not several\n".encode())
                return
        if "Host" not in self.headers and self.request_version != "HTTP/1.0":
            # RFC 9112 3.2: an HTTP/1.1 request without Host is 400. 1.0 has none to
            # require (curl -0, probes), and a browser always sends one.
            self.send_answer(HTTPStatus.BAD_REQUEST, PLAIN,
                             b"400: send a Host header (HTTP/1.1 requires one)\n")
            return
        if "#" in self.path:
            # RFC 9112 3.2: a request target has no fragment (a client keeps it). One
            # that sends it (a link's #token=...) must not be served, or logged, as a path.
            self.send_answer(HTTPStatus.BAD_REQUEST, PLAIN, (
                b"400: the request target carries a fragment (#...), which a client keeps "
                b"to itself: send /path?query, and a token only in a header or a form\n"))
            return
        if (refusal := self._origin_form()) is not None:
            self.send_answer(refusal.status, PLAIN, f"{refusal}\n".encode())
            return
        if "Host" in self.headers and (fault := host_fault(self.headers["Host"])):
            self.send_answer(HTTPStatus.BAD_REQUEST, PLAIN, f"400: {fault}\n".encode())
            return
        self.close_connection = True
        path = self.path.partition("?")[0]
        methods = ("GET", "HEAD", "POST") if path in self.post_paths else ("GET", "HEAD")
        if self.command not in methods:
            allow = "POST" if path in self.post_only_paths else ", ".join(methods)
            self.send_answer(HTTPStatus.METHOD_NOT_ALLOWED, PLAIN,
                             f"only {allow} here\n".encode(), {"Allow": allow})
            return
        self.body = b""
        if self.command == "POST":
            body = self._read_body(rest, deadline)
            if body is None:
                return
            self.body = body
            if isinstance(self.server, GuardedServer):
                self.server.note_head_complete()
            self.connection.settimeout(self.write_deadline_s)
        self.respond()

    def handle_expect_100(self) -> bool:
        # parse_request calls it before the request is judged: a 100 Continue told a GET
        # (whose body is never read), or a request then refused, to send its body.
        # _read_body sends it, for a form it will read.
        return True

    def _origin_form(self) -> TargetRefused | None:
        """An absolute-form target (``GET http://host/path``) as its path, its authority
        the Host every check reads (an HTTP/1.0 request's too); or why it is refused."""
        if self.path.startswith("/") or (self.path == "*" and self.command == "OPTIONS"):
            return None  # origin-form; OPTIONS * is refused as the method (405)
        tls = isinstance(self.connection, ssl.SSLSocket)
        try:
            self.path, authority = absolute_form(self.path, self.headers.get("Host"), tls)
        except TargetRefused as refusal:
            return refusal
        del self.headers["Host"]
        self.headers["Host"] = authority
        return None

    def _read_body(self, rest: bytes, deadline: float) -> bytes | None:
        """A POST's body (``Content-Length`` bytes, at most MAX_BODY_BYTES), in by the
        head's deadline; None when it was refused (answered) or never came."""
        # One Content-Length at most (READ_ONCE); its blanks are not its value.
        length = (self.headers.get("Content-Length") or "").strip(" \t")
        if self.headers.get("Transfer-Encoding") is not None or not length:
            # chunked: a length this server would have to trust the client to end
            self.send_answer(HTTPStatus.LENGTH_REQUIRED, PLAIN,
                             b"411: send the form with a Content-Length, not chunked\n")
            return None
        if not (length.isascii() and length.isdigit()):
            self.send_answer(HTTPStatus.BAD_REQUEST, PLAIN,
                             b"400: Content-Length is not a number of bytes\n")
            return None
        # Zeros first are still its value; past 4,300 digits int() raised ValueError (no
        # answer, a traceback per request): more digits than the bound has is too large.
        length = length.lstrip("0") or "0"
        if len(length) > len(str(MAX_BODY_BYTES)) or int(length) > MAX_BODY_BYTES:
            self.send_answer(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, PLAIN,
                             f"413: a form here is at most {MAX_BODY_BYTES} bytes\n".encode())
            return None
        want = int(length)
        body = rest[:want]
        if len(body) < want and self.request_version == "HTTP/1.1" and \
                (self.headers.get("Expect") or "").strip().lower() == "100-continue":
            # RFC 9110 10.1.1: the client waits for it (curl a second) before the body
            self.send_response_only(HTTPStatus.CONTINUE)
            self.end_headers()
        while len(body) < want:
            left = deadline - time.monotonic()
            if left <= 0:
                return None  # too slow: nothing is owed to it
            self.connection.settimeout(left)
            try:
                chunk = self.connection.recv(want - len(body))
            except OSError:
                return None
            if not chunk:
                return None
            body += chunk
        return body

    def peer_authenticated(self) -> None:
        """The peer proved who it is (a manager certificate, the bearer token): its
        connection is never evicted, and may be answered on a reserved slot."""
        if isinstance(self.server, GuardedServer):
            self.server.note_authenticated()

    def send_answer(self, status: int, ctype: str, body: bytes,
                    headers: dict[str, str] | None = None) -> None:
        if isinstance(self.server, GuardedServer) and not self.server.may_answer() \
                and not self.open_on_reserve:
            # A reserved slot, and the peer never authenticated: it holds the slot no
            # longer than this short answer.
            status, ctype, body = HTTPStatus.SERVICE_UNAVAILABLE, PLAIN, b"busy; retry\n"
            headers = {"Retry-After": "1"}
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        for k, v in {**self.always_headers, **(headers or {})}.items():
            self.send_header(k, v)
        self._answer = b""
        self.end_headers()  # flush_headers (below) keeps the head for the one write
        head, self._answer = self._answer, None
        self.write_within_deadline(head, b"" if self.command == "HEAD" else body)

    _answer: bytes | None = None

    def flush_headers(self) -> None:
        if self._answer is None:
            super().flush_headers()
            return
        buf = getattr(self, "_headers_buffer", [])
        self._answer += b"".join(buf)
        buf.clear()

    def write_within_deadline(self, *parts: bytes) -> None:
        """Send ``parts`` (head, body: never joined, so a big body stays one object
        shared by every connection) within one deadline for the whole answer
        (``write_deadline_s``): the socket's own timeout is per send, which a reader
        taking one byte at a time would renew forever. Raises TimeoutError past the
        deadline (the connection then closes), OSError when the guard closed a stuck
        answer or the peer went away."""
        if isinstance(self.server, GuardedServer):
            self.server.note_writing()
        deadline = time.monotonic() + self.write_deadline_s
        sock = self.connection
        for data in parts:
            view = memoryview(data)
            while view:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the answer was not read within the write deadline")
                sock.settimeout(left)
                sent = sock.send(view[:WRITE_CHUNK])
                view = view[sent:]

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        status = HTTPStatus(code)
        self.request_version = "HTTP/1.1"  # always answer with a status line, even to 0.9
        if not self.error_detail:
            message = None
        elif message and len(message) > 200:
            message = message[:200] + "..."
        with contextlib.suppress(OSError):  # the client has gone; nothing to tell it
            self.send_answer(status, PLAIN, f"{status.value} {message or status.phrase}\n".encode())


@dataclass(eq=False)
class Conn:
    """One accepted connection, as the guard sees it."""

    addr: str
    since: float
    ctl: socket.socket | None = None  # a dup of the socket: shutting it wakes its thread
    complete: bool = False  # its whole request head is in (it is being answered)
    writing_since: float | None = None  # when its answer started being written
    authenticated: bool = False  # the handler said so (peer_authenticated)
    reserved: bool = False  # admitted into the reserve: answered only if authenticated


def stuck(c: Conn, now: float, stuck_write_s: float = STUCK_WRITE_S) -> bool:
    """Its answer has waited on its reader for ``stuck_write_s``: whoever the reader is
    (a proved peer too), it holds a slot without reading."""
    return c.writing_since is not None and now - c.writing_since >= stuck_write_s


def counted(c: Conn, now: float, stuck_write_s: float = STUCK_WRITE_S) -> bool:
    """Counts against the cap: everyone but a proved peer that is not stuck."""
    return not c.authenticated or stuck(c, now, stuck_write_s)


def evictable(c: Conn, now: float, stuck_write_s: float = STUCK_WRITE_S) -> bool:
    """A half-sent request (never an authenticated peer's), or a stuck answer."""
    return stuck(c, now, stuck_write_s) or (not c.complete and not c.authenticated)


def pick_victim(conns: Iterable[Conn], addr: str, now: float | None = None,
                stuck_write_s: float = STUCK_WRITE_S) -> Conn | None:
    """The connection to close so that a new one from ``addr`` fits, or None.

    Only connections still sending their request head (an honest client sends its head
    at once; one still sending is slow or hostile), never an authenticated one, and
    answers stuck on a reader that does not read (``evictable``) are ever closed. The
    address holding the most connections, the newcomer counted with its own, loses its
    oldest such connection (a tie: the older one goes): a flood from one address or from
    many wears itself down, and a client with one connection is only pushed out when no
    address holds more."""
    now = time.monotonic() if now is None else now
    conns = list(conns)
    count = Counter(c.addr for c in conns if counted(c, now, stuck_write_s))
    count[addr] += 1
    slow = [c for c in conns if evictable(c, now, stuck_write_s)]
    if not slow:
        return None
    oldest: dict[str, float] = {}
    for c in slow:
        oldest[c.addr] = min(oldest.get(c.addr, c.since), c.since)
    worst = max(oldest, key=lambda a: (count[a], -oldest[a]))
    return min((c for c in slow if c.addr == worst), key=lambda c: c.since)


class GuardedServer(LoggedErrors, ThreadingHTTPServer):
    """A threading HTTP server that stays fair when full.

    At most ``max_connections`` connections at once, each served by a thread of a pool
    (a flood's reconnects cost no thread start each). When a new one arrives and all are
    taken, the slowest client's oldest half-sent request, or answer its reader does not
    read, is closed to make room (``pick_victim``). When every connection is busy
    answering, up to ``reserved`` more are let in, but only a peer the handler
    authenticates is answered on those (the daemon's fetch, Prometheus with the token),
    and answers the handler marks ``open_on_reserve`` (/healthz); others get 503."""

    daemon_threads = True
    block_on_close = False  # closing the server never waits on a client
    # The kernel's accept queue: long, so that a flood's reconnects never fill it and make
    # the kernel drop an honest client's SYN (a retransmit waits 1 s, then 3 s); the price
    # is waiting behind them, a few hundred ms at worst (benchmarks/bench_hostile.py).
    request_queue_size = 1024
    max_connections = 256
    reserved = 8
    # The kernel's send buffer per connection, instead of autotuning up to tcp_wmem's
    # maximum (4 MiB): a reader that does not read then pins at most this much kernel
    # memory (twice it, as Linux counts), its answer is stuck (and evictable) sooner,
    # and 256 connections cannot take a gigabyte of the host's TCP memory. A LAN reader
    # still gets 256 KiB per round trip.
    send_buffer_bytes = 256 * 1024
    log_every_s = 10.0  # a flood is logged as one line per this many seconds
    # Addresses counted apart between two such lines: a flood from more (IPv6 gives
    # anyone millions) is counted together past them, in bounded memory.
    turned_away_addresses = 1024

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        address = (bound_host(address[0]), address[1])  # never what a resolver says
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self._conns: set[Conn] = set()
        self._in_flight = 0  # connections not yet released, evicted ones included
        self._jobs: queue.SimpleQueue[tuple[Any, Any, Conn] | None] = queue.SimpleQueue()
        self._workers = self._idle = self._queued = 0
        self._lock = threading.Lock()
        self._local = threading.local()
        self._turned_away: Counter[str] = Counter()
        self._logged_at = 0.0
        self.evicted_total = 0  # half-sent requests closed to make room
        self.refused_total = 0  # connections closed on arrival (all busy, reserve taken)
        super().__init__(address, handler)

    # --- admission ---------------------------------------------------------------

    def _admit(self, request: socket.socket, ip: str) -> Conn | None:
        with self._lock:
            # Evicted connections end within microseconds; a cap on them still holds.
            if self._in_flight >= self._most_in_flight():
                self._turn_away("refused", ip)
                return None
            conn = Conn(ip, time.monotonic())
            if sum(counted(c, conn.since) for c in self._conns) >= self.max_connections:
                victim = pick_victim(self._conns, ip, conn.since)
                if victim is not None:
                    self._evict(victim)
                elif len(self._conns) < self.max_connections + self.reserved:
                    conn.reserved = True
                else:
                    self._turn_away("refused", ip)
                    return None
            try:
                conn.ctl = request.dup()
            except OSError:
                return None
            self._conns.add(conn)
            self._in_flight += 1
            return conn

    def _most_in_flight(self) -> int:
        return 2 * self.max_connections + self.reserved

    def _evict(self, victim: Conn) -> None:
        """Close a half-sent request (lock held): its thread wakes from recv and ends."""
        self._conns.discard(victim)
        if victim.ctl is not None:
            with contextlib.suppress(OSError):
                victim.ctl.shutdown(socket.SHUT_RDWR)
        self._turn_away("evicted", victim.addr)

    def _turn_away(self, what: str, ip: str) -> None:
        """Count it; log the counts at most every ``log_every_s`` (lock held)."""
        key = f"{what} from {ip}"
        if key not in self._turned_away and \
                len(self._turned_away) >= self.turned_away_addresses:
            key = f"{what} from other addresses"
        self._turned_away[key] += 1
        if what == "evicted":
            self.evicted_total += 1
        else:
            self.refused_total += 1
        now = time.monotonic()
        if now - self._logged_at >= self.log_every_s:
            top = ", ".join(f"{n} {k}" for k, n in self._turned_away.most_common(3))
            logger.warning("connections full ({} at once): {} in the last {:.0f}s",
                           self.max_connections, top, now - self._logged_at
                           if self._logged_at else 0)
            self._turned_away.clear()
            self._logged_at = now

    def process_request(self, request: Any, client_address: Any) -> None:
        ip = str(client_address[0]) if client_address else ""
        conn = self._admit(request, ip)
        if conn is None:
            self.shutdown_request(request)
            return
        request.settimeout(WRITE_DEADLINE_S)
        if self.send_buffer_bytes:
            with contextlib.suppress(OSError):
                request.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
        with self._lock:
            self._queued += 1
            spawn = self._queued > self._idle and self._workers < self._most_in_flight()
            if spawn:
                self._workers += 1
        self._jobs.put((request, client_address, conn))
        if spawn:
            try:
                threading.Thread(target=self._work, name="http-worker", daemon=True).start()
            except RuntimeError:  # no thread to be had: the others still drain the queue
                with self._lock:
                    self._workers -= 1

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            job = self._jobs.get()
            with self._lock:
                self._idle -= 1
                self._queued -= 1
            if job is None:
                return
            self._serve_one(*job)

    def server_close(self) -> None:
        super().server_close()
        with self._lock:
            workers = self._workers
        for _ in range(workers):
            self._jobs.put(None)

    def _serve_one(self, request: Any, client_address: Any, conn: Conn) -> None:
        self._local.conn = conn
        try:
            self.finish_request(request, client_address)
        except OSError as exc:
            # A connection evicted by the guard, or dropped by its peer, before or while
            # it was served: the peer's doing, not a fault of the server (no traceback).
            if exc.errno not in _PEER_GONE:
                self.handle_error(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self._local.conn = None
            self._release(conn)
            self.shutdown_request(request)

    def _release(self, conn: Conn) -> None:
        with self._lock:
            self._conns.discard(conn)
            self._in_flight -= 1
        if conn.ctl is not None:  # out of the set: no eviction can reach it any more
            conn.ctl.close()

    # --- what the handler tells the guard (about the connection of this thread) ----

    def _current(self) -> Conn | None:
        conn = getattr(self._local, "conn", None)
        return conn if isinstance(conn, Conn) else None

    def note_head_complete(self) -> None:
        if (conn := self._current()) is not None:
            with self._lock:
                conn.complete = True

    def note_writing(self) -> None:
        if (conn := self._current()) is not None:
            with self._lock:
                conn.writing_since = time.monotonic()

    def note_authenticated(self) -> None:
        if (conn := self._current()) is not None:
            with self._lock:
                conn.authenticated = True

    def may_answer(self) -> bool:
        """False on a reserved connection whose peer has not authenticated."""
        conn = self._current()
        return conn is None or not conn.reserved or conn.authenticated

    def connection_counts(self) -> tuple[int, int]:
        """(connections held, connections in flight with evicted ones not yet ended),
        for tests and benchmarks."""
        with self._lock:
            return len(self._conns), self._in_flight
