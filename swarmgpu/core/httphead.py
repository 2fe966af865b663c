"""A request head, read and checked as the most careful server would (RFC 9112).

Both HTTP servers (``httpguard.OneRequestHandler``) read their request heads here:

* ``read_head_and_rest``: the request line and headers within one deadline, at most
  ``MAX_HEAD_BYTES`` (414 / 431), a few empty lines before the request line ignored
  (RFC 9112 2.2: a client's stray CRLF; more than ``MAX_EMPTY_LINES`` refused), a TLS
  handshake sent to the plain side answered at once;
* ``head_fault``: a request line or header lines two parsers read apart (other
  separators than one space, a version not DIGIT.DIGIT; no colon, a space before it,
  folding, a bare CR, a control byte);
* ``READ_ONCE``: the fields read as one value, refused when given twice;
* ``absolute_form``: a ``GET http://host/path`` target (RFC 9112 3.2.2: a server MUST
  accept it) as its path and the host every check then reads;
* ``host_fault``: a Host that is no ``uri-host [":" port]`` (RFC 9112 3.2: 400).
"""

from __future__ import annotations

import ipaddress
import re
import socket
import time
from http import HTTPStatus

MAX_HEAD_BYTES = 8 * 1024
MAX_EMPTY_LINES = 4  # before the request line, ignored (RFC 9112 2.2); more are refused
_HEAD_END = re.compile(rb"\n\r?\n")
_BARE_CR = re.compile(rb"\r(?!\n)")
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 5.1: a field name
# RFC 9112 3: method SP request-target SP HTTP/DIGIT.DIGIT, one SP each and nothing
# around them; the target visible ASCII. (Without a version: HTTP/0.9, answered 505.)
_REQUEST_LINE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+ [\x21-\x7e]+(?: HTTP/[0-9]\.[0-9])?")
_CTL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # in a value; HT is allowed
# An absolute-form target: scheme, authority, then the path and query (maybe empty).
_ABSOLUTE = re.compile(r"(?i:(https?))://([^/?#]*)([/?].*)?", re.DOTALL)
# Fields read as one value: two lines of one are a request two parsers read apart (the
# first read here, the last by a proxy in front), refused. A user agent sends one Cookie
# line (RFC 6265 5.4).
READ_ONCE = ("Host", "Authorization", "Cookie", "Content-Length")


class HeadTooLarge(Exception):
    def __init__(self, status: HTTPStatus) -> None:
        super().__init__(status.phrase)
        self.status = status


class TooManyEmptyLines(Exception):
    """More than MAX_EMPTY_LINES empty lines before the request line: no stray CRLF of a
    client's, answered 400."""


class TlsToPlain(Exception):
    """A TLS handshake record where a plain-HTTP request head belongs: answered at once
    (400) instead of waiting out the head deadline for a line break a ClientHello has
    not got, so a client that expected HTTPS learns at once that this is plain HTTP."""


def read_head(sock: socket.socket, deadline_s: float,
              max_bytes: int = MAX_HEAD_BYTES) -> bytes:
    """The request line and headers (ending in a blank line), read straight from the
    socket within one deadline. b"" when the client went away or ran out of time;
    HeadTooLarge (414 for the request line, 431 for the headers) when it sends too much.
    The body, if any, is not read: the connection closes after one answer."""
    return read_head_and_rest(sock, time.monotonic() + deadline_s, max_bytes)[0]


def read_head_and_rest(sock: socket.socket, deadline: float,
                       max_bytes: int = MAX_HEAD_BYTES) -> tuple[bytes, bytes]:
    """``read_head`` by a ``time.monotonic()`` deadline, with what came after the head
    (the start of a POST's body)."""
    buf = b""
    empty = 0
    while True:
        # Empty lines before the request line are ignored (RFC 9112 2.2), a few.
        while (skip := 1 if buf[:1] == b"\n" else 2 if buf[:2] == b"\r\n" else 0):
            buf = buf[skip:]
            empty += 1
            if empty > MAX_EMPTY_LINES:
                raise TooManyEmptyLines
        first = buf.find(b"\n")
        if (first < 0 and len(buf) > max_bytes) or first > max_bytes:
            raise HeadTooLarge(HTTPStatus.REQUEST_URI_TOO_LONG)
        # The blank line: a line ends at LF, a CR before it optional (the request parser
        # reads lines so), so LF CRLF ends a head as CRLF CRLF and LF LF do.
        end = _HEAD_END.search(buf)
        if (end.end() if end else len(buf)) > max_bytes:
            raise HeadTooLarge(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)
        if end:  # the head, and what came after its blank line (a POST's body)
            return buf[:end.end()], buf[end.end():]
        left = deadline - time.monotonic()
        if left <= 0:
            return b"", b""
        sock.settimeout(left)
        try:
            chunk = sock.recv(4096)
        except OSError:  # timeout, reset
            return b"", b""
        if not chunk:
            return b"", b""
        buf += chunk
        if buf[:1] == b"\x16" and (len(buf) < 2 or buf[1] == 3):  # TLS handshake, v3.x
            raise TlsToPlain


