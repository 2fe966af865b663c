"""The engine's event stream read as events, bounded: one JSON object a line.

The engine writes each event with Go's ``json.Encoder`` (a newline after each). The
docker SDK's own reader keeps every byte until it parses as JSON, so an answer that is
not events (a proxy's error page, a huge value, garbage) grew in memory without end
while the stream looked open and said nothing. Here a line is at most ``MAX_EVENT_BYTES``,
ends within ``MAX_LINE_S`` of its first byte (a line trickled a byte at a time, each
within the stream's idle timeout, held it open and deaf: a quiet stream is fine, a line
begun and never ended is not), and must be a JSON object; anything else is
``NotAnEvent`` naming it (a ``SwarmError`` from ``SwarmClient.events``), and the reader
(``swarm.cache.follow``) marks a gap, lists in full and reconnects.

``Cut``: an open stream ended from another thread (``swarm.cache`` took it for stalled):
its socket is shut down, which wakes the blocked read (closing it would not); never
once the stream has ended, when the socket may serve another request.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from swarmgpu.core.jsonkeys import RepeatedKey, unique_keys
from swarmgpu.core.peertext import quoted
from swarmgpu.swarm.answerjson import REPEATED_FIX

MAX_EVENT_BYTES = 1 << 20  # one event; the engine's are under a few KiB
# The longest one event's line may take: the engine writes each whole (Go's json.Encoder,
# one write), so only a proxy's trickle comes near. Checked as each chunk comes, so a
# line is refused within this plus one idle timeout (SwarmClient.events' idle_s).
MAX_LINE_S = 60.0


class Cut:
    """Ends one open stream from another thread: ``__call__`` shuts its socket down,
    so the reader's blocked read returns at once; ``asked`` says the end was asked.

    ``can_cut``: the transport shows the socket; where it hides it (npipe, some ssh)
    a cut would do nothing and the stream ends at its idle timeout, so none is handed
    out (``SwarmClient.events``). Once the stream has ended (``end``, or urllib3 gave
    the connection back to its pool on reading the body's end) a cut does nothing: the
    socket may already carry another request, the reopened stream's."""

    def __init__(self, resp: Any) -> None:
        self.asked = False
        self._resp = resp
        self._sock = stream_socket(resp)
        self._lock = threading.Lock()
        self._ended = False

    @property
    def can_cut(self) -> bool:
        return self._sock is not None

    def end(self) -> None:
        """The stream has ended: a later cut leaves its socket alone."""
        with self._lock:
            self._ended = True

    def __call__(self) -> None:
        with self._lock:
            # still the answer's own socket: not yet handed back to the pool
            if self._ended or self._sock is None or stream_socket(self._resp) is not self._sock:
                return
            self.asked = True
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)


def stream_socket(resp: Any) -> socket.socket | None:
    """The socket under a streamed ``requests`` answer (the unix socket, TCP or TLS),
    or None where the transport hides it (the stream then ends at its idle timeout)."""
    raw = getattr(resp, "raw", None)
    sock = getattr(getattr(raw, "connection", None), "sock", None)
    if isinstance(sock, socket.socket):
        return sock
    # http.client's answer reads through sock.makefile(): BufferedReader -> SocketIO
    sock = getattr(getattr(getattr(getattr(raw, "_fp", None), "fp", None), "raw", None),
                   "_sock", None)
    return sock if isinstance(sock, socket.socket) else None


class NotAnEvent(ValueError):
    """The stream said something that is not an event (the message names it)."""


def read_events(
    chunks: Iterable[bytes], source: str, limit: int = MAX_EVENT_BYTES,
    line_s: float | None = None,
) -> Iterator[dict[str, Any]]:
    """Each event of ``chunks`` (the answer's body as it arrives), as a dict; a line
    over ``limit`` bytes, or not ended ``line_s`` (``MAX_LINE_S``) after its first byte
    came, is ``NotAnEvent``."""
    line_s = MAX_LINE_S if line_s is None else line_s
    buf = bytearray()
    seen = 0  # bytes of ``buf`` known to hold no end of line: a line sent a byte a chunk
    begun = 0.0  # when the line in ``buf`` began to come (monotonic)
    for chunk in chunks:  # was searched again from its start each time, quadratic in it
        now = time.monotonic()
        if not buf:
            begun = now
        buf += chunk
        ended = False
        while (end := buf.find(b"\n", seen)) >= 0:
            line = bytes(buf[:end])
            del buf[: end + 1]
            seen, ended = 0, True
            if line.strip():
                yield parse_event(line, source, limit)
        if ended:  # what is left began in this chunk (its reader's time after it is not its)
            begun = now = time.monotonic()
        seen = len(buf)
        if len(buf) > limit:
            raise NotAnEvent(
                f"event stream from {source}: an event over {limit >> 20} MiB without its "
                f"end of line ({bytes(buf[:60])!r}...): not the engine's answer; a proxy "
                "between? the stream is read again from a full list"
            )
        if buf and now - begun > line_s:
            raise NotAnEvent(
                f"event stream from {source}: an event begun {now - begun:.1f} s ago without "
                f"its end of line ({bytes(buf[:60])!r}, {len(buf)} bytes so far; the engine "
                f"sends each whole, the most waited is {line_s:g} s): not the engine's "
                "answer; a proxy between? the stream is read again from a full list"
            )
    if buf.strip():
        # The engine ends each event with a newline: what is left was cut mid-event
        # (an engine that stopped, a connection closed), unless it is a whole object.
        try:
            last = parse_event(bytes(buf), source, limit)
        except NotAnEvent:
            raise NotAnEvent(
                f"event stream from {source}: it ended inside an event ({bytes(buf[:60])!r}, "
                f"{len(buf)} bytes without their end of line): cut mid-event; the stream "
                "is read again from a full list"
            ) from None
        yield last


def parse_event(line: bytes, source: str, limit: int = MAX_EVENT_BYTES) -> dict[str, Any]:
    """One line of the stream as an event, or ``NotAnEvent`` naming what it is."""
    what = f"event stream from {source}: {line[:60]!r}{'...' if len(line) > 60 else ''}"
    if len(line) > limit:
        raise NotAnEvent(f"{what} is over {limit >> 20} MiB: not an event")
    # Strict UTF-8, as Go's decoder reads it: json.loads on bytes guesses UTF-16 or -32
    # from NUL bytes and skips a byte order mark, where the engine's own client refuses
    # both. ASCII in UTF-16/32 is valid UTF-8 with NULs, which JSON refuses as such.
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotAnEvent(f"{what} is not UTF-8 (byte {exc.start}): not an event; a proxy "
                         "between?") from None
    if text.startswith("\ufeff") or "\x00" in text:
        raise NotAnEvent(f"{what} is not UTF-8 JSON (a byte order mark or a NUL byte: "
                         "UTF-16 or UTF-32?): not an event; a proxy between?")
    try:
        event = json.loads(text, object_pairs_hook=unique_keys)
    except RepeatedKey as exc:  # (which of the two the engine meant cannot be told)
        raise NotAnEvent(f"{what} names {quoted(exc.key, 80)} twice in one object: not an "
                         f"event; {REPEATED_FIX}") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise NotAnEvent(
            f"{what} is not JSON ({type(exc).__name__}): not an event; a proxy between?"
        ) from None
    if not isinstance(event, dict):
        raise NotAnEvent(f"{what} is not an object: not an event")
    return event
