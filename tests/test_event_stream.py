"""SwarmClient.events on a stand-in engine socket: events split across chunks arrive
whole; a stream that says nothing for ``idle_s`` (a dead connection looks the same) is
cut, naming it; an answer that is not events (garbage, one over the bound, JSON that is
not an object, nested past Python's recursion) is an error naming it, read no further,
never buffered without end. ``swarm.cache.follow`` then marks a gap and the cache
lists in full until the stream is open again (tests/test_swarm_cache.py)."""

from __future__ import annotations

import contextlib
import json
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from swarmgpu.swarm.client import SwarmClient, SwarmError, SwarmUnavailable
from swarmgpu.swarm.eventstream import MAX_EVENT_BYTES, NotAnEvent, parse_event, read_events


class Engine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    chunks: list[bytes]  # /events' body, chunk by chunk; then it holds until ``done``
    done: threading.Event
    close: bool  # end the answer after the chunks instead of holding
    more: list[bytes]  # said once ``done`` is set, then the answer ends


class Handler(socketserver.BaseRequestHandler):
    """GET /events: a chunked 200 of the server's chunks; anything else (the client's
    version probe, info): a small JSON answer. The connection is kept for the next
    request unless the client asked ``Connection: close``, as the engine (Go) does."""

    server: Engine

    def handle(self) -> None:
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                got = self.request.recv(4096)
                if not got:
                    return
                buf += got
            head, buf = buf.split(b"\r\n\r\n", 1)
            if not self.answer(head):
                return

    def answer(self, head: bytes) -> bool:
        """Answer one request; False: the connection ends."""
        path = head.split(b" ", 2)[1]
        close = b"\r\nconnection: close" in head.lower()
        end = b"Connection: close\r\n" if close else b""
        if b"/events" not in path:
            body = json.dumps({"ApiVersion": "1.43", "Version": "24.0.0"}).encode()
            self.request.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%s"
                b"Content-Length: %d\r\n\r\n%s" % (end, len(body), body)
            )
            return not close
        self.request.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%s"
            b"Transfer-Encoding: chunked\r\n\r\n" % end
        )
        try:
            for c in self.server.chunks:
                self.request.sendall(b"%x\r\n%s\r\n" % (len(c), c))
            if self.server.close:
                self.request.sendall(b"0\r\n\r\n")
                return not close
            self.server.done.wait(30)
            if self.server.more:
                for c in [*self.server.more, b""]:
                    self.request.sendall(b"%x\r\n%s\r\n" % (len(c), c))
        except OSError:
            pass  # the client left
        return False


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    srv = Engine(str(tmp_path / "engine.sock"), Handler)
    srv.chunks, srv.done, srv.close = [], threading.Event(), False
    srv.more = []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.done.set()
    srv.shutdown()
    srv.server_close()


def drain(srv: Engine, idle_s: float = 5.0, cut_after_s: float | None = None
          ) -> tuple[list[dict[str, Any]], BaseException | None]:
    """The events read, and what ended the stream (None: it ended); at most 15 s.
    ``cut_after_s``: the stream's cut (``on_cut``) is called from another thread then."""
    got: list[dict[str, Any]] = []
    end: list[BaseException | None] = [None]
    opened: list[bool] = []

    def cut_later(cut: Callable[[], None]) -> None:
        assert cut_after_s is not None
        threading.Timer(cut_after_s, cut).start()

    def read() -> None:
        client = SwarmClient(f"unix://{srv.server_address}")
        try:
            for ev in client.events(on_open=lambda: opened.append(True), idle_s=idle_s,
                                    on_cut=cut_later if cut_after_s is not None else None):
                got.append(ev)
        except BaseException as exc:  # the test reports what ended it
            end[0] = exc

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(15)
    assert not t.is_alive(), f"the stream was still read after 15 s: {len(got)} events"
    assert opened == [True]
    return got, end[0]


def ev(kind: str, obj: str) -> bytes:
    return json.dumps({"Type": kind, "Action": "update", "Actor": {"ID": obj}}).encode()


