"""``swarmgpu plan`` reads the daemon's moves (``cli.daemonmoves``) from whatever answers
on ``http.listen``, as an edge: bounded in time and size, no redirect followed, and an
answer that is not the moves document is said as what it is, not taken. Each stand-in
here answers raw bytes on a loopback port."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from support.fifo import make_fifo, read_within

from swarmgpu.cli import daemonmoves
from swarmgpu.core.config import Config

Answer = Callable[[bytes, socket.socket, threading.Event], None]
MOVES = json.dumps({"proposed": [], "recent": [], "dry_run": True}).encode()


def _ok(body: bytes) -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)


class Daemon:
    """A loopback port answering each request with ``answer`` (the request's head, the
    socket, the stop event), once a test set it; every request head is kept."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.heads: list[bytes] = []
        self.answer: Answer = lambda _h, s, _e: s.sendall(_ok(MOVES))
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head and (chunk := conn.recv(4096)):
                    head += chunk
                self.heads.append(head)
                with contextlib.suppress(OSError):  # the reader hung up
                    self.answer(head, conn, self.stop)

    def cfg(self, token_file: str = "") -> Config:
        c = Config()
        return replace(c, http=replace(c.http, listen=f"127.0.0.1:{self.port}",
                                       token_file=token_file))


@pytest.fixture
def stand_in() -> Iterator[Daemon]:
    d = Daemon()
    yield d
    d.stop.set()
    d.sock.close()


def _drip(_h: bytes, s: socket.socket, stop: threading.Event) -> None:
    """Headers at once, then a byte of the body now and then: each read of the socket
    within any per-read timeout, the answer never whole (ends after 8 s, or when
    stopped, so that a reader without a deadline still returns)."""
    s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
    end = time.monotonic() + 8
    while not stop.is_set() and time.monotonic() < end:
        s.sendall(b" ")
        stop.wait(0.2)


def test_a_daemon_that_answers_a_byte_at_a_time_is_not_waited_on(
        stand_in: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    # requests' timeout bounds each read, not the answer: plan waited as long as the
    # bytes kept coming, then said the daemon was "not reachable".
    monkeypatch.setattr(daemonmoves, "TIMEOUT_S", 0.5, raising=False)
    stand_in.answer = _drip
    got = daemonmoves.daemon_moves(stand_in.cfg())
    assert isinstance(got, str) and "did not answer within" in got, got


def test_a_larger_answer_than_any_moves_document_is_not_read_whole(
        stand_in: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(daemonmoves, "MAX_BYTES", 1 << 20, raising=False)
    big = json.dumps({"proposed": [], "recent": [], "pad": "x" * (2 << 20)}).encode()
    stand_in.answer = lambda _h, s, _e: s.sendall(_ok(big))
    got = daemonmoves.daemon_moves(stand_in.cfg())
    assert isinstance(got, str) and "more than" in got, got


def test_a_redirect_is_not_followed(stand_in: Daemon) -> None:
    # requests followed it, and plan showed another path's (or host's) document as the
    # daemon's moves.
    def answer(head: bytes, s: socket.socket, _e: threading.Event) -> None:
        if head.startswith(b"GET /elsewhere "):
            s.sendall(_ok(MOVES))
        else:
            s.sendall(b"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0"
                      b"\r\nConnection: close\r\n\r\n")

    stand_in.answer = answer
    got = daemonmoves.daemon_moves(stand_in.cfg())
    assert isinstance(got, str) and "HTTP 302" in got and "redirect" in got, got
    assert len(stand_in.heads) == 1, stand_in.heads


def test_a_daemon_that_failed_its_answer_is_sent_to_its_log(stand_in: Daemon) -> None:
    # A 500 (the daemon's route raised) asked whether http.listen was the right port.
    stand_in.answer = lambda _h, s, _e: s.sendall(
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 15\r\nConnection: close"
        b"\r\n\r\ninternal error\n")
    got = daemonmoves.daemon_moves(stand_in.cfg())
    assert isinstance(got, str) and "HTTP 500" in got and "its log" in got, got
    assert "http.listen of this config" not in got, got


@pytest.mark.parametrize("body", [
    b"[" * 200_000,  # nested past the decoder's recursion: plan raised
    b'{"error": "who are you"}',  # another program's: read as "none proposed"
    b'{"proposed": "x", "recent": []}',
    b'{"proposed": [], "recent": [], "gain": NaN}',  # plan --json wrote NaN: no JSON
    b'{"proposed": [], "proposed": [{"service": "s"}], "recent": []}',
    b"<html>sign in</html>",
    b"\xff\xfe\x00",
])
def test_an_answer_that_is_not_the_moves_document_is_not_taken(
        stand_in: Daemon, body: bytes) -> None:
    stand_in.answer = lambda _h, s, _e: s.sendall(_ok(body))
    got = daemonmoves.daemon_moves(stand_in.cfg())
    assert isinstance(got, str) and "not its moves" in got, got


def test_the_moves_are_read_with_the_token_of_http_token_file(
        stand_in: Daemon, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("abc123def456\n")
    got = daemonmoves.daemon_moves(stand_in.cfg(str(tmp_path / "token")))
    assert got == json.loads(MOVES), got
    assert b"\r\nAuthorization: Bearer abc123def456\r\n" in stand_in.heads[0], stand_in.heads


def test_a_token_file_that_is_a_fifo_is_refused_not_waited_on(
        stand_in: Daemon, tmp_path: Path) -> None:
    fifo = make_fifo(tmp_path / "token")
    stand_in.answer = lambda _h, s, _e: s.sendall(
        b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    got = read_within(lambda: daemonmoves.daemon_moves(stand_in.cfg(str(fifo))), fifo)
    assert isinstance(got, str) and "HTTP 401" in got and "not a regular file" in got, got
    assert b"Authorization" not in stand_in.heads[0], stand_in.heads
