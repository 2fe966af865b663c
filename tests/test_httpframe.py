"""The docker-proxy's request framing (``swarmgpu.swarm.httpframe``) on byte strings.

A table of framings, each accepted or refused with its status, then properties
(hypothesis): random bytes never crash the reader; how the bytes are split across
reads never changes the outcome; a bare CR or LF put anywhere in a good head is
refused; whatever is accepted, rebuilt as the proxy forwards it and parsed again, is
the same request; a chunked body comes out whole however it is chunked.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarmgpu.swarm.enginewire import request_bytes
from swarmgpu.swarm.httpframe import (
    MAX_BODY_BYTES,
    MAX_CHUNK_LINE,
    MAX_HEAD_BYTES,
    ChunkDecoder,
    Refused,
    Request,
    RequestReader,
    parse_request,
    parse_response_head,
)

GET = b"GET /v1.41/nodes HTTP/1.1\r\nHost: docker\r\n"
POST = b"POST /v1.41/nodes/abc/update?version=3 HTTP/1.1\r\nHost: docker\r\n"
SMUGGLED = (b"POST /v1.41/containers/create HTTP/1.1\r\nHost: docker\r\n"
            b"Content-Length: 2\r\n\r\n{}")


def _chunked(*parts: bytes, ext: bytes = b"") -> bytes:
    return b"".join(b"%x%s\r\n%s\r\n" % (len(p), ext, p) for p in parts) + b"0\r\n\r\n"


# (name, raw, None: accepted | the status of the refusal)
CASES: list[tuple[str, bytes, int | None]] = [
    ("plain GET", GET + b"\r\n", None),
    ("GET, Content-Length 0", GET + b"Content-Length: 0\r\n\r\n", None),
    ("POST with a length", POST + b"Content-Length: 2\r\n\r\n{}", None),
    ("POST chunked", POST + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(b"{", b"}"),
     None),
    ("POST chunked, upper-case coding", POST + b"Transfer-Encoding: Chunked\r\n\r\n"
     + _chunked(b"{}"), None),
    ("chunk extension token=token", POST + b"Transfer-Encoding: chunked\r\n\r\n"
     + _chunked(b"{}", ext=b";a=b;c"), None),
    ("chunk extension quoted", POST + b"Transfer-Encoding: chunked\r\n\r\n"
     + _chunked(b"{}", ext=b';a="x \\" y"'), None),
    ("value with inner spaces and a tab", GET + b"User-Agent: a b\tc\r\n\r\n", None),
    ("query", b"GET /v1.41/tasks?filters=%7B%22a%22%3A+1%7D&x=y HTTP/1.1\r\nHost: d\r\n\r\n",
     None),
    ("Connection: close, keep-alive", GET + b"Connection: close, keep-alive\r\n\r\n", None),
    # line endings
    ("bare LF ends the head (issue 32)", b"GET /v1.41/nodes HTTP/1.1\r\nHost: d\n\n"
     + SMUGGLED, 400),
    ("bare LF line endings", b"GET /v1.41/nodes HTTP/1.1\nHost: d\n\n", 400),
    ("bare CR", GET + b"X: a\rb\r\n\r\n", 400),
    ("CR CR LF", GET + b"X: a\r\r\n\r\n", 400),
    ("an empty line first", b"\r\n" + GET + b"\r\n", 400),
    ("obs-fold", GET + b"X: a\r\n b\r\n\r\n", 400),
    ("obs-fold with a tab", GET + b"X: a\r\n\tTransfer-Encoding: chunked\r\n\r\n", 400),
    ("space before the colon", POST + b"Content-Length : 2\r\n\r\n{}", 400),
    ("no colon", GET + b"X\r\n\r\n", 400),
    ("NUL in a value", GET + b"X: a\x00b\r\n\r\n", 400),
    ("non-ASCII in a value", GET + b"X: caf\xc3\xa9\r\n\r\n", 400),
    ("DEL in a value", GET + b"X: a\x7fb\r\n\r\n", 400),
    ("header name with a slash", GET + b"X/Y: 1\r\n\r\n", 400),
    ("too many fields", GET + b"X: 1\r\n" * 64 + b"\r\n", 431),
    ("a head too large", GET + b"X: " + b"a" * 40_000 + b"\r\n\r\n", 431),
    # request line
    ("two spaces", b"GET  /v1.41/nodes HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("a tab", b"GET\t/v1.41/nodes HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("lower-case method", b"get /v1.41/nodes HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("HTTP/1.0", b"GET /v1.41/nodes HTTP/1.0\r\n\r\n", 400),
    ("HTTP/1.0 keep-alive", b"GET /v1.41/nodes HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
     + SMUGGLED, 400),
    ("HTTP/2.0", b"GET /v1.41/nodes HTTP/2.0\r\nHost: d\r\n\r\n", 400),
    ("HTTP/0.9 (no version)", b"GET /v1.41/nodes\r\n\r\n", 400),
    ("trailing space", b"GET /v1.41/nodes HTTP/1.1 \r\nHost: d\r\n\r\n", 400),
    # target
    ("absolute-form", b"GET http://docker/v1.41/nodes HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("asterisk-form", b"OPTIONS * HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("authority-form", b"CONNECT docker:2375 HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("%2f", b"GET /v1.41/nodes/a%2f..%2fb HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("%2e%2e", b"GET /v1.41/nodes/%2e%2e/secrets HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("any % in the path", b"GET /v1.41/nodes/a%41 HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("dot-dot", b"GET /v1.41/nodes/../secrets HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("dot", b"GET /v1.41/./nodes HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("doubled slash", b"GET /v1.41//nodes HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("backslash", b"GET /v1.41/nodes\\..\\x HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("fragment", b"GET /v1.41/nodes#x HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("semicolon in the query", b"GET /v1.41/nodes?a=1;b=2 HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("repeated query name", b"GET /v1.41/nodes?a=1&a=2 HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("bad percent escape", b"GET /v1.41/nodes?a=%zz HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("query part without =", b"GET /v1.41/nodes?a HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    ("query not UTF-8", b"GET /v1.41/nodes?a=%ff HTTP/1.1\r\nHost: d\r\n\r\n", 400),
    # Host
    ("no Host", b"GET /v1.41/nodes HTTP/1.1\r\n\r\n", 400),
    ("two Hosts", GET + b"Host: other\r\n\r\n", 400),
    # body framing
    ("CL and TE (CL.TE)", POST + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"0\r\n\r\n" + SMUGGLED, 400),
    ("TE and CL (TE.CL)", POST + b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n"
     + _chunked(SMUGGLED), 400),
    ("two Content-Lengths", POST + b"Content-Length: 0\r\nContent-Length: 2\r\n\r\n{}", 400),
    ("two equal Content-Lengths", POST + b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
     400),
    ("a Content-Length list", POST + b"Content-Length: 2, 2\r\n\r\n{}", 400),
    ("a signed Content-Length", POST + b"Content-Length: +2\r\n\r\n{}", 400),
    ("a hex Content-Length", POST + b"Content-Length: 0x2\r\n\r\n{}", 400),
    ("a huge Content-Length", POST + b"Content-Length: 99999999999999999999\r\n\r\n", 400),
    ("a body too large", POST + b"Content-Length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1), 413),
    ("POST without a length", POST + b"\r\n{}", 411),
    ("GET with a body", GET + b"Content-Length: 2\r\n\r\n{}", 400),
    ("GET chunked", GET + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("TE gzip, chunked", POST + b"Transfer-Encoding: gzip, chunked\r\n\r\n"
     + _chunked(b"{}"), 400),
    ("TE chunked, identity", POST + b"Transfer-Encoding: chunked, identity\r\n\r\n", 400),
    ("TE xchunked", POST + b"Transfer-Encoding: xchunked\r\n\r\n", 400),
    ("TE twice", POST + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
     + _chunked(b"{}"), 400),
    ("TE with a vertical tab", POST + b"Transfer-Encoding:\x0bchunked\r\n\r\n", 400),
    ("chunk size 0x", POST + b"Transfer-Encoding: chunked\r\n\r\n0x2\r\n{}\r\n0\r\n\r\n", 400),
    ("chunk size with a sign", POST + b"Transfer-Encoding: chunked\r\n\r\n+2\r\n{}\r\n0\r\n\r\n",
     400),
    ("chunk size too long", POST + b"Transfer-Encoding: chunked\r\n\r\n000000002\r\n{}\r\n"
     b"0\r\n\r\n", 400),
    ("chunk size with a space", POST + b"Transfer-Encoding: chunked\r\n\r\n2 \r\n{}\r\n"
     b"0\r\n\r\n", 400),
    ("chunk extension bare LF", POST + b"Transfer-Encoding: chunked\r\n\r\n2;a\n\r\n{}\r\n"
     b"0\r\n\r\n", 400),
    ("chunk size line ends in bare LF", POST + b"Transfer-Encoding: chunked\r\n\r\n2\n{}\r\n"
     b"0\r\n\r\n", 400),
    ("chunk extension unterminated quote", POST + b"Transfer-Encoding: chunked\r\n\r\n"
     b'2;a="x\r\n{}\r\n0\r\n\r\n', 400),
    ("chunk extension with space", POST + b"Transfer-Encoding: chunked\r\n\r\n2; a=b\r\n{}\r\n"
     b"0\r\n\r\n", 400),
    ("chunk extension, empty value", POST + b"Transfer-Encoding: chunked\r\n\r\n2;a=\r\n{}"
     b"\r\n0\r\n\r\n", 400),
    ("chunk data longer than its size", POST + b"Transfer-Encoding: chunked\r\n\r\n1\r\n{}"
     b"\r\n0\r\n\r\n", 400),
    ("trailer fields", POST + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX: y\r\n\r\n",
     400),
    ("a chunked body too large", POST + b"Transfer-Encoding: chunked\r\n\r\nffffffff\r\n", 413),
    # Refused only when its CRLF came in a later read: how the bytes arrived decided.
    ("a chunk-size line over the bound, whole", POST + b"Transfer-Encoding: chunked\r\n\r\n"
     + _chunked(b"{}", ext=b";a=" + b"x" * MAX_CHUNK_LINE), 400),
    # one request per connection
    ("pipelined", GET + b"\r\n" + SMUGGLED, 400),
    ("pipelined after a body", POST + b"Content-Length: 2\r\n\r\n{}" + SMUGGLED, 400),
    ("pipelined after chunks", POST + b"Transfer-Encoding: chunked\r\n\r\n"
     + _chunked(b"{}") + SMUGGLED, 400),
    ("one extra byte", GET + b"\r\n\r", 400),
    # hop-by-hop and upgrades
    ("Upgrade", GET + b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n", 400),
    ("Connection naming a header", GET + b"Connection: close, X-Auth\r\n\r\n", 400),
    ("Expect", POST + b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\n{}", 400),
    ("incomplete", GET, 400),
]


@pytest.mark.parametrize(("name", "raw", "status"), CASES, ids=[c[0] for c in CASES])
def test_framing(name: str, raw: bytes, status: int | None) -> None:
    if status is None:
        assert isinstance(parse_request(raw), Request)
    else:
        with pytest.raises(Refused) as exc:
            parse_request(raw)
        assert exc.value.status == status, exc.value.reason


def test_what_is_parsed() -> None:
    req = parse_request(POST + b"User-Agent: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                        + _chunked(b'{"a"', b": 1}", ext=b";q=1"))
    assert (req.method, req.path, req.query, req.body) == (
        "POST", "/v1.41/nodes/abc/update", (("version", "3"),), b'{"a": 1}')
    assert req.header("user-agent") == "x" and req.param("version") == "3"
    assert req.header("x") is None and req.param("x") is None
    q = parse_request(b"GET /v1.41/tasks?filters=%7B%22a%22%3A+%5B1%5D%7D HTTP/1.1\r\n"
                      b"Host: d\r\n\r\n")
    assert q.query == (("filters", '{"a": [1]}'),)


def test_the_reader_waits_for_more_and_refuses_as_soon_as_it_can() -> None:
    r = RequestReader()
    assert r.feed(b"GET /v1.41/nodes HTTP/1.1\r\nHo") is None
    assert r.feed(b"st: d\r\n\r") is None
    assert r.feed(b"\n") is not None
    r = RequestReader()
    with pytest.raises(Refused):  # the bare LF is refused before the head is complete
        r.feed(b"GET /v1.41/nodes HTTP/1.1\nHost")


def test_the_engines_answer_head() -> None:
    h = parse_response_head(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                            b"Transfer-Encoding: chunked")
    assert (h.status, h.reason, h.chunked, h.length) == (200, "OK", True, None)
    h = parse_response_head(b"HTTP/1.1 204 No Content")
    assert h.bodyless
    for bad in (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked",
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2",
                b"HTTP/1.1 200 OK\nX: y", b"HTTP/2 200", b"HTTP/1.1 99 x"):
        with pytest.raises(Refused):
            parse_response_head(bad)


# --- properties ----------------------------------------------------------------------

GOOD = [raw for _, raw, status in CASES if status is None]
BAD = [(raw, status) for _, raw, status in CASES if status is not None and raw != GET]


def _outcome(raw: bytes, cuts: list[int]) -> Any:
    """What the proxy makes of ``raw`` read in pieces (cut at ``cuts``)."""
    r = RequestReader()
    got: Any = None
    try:
        last = 0
        for c in [*sorted(set(cuts)), len(raw)]:
            if c <= last:
                continue
            got = r.feed(raw[last:c])
            last = c
            if got is not None and c < len(raw):
                # whole before the last piece: the rest is after the request, which the
                # proxy's peek refuses as pipelining (or, arriving later, never reads)
                return ("refused", 400)
        return ("ok", got)
    except Refused as exc:
        return ("refused", exc.status)


@pytest.mark.parametrize("size", [MAX_HEAD_BYTES - 1, MAX_HEAD_BYTES, MAX_HEAD_BYTES + 1])
def test_a_head_at_the_bound_has_one_outcome_wherever_its_blank_line_is_cut(size: int) -> None:
    # A head of 32 KiB was taken whole and refused 431 when a read ended inside its
    # final CRLFCRLF: the bytes of that terminator were counted as head.
    start = b"GET /v1.41/nodes HTTP/1.1\r\nHost: d" + b"".join(
        b"\r\nX%d: " % i + b"a" * 7000 for i in range(4)) + b"\r\nW: "
    head = start + b"a" * (size - len(start))
    raw = head + b"\r\n\r\n"
    whole = _outcome(raw, [])
    assert whole[0] == ("ok" if size <= MAX_HEAD_BYTES else "refused"), whole
    for cut in range(len(head) - 2, len(raw)):
        assert _outcome(raw, [cut]) == whole, cut


@settings(max_examples=400, deadline=None)
@given(case=st.sampled_from(GOOD + [raw for raw, _ in BAD]), cuts=st.lists(
    st.integers(0, 400), max_size=12))
def test_prop_how_the_bytes_arrive_never_changes_the_outcome(case: bytes,
                                                            cuts: list[int]) -> None:
    whole = _outcome(case, [])
    assert _outcome(case, [c for c in cuts if c < len(case)]) == whole


@settings(max_examples=400, deadline=None)
@given(raw=st.one_of(st.binary(max_size=300),
                     st.sampled_from(GOOD).flatmap(
                         lambda g: st.tuples(st.just(g), st.integers(0, len(g)),
                                             st.binary(min_size=1, max_size=4)).map(
                             lambda t: t[0][:t[1]] + t[2] + t[0][t[1]:]))))
def test_prop_no_input_crashes_the_reader(raw: bytes) -> None:
    try:
        RequestReader().feed(raw)
    except Refused as exc:
        assert exc.status in (400, 408, 411, 413, 431) and exc.reason


@settings(max_examples=300, deadline=None)
@given(case=st.sampled_from(GOOD), where=st.integers(0, 10_000),
       bare=st.sampled_from([b"\n", b"\r"]))
def test_prop_a_bare_cr_or_lf_anywhere_in_the_head_is_refused(case: bytes, where: int,
                                                              bare: bytes) -> None:
    head_end = case.index(b"\r\n\r\n")
    at = where % (head_end + 1)
    if case[at - 1:at] == b"\r" and bare == b"\n":
        at -= 1  # not between a CR and its LF: that would make a CRLF, not a bare LF
    raw = case[:at] + bare + case[at:]
    with pytest.raises(Refused):
        parse_request(raw)


TOKEN = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.",
                min_size=1, max_size=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(method=st.sampled_from(["GET", "POST"]),
       segs=st.lists(TOKEN.filter(lambda s: s not in (".", "..")), min_size=1, max_size=4),
       query=st.dictionaries(TOKEN, st.text(max_size=20), max_size=3),
       ua=st.text("abcdefghijklmnopqrstuvwxyz/0123456789. ", max_size=20).map(str.strip),
       body=st.binary(max_size=200))
def test_prop_what_the_proxy_forwards_parses_back_to_the_same_request(
        method: str, segs: list[str], query: dict[str, str], ua: str, body: bytes) -> None:
    from urllib.parse import urlencode

    target = "/" + "/".join(segs) + (f"?{urlencode(query)}" if query else "")
    raw = request_bytes(method, target, ua or None, body if method == "POST" else None)
    req = parse_request(raw)
    assert req.method == method and req.path == "/" + "/".join(segs)
    assert dict(req.query) == query and req.body == (body if method == "POST" else b"")
    again = request_bytes(req.method, req.path + (f"?{urlencode(req.query)}"
                                                  if req.query else ""),
                          req.header("user-agent"), req.body if method == "POST" else None)
    assert again == raw


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=500), sizes=st.lists(st.integers(1, 64), max_size=20),
       cuts=st.lists(st.integers(0, 700), max_size=10))
def test_prop_chunked_bodies_come_out_whole(body: bytes, sizes: list[int],
                                           cuts: list[int]) -> None:
    parts, at = [], 0
    for n in sizes:
        if at >= len(body):
            break
        parts.append(body[at:at + n])
        at += n
    if at < len(body):
        parts.append(body[at:])
    wire = _chunked(*parts)
    dec, out, last = ChunkDecoder(10_000), b"", 0
    for c in [*sorted({c for c in cuts if c < len(wire)}), len(wire)]:
        out += b"".join(dec.feed(wire[last:c]))
        last = c
    assert dec.done and out == body and dec.leftover == b""
