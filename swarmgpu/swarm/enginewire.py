"""The docker-proxy's side of the engine: one connection, its request and its answer.

``Wire`` reads an answer's head, then its body as pieces (Content-Length, chunked, or
until close), or whole up to ``MAX_ANSWER_BYTES``; ``engine_json`` is the proxy's own
read (the spec a write is checked against, the surge book's sweep). Every request the
proxy sends is one it wrote itself (``request_bytes``), ``Connection: close``.
"""

from __future__ import annotations

import math
import select
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

from swarmgpu.swarm.httpframe import ChunkDecoder, Refused, ResponseHead, parse_response_head
from swarmgpu.swarm.jsonstrict import JsonError, JsonTooLarge, load_answer

ENGINE_DEADLINE_S = 120.0  # the engine's whole answer (not /events, a stream)
MAX_ANSWER_BYTES = 4 * 1024 * 1024  # an answer the proxy reads whole (specs, /swarm)


class ClientGone(Exception):
    """The client closed its connection while an answer streamed."""


class Wire:
    """One connection to the engine: send a request, read its answer's head, then its
    body as pieces (Content-Length, chunked, or until close)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _recv(self, deadline: float | None, watch: socket.socket | None) -> bytes:
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if wait == 0.0:
                raise Refused(504, "the engine did not answer in time")
            ready = readable([self.sock, *([watch] if watch else [])], wait)
            if watch is not None and watch.fileno() in ready:
                # A streaming client only reads: EOF, or bytes it should not send.
                raise ClientGone
            if self.sock.fileno() in ready:
                return self.sock.recv(64 * 1024)

    def head(self, deadline: float) -> ResponseHead:
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > 64 * 1024:
                raise Refused(502, "the engine's answer head is too large")
            got = self._recv(deadline, None)
            if not got:
                raise Refused(502, "the engine closed the connection without an answer")
            self.buf += got
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        return parse_response_head(head)

    def body(
        self, head: ResponseHead, deadline: float | None, watch: socket.socket | None = None
    ) -> Iterator[bytes]:
        if head.bodyless:
            return
        if head.chunked:
            dec = ChunkDecoder(1 << 62)
            data, self.buf = self.buf, b""
            while True:
                yield from dec.feed(data)
                if dec.done:
                    return
                data = self._recv(deadline, watch)
                if not data:
                    raise Refused(502, "the engine's chunked answer was cut short")
        left = head.length
        data, self.buf = self.buf, b""
        while True:
            if left is not None:
                data = data[:left]
                left -= len(data)
            if data:
                yield data
            if left == 0:
                return
            data = self._recv(deadline, watch)
            if not data:
                if left is None:
                    return
                raise Refused(502, "the engine's answer was cut short")

    def whole(self, head: ResponseHead, deadline: float) -> bytes:
        out: list[bytes] = []
        size = 0
        for piece in self.body(head, deadline):
            out.append(piece)
            size += len(piece)
            if size > MAX_ANSWER_BYTES:
                raise Refused(502, "the engine's answer is too large to check")
        return b"".join(out)


def readable(socks: list[socket.socket], wait: float | None) -> set[int]:
    """The descriptors of ``socks`` with something to read (or closed) within ``wait``
    seconds (None: until one has). poll, not select: ``select.select`` raises ValueError
    for a descriptor past 1023, which a proxy holding a thousand connections hands out."""
    poller = select.poll()
    for s in socks:
        poller.register(s, select.POLLIN)
    ms = None if wait is None else max(0, math.ceil(wait * 1000))
    return {fd for fd, _ in poller.poll(ms)}


def request_bytes(method: str, target: str, user_agent: str | None, body: bytes | None) -> bytes:
    """A request head the proxy writes itself (every value was parsed and checked)."""
    lines = [f"{method} {target} HTTP/1.1", "Host: docker"]
    if user_agent:
        lines.append(f"User-Agent: {user_agent}")
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + (body or b"")


def engine_json(connect: Callable[[], socket.socket], path: str) -> tuple[int, Any, bytes]:
    """The proxy's own GET of ``path`` from the engine: (status, JSON, raw body)."""
    up = connect()
    try:
        up.sendall(request_bytes("GET", path, None, None))
        wire = Wire(up)
        deadline = time.monotonic() + ENGINE_DEADLINE_S
        head = wire.head(deadline)
        raw = wire.whole(head, deadline)
    finally:
        up.close()
    try:
        return head.status, load_answer(raw, f"GET {path}") if raw else None, raw
    except JsonError as exc:
        raise Refused(
            502,
            str(exc)
            if isinstance(exc, JsonTooLarge)
            else f"the engine's answer to GET {path} is not JSON",
        ) from None