def test_events_split_across_chunks_arrive_whole(engine: Engine) -> None:
    one, two = ev("node", "n1"), ev("service", "s1")
    engine.chunks = [one[:7], one[7:] + b"\n" + two[:3], two[3:] + b"\n"]
    engine.close = True
    got, end = drain(engine)
    assert end is None
    assert [e["Actor"]["ID"] for e in got] == ["n1", "s1"]


def test_a_stream_silent_for_idle_s_is_cut_naming_it(engine: Engine) -> None:
    engine.chunks = [ev("node", "n1") + b"\n"]
    got, end = drain(engine, idle_s=0.5)  # (drain's 15 s: a hang guard)
    assert [e["Actor"]["ID"] for e in got] == ["n1"]
    assert isinstance(end, SwarmUnavailable), repr(end)
    assert "no event for 0.5 s" in str(end) and "engine.sock" in str(end)


def test_a_stream_taken_for_stalled_is_cut_at_once_from_another_thread(
        engine: Engine) -> None:
    """The cache took the stream for stalled (a change with no event) after ~90 s, yet
    it stayed open, every cycle listing, until its 600 s idle timeout: its cut, called
    from another thread, wakes the blocked read now, naming why."""
    engine.chunks = [ev("node", "n1") + b"\n"]
    # Ended by the cut, said so: not by the 60 s idle timeout (past drain's 15 s).
    got, end = drain(engine, idle_s=60.0, cut_after_s=0.3)
    assert [e["Actor"]["ID"] for e in got] == ["n1"]
    assert isinstance(end, SwarmUnavailable), repr(end)
    assert "taken for stalled" in str(end) and "engine.sock" in str(end)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"<html>502 Bad Gateway</html>\n", "not JSON"),
        (b"[1, 2]\n", "not an object"),
        (b"[" * 200_000 + b"\n", "not JSON"),  # nested past Python's recursion limit
        (b"x" * (2 << 20), "over 1 MiB"),  # no end of line: was buffered without end
    ],
)
def test_an_answer_that_is_not_events_is_an_error_naming_it(
    engine: Engine, body: bytes, says: str
) -> None:
    engine.chunks = [ev("node", "n1") + b"\n"] + [
        body[i : i + 65536] for i in range(0, len(body), 65536)
    ]
    got, end = drain(engine)
    assert [e["Actor"]["ID"] for e in got] == ["n1"]
    assert isinstance(end, SwarmError), repr(end)
    assert says in str(end) and "event stream" in str(end), str(end)


def test_a_line_sent_a_byte_a_chunk_is_refused_and_its_ends_still_found() -> None:
    """A proxy (or a hung engine) that sends a line one byte per chunk: each chunk
    searched the whole line so far for its end again, 1 MiB taking 8 to 17 s of the
    daemon's CPU (quadratic), before it was refused as over the bound. Its time is
    measured by benchmarks/bench_event_trickle.py, not here."""
    with pytest.raises(NotAnEvent, match="over 1 MiB without its end of line"):
        list(read_events((b"x" for _ in range(MAX_EVENT_BYTES + 2)), "proxy"))
    # and a line ended after such a trickle is still found, whole
    trickle = [bytes([b]) for b in ev("node", "n1") + b"\n" + ev("node", "n2") + b"\n"]
    assert [e["Actor"]["ID"] for e in read_events(trickle, "proxy")] == ["n1", "n2"]


def test_a_quiet_stream_and_a_slow_reader_are_not_a_line_trickled() -> None:
    """Only a line begun and not ended within ``line_s`` is refused: silence between
    whole events (a quiet swarm) and the reader's own time on an event are not its."""
    def chunks() -> Iterator[bytes]:
        yield ev("node", "n1") + b"\n" + ev("node", "n2")[:10]
        yield ev("node", "n2")[10:] + b"\n"
        time.sleep(0.3)  # (quiet: no line begun)
        yield ev("node", "n3") + b"\n"

    got = []
    for event in read_events(chunks(), "engine", line_s=0.2):
        got.append(event["Actor"]["ID"])
        time.sleep(0.3)  # (the reader's time, n2 half come meanwhile)
    assert got == ["n1", "n2", "n3"]