def head_fault(head: bytes) -> str | None:
    """Why another parser (a proxy in front) would read this head's header lines apart
    from this server, or None (RFC 9112 2.2, 5.1, 5.2; RFC 9110 5.5: refuse them). The
    standard library's parser ends the headers at a line without a colon (a Host or
    Authorization after it unseen), takes 'Host :' as no Host, a bare CR as a line
    break, and folds continuation lines. A line may end in LF alone, as it reads one.
    Its request line splits at any whitespace ``str.split`` knows (NBSP, NEL, a run of
    blanks, around the line) and reads ``HTTP/01.1`` or ``HTTP/1.10`` as a version."""
    if _BARE_CR.search(head):
        return "a bare CR in the request head: end each line with CRLF"
    if not _REQUEST_LINE.fullmatch(head.split(b"\n", 1)[0].removesuffix(b"\r")):
        return ("a malformed request line: send METHOD /target HTTP/1.1, one space "
                "between each, the target in visible ASCII (%-escaped)")
    for line in head.split(b"\n")[1:]:
        line = line.removesuffix(b"\r")
        if not line:
            break  # the blank line that ends the head
        if line[:1] in (b" ", b"\t"):
            return ("obsolete line folding (a header line starting with a space or tab): "
                    "send each field on one line")
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            return ("a malformed header line (no colon, or a space or other character "
                    "no field name has before it): send NAME: VALUE")
        if _CTL.search(value):
            return "a control character (NUL, DEL, ...) in a header value"
    return None


# RFC 3986 3.2.2-3: uri-host [":" port]; the host an IP-literal (IPv6, an RFC 6874 zone
# "%25..." allowed, checked by ipaddress below) or a reg-name (an IPv4 address is one),
# never empty (RFC 9110 4.2.1: an http URI's host is not).
_HOST_FIELD = re.compile(
    r"(?:\[([0-9A-Fa-f:.]+)(?:%25[A-Za-z0-9._~-]+)?\]"
    r"|(?:[A-Za-z0-9._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})+)(?::[0-9]*)?", re.ASCII)


def host_fault(value: str) -> str | None:
    """Why a Host field value is no ``uri-host [":" port]`` (RFC 9110 7.2), or None.
    A proxy in front reads such a Host its own way (``user@a`` as the host ``a``,
    ``a:1:2`` as ``a:1``), so RFC 9112 3.2 answers it 400."""
    m = _HOST_FIELD.fullmatch(value.strip(" \t"))
    if m is not None and m.group(1) is not None:
        try:
            ipaddress.IPv6Address(m.group(1))
        except ValueError:
            m = None
    if m is None:
        return ("a Host that is no host[:port] (empty, a user@, a path, two ports, an "
                "unclosed [): send the name or address and its port alone")
    return None


class TargetRefused(Exception):
    """A request target this server does not serve: the status, and the text to answer."""

    def __init__(self, status: HTTPStatus, text: str) -> None:
        super().__init__(text)
        self.status = status


def absolute_form(target: str, host: str | None, tls: bool) -> tuple[str, str]:
    """(path, host) of an absolute-form ``target`` (``http://host/path?query``), which
    RFC 9112 3.2.2 says a server MUST accept, its authority the host; or TargetRefused.
    ``host``: the request's Host field; ``tls``: whether the connection is HTTPS."""
    m = _ABSOLUTE.fullmatch(target)
    if m is None:
        raise TargetRefused(HTTPStatus.BAD_REQUEST, "400: the request target is neither "
                            "/path nor http://host/path")
    scheme, authority, rest = m.group(1).lower(), m.group(2), m.group(3) or ""
    if "@" in authority or not authority:
        # RFC 9110 4.2.4: userinfo in an http(s) URI is an error; 4.2.1: so is no host
        raise TargetRefused(HTTPStatus.BAD_REQUEST, "400: the request target names no "
                            "host, or a user: send http://host/path")
    if host is not None and host.strip(" \t").lower() != authority.lower():
        # The client MUST send the target's authority as Host (RFC 9112 3.2.2): one that
        # differs is two hosts, one read here and the other by a proxy in front.
        raise TargetRefused(HTTPStatus.BAD_REQUEST, "400: the Host header names another "
                            "host than the request target: send the same")
    if (scheme == "https") != tls:
        # RFC 9110 7.4: an https resource only over TLS, and this port's plain side serves
        # no https one (nor its TLS side an http one): 421.
        raise TargetRefused(HTTPStatus.MISDIRECTED_REQUEST, f"421: {scheme}:// is not "
                            f"served on this {'HTTPS' if tls else 'plain HTTP'} connection")
    return (rest if rest.startswith("/") else "/" + rest), authority
