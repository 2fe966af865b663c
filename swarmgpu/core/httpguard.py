"""What both HTTP servers (agent and daemon) need to survive hostile clients.

* a connection cap, overall and per client address, so one host's half-open requests
  (slowloris) can never take every slot: the daemon scraping an agent, or Prometheus
  scraping the daemon, always finds one free;
* a whole-request deadline for the request head: each read waits at most what is left
  of it, so one header byte every few seconds ends at the deadline, not never;
* a write deadline for the answer (a client that never reads cannot hold a thread);
* one GET or HEAD per connection (``OneRequestHandler``), other methods 405.

The standard library's ``BaseHTTPRequestHandler`` has only a per-read timeout.
"""

from __future__ import annotations

import contextlib
import io
import socket
import threading
import time
from collections import Counter
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from loguru import logger

HEAD_DEADLINE_S = 5.0
WRITE_DEADLINE_S = 10.0
MAX_HEAD_BYTES = 8 * 1024
PLAIN = "text/plain; charset=utf-8"


class HeadTooLarge(Exception):
    def __init__(self, status: HTTPStatus) -> None:
        super().__init__(status.phrase)
        self.status = status


def read_head(sock: socket.socket, deadline_s: float = HEAD_DEADLINE_S,
              max_bytes: int = MAX_HEAD_BYTES) -> bytes:
    """The request line and headers (ending in a blank line), read straight from the
    socket within one deadline. b"" when the client went away or ran out of time;
    HeadTooLarge (414 for the request line, 431 for the headers) when it sends too much.
    The body, if any, is never read: every request here is a GET and the connection
    closes after one answer."""
    deadline = time.monotonic() + deadline_s
    buf = b""
    while True:
        first = buf.find(b"\n")
        if (first < 0 and len(buf) > max_bytes) or first > max_bytes:
            raise HeadTooLarge(HTTPStatus.REQUEST_URI_TOO_LONG)
        ends = [e + n for e, n in ((buf.find(b"\r\n\r\n"), 4), (buf.find(b"\n\n"), 2))
                if e >= 0]
        if (min(ends) if ends else len(buf)) > max_bytes:
            raise HeadTooLarge(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)
        if ends:
            return buf[:min(ends)]
        left = deadline - time.monotonic()
        if left <= 0:
            return b""
        sock.settimeout(left)
        try:
            chunk = sock.recv(4096)
        except OSError:  # timeout, reset
            return b""
        if not chunk:
            return b""
        buf += chunk


class OneRequestHandler(BaseHTTPRequestHandler):
    """One GET or HEAD per connection, which keeps each connection bounded: the head is
    read within one deadline (the handler's ``timeout`` if set, else HEAD_DEADLINE_S),
    parsed, and other methods get 405. Subclasses answer in ``respond()`` with
    ``send_answer``; ``always_headers`` go on every answer, errors included."""

    protocol_version = "HTTP/1.1"
    write_deadline_s: float = WRITE_DEADLINE_S
    always_headers: ClassVar[dict[str, str]] = {}
    # Echo parse_request's reason (cut to 200 characters) in error bodies, or only the phrase.
    error_detail = False

    def respond(self) -> None:
        raise NotImplementedError

    def handle_one_request(self) -> None:
        self.close_connection = True
        self.command = ""
        self.request_version = "HTTP/1.0"
        try:
            head = read_head(self.connection, float(self.timeout or HEAD_DEADLINE_S))
        except HeadTooLarge as e:
            self.requestline = "(too large)"  # send_response logs it
            self.connection.settimeout(self.write_deadline_s)
            self.send_error(e.status)
            return
        if not head:
            return  # gone, or too slow: nothing is owed to it
        self.connection.settimeout(self.write_deadline_s)  # the answer's write deadline
        real_rfile = self.rfile
        self.rfile = io.BytesIO(head)  # parse_request reads the headers from rfile
        try:
            self.raw_requestline = self.rfile.readline()
            if not self.parse_request():
                return
        finally:
            self.rfile = real_rfile
        self.close_connection = True
        if self.command not in ("GET", "HEAD"):
            self.send_answer(HTTPStatus.METHOD_NOT_ALLOWED, PLAIN, b"only GET and HEAD\n",
                             {"Allow": "GET, HEAD"})
            return
        self.respond()

    def send_answer(self, status: int, ctype: str, body: bytes,
                    headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        for k, v in {**self.always_headers, **(headers or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        status = HTTPStatus(code)
        self.request_version = "HTTP/1.1"  # always answer with a status line, even to 0.9
        if not self.error_detail:
            message = None
        elif message and len(message) > 200:
            message = message[:200] + "..."
        with contextlib.suppress(OSError):  # the client has gone; nothing to tell it
            self.send_answer(status, PLAIN, f"{status.value} {message or status.phrase}\n".encode())


class GuardedServer(ThreadingHTTPServer):
    """A threading HTTP server with a connection cap overall and per client address."""

    daemon_threads = True
    request_queue_size = 64
    max_connections = 32
    max_per_client = 8

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._per_client: Counter[str] = Counter()
        self._lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        ip = str(client_address[0]) if client_address else ""
        with self._lock:
            crowded = self._per_client[ip] >= self.max_per_client
            if not crowded:
                self._per_client[ip] += 1
        if crowded or not self._slots.acquire(blocking=False):
            if not crowded:
                with self._lock:
                    self._release_client(ip)
            logger.warning("too many connections ({}); closing one from {}",
                           "from that client" if crowded else "in all", ip)
            self.shutdown_request(request)
            return
        try:
            request.settimeout(WRITE_DEADLINE_S)
            super().process_request(request, client_address)
        except Exception:
            self._slots.release()
            with self._lock:
                self._release_client(ip)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()
            with self._lock:
                self._release_client(str(client_address[0]) if client_address else "")

    def _release_client(self, ip: str) -> None:
        self._per_client[ip] -= 1
        if self._per_client[ip] <= 0:
            del self._per_client[ip]
