"""One HTTP(S) GET with a wall-clock deadline and a byte cap, for talking to agents.

``requests`` bounds each socket read, not the request: a peer that sends one byte a
second never times out, and its byte cap is checked per 64 KiB chunk. Here every step
(connect, TLS handshake, send, each read of at most 16 KiB) runs with the socket timeout
set to what is left of one deadline, so the whole request ends by ``timeout_s`` whatever
the peer does. Redirects are never followed, and errors never contain what the peer sent
(a body could carry an internal page, read back through the daemon's map).

DNS resolution (``{hostname}`` templates) cannot be interrupted: it runs in a thread of
its own that the GET stops waiting for at the deadline (``_resolve``), so a name whose
server answers slowly (root on a node names its host) costs that node its deadline, not
the resolver's timeouts; one lookup per name in flight, which later fetches of it wait
for. ``{addr}`` templates need none.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, urlsplit

from swarmgpu.core.healthcheck import HTTPS_ONLY_HEADER
from swarmgpu.core.peertext import peer_text

MAX_HEAD_BYTES = 64 * 1024  # status line and headers
READ_CHUNK = 16 * 1024
# A chunk's size line, its extensions included (which nothing reads): one of megabytes
# was copied and split again on each read while its chunk trickled in. Go's net/http
# refuses one past 4 KiB too.
MAX_CHUNK_LINE = 4096


# What answered, when a GET failed (FetchError.kind): the daemon turns it into the cause
# and the one-line fix an operator reads (agent_client).
CONNECT = "connect"  # nothing accepted the connection (connected is False)
PLAIN_HTTP = "plain-http"  # an HTTPS GET: a plain-HTTP server answered the handshake
TLS_ANSWERED = "tls-answered"  # an HTTP GET: a TLS server answered
TLS = "tls"  # the TLS handshake failed otherwise (the reason says how)
CERTIFICATE = "certificate"  # the peer's certificate failed verification
HTTP = "http"  # a TCP peer that broke HTTP
UNRESOLVED = "unresolved"  # the host's name did not resolve (connected is False)
TOO_LARGE = "too-large"  # a body past max_bytes (the caller's cap: its setting says so)
HEAD_TOO_LARGE = "head-too-large"  # a head past MAX_HEAD_BYTES, which no setting raises


class FetchError(Exception):
    """Why a GET failed, in words that never quote the peer's bytes (and, should a
    TLS library's reason name something the peer sent, at most ~300 clean characters).
    ``kind``: what answered (the constants above); ``connected``: something accepted
    the TCP connection."""

    def __init__(self, msg: str, *, kind: str = HTTP, connected: bool = True) -> None:
        super().__init__(peer_text(msg))
        self.kind = kind
        self.connected = connected


class Deadline(TimeoutError):
    """The deadline passed; ``connected``: after something accepted the connection."""

    def __init__(self, connected: bool = True) -> None:
        super().__init__("timed out")
        self.connected = connected


@dataclass(frozen=True)
class Fetched:
    status: int
    body: bytes
    peer_cn: str | None = None  # the verified certificate's CN (HTTPS with verification)
    peer_cert: Mapping[str, object] | None = None  # all of it, as getpeercert() decodes it
    headers: Mapping[str, str] = field(default_factory=dict)  # names in lower case


def peer_common_name(cert: Mapping[str, object] | None) -> str | None:
    """The subject CN of a certificate as ``SSLSocket.getpeercert()`` returns it."""
    if not cert:
        return None
    subject = cert.get("subject", ())
    if not isinstance(subject, tuple):
        return None
    for rdn in subject:
        for pair in rdn:
            if isinstance(pair, tuple) and len(pair) == 2 and pair[0] == "commonName":
                return str(pair[1])
    return None


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _head_end(buf: bytes | bytearray) -> int:
    return buf.find(b"\r\n\r\n")


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not (
        len(parts[1]) == 3 and parts[1].isdigit()  # bytes.isdigit is ASCII-only
    ):
        raise FetchError("did not answer HTTP/1.x")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise FetchError("sent a malformed HTTP header")
        key, text = name.strip().decode("latin-1").lower(), value.strip().decode("latin-1")
        # A field given twice is one list (RFC 9110 5.3): two lengths stay both seen.
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return int(parts[1]), headers


def _framing(headers: Mapping[str, str]) -> tuple[bool, int | None]:
    """(chunked, Content-Length) of a body, or FetchError where two readers could frame
    it apart (RFC 9112 6.3): no transfer coding but chunked was asked for (no TE)."""
    te, raw = headers.get("transfer-encoding"), headers.get("content-length")
    if te is not None:
        if [c.strip().lower() for c in te.split(",")] != ["chunked"]:
            raise FetchError("sent a body framed with a transfer coding other than "
                             "chunked, which was not asked for")
        if raw is not None:
            raise FetchError("sent a body framed two ways (Transfer-Encoding and "
                             "Content-Length)")
        return True, None
    if raw is None:
        return False, None
    values = {v.strip() for v in raw.split(",")}
    if not all(v.isascii() and v.isdigit() and len(v) <= 15 for v in values):
        raise FetchError("sent a malformed Content-Length")
    if len(values) > 1:
        raise FetchError("sent a body framed two ways (Content-Lengths that differ)")
    return False, int(values.pop())


class _Dechunker:
    """A chunked body (RFC 9112 7.1) parsed as it arrives, each byte once: parsing it
    whole again on every read that ended in CRLF CRLF was quadratic (1 MiB of small
    chunks took seconds of CPU, and each parse ran past the deadline)."""

    def __init__(self, start: int, max_bytes: int) -> None:
        self.pos = start  # where the next chunk-size line starts
        self.seen = start  # no line end still to be found before it
        self.max_bytes = max_bytes
        self.out = bytearray()
        self.last = -1  # the last chunk's line end, once it is in (trailers follow)

    def parse(self, data: bytearray, closed: bool) -> bytes | None:
        """The body once complete (the last chunk, then a blank line or the close);
        None while incomplete. ``data``: the whole answer so far, only ever appended."""
        while self.last < 0:
            eol = data.find(b"\r\n", self.seen, self.pos + MAX_CHUNK_LINE + 2)
            if eol < 0:
                if len(data) - self.pos > MAX_CHUNK_LINE + 1:
                    raise FetchError(f"sent a chunk-size line longer than {MAX_CHUNK_LINE} "
                                     "bytes (its extensions), which no server writes")
                self.seen = max(self.pos, len(data) - 1)
                return None
            size_text = bytes(data[self.pos:eol]).split(b";", 1)[0].strip()
            if not size_text or len(size_text) > 8 or not all(
                c in b"0123456789abcdefABCDEF" for c in size_text
            ):
                raise FetchError("sent a malformed chunked body")
            size = int(size_text, 16)
            if size == 0:
                self.last = self.seen = eol
                break
            start = eol + 2
            if len(data) < start + size + 2:
                self.seen = eol  # this line is read again once its chunk is in
                return None
            if data[start + size:start + size + 2] != b"\r\n":  # RFC 9112 7.1: data, CRLF
                raise FetchError("sent a chunk not followed by CRLF (its size is wrong)")
            self.out += data[start:start + size]
            if len(self.out) > self.max_bytes:
                raise FetchError(f"sent more than {self.max_bytes} bytes", kind=TOO_LARGE)
            self.pos = self.seen = start + size + 2
        # The trailer section (RFC 9112 7.1.2) ends in a blank line: none is CRLF CRLF.
        if closed or data.find(b"\r\n\r\n", self.seen) >= 0:
            return bytes(self.out)
        self.seen = max(self.last, len(data) - 3)
        return None


def get(
    url: str,
    *,
    timeout_s: float,
    max_bytes: int,
    tls: ssl.SSLContext | None = None,
    headers: Mapping[str, str] | None = None,
) -> Fetched:
    """GET ``url``; raise FetchError (or TimeoutError) when it cannot be done in time."""
    deadline = time.monotonic() + timeout_s
    parts = urlsplit(url)
    host, port, host_header, request = _request(parts, headers)
    try:
        raw = _connect(host, port, deadline)
    except OSError as exc:
        if isinstance(exc, TimeoutError):
            raise Deadline(connected=False) from None
        if isinstance(exc, socket.gaierror):
            raise FetchError(f"cannot resolve its host name ({exc.__class__.__name__})",
                             kind=UNRESOLVED, connected=False) from None
        raise FetchError(f"cannot connect ({exc.__class__.__name__})", kind=CONNECT,
                         connected=False) from None
    sock: socket.socket = raw
    peer_cn: str | None = None
    peer_cert: Mapping[str, object] | None = None
    try:
        if parts.scheme == "https":
            sock = _handshake(raw, tls or ssl.create_default_context(), host, port,
                              host_header, deadline)
            if isinstance(sock, ssl.SSLSocket):
                peer_cert = sock.getpeercert()
                peer_cn = peer_common_name(peer_cert)
        sock.settimeout(_left(deadline))
        sock.sendall(request)
        got = _read_response(sock, deadline, max_bytes, peer_cn)
        return Fetched(got.status, got.body, got.peer_cn, peer_cert, got.headers)
    except OSError as exc:
        if isinstance(exc, TimeoutError):
            raise Deadline() from None
        why = f"connection failed ({exc.__class__.__name__})"
        if parts.scheme == "http" and _answers_tls(host, port, deadline):
            raise FetchError(f"{why}: a TLS server, not plain HTTP", kind=TLS_ANSWERED) from None
        raise FetchError(why) from None
    except FetchError as exc:
        if exc.kind == HTTP and parts.scheme == "http" and "before answering" in str(exc) \
                and _answers_tls(host, port, deadline):
            raise FetchError(f"{exc}: a TLS server, not plain HTTP", kind=TLS_ANSWERED) \
                from None
        raise
    finally:
        sock.close()


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    """``socket.create_connection`` within ``deadline``, its name's lookup too."""
    err: OSError = OSError(f"no address for {host[:64]!r}")
    for family, kind, proto, _, addr in _resolve(host, port, deadline):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(_left(deadline))
            sock.connect(addr)
            return sock
        except OSError as exc:  # the next address, as create_connection tries it
            sock.close()
            err = exc
    raise err


