"""Strict HTTP/1.1 framing for the docker-proxy: what a request is, decided once.

Request smuggling lives in the gap between two parsers that frame the same bytes
differently (where a line ends, where a body ends). The proxy closes the gap by
framing every request itself, strictly, and forwarding only a request it rebuilt from
what it parsed: the engine never sees a byte the proxy did not understand. Anything
two reasonable parsers could read differently is refused (``Refused``: the status to
answer and why), never repaired:

- a bare CR or LF anywhere in the head (Go's ``net/http``, hence dockerd, ends a line
  at a bare LF), a leading empty line, obsolete line folding, a header name with
  whitespace before its colon, control or non-ASCII bytes in a value;
- more than ``MAX_HEADERS`` fields or ``MAX_HEAD_BYTES`` of head (431);
- HTTP/1.0 (keep-alive there is a header, not the rule) and versions other than 1.1;
- a missing, duplicate or malformed ``Host`` or ``Content-Length``; ``Content-Length``
  with ``Transfer-Encoding``; any transfer coding but a single ``chunked``; a POST
  with neither (411); a body on a GET; ``Upgrade``, ``Expect``, a ``Connection`` token
  other than close/keep-alive (hop-by-hop names would strip headers downstream);
- chunk sizes that are not plain hex, chunk extensions other than ``;name[=value]``
  (token or quoted string), a chunk-size line over ``MAX_CHUNK_LINE`` bytes, trailer
  fields, a chunk not followed by CRLF;
- a target that is not origin-form (absolute-form, ``*``), that has a fragment, a
  percent-encoded byte in the path (an encoded slash or dot), a dot segment, a doubled
  slash, or a query that is not plain ``name=value&...`` with unique names;
- bytes after the request (pipelining): one request per connection.

Pure: ``RequestReader.feed`` takes bytes and returns the request once whole; the
proxy does the I/O. ``ChunkDecoder`` also reads the engine's chunked answers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote_plus

MAX_HEAD_BYTES = 32 * 1024
MAX_HEADERS = 64
MAX_LINE_BYTES = 8 * 1024
MAX_TARGET_BYTES = 4 * 1024
MAX_BODY_BYTES = 1024 * 1024  # a service spec is a few KiB; the swarm spec too
MAX_CHUNK_LINE = 256

_BARE = re.compile(rb"\r(?!\n)|(?<!\r)\n")
_REQUEST_LINE = re.compile(rb"([A-Z]{1,16}) ([\x21-\x7e]{1,%d}) (HTTP/[0-9]\.[0-9])"
                           % MAX_TARGET_BYTES)
_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_FIELD = re.compile(rb"(" + _TOKEN + rb"):[ \t]*([\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?)?"
                    rb"[ \t]*")
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([1-5][0-9][0-9])(?: ([\x20-\x7e\t]*))?")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,8})((?:;" + _TOKEN + rb"(?:=(?:" + _TOKEN
                         + rb'|"(?:[\x20\x21\x23-\x5b\x5d-\x7e\t]|\\[\x20-\x7e\t])*"))?)*)')
_PATH = re.compile(r"(/[A-Za-z0-9._~-]+)+|/")
_QUERY = re.compile(r"[A-Za-z0-9._~!$'()*+,=:@/?%-]*")
_PCT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_DIGITS = re.compile(r"[0-9]{1,12}")
_BODYLESS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})


class Refused(Exception):
    """A request the proxy will not forward: ``status`` to answer, ``reason`` to say."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Request:
    """One request as the proxy understood it; the forwarded one is rebuilt from this."""

    method: str
    path: str  # origin-form path, checked (no %, no dot segment, no //)
    query: tuple[tuple[str, str], ...]  # decoded, names unique, in order
    headers: tuple[tuple[str, str], ...]  # (lower-case name, value), in order
    body: bytes  # the whole body, de-chunked

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None

    def param(self, name: str) -> str | None:
        for k, v in self.query:
            if k == name:
                return v
        return None


