"""The daemon's bounded GET to agents (``boundedhttp``) framed as RFC 9112 says.

Each test answers one request from a loopback socket with bytes written by hand: the
framings honest servers use are read, and anything two readers could frame apart (a
chunk without its CRLF, two lengths, a coding not asked for) is refused, named.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from support.gpu_nodes import RTX4090

from swarmgpu.core.config import AgentsConfig
from swarmgpu.manager.nodes import boundedhttp
from swarmgpu.manager.nodes.agent_client import fetch_facts
from swarmgpu.swarm.client import SwarmNode

GOOD = json.dumps(RTX4090.facts().to_dict()).encode()


@pytest.fixture
def answer() -> Iterator[Callable[[bytes], int]]:
    """A port whose one connection gets ``raw`` after the request, then is closed."""
    socks: list[socket.socket] = []

    def start(raw: bytes) -> int:
        srv = socket.create_server(("127.0.0.1", 0))
        socks.append(srv)

        def serve() -> None:
            try:
                conn, _ = srv.accept()
                with conn:
                    conn.settimeout(5)
                    conn.recv(65536)
                    conn.sendall(raw)
            except OSError:
                pass

        threading.Thread(target=serve, daemon=True).start()
        return int(srv.getsockname()[1])

    yield start
    for s in socks:
        s.close()


def get(port: int) -> boundedhttp.Fetched:
    return boundedhttp.get(f"http://127.0.0.1:{port}/facts", timeout_s=3, max_bytes=1 << 20)


def refused(port: int) -> str:
    with pytest.raises(boundedhttp.FetchError) as exc:
        get(port)
    return str(exc.value)


def test_a_chunk_not_followed_by_crlf_is_refused(answer: Callable[[bytes], int]) -> None:
    """RFC 9112 7.1: chunk-data CRLF. Two bytes after a chunk were skipped unread,
    whatever they were: a lying chunk size gave a body the sender did not frame."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert "chunk" in refused(answer(head + b"5\r\nhelloXY0\r\n\r\n"))
    assert get(answer(head + b"5\r\nhello\r\n0\r\n\r\n")).body == b"hello"


@pytest.mark.parametrize(
    "fields",
    [
        b"Content-Length: 2\r\nContent-Length: 5\r\n",
        b"Transfer-Encoding: gzip, chunked\r\n",
        b"Transfer-Encoding: chunked, gzip\r\n",
        b"Transfer-Encoding: gzip\r\nContent-Length: 5\r\n",
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n",
        b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
    ],
)
def test_an_answer_framed_two_ways_is_refused(
    answer: Callable[[bytes], int], fields: bytes
) -> None:
    """RFC 9112 6.3: two Content-Lengths that differ are invalid framing; a transfer
    coding other than chunked was never asked for (no TE header), and with a
    Content-Length, Transfer-Encoding "ought to be handled as an error". The last
    Content-Length won silently, 'gzip, chunked' gave the gzip bytes as the body, and
    'gzip' with a length read the length."""
    raw = b"HTTP/1.1 200 OK\r\n" + fields + b"\r\n5\r\nhello\r\n0\r\n\r\n"
    assert "framed" in refused(answer(raw))


def test_a_content_length_repeated_alike_or_a_lone_chunked_is_read(
    answer: Callable[[bytes], int],
) -> None:
    """RFC 9110 8.6: the same length repeated MAY be read as one."""
    ok = get(answer(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello"))
    assert ok.body == b"hello"
    ok = get(
        answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    )
    assert ok.body == b"hello"


def test_interim_1xx_answers_before_the_final_one_are_skipped(
    answer: Callable[[bytes], int],
) -> None:
    """RFC 9110 15.2: a client MUST parse 1xx answers before the final one, even
    unasked for (a proxy's 103 Early Hints). The first status line was taken as the
    answer: 'agent answered HTTP 100'."""
    raw = (
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
    )
    got = get(answer(raw))
    assert (got.status, got.body) == (200, b"hello")
    endless = b"HTTP/1.1 100 Continue\r\n\r\n" * 5000
    assert "headers" in refused(answer(endless))


def node(port: int) -> SwarmNode:
    return SwarmNode(
        "nid", RTX4090.hostname, "127.0.0.1", "worker", "ready", "active", {}, {}, 1, {}, {}
    )


def test_a_body_in_a_content_coding_not_asked_for_is_named_never_inflated(
    answer: Callable[[bytes], int],
) -> None:
    """The GET asks for identity (RFC 9110 12.5.3). A gzipped answer (a proxy that
    compresses, a bomb) was 'not JSON facts (not UTF-8)', which names nothing to fix;
    it is refused naming the coding, and never inflated."""
    bomb = gzip.compress(b" " * (64 << 20))
    raw = (
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(bomb)
        + bomb
    )
    port = answer(raw)
    cfg = AgentsConfig(port=port, timeout_s=3, identity="none")
    res = fetch_facts(node(port), cfg)
    assert res.facts is None and "Content-Encoding" in (res.error or ""), res.error
    ok = get(
        answer(
            b"HTTP/1.1 200 OK\r\nContent-Encoding: identity\r\n"
            b"Content-Length: %d\r\n\r\n" % len(GOOD) + GOOD
        )
    )
    assert ok.body == GOOD


def test_a_body_of_many_small_chunks_is_read_in_one_pass_within_the_deadline() -> None:
    """Each read ending in CRLF CRLF re-parsed the whole chunked body from its start:
    1 MiB of 2-byte chunks, arriving 16 KiB at a time, took some 13 s of CPU (the
    deadline overrun by up to a second per parse, two at 4 MiB), so an agent framing
    its answer so held a fetch, and a core, past agents.timeout_s."""
    unit = b"2\r\n\r\n\r\n"  # a chunk of two bytes, CRLF, that ends a read in CRLF CRLF
    block = unit * (16 * 1024 // len(unit))
    blocks = 128
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = srv.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                for _ in range(blocks):
                    conn.sendall(block)
                    time.sleep(0.002)  # one block a read, each ending in CRLF CRLF
                conn.sendall(b"0\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    port = srv.getsockname()[1]
    try:  # read whole within its own deadline (a parse per read overran it: Deadline)
        got = boundedhttp.get(f"http://127.0.0.1:{port}/facts", timeout_s=5,
                              max_bytes=4 << 20)
    finally:
        srv.close()
    assert got.body == b"\r\n" * (blocks * len(block) // len(unit))


def test_a_chunk_size_line_longer_than_any_server_writes_is_refused(
        answer: Callable[[bytes], int]) -> None:
    """A chunk's size line carries its extensions, which nothing reads: one of
    megabytes was copied and split again on each read while its chunk trickled in (a
    core spent for the whole deadline, per agent). Past MAX_CHUNK_LINE it is refused,
    named, as Go's net/http refuses one past 4 KiB; a short extension is still read."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    long_ext = b"1;" + b"x" * (boundedhttp.MAX_CHUNK_LINE + 1) + b"\r\nA\r\n0\r\n\r\n"
    assert "chunk-size line" in refused(answer(head + long_ext))
    no_end = b"1;" + b"x" * (boundedhttp.MAX_CHUNK_LINE + 1)  # (and its CRLF never comes)
    assert "chunk-size line" in refused(answer(head + no_end))
    assert get(answer(head + b"1;name=value\r\nA\r\n0\r\n\r\n")).body == b"A"
