"""A recording stand-in for the engine's socket, for the docker-proxy's tests and
benchmarks/bench_proxy_memory.py: it records each request's bytes and answers as the
engine would, just enough for the proxy's calls (``EngineHandler``)."""

from __future__ import annotations

import copy
import json
import re
import socketserver
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

SWARM = {
    "ID": "s1",
    "Version": {"Index": 7},
    "Spec": {"Name": "default", "Labels": {}},
    "JoinTokens": {"Worker": "SWMTKN-1-worker", "Manager": "SWMTKN-1-manager"},
}
# A GPU service (a label under the prefix) whose owner dropped every capability.
SERVICE = {
    "ID": "svc1",
    "Version": {"Index": 3},
    "Spec": {
        "Name": "web",
        "Labels": {"swarmgpu.gpus": "1"},
        "Mode": {"Replicated": {"Replicas": 1}},
        "TaskTemplate": {
            "ContainerSpec": {
                "Image": "app:1",
                "CapabilityDrop": ["ALL"],
                "Privileges": {"NoNewPrivileges": True},
            }
        },
    },
}


class Engine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 64  # the proxy's connections at once (benchmarks/)
    seen: list[bytes]
    events_sent: threading.Event
    swarm: dict[str, Any]  # SWARM as the engine holds it now
    service: dict[str, Any]  # SERVICE as the engine holds it now (a service update applies)
    raw: dict[bytes, bytes]  # path (no /vX.Y) -> a GET's 200 body as sent: a hostile engine
    errors: dict[bytes, bytes]  # path (no /vX.Y) -> a GET's 400 message (an ambiguous name)
    before_write: Callable[[], None] | None  # runs as a service update arrives
    more_services: list[dict[str, Any]]  # listed beside ``service`` (never inspected)


class EngineHandler(socketserver.BaseRequestHandler):
    """Records each request's bytes; answers a GET of a path in ``raw`` with its bytes,
    one in ``errors`` 400 with its message,
    GET /swarm with chunks (as Go does for a longer answer), GET /services? with the
    service when an ``id`` filter is a prefix of its ID, /events as a stream, a
    service update at the service's version by applying it (the next version), anything
    else 200 ``{}``."""

    server: Engine

    def handle(self) -> None:
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            buf += chunk
        m = re.search(rb"Content-Length: (\d+)", buf)
        want = buf.index(b"\r\n\r\n") + 4 + (int(m.group(1)) if m else 0)
        while len(buf) < want:
            buf += self.request.recv(4096)
        self.server.seen.append(buf)
        line = buf.split(b"\r\n", 1)[0]
        got = re.match(rb"GET (?:/v[0-9.]+)?(/[^ ]*) ", line)
        if got and got.group(1) in self.server.raw:
            body = self.server.raw[got.group(1)]
            self.request.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
        elif got and got.group(1) in self.server.errors:
            body = json.dumps({"message": self.server.errors[got.group(1)].decode()}).encode()
            self.request.sendall(
                b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
        elif re.match(rb"GET (/v[0-9.]+)?/swarm ", line):
            body = json.dumps(self.server.swarm).encode()
            self.request.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
                + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:10], body[10:]))
                + b"0\r\n\r\n"
            )
        elif lst := re.match(rb"GET (?:/v[0-9.]+)?(/services\?[^ ]*) ", line):
            # The list, filtered by ID as the engine does (each ``id`` a prefix).
            query = parse_qs(urlsplit(lst.group(1).decode()).query)
            ids = json.loads(query.get("filters", ["{}"])[0]).get("id", [])
            listed = [s for s in (self.server.service, *self.server.more_services)
                      if any(s["ID"].startswith(i) for i in ids)]
            body = json.dumps(listed).encode()
            self.request.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
        elif re.match(rb"GET (/v[0-9.]+)?/services/[^/ ]+ ", line):
            body = json.dumps(self.server.service).encode()
            self.request.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
        elif m := re.match(rb"POST /services/svc1/update\?version=([0-9]+) ", line):
            if self.server.before_write is not None:
                self.server.before_write()  # another writer, between the check and this
            svc = self.server.service
            ok = int(m.group(1)) == svc["Version"]["Index"]
            if ok:  # the engine's own version check: a stale update is not applied
                svc["Spec"] = json.loads(buf.split(b"\r\n\r\n", 1)[1])
                svc["Version"] = {"Index": svc["Version"]["Index"] + 1}
            body = b"{}" if ok else b'{"message": "update out of sequence"}'
            self.request.sendall(
                b"HTTP/1.1 %s\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s"
                % (b"200 OK" if ok else b"500 Internal Server Error", len(body), body)
            )
        elif line.startswith(b"GET /v1.43/events"):
            self.request.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            for i in range(3):
                ev = json.dumps({"Type": "node", "Action": "update", "n": i}).encode() + b"\n"
                self.request.sendall(b"%x\r\n%s\r\n" % (len(ev), ev))
            self.server.events_sent.set()
            self.request.settimeout(10)
            self.request.recv(1)  # until the proxy hangs up
        else:
            self.request.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Api-Version: 1.43\r\nContent-Length: 2\r\n\r\n{}"
            )


def start_engine(path: str) -> Engine:
    """The stand-in, serving on the unix socket ``path`` (``shutdown`` it after)."""
    engine = Engine(path, EngineHandler)
    engine.seen = []
    engine.events_sent = threading.Event()
    engine.swarm = copy.deepcopy(SWARM)
    engine.service = copy.deepcopy(SERVICE)
    engine.raw = {}
    engine.errors = {}
    engine.before_write = None
    engine.more_services = []
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    return engine