@dataclass
class _Lookup:
    """One ``getaddrinfo`` in flight: its result (a list, or the OSError) once ``done``."""

    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None


# The lookups in flight, by (host, port): a fetch of a name whose lookup still runs waits
# for that one. Each fetch of a hung name (the GET and its TLS probes, every cycle)
# started a thread of its own, which ends only when the resolver gives up: with one that
# never answers they piled up without bound; now one per name.
_LOOKUPS: dict[tuple[str, int], _Lookup] = {}
_LOOKUPS_LOCK = threading.Lock()


def _resolve(host: str, port: int, deadline: float) -> list[Any]:
    """``getaddrinfo`` of ``host``, waited for until ``deadline`` at most (TimeoutError):
    the lookup cannot be interrupted, so it runs in a daemon thread left to end by the
    resolver's own timeouts, one per name in flight (``_LOOKUPS``). An IP literal is
    read at once, no thread."""
    try:
        ipaddress.ip_address(host.partition("%")[0])
        return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    except ValueError:
        pass
    key = (host, port)
    with _LOOKUPS_LOCK:
        job = _LOOKUPS.get(key)
        if job is None:
            job = _LOOKUPS[key] = _Lookup()
            threading.Thread(target=lambda: _lookup(key, job), name="agent-dns",
                             daemon=True).start()
    if not job.done.wait(_left(deadline)):
        raise TimeoutError
    if isinstance(job.result, OSError):
        raise job.result
    return list(job.result)


