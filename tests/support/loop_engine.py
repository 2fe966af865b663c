"""An engine on loopback for docker-py's own client: real HTTP/1.1, keep-alive, each
GET (or POST, its body read: ``posts`` counts them) of a path answered from
``answers`` (the path without its /vX.Y; /version, unless
named, a 24.0 engine's): bytes as they
are (with a length), a ``Padded`` or ``Chunked`` body sent chunked, as Go sends a long
answer, a ``Trickled`` one a byte at a time, as a slow proxy may, or ``SlowHeaders``:
its headers so. It counts the connections it took and the bytes of each chunked body
(or of slow headers) it got out."""

from __future__ import annotations

import json
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from click.testing import CliRunner

from support.serving import served
from swarmgpu.cli import main
from swarmgpu.swarm.client import SwarmClient, SwarmUnavailable

VERSION = json.dumps({"ApiVersion": "1.43", "MinAPIVersion": "1.24",
                      "Version": "24.0.0"}).encode()


@dataclass(frozen=True)
class Padded:
    """A JSON empty list of ``size`` bytes (``[``, spaces, ``]``): cheap to decode, so a
    client that reads it whole takes it for an empty list."""

    size: int


@dataclass(frozen=True)
class Chunked:
    """``body`` sent chunked (no length), as Go sends a long answer."""

    body: bytes


@dataclass(frozen=True)
class Trickled:
    """``body`` sent chunked a byte every ``every_s``, each well within the client's
    timeout; the rest unsent once the client closed the connection."""

    body: bytes
    every_s: float


@dataclass(frozen=True)
class SlowHeaders:
    """``body`` (with a length) after headers sent a byte every ``every_s``, each well
    within the client's timeout; the rest unsent once the client closed the connection."""

    body: bytes
    every_s: float


Answer = bytes | Padded | Chunked | Trickled | SlowHeaders


class LoopEngine(ThreadingHTTPServer):
    daemon_threads = True
    answers: dict[str, Answer]
    connections: int
    posts: int
    sent: int  # of the last chunked body, once ``sent_all`` is set
    sent_all: threading.Event
    # Each path's chunked bodies, in the order they ended: the bytes of each sent (a
    # read cut short sent fewer than its body: counted, where a wall clock would lag).
    sent_to: dict[str, list[int]]

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # (a client that closed its connection, as a refused answer's reader does)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # (keep-alive: a released connection is used again)
    server: LoopEngine

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1
        if self.server.address_family != socket.AF_UNIX:  # (as Go sets it: headers and
            # body written apart wait no 40 ms for the client's delayed ack)
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *_: object) -> None:
        pass

    def do_POST(self) -> None:  # (a write: its body read, then answered as a GET)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.posts += 1
        self.do_GET()

    def do_GET(self) -> None:  # (http.server calls it so)
        path = self.path.partition("?")[0]
        if path.startswith("/v1."):
            path = "/" + path.split("/", 2)[2]
        body = self.server.answers.get(path, VERSION if path == "/version" else b"{}")
        if isinstance(body, SlowHeaders):
            self._slow_headers(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if isinstance(body, bytes):
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        chunks = (_padding(body.size) if isinstance(body, Padded) else
                  _slices(body.body, 1) if isinstance(body, Trickled) else _slices(body.body))
        try:
            for chunk in chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                sent += len(chunk)
                if isinstance(body, Trickled):
                    time.sleep(body.every_s)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client closed it: the rest unread
            self.close_connection = True
        finally:
            self.server.sent = sent
            self.server.sent_to.setdefault(path, []).append(sent)
            self.server.sent_all.set()


    def _slow_headers(self, answer: SlowHeaders) -> None:
        head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"X-Padding: %s\r\nContent-Length: %d\r\n\r\n"
                % (b"x" * 200, len(answer.body)))
        sent = 0
        try:
            for i in range(len(head)):
                self.wfile.write(head[i:i + 1])
                self.wfile.flush()
                sent += 1
                time.sleep(answer.every_s)
            self.wfile.write(answer.body)
        except OSError:  # the client closed it: the rest unread
            self.close_connection = True
        finally:
            self.server.sent = sent
            self.server.sent_all.set()


def _padding(size: int, chunk: int = 64 * 1024) -> Iterator[bytes]:
    yield b"["
    spaces = size - 2
    while spaces > 0:
        yield b" " * min(chunk, spaces)
        spaces -= chunk
    yield b"]"


def _slices(body: bytes, chunk: int = 32 * 1024) -> Iterator[bytes]:
    return (body[i:i + chunk] for i in range(0, len(body), chunk))


class UnixLoopEngine(socketserver.ThreadingUnixStreamServer, LoopEngine):
    """A ``LoopEngine`` on a unix socket, as the engine's own."""


@contextmanager
def loop_engine(answers: dict[str, Answer], unix: str = "",
                tls: ssl.SSLContext | None = None) -> Iterator[LoopEngine]:
    """A ``LoopEngine`` on 127.0.0.1 serving ``answers``, for the block's length
    (its address: ``tcp://127.0.0.1:<server.server_port>``); on the unix socket at path
    ``unix`` where given (``unix://<unix>``); over TLS with server context ``tls``."""
    server = (UnixLoopEngine(unix, Handler) if unix else
              LoopEngine(("127.0.0.1", 0), Handler))
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    server.answers, server.connections, server.sent = answers, 0, 0
    server.posts = 0
    server.sent_all = threading.Event()
    server.sent_to = {}
    with served(server):
        yield server


def doctor_engine(monkeypatch: pytest.MonkeyPatch, port: int) -> Any:
    """``doctor``'s docker.engine check, asked of the engine at ``port`` (the live node's
    other checks as they come)."""
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{port}")
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    res = CliRunner().invoke(main, ["doctor", "--root", "/", "--json", "--agents-service",
                                    "", "--source", "file:/nonexistent"])
    (check,) = [c for c in json.loads(res.output)["checks"] if c["id"] == "docker.engine"]
    return check


def doctor_refused(monkeypatch: pytest.MonkeyPatch, port: int, found: str) -> None:
    """``doctor``'s docker.engine check of the engine at ``port`` fails saying ``found``,
    naming the proxy as the fix."""
    check = doctor_engine(monkeypatch, port)
    assert check["status"] == "fail", check
    assert found in check["found"], check
    assert "proxy in front of the engine" in check["fix"], check


def refused_in_time(engine: LoopEngine, call: Callable[[], object],
                    refused: type[Exception], match: str, sent_below: int) -> Exception:
    """``call()`` refused as ``refused`` (matching ``match``) before the answer was sent
    whole: its connection closed with fewer than ``sent_below`` bytes of it sent (the
    work done, counted: a loaded machine stretches the wall time, not this)."""
    with pytest.raises(refused, match=match) as got:
        call()
    assert engine.sent_all.wait(5)  # (its connection closed: the rest unsent)
    assert engine.sent < sent_below, engine.sent
    return got.value


def tasks_refused(answer: Answer, match: str, sent_below: int) -> None:
    """The daemon's client (a 1 s timeout) reading the task list of an engine that
    answers it ``answer`` is refused as ``refused_in_time`` says, naming the proxy as
    the fix."""
    with loop_engine({"/tasks": answer}) as engine:
        sw = SwarmClient(f"tcp://127.0.0.1:{engine.server_port}", timeout_s=1)
        got = refused_in_time(engine, sw.tasks, SwarmUnavailable, match, sent_below)
    assert "proxy in front of the engine" in str(got)