def split_target(target: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """(path, query pairs) of an origin-form target, or Refused(400)."""
    if not target.startswith("/"):
        raise Refused(400, "only origin-form request targets (/path?query): absolute-form "
                           "and * are refused")
    if "#" in target:
        raise Refused(400, "a fragment in the request target")
    path, sep, query = target.partition("?")
    if "%" in path:
        raise Refused(400, "a percent-encoded byte in the path (an encoded slash or dot "
                           "would be read differently downstream)")
    if "//" in path:
        raise Refused(400, "a doubled slash in the path")
    if any(seg in (".", "..") for seg in path.split("/")):
        raise Refused(400, "a dot segment in the path")
    if not _PATH.fullmatch(path):
        raise Refused(400, "the path has characters other than letters, digits, "
                           "'/', '.', '_', '~', '-'")
    return path, (parse_query(query) if sep else ())


def parse_query(query: str) -> tuple[tuple[str, str], ...]:
    """``name=value&...``, percent escapes well formed, names unique (two readers could
    pick different ones of a repeated name), values UTF-8."""
    if not _QUERY.fullmatch(query.replace("&", "")) or _PCT.search(query):
        raise Refused(400, "a malformed query (';', a bad percent escape or a character "
                           "outside the query set)")
    if not query:
        return ()
    out: list[tuple[str, str]] = []
    for part in query.split("&"):
        name, eq, value = part.partition("=")
        if not name or not eq:
            raise Refused(400, "a query part that is not name=value")
        try:
            name = unquote_plus(name, errors="strict")
            value = unquote_plus(value, errors="strict")
        except UnicodeDecodeError:
            raise Refused(400, "a query that is not UTF-8") from None
        if any(name == k for k, _ in out):
            raise Refused(400, f"the query names {name[:40]!r} twice")
        out.append((name, value))
    return tuple(out)


def parse_fields(lines: list[bytes]) -> tuple[tuple[str, str], ...]:
    """Header fields, strictly: no folding, no space before the colon, printable
    ASCII values (tabs and spaces inside), at most ``MAX_HEADERS``."""
    if len(lines) > MAX_HEADERS:
        raise Refused(431, f"more than {MAX_HEADERS} header fields")
    out: list[tuple[str, str]] = []
    for line in lines:
        if not line:
            raise Refused(400, "an empty header line")
        if line[:1] in (b" ", b"\t"):
            raise Refused(400, "obsolete line folding (a header line starting with "
                               "whitespace)")
        if len(line) > MAX_LINE_BYTES:
            raise Refused(431, f"a header line over {MAX_LINE_BYTES} bytes")
        m = _FIELD.fullmatch(line)
        if m is None:
            raise Refused(400, "a malformed header field (whitespace before the colon, a "
                               "control or non-ASCII byte, or no colon)")
        out.append((m.group(1).decode("ascii").lower(), (m.group(2) or b"").decode("ascii")))
    return tuple(out)


def check_head_bytes(buf: bytes | bytearray, end: int, since: int = 0) -> None:
    """Refuse a bare CR or LF in ``buf[since:end]`` (``end`` -1: the head is not complete
    yet; a CR as the last byte may still be followed by its LF). ``since``: what was
    checked before (the reader searches only the bytes a read added, from the last one
    it held back: a head trickled a byte a read was searched whole each read)."""
    # Incomplete: a CR as the last byte may still be followed by its LF.
    stop = end + 4 if end >= 0 else len(buf) - buf.endswith(b"\r")
    if _BARE.search(buf, since, stop):  # (the lookbehind still sees the byte before)
        raise Refused(400, "a bare CR or LF in the request head (lines end with CRLF "
                           "only)")


@dataclass(frozen=True)
class _Head:
    method: str
    path: str
    query: tuple[tuple[str, str], ...]
    headers: tuple[tuple[str, str], ...]
    length: int | None  # Content-Length, or None
    chunked: bool


def parse_head(head: bytes) -> _Head:
    """The request line and fields (``head`` without its final CRLFCRLF)."""
    lines = head.split(b"\r\n")
    if not lines[0]:
        raise Refused(400, "an empty line before the request line")
    m = _REQUEST_LINE.fullmatch(lines[0])
    if m is None:
        raise Refused(400, "a malformed request line (METHOD SP /target SP HTTP/1.1, "
                           "single spaces, upper-case method)")
    version = m.group(3)
    if version == b"HTTP/1.0":
        raise Refused(400, "HTTP/1.0 is refused (its keep-alive is a header, not the "
                           "rule): use HTTP/1.1")
    if version != b"HTTP/1.1":
        raise Refused(400, f"{version.decode()} is not HTTP/1.1")
    method = m.group(1).decode("ascii")
    path, query = split_target(m.group(2).decode("ascii"))
    headers = parse_fields(lines[1:])

    def only(name: str) -> str | None:
        got = [v for k, v in headers if k == name]
        if len(got) > 1:
            raise Refused(400, f"the {name} header given twice")
        return got[0] if got else None

    host = only("host")
    if host is None:
        raise Refused(400, "no Host header (HTTP/1.1 requires one)")
    for name, title in (("upgrade", "Upgrade"), ("expect", "Expect")):
        if only(name) is not None:
            raise Refused(400, f"an {title} header (no upgrades, no 100-continue)")
    conn = only("connection")
    if conn is not None:
        tokens = {t.strip().lower() for t in conn.split(",")}
        if not tokens <= {"close", "keep-alive"}:
            raise Refused(400, "a Connection header naming anything but close or "
                               "keep-alive")
    cl, te = only("content-length"), only("transfer-encoding")
    if cl is not None and te is not None:
        raise Refused(400, "both Content-Length and Transfer-Encoding")
    length: int | None = None
    if cl is not None:
        if not _DIGITS.fullmatch(cl):
            raise Refused(400, "a malformed Content-Length (digits only, one value)")
        length = int(cl)
        if length > MAX_BODY_BYTES:
            raise Refused(413, f"a body over {MAX_BODY_BYTES} bytes")
    chunked = False
    if te is not None:
        if te.lower() != "chunked":
            raise Refused(400, "a transfer coding other than a single 'chunked'")
        chunked = True
    if method in _BODYLESS and (chunked or length):
        raise Refused(400, f"a {method} request with a body")
    if method not in _BODYLESS and length is None and not chunked:
        raise Refused(411, f"a {method} request needs a Content-Length")
    return _Head(method, path, query, headers, length, chunked)


class ChunkDecoder:
    """Incremental ``Transfer-Encoding: chunked`` body: ``feed`` returns the data
    pieces complete so far; ``done`` once the last chunk and the empty trailer came;
    ``leftover`` is what followed. Strict: hex sizes (at most 8 digits), well-formed
    ``;name[=value]`` extensions (ignored), no trailer fields, CRLF after each chunk."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self.done = False
        self.leftover = b""
        self._buf = bytearray()
        self._need = -1  # -1: a size line next; -2: the final CRLF; n: n data bytes

    def feed(self, data: bytes) -> list[bytes]:
        if self.done:
            self.leftover += data
            return []
        self._buf += data
        out: list[bytes] = []
        while not self.done:
            if self._need == -1:
                end = self._buf.find(b"\r\n")
                # The bound whether or not the line's CRLF came in the same read: a long
                # line was refused or taken by how the bytes arrived.
                part = len(self._buf) - self._buf.endswith(b"\r")  # (its CR may end it)
                if end > MAX_CHUNK_LINE or (end < 0 and part > MAX_CHUNK_LINE):
                    raise Refused(400, f"a chunk-size line over {MAX_CHUNK_LINE} bytes")
                if end < 0:
                    if _BARE.search(self._buf.rstrip(b"\r")):
                        raise Refused(400, "a malformed chunk-size line")
                    break
                line = bytes(self._buf[:end])
                del self._buf[:end + 2]
                m = _CHUNK_SIZE.fullmatch(line)
                if m is None:
                    raise Refused(400, "a malformed chunk-size line (hex size, then only "
                                       "';name' or ';name=value' extensions)")
                size = int(m.group(1), 16)
                self.total += size
                if self.total > self.limit:
                    raise Refused(413, f"a chunked body over {self.limit} bytes")
                self._need = size if size else -2
            elif self._need == -2:
                if len(self._buf) < 2:
                    if self._buf and self._buf != b"\r":
                        raise Refused(400, "trailer fields after the last chunk")
                    break
                if self._buf[:2] != b"\r\n":
                    raise Refused(400, "trailer fields after the last chunk")
                self.leftover = bytes(self._buf[2:])
                self._buf.clear()
                self.done = True
            else:
                if len(self._buf) < self._need + 2:
                    break
                if self._buf[self._need:self._need + 2] != b"\r\n":
                    raise Refused(400, "a chunk not followed by CRLF")
                if self._need:
                    out.append(bytes(self._buf[:self._need]))
                del self._buf[:self._need + 2]
                self._need = -1
        return out


class RequestReader:
    """Feed it the client's bytes; it returns the ``Request`` once whole (None: more is
    needed), or raises ``Refused``. Bytes after the request are refused too."""

    def __init__(self, max_body: int = MAX_BODY_BYTES) -> None:
        self._buf = bytearray()
        self._head: _Head | None = None
        self._chunks: ChunkDecoder | None = None
        self._body: list[bytes] = []
        self._max_body = max_body

    @property
    def body_next(self) -> bool:
        """The head is whole and a body follows (the proxy reads a write's body only in
        its turn)."""
        return self._head is not None and (self._head.chunked or bool(self._head.length))

    @property
    def head(self) -> Request | None:
        """The request once its head is whole, its body not yet read (empty): the proxy
        judges it before it reads a byte of the body."""
        h = self._head
        return None if h is None else Request(h.method, h.path, h.query, h.headers, b"")

    def feed(self, data: bytes) -> Request | None:
        if self._head is None:
            held = len(self._buf)
            self._buf += data
            # From the bytes that may start what this read ends: a CRLFCRLF, a held CR.
            end = self._buf.find(b"\r\n\r\n", max(0, held - 3))
            check_head_bytes(self._buf, end, max(0, held - 1))
            if end < 0:
                # Up to 3 bytes of the CRLFCRLF may be here already: they are no head.
                if len(self._buf) > MAX_HEAD_BYTES + 3:
                    raise Refused(431, f"a request head over {MAX_HEAD_BYTES} bytes")
                return None
            if end > MAX_HEAD_BYTES:
                raise Refused(431, f"a request head over {MAX_HEAD_BYTES} bytes")
            self._head = parse_head(bytes(self._buf[:end]))
            data = bytes(self._buf[end + 4:])
            self._buf.clear()
            if self._head.chunked:
                self._chunks = ChunkDecoder(self._max_body)
        head = self._head
        if self._chunks is not None:
            self._body += self._chunks.feed(data)
            if not self._chunks.done:
                return None
            body, rest = b"".join(self._body), self._chunks.leftover
        else:
            self._buf += data
            length = head.length or 0
            if len(self._buf) < length:
                return None
            body, rest = bytes(self._buf[:length]), bytes(self._buf[length:])
        if rest:
            raise Refused(400, "bytes after the request (pipelining): one request per "
                               "connection")
        return Request(head.method, head.path, head.query, head.headers, body)


def parse_request(raw: bytes) -> Request:
    """The one request ``raw`` holds, whole, or Refused (an incomplete one: 400)."""
    got = RequestReader().feed(raw)
    if got is None:
        raise Refused(400, "an incomplete request")
    return got


@dataclass(frozen=True)
class ResponseHead:
    """The engine's answer's status line and fields, and how its body is framed."""

    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    length: int | None  # Content-Length; None with ``chunked`` False: until close
    chunked: bool

    @property
    def bodyless(self) -> bool:
        return self.status < 200 or self.status in (204, 304)


def parse_response_head(head: bytes) -> ResponseHead:
    """The engine's status line and fields (trusted, but framed as strictly as a
    request: the proxy re-frames the answer for its client)."""
    if _BARE.search(head):
        raise Refused(502, "the engine's answer has a bare CR or LF")
    lines = head.split(b"\r\n")
    m = _STATUS_LINE.fullmatch(lines[0])
    if m is None:
        raise Refused(502, "the engine's answer has a malformed status line")
    headers = parse_fields(lines[1:])
    cls = [v for k, v in headers if k == "content-length"]
    tes = [v for k, v in headers if k == "transfer-encoding"]
    if len(cls) > 1 or len(tes) > 1 or (cls and tes) or \
            (cls and not _DIGITS.fullmatch(cls[0])) or (tes and tes[0].lower() != "chunked"):
        raise Refused(502, "the engine's answer is framed ambiguously")
    return ResponseHead(int(m.group(1)), (m.group(2) or b"").decode("ascii"), headers,
                        int(cls[0]) if cls else None, bool(tes))