def _lookup(key: tuple[str, int], job: _Lookup) -> None:
    try:
        job.result = socket.getaddrinfo(key[0], key[1], 0, socket.SOCK_STREAM)
    except OSError as exc:
        job.result = exc
    finally:
        with _LOOKUPS_LOCK:  # gone before it is done: a later fetch asks afresh
            _LOOKUPS.pop(key, None)
        job.done.set()


def _request(parts: SplitResult, headers: Mapping[str, str] | None
             ) -> tuple[str, int, str, bytes]:
    """(host, port, Host header, the request's bytes) for a URL, or FetchError."""
    if parts.scheme not in ("http", "https"):
        raise FetchError(f"scheme {parts.scheme!r} is not http or https")
    host = parts.hostname or ""
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise FetchError("the URL's port is not a number") from None
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    # An IPv6 zone (fe80::1%eth0) means something on this host alone: never sent in
    # Host (RFC 6874 4), which the agent answers 400 (httphead.host_fault).
    host_header = f"[{host.partition('%')[0]}]" if ":" in host else host
    if parts.port:
        host_header += f":{parts.port}"
    lines = [f"GET {path} HTTP/1.1", f"Host: {host_header}", "Connection: close",
             "Accept-Encoding: identity", "User-Agent: swarmgpu"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return host, port, host_header, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _handshake(raw: socket.socket, ctx: ssl.SSLContext, host: str, port: int,
               host_header: str, deadline: float) -> socket.socket:
    """The TLS handshake on a connected socket, or FetchError naming what answered."""
    try:
        # The handshake gets part of what is left: a plain-HTTP server that waits for a
        # request line answers nothing, and the rest of the time asks it in plain HTTP
        # what it is (_answers_plain_http).
        left = _left(deadline)
        raw.settimeout(min(left, max(1.0, 0.6 * left)))
        sname = host if ctx.check_hostname else None
        return ctx.wrap_socket(raw, server_hostname=sname)
    except TimeoutError:
        raw.close()
        if _answers_plain_http(host, port, host_header, deadline):
            raise FetchError("TLS handshake got no answer: a plain-HTTP server "
                             "listens there", kind=PLAIN_HTTP) from None
        raise Deadline() from None
    except ssl.SSLCertVerificationError as exc:
        raise FetchError(f"TLS certificate refused: {exc.verify_message}",
                         kind=CERTIFICATE) from None
    except ssl.SSLError as exc:
        reason = exc.reason or exc.__class__.__name__
        raw.close()
        if _answers_plain_http(host, port, host_header, deadline):
            raise FetchError(f"TLS handshake failed ({reason}): a plain-HTTP server "
                             "answered it", kind=PLAIN_HTTP) from None
        raise FetchError(f"TLS handshake failed ({reason})", kind=TLS) from None


def _answers_tls(host: str, port: int, deadline: float) -> bool:
    """After a plain-HTTP GET got no answer: does the port complete a TLS handshake?
    (An agent with its node certificate serves HTTPS and drops a plain request.) Nothing
    is verified or sent: only whether TLS answers, within the same deadline."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # a probe: the certificate is not trusted for anything
    try:
        with _connect(host, port, deadline) as raw:
            raw.settimeout(_left(deadline))
            with ctx.wrap_socket(raw):
                return True
    except (OSError, TimeoutError):
        return False


def _answers_plain_http(host: str, port: int, host_header: str, deadline: float) -> bool:
    """After a failed TLS handshake: does a plain-HTTP GET on the same port get an HTTP
    answer? (An agent that found no node certificate serves plain HTTP: the daemon can
    then say so, instead of a TLS library's 'wrong version number'.) Within the same
    deadline; only the first bytes of the answer are read, never kept."""
    try:
        with _connect(host, port, deadline) as s:
            s.settimeout(_left(deadline))
            s.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host_header}\r\nConnection: close"
                      "\r\nUser-Agent: swarmgpu\r\n\r\n".encode("latin-1"))
            first = b""
            while len(first) < 8:
                s.settimeout(_left(deadline))
                chunk = s.recv(8 - len(first))
                if not chunk:
                    break
                first += chunk
    except (OSError, TimeoutError):
        return False
    return first.startswith(b"HTTP/1.")


def _looks_like_tls(data: bytes | bytearray) -> bool:
    """A TLS record header (handshake or alert, version 3.x): a TLS server's answer to
    a plain-HTTP request."""
    return len(data) >= 2 and data[0] in (0x15, 0x16) and data[1] == 0x03


def _interim(head: bytes | bytearray) -> bool:
    """A 1xx head other than 101 (no upgrade is asked for: a 101 is the answer)."""
    status = _parse_head(bytes(head))[0]
    return 100 <= status < 200 and status != 101


def _read_response(sock: socket.socket, deadline: float, max_bytes: int,
                   peer_cn: str | None) -> Fetched:
    buf = bytearray()
    status = 0
    hdrs: dict[str, str] = {}
    body_at = -1
    length: int | None = None
    dechunker: _Dechunker | None = None
    interim = 0  # bytes of 1xx heads skipped
    while True:
        sock.settimeout(_left(deadline))
        chunk = sock.recv(READ_CHUNK)
        if chunk:
            buf += chunk
        if body_at < 0:
            end = _head_end(buf)
            while end >= 0 and _interim(buf[:end]):
                # RFC 9110 15.2: 1xx answers before the final one are read and skipped,
                # even unasked for (a proxy's 103 Early Hints); they count as head bytes.
                interim += end + 4
                del buf[:end + 4]
                end = _head_end(buf)
            if end < 0:
                if len(buf) + interim > MAX_HEAD_BYTES:
                    raise FetchError(f"sent more than {MAX_HEAD_BYTES} bytes of headers",
                                     kind=HEAD_TOO_LARGE)
                if _looks_like_tls(buf):
                    raise FetchError("answered in TLS, not plain HTTP", kind=TLS_ANSWERED)
                if not chunk:
                    raise FetchError("closed the connection before answering")
                continue
            status, hdrs = _parse_head(bytes(buf[:end]))
            body_at = end + 4
            if status == 400 and HTTPS_ONLY_HEADER.lower() in hdrs:
                raise FetchError("answered 400: a TLS server, not plain HTTP (it said so)",
                                 kind=TLS_ANSWERED)
            if status != 200:  # the body of an error or redirect is never read
                return Fetched(status, b"", peer_cn)
            chunked, length = _framing(hdrs)
            if chunked:
                dechunker = _Dechunker(body_at, max_bytes)
            # Accept-Encoding: identity was sent (RFC 9110 12.5.3); a coded body is never
            # inflated (a bomb), and named: "not UTF-8" would name nothing to fix.
            if hdrs.get("content-encoding", "identity").strip().lower() not in ("identity", ""):
                raise FetchError("sent its body compressed (Content-Encoding), though asked "
                                 "for identity: a proxy in between?")
            if length is not None and length > max_bytes:
                # Refused unread: what it said it would send, not what it sent (it may
                # close after two bytes, which a higher cap would then meet).
                raise FetchError(f"announced a body of {length} bytes, more than "
                                 f"{max_bytes}", kind=TOO_LARGE)
        size = len(buf) - body_at  # counted, not copied: a copy a read was quadratic
        if size > max_bytes + (64 * 1024 if dechunker is not None else 0):
            raise FetchError(f"sent more than {max_bytes} bytes", kind=TOO_LARGE)
        if dechunker is not None:
            got = dechunker.parse(buf, closed=not chunk)
            if got is not None:
                return Fetched(status, got, peer_cn, None, hdrs)
            if not chunk:
                raise FetchError("closed the connection in the middle of the body")
            continue
        if length is not None and size >= length:
            return Fetched(status, bytes(buf[body_at:body_at + length]), peer_cn, None, hdrs)
        if not chunk:
            if length is not None:
                raise FetchError("closed the connection in the middle of the body")
            return Fetched(status, bytes(buf[body_at:]), peer_cn, None, hdrs)
