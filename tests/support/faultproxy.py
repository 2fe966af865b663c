"""A fault-injecting HTTP proxy in front of the Docker Engine's unix socket.

Point the daemon's ``docker_host`` at ``proxy.docker_host`` and set ``proxy.rules``:
each request (method + path) is checked against the rules in order; the first that
fires decides what happens to it. Faults, all counted in ``proxy.injected``:

* ``error500``: answer 500 ``{"message": "injected fault"}`` without forwarding;
* ``out_of_sequence``: answer 500 with the engine's "update out of sequence" text;
* ``slow``: forward after ``delay_s``;
* ``hang``: hold the request ``delay_s`` (longer than the client timeout), then close;
* ``drop_response``: forward (the engine acts) and close without answering: the
  write landed but the client never learns it;
* ``after``: forward, then call ``hook(method, path)`` (e.g. SIGKILL the daemon).

``cut_streams()`` closes every open streaming response (the event stream).
Each request is forwarded on its own upstream connection with ``Connection: close``,
so request boundaries are always known and a fault never corrupts the next request.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import socket
import socketserver
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

OUT_OF_SEQUENCE = "rpc error: code = Unknown desc = update out of sequence"
MAX_HEAD = 64 * 1024


@dataclass
class Rule:
    fault: str  # error500 | out_of_sequence | slow | hang | drop_response | after
    method: str = ".*"  # regex on the method
    path: str = ".*"  # regex on the path (query string included)
    probability: float = 1.0
    times: int | None = None  # fire at most this many times (None: no limit)
    delay_s: float = 0.0
    hook: Callable[[str, str], None] | None = None
    fired: int = 0

    def matches(self, method: str, path: str, rng: random.Random) -> bool:
        if self.times is not None and self.fired >= self.times:
            return False
        if not re.fullmatch(self.method, method) or not re.search(self.path, path):
            return False
        return rng.random() < self.probability


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """(head including the blank line, any body bytes read past it)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return b"", b""
        buf += chunk
        if len(buf) > MAX_HEAD:
            raise ValueError("request head too large")
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


def _header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == name.lower():
            return v.strip()
    return None


def _force_close(head: bytes) -> bytes:
    lines = [ln for ln in head.split(b"\r\n")
             if not ln.lower().startswith((b"connection:", b"keep-alive:"))]
    lines.insert(1, b"Connection: close")
    return b"\r\n".join(lines)


def _answer(status: str, message: str) -> bytes:
    body = json.dumps({"message": message}).encode()
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


class FaultProxy:
    def __init__(self, upstream: str | Path, path: str | Path, *, seed: int = 0) -> None:
        self.upstream = str(upstream).removeprefix("unix://")
        self.path = Path(path)
        self.rules: list[Rule] = []
        self.injected: Counter[str] = Counter()
        self.requests = 0
        self.rng = random.Random(seed)
        self._lock = threading.Lock()
        self._streams: set[socket.socket] = set()
        self._server: socketserver.ThreadingUnixStreamServer | None = None

    @property
    def docker_host(self) -> str:
        return f"unix://{self.path}"

    # --- control ------------------------------------------------------------
    def start(self) -> FaultProxy:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._handle(self.request)

        server = socketserver.ThreadingUnixStreamServer(str(self.path), Handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                         daemon=True, name="faultproxy").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self.cut_streams()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def clear(self) -> None:
        with self._lock:
            self.rules = []

    def cut_streams(self) -> int:
        with self._lock:
            streams, self._streams = list(self._streams), set()
        for s in streams:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        if streams:
            self.injected["stream_cut"] += len(streams)
        return len(streams)

    # --- one connection = one request ---------------------------------------
    def _pick(self, method: str, path: str) -> Rule | None:
        with self._lock:
            self.requests += 1
            for rule in self.rules:
                if rule.matches(method, path, self.rng):
                    rule.fired += 1
                    return rule
        return None

    def _handle(self, client: socket.socket) -> None:
        try:
            head, rest = _read_head(client)
        except (OSError, ValueError):
            return
        if not head:
            return
        method, path = ([*head.split(b"\r\n", 1)[0].decode("latin-1").split(" "), "", ""])[:2]
        length = int(_header(head, b"content-length") or b"0")
        body = rest
        while len(body) < length:
            chunk = client.recv(65536)
            if not chunk:
                return
            body += chunk
        rule = self._pick(method, path)
        fault = rule.fault if rule else None
        if fault is not None and fault not in ("after",):
            self.injected[fault] += 1
        try:
            if fault == "error500":
                client.sendall(_answer("500 Internal Server Error", "injected fault"))
                return
            if fault == "out_of_sequence":
                client.sendall(_answer("500 Internal Server Error", OUT_OF_SEQUENCE))
                return
            if fault == "hang":
                time.sleep(rule.delay_s if rule else 0)
                return
            if fault == "slow" and rule:
                time.sleep(rule.delay_s)
            self._forward(client, _force_close(head) + body,
                          drop=fault == "drop_response", stream="/events" in path)
            if fault == "after" and rule and rule.hook:
                self.injected["after_hook"] += 1
                rule.hook(method, path)
        except OSError:
            return

    def _forward(self, client: socket.socket, request: bytes, *, drop: bool,
                 stream: bool) -> None:
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            up.connect(self.upstream)
            up.sendall(request)
            if stream:
                with self._lock:
                    self._streams.add(client)
            while True:
                chunk = up.recv(65536)
                if not chunk:
                    break
                if not drop:
                    client.sendall(chunk)
        except OSError:
            pass  # engine down or stream cut: the client sees a closed connection
        finally:
            with self._lock:
                self._streams.discard(client)
            up.close()