def test_a_line_begun_and_not_ended_in_time_is_refused() -> None:
    def chunks() -> Iterator[bytes]:
        yield ev("node", "n1") + b"\n" + b'{"Type"'
        for _ in range(20):
            time.sleep(0.05)
            yield b" "

    got = []
    with pytest.raises(NotAnEvent, match=r"an event begun 0.[0-9] s ago without its end"):
        for event in read_events(chunks(), "proxy", line_s=0.2):
            got.append(event["Actor"]["ID"])
    assert got == ["n1"]


def test_a_stream_that_ends_inside_an_event_says_so(engine: Engine) -> None:
    """The engine ends every event with a newline: an answer that ends before it was
    cut mid-event (blamed on a proxy's page before)."""
    engine.chunks = [ev("node", "n1") + b"\n" + ev("service", "s1")[:20]]
    engine.close = True
    got, end = drain(engine)
    assert [e["Actor"]["ID"] for e in got] == ["n1"]
    assert isinstance(end, SwarmError), repr(end)
    assert "ended inside an event" in str(end) and "engine.sock" in str(end), str(end)


def test_a_cut_after_the_stream_ended_leaves_the_pools_connection_alone(
        engine: Engine) -> None:
    """A stream that ends cleanly hands its connection back to the pool (urllib3 does,
    on reading the body's end), and the stream reopened takes it again: a cut of the
    ended stream taken then (the cache's stall verdict, racing the end) shut down the
    new stream's socket, which ended at once."""
    engine.chunks, engine.close = [ev("node", "n1") + b"\n"], True
    client = SwarmClient(f"unix://{engine.server_address}")
    cuts: list[Callable[[], None]] = []
    got = list(client.events(on_cut=cuts.append, idle_s=5.0))
    assert [e["Actor"]["ID"] for e in got] == ["n1"] and len(cuts) == 1
    engine.close, engine.more = False, [ev("node", "n2") + b"\n"]
    again: list[str] = []
    first = threading.Event()

    def read() -> None:
        with contextlib.suppress(SwarmError):  # what ended it: the events read say
            for e in client.events(idle_s=5.0):
                again.append(e["Actor"]["ID"])
                first.set()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    assert first.wait(5), "the stream reopened never opened"
    cuts[0]()  # late: its stream has ended
    engine.done.set()  # the engine says one more event, then ends the stream
    t.join(10)
    assert again == ["n1", "n2"], again


class HiddenSocket:
    """A streamed answer whose transport hides its socket (npipe, some ssh)."""

    status_code = 200
    raw = object()

    def iter_content(self, size: int) -> Iterator[bytes]:
        yield ev("node", "n1") + b"\n"

    def close(self) -> None:
        pass


def test_a_stream_whose_socket_is_hidden_hands_the_cache_no_cut(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the transport hides the socket the cut did nothing, yet it was handed to
    the cache, whose stall warning said "reopening it now": the stream stayed open
    until its idle timeout. No cut is handed over: the warning says that timeout."""
    client = SwarmClient(f"unix://{engine.server_address}")
    monkeypatch.setattr(client._api, "_get", lambda *a, **k: HiddenSocket())
    cuts: list[Callable[[], None]] = []
    got = list(client.events(on_cut=cuts.append, idle_s=5.0))
    assert [e["Actor"]["ID"] for e in got] == ["n1"]
    assert cuts == []


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32",
                                      "utf-8-sig"])
def test_an_event_not_in_utf8_is_refused_as_the_engine_s_client_would(encoding: str) -> None:
    """json.loads on bytes guessed UTF-16/32 and skipped a byte order mark, so a line
    Go's decoder (the docker CLI's) refuses was taken for an event: strict UTF-8."""
    line = json.dumps({"Type": "node", "Action": "update", "Actor": {"ID": "n1"}})
    with pytest.raises(NotAnEvent, match="not UTF-8"):
        parse_event(line.encode(encoding), "proxy")
    with pytest.raises(NotAnEvent, match=r"not UTF-8 \(byte 1\)"):
        parse_event(b'{\xff"Type": "node"}', "proxy")
    assert parse_event(line.encode(), "proxy")["Actor"]["ID"] == "n1"
