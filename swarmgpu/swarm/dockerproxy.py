"""A least-privilege door to the Docker socket: exactly the calls the daemon makes.

The docker group is root-equivalent (start a privileged container, own the host). The
daemon needs much less: read Swarm objects, and update node labels, service specs and
the swarm's own labels. ``swarmgpu docker-proxy`` listens on a unix socket (or loopback
TCP) and forwards a request to the engine only when it is one of ``ALLOWED_CALLS`` and
does what the daemon does with it. ``ALLOWED_CALLS`` is also the table in
docs/security.md (the "the proxy lets through" column is ``Call.allows``) and what
``swarmgpu/swarm/client.py`` calls; ``tests/test_dockerproxy.py`` checks all three.

Framing (``httpframe``): the proxy parses each request strictly, refuses anything two
HTTP parsers could read differently (400/411/413/431), and forwards a request it
rebuilt from what it parsed (its own head, the body re-framed with Content-Length), one
per connection, ``Connection: close`` both ways. The engine's answer is re-framed too
(``enginewire``: the proxy's side of its connection to the engine).

Content: the three writes are checked against the current spec, which the proxy reads
from the engine itself; ``version`` must be that spec's, so the engine applies the
update only to the spec that was checked; the read and the write go without the
client's ``/vX.Y`` (at an older API version the engine drops fields from the body it
was sent, ``_vet``). What a write may change is the daemon's to
say: ``build_proxy`` takes the checks (``swarmgpu.manager.engine.proxy_policy.write_checks``,
handed over by ``swarmgpu docker-proxy``); across writes, ``surges`` keeps the daemon's
replica raises from stacking. ``GET /swarm`` comes back without its join tokens.
What the proxy reads whole (a write's body, the spec it is checked against, ``GET
/swarm``'s answer) is read in turns, one request at a time (``ProxyServer.whole``), on
two malloc heaps (``few_heaps``): 32 at once outgrew the stack's 128M. The engine's
answers it reads whole are parsed as a write's body is (``load_answer``: its bounds).
Refusals are 403 and logged.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import socket
import socketserver
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal
from urllib.parse import urlencode

from loguru import logger

from swarmgpu.core.peertext import peer_text
from swarmgpu.core.servererrors import LoggedErrors
from swarmgpu.swarm.enginewire import (
    ENGINE_DEADLINE_S,
    ClientGone,
    Wire,
    engine_json,
    readable,
    request_bytes,
)
from swarmgpu.swarm.httpframe import Refused, Request, RequestReader, split_target
from swarmgpu.swarm.jsonstrict import JsonError, JsonTooLarge, load_answer, load_json
from swarmgpu.swarm.proxyhost import loopback_host, tcp_listen
from swarmgpu.swarm.proxystop import STOP_WAIT_S, finish_turn, stop_on_signals
from swarmgpu.swarm.surges import (
    SurgeBook,
    SurgeRefused,
    admit_or_sweep,
    out_of_sequence,
    replicas,
)
from swarmgpu.swarm.unkeyed import answered_by_prefix, wrong_object

_log = logger.bind(component="docker-proxy")

REQUEST_DEADLINE_S = 10.0  # the whole request (head and body) from the first byte
CLIENT_WRITE_TIMEOUT_S = 30.0  # a client that does not read its answer is dropped
MAX_CONNECTIONS = 32  # in flight at once; more get 503 (the daemon uses ~10)
_VERSION = re.compile(r"^/v[0-9]{1,2}\.[0-9]{1,3}(?=/)")
_ID = "[A-Za-z0-9][A-Za-z0-9_.-]{0,127}"  # node/service IDs and names
# A whole service ID as swarmkit makes it (identity.NewID: base 36, 25 digits), which is
# what the engine's answer carries and ``{{.Service.ID}}`` gives.
_SERVICE_ID = re.compile(r"[0-9a-z]{25}")
_NUMBER = r"[0-9]{1,20}"
_ANY = r"[\x20-\x7e]{0,4096}"
_BOOL = "(?i:true|false)|1|0"  # requests writes a Python bool as True/False
# Hop-by-hop and framing fields of the engine's answer: the proxy writes its own.
_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length",
                  "upgrade", "proxy-connection", "te", "trailer"})

Kind = Literal["read", "stream", "swarm", "node-update", "service-update", "swarm-update"]
# A write's check: (the current spec, the posted one) -> None, or ValueError saying what
# else it changes; one per write kind.
WriteCheck = Callable[[Mapping[str, Any], Any], None]
WriteChecks = Mapping[str, WriteCheck]
WRITE_KINDS = ("node-update", "service-update", "swarm-update")


@dataclass(frozen=True)
class Call:
    """One Engine API call the daemon makes: method, path as the docs write it
    (``{id}`` for an object ID or name), the code in client.py that makes it (docker
    SDK ``APIClient`` methods, or the raw path it posts to), why, the query names it
    may carry (name -> the values allowed, a regex), what the proxy checks beyond
    that (``kind``) and that check in words (``allows``, the docs' column)."""

    method: str
    path: str
    client: tuple[str, ...]
    why: str
    allows: str
    kind: Kind = "read"
    params: Mapping[str, str] = field(default_factory=dict)

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        return re.compile("^" + re.escape(self.path).replace(re.escape("{id}"), _ID) + "$")

    def check_params(self, query: tuple[tuple[str, str], ...]) -> str | None:
        """None when every query parameter is one this call may carry, with a value
        allowed for it; else what is wrong."""
        for name, value in query:
            rule = self.params.get(name)
            if rule is None:
                return f"the query parameter {name[:40]!r} (allowed: " \
                       f"{', '.join(sorted(self.params)) or 'none'})"
            if not re.fullmatch(rule, value):
                return f"{name}={value[:40]!r} (allowed: {rule})"
        if self.kind.endswith("-update") and not any(k == "version" for k, _ in query):
            return "an update without ?version="
        return None


_WRITE = {"version": _NUMBER}
_NO_ROTATION = {"rotateWorkerToken": "false", "rotateManagerToken": "false",
                "rotateManagerUnlockKey": "false"}

# The single source of truth: the proxy allows these, docs/security.md tables them, and
# tests/test_dockerproxy.py checks that client.py makes no other call.
ALLOWED_CALLS: tuple[Call, ...] = (
    Call("GET", "/version", ("APIClient()", "version"),
         "the docker SDK asks the engine's API version when it connects; the spec-write "
         "guard asks its release again once a minute (swarm.engineskew)", "no query"),
    Call("GET", "/info", ("info",), "this engine's Swarm node ID, cluster ID, data root",
         "no query"),
    Call("GET", "/swarm", ("inspect_swarm",),
         "the swarm root CA agents' certificates must chain to; the workload model label",
         "no query; the answer without `JoinTokens`", "swarm"),
    Call("GET", "/nodes", ("nodes",),
         "snapshot; a move's start: the nodes holding its service (its ledger label)",
         "`filters`", params={"filters": _ANY}),
    Call("GET", "/nodes/{id}", ("inspect_node",),
         "leader check; read before write; a move's own nodes, each cycle it is in flight",
         "no query"),
    Call("GET", "/services", ("services",), "snapshot", "`filters`, `status`",
         params={"filters": _ANY, "status": _BOOL}),
    Call("GET", "/services/{id}", ("inspect_service",), "read before write",
         "`insertDefaults`", params={"insertDefaults": _BOOL}),
    Call("GET", "/tasks", ("tasks",),
         "snapshot (desired-state running, ready; shutdown, remove: tasks stopping)",
         "`filters`", params={"filters": _ANY}),
    Call("GET", "/events", ("/events",), "a cycle on every node or service change (stream)",
         "`filters`; streamed", "stream", {"filters": _ANY}),
    Call("GET", "/images/json", ("images",),
         "ungranted GPU access: the image a service on a GPU node runs (reference filter)",
         "`filters`, `only_ids`, `all`",
         params={"filters": _ANY, "only_ids": _BOOL, "all": _BOOL}),
    Call("GET", "/images/{id}/json", ("inspect_image",),
         "ungranted GPU access: that image's env (NVIDIA_VISIBLE_DEVICES, CUDA_VERSION)",
         "no query"),
    Call("POST", "/nodes/{id}/update", ("update_node",),
         "node labels under the prefix: facts, placement gates, the GPU ledger",
         "`version` (the current one); the spec equal to the current one but for labels "
         "under the prefix (no role, availability, name or other label change), none of "
         "them one no node carries (`<prefix>hold`, `<prefix>state.*`: the hold and the "
         "renewal constraint read their absence) added or changed",
         "node-update", _WRITE),
    Call("POST", "/services/{id}/update", ("/services/{0}/update",),
         "placement and moves: swarmgpu.* service labels, the gate, the device env",
         "`version` (the current one); only a service that is swarmgpu's (a label under "
         "the prefix, a gate constraint or a swarmgpu env template), its spec equal to the "
         "current one but for: service labels under the prefix (a `devices.` list it "
         "sets: GPU-/MIG- UUIDs), gate constraints (`node.labels.<prefix>service.*`) and "
         "the hold (`node.labels.<prefix>hold==true`, replaced by the gate), swarmgpu's "
         "own env lines (exact), the lines of `NVIDIA_VISIBLE_DEVICES` and "
         "`DOCKER_RESOURCE_*` removed or set to `void`, placement's `/dev/null` device "
         "mount (exact), `ForceUpdate`, `Placement.MaxReplicas`, `Mode.Replicated.Replicas` "
         "(a whole number, raised by one at most: a move's make-before-break surge; a "
         "write asking for more, or raising again the count the proxy let the daemon "
         "raise that service to, is refused, so the daemon's access cannot fill the raft "
         "store with tasks), discrete generic-resource reservations, "
         "`UpdateConfig.Parallelism` (no image, other mount, privilege, capability, "
         "network or other change); any other service only its `NVIDIA_VISIBLE_DEVICES` "
         "and `DOCKER_RESOURCE_*` lines removed or set to `void`", "service-update", _WRITE),
    Call("POST", "/swarm/update", ("/swarm/update",),
         "the learned workload model, a label on the swarm object (swarmgpu.state.workload)",
         "`version` (the current one), the three `rotate…` flags only `false`; the spec "
         "equal to the current one but for labels under the prefix", "swarm-update",
         {**_WRITE, **_NO_ROTATION}),
)


def without_join_tokens(swarm: Any) -> Any:
    """``GET /swarm``'s answer without ``JoinTokens`` (a join token makes a node)."""
    if isinstance(swarm, dict):
        return {k: v for k, v in swarm.items() if k != "JoinTokens"}
    return swarm


def match(method: str, path: str) -> Call | None:
    """The call ``method path`` is (an optional /vX.Y prefix), when the daemon makes it."""
    bare = _VERSION.sub("", path, count=1)
    for call in ALLOWED_CALLS:
        if call.method == method and call.pattern.match(bare):
            return call
    return None


def allowed(method: str, target: str) -> Call | None:
    """The call ``method target`` is, when its target parses strictly and the daemon
    may make it (None: refuse)."""
    try:
        path, _ = split_target(target)
    except Refused:
        return None
    return match(method, path)


def _json_answer(status: int, message: str) -> bytes:
    body = json.dumps({"message": message}).encode() + b"\n"
    return _answer_head(status, (("Content-Type", "application/json"),), len(body)) + body


_REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
            408: "Request Timeout", 411: "Length Required", 413: "Payload Too Large",
            421: "Misdirected Request",
            431: "Request Header Fields Too Large", 500: "Internal Server Error",
            502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


def _answer_head(status: int, headers: tuple[tuple[str, str], ...], length: int | None,
                 reason: str = "") -> bytes:
    lines = [f"HTTP/1.1 {status} {reason or _REASONS.get(status, 'Status')}",
             *(f"{k}: {v}" for k, v in headers)]
    lines.append(f"Content-Length: {length}" if length is not None
                 else "Transfer-Encoding: chunked")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


# --- the proxy server --------------------------------------------------------------


class _Handler(socketserver.BaseRequestHandler):
    server: ProxyServer
    request: socket.socket
    # A service write let through: (its ID, the version checked, its replicas), for
    # the surge book once the engine answers 2xx.
    applied: tuple[str, int, int | None] | None = None
    made = False  # ...and that raise made its service's entry in the book
    turn = False  # holds ``server.whole``
    judged: Request | None = None  # the request judged so far (its head), for the log

    def handle(self) -> None:
        if not self.server.slots.acquire(blocking=False):
            self._refuse(Refused(503, f"more than {MAX_CONNECTIONS} connections at once"),
                         None)
            return
        try:
            self._serve()
        except (OSError, ClientGone):
            pass
        finally:
            if self.turn:
                self.server.whole.release()
            self.server.slots.release()
            with contextlib.suppress(OSError):
                self.request.close()

    def _serve(self) -> None:
        req: Request | None = None
        try:
            req = self._read()
            if req is None:
                return
            call = self._judge(req)
            if call.kind in (*WRITE_KINDS, "swarm"):
                self._take_turn()
            target, body = self._vet(call, req)
            if self._more_waiting():
                raise Refused(400, "bytes after the request (pipelining): one request per "
                                   "connection")
        except Refused as r:
            self._refuse(r, req or self.judged)
            return
        self._forward(call, req, target, body)

    def _judge(self, req: Request) -> Call:
        """The call ``req`` makes, judged on its head (its Host over TCP, the call, its
        query, a write's Content-Type), or Refused: before a byte of a body is read or a
        turn taken, so a request never forwarded holds no write's turn while its body
        is awaited."""
        self.judged = req
        if self.server.loopback_host_only and not loopback_host(req.header("host")):
            raise Refused(421, "over TCP only a loopback Host (127.0.0.1, localhost, "
                               "[::1]): another name is a rebound one")
        call = match(req.method, req.path)
        if call is None:
            raise Refused(403, f"{req.method} {req.path} is not a call the daemon makes "
                               "(docs/security.md)")
        bad = call.check_params(req.query)
        if bad is not None:
            raise Refused(403, f"{req.method} {req.path}: {bad}")
        # The engine refuses a body that does not say it is JSON (CheckForJSON): a web
        # page's form or text/plain POST needs no CORS preflight. The proxy writes its
        # own Content-Type, so it makes the same check first.
        ctype = (req.header("content-type") or "").split(";", 1)[0].strip().lower()
        if call.kind.endswith("-update") and ctype != "application/json":
            raise Refused(400, "a write's Content-Type must be application/json")
        return call

    def _read(self) -> Request | None:
        """The client's one request, framed strictly (None: it went away)."""
        sock, reader = self.request, RequestReader()
        deadline = time.monotonic() + REQUEST_DEADLINE_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Refused(408, f"no whole request within {REQUEST_DEADLINE_S:g} s")
            sock.settimeout(left)
            try:
                data = sock.recv(64 * 1024)
            except TimeoutError:
                continue
            if not data:
                return None
            got = reader.feed(data)
            if got is not None:
                return got
            if reader.body_next and not self.turn and reader.head is not None:
                # Nothing more of a body is read before its turn; its time starts then.
                self._judge(reader.head)
                self._take_turn()
                deadline = time.monotonic() + REQUEST_DEADLINE_S

    def _take_turn(self) -> None:
        """Wait for ``server.whole`` up to the request deadline (then 503)."""
        if self.turn:
            return
        if not self.server.whole.acquire(timeout=REQUEST_DEADLINE_S):
            raise Refused(503, f"no turn within {REQUEST_DEADLINE_S:g} s: the proxy reads "
                               "writes and GET /swarm one at a time (its memory), and another "
                               "held it; try again")
        self.turn = True

    def _more_waiting(self) -> bool:
        """Bytes after the request already here (a socket timeout would make even a
        MSG_DONTWAIT peek wait: poll first)."""
        if not readable([self.request], 0):
            return False
        try:
            return bool(self.request.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except (BlockingIOError, InterruptedError, TimeoutError):
            return False

    def _refuse(self, r: Refused, req: Request | None) -> None:
        what = f"{req.method} {req.path}" if req is not None else "a request"
        r = Refused(r.status, peer_text(r.reason))  # a write's refusal names its keys
        if r.status == 500:  # a stale version: the daemon reads again, as from the engine
            _log.info("{}: {}", what, r.reason)
        else:
            self.server.refused += 1
            _log.warning("refused {} with {}: {}", what, r.status, r.reason)
        sock = self.request
        with contextlib.suppress(OSError):
            sock.settimeout(CLIENT_WRITE_TIMEOUT_S)
            sock.sendall(_json_answer(r.status, f"swarmgpu docker-proxy: {r.reason}"))
            sock.shutdown(socket.SHUT_WR)
            # Read what the client still sends (briefly), so it gets the answer
            # rather than a reset.
            sock.settimeout(0.5)
            for _ in range(16):
                if not sock.recv(64 * 1024):
                    break

    # --- content checks --------------------------------------------------------------
    def _engine_json(self, path: str) -> tuple[int, Any, bytes]:
        """The proxy's own GET of ``path`` from the engine: (status, JSON, raw body)."""
        return engine_json(self.server.connect_upstream, path)

    def _no_other_by_prefix(self, kind: str, ref: str, cur: Mapping[str, Any]) -> None:
        """Refused unless ``ref``, where the engine answered ``cur`` for it as an ID
        prefix, is the prefix of no other object's ID, as the engine's list says it. The
        engine refuses a prefix two objects share, but the write goes to ``cur``'s whole
        ID: an engine (or a proxy before it) that answered one of two wrote it anyway."""
        if not answered_by_prefix(cur, ref, kind):
            return
        path = f"/{kind}s?{urlencode({'filters': json.dumps({'id': [ref]})})}"
        status, listed, _ = self._engine_json(path)
        if status != 200 or not isinstance(listed, list):
            raise Refused(502, f"listing {kind}s by the ID prefix {ref!r} first: the engine "
                               f"answered {status}, not a list")
        ids = sorted({e["ID"] for e in listed if isinstance(e, Mapping)
                      and isinstance(e.get("ID"), str) and e["ID"].startswith(ref)})
        if cur["ID"] not in ids:
            raise Refused(502, f"the engine's {kind}s listed by the ID prefix {ref!r} leave "
                               f"out {kind} {cur['ID']!r}, which it answered for it; nothing "
                               "written")
        if len(ids) > 1:
            shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
            raise Refused(400, f"{kind} {ref!r} is ambiguous: the ID prefix of {len(ids)} "
                               f"{kind}s ({shown}); nothing written: name it by its whole ID")

    def _vet(self, call: Call, req: Request) -> tuple[str, bytes | None]:
        """The target and body to forward: rebuilt, and for a write, checked against
        the current spec."""
        if not call.kind.endswith("-update"):
            return req.path + (f"?{urlencode(req.query)}" if req.query else ""), None
        try:
            new = load_json(req.body)
        except JsonError as exc:
            raise Refused(413 if isinstance(exc, JsonTooLarge) else 400, str(exc)) from None
        # The read and the write go without the client's /vX.Y: the engine takes a
        # service update at the URL's API version and drops what older versions lacked
        # (moby's adjustForAPIVersion: CapabilityDrop, Ulimits, Pids, NoNewPrivileges,
        # Seccomp, AppArmor...; below 1.30 it re-pins the image), so a body equal to the
        # checked spec, posted to /v1.40/, would change it. Unprefixed, the engine uses
        # its own version (what the SDK negotiates), where the body means what was checked.
        obj = _VERSION.sub("", req.path, count=1).split("/")
        read = {"node-update": f"/nodes/{obj[-2]}",
                "service-update": f"/services/{obj[-2]}",
                "swarm-update": "/swarm"}[call.kind]
        status, cur, raw = self._engine_json(read)
        if status != 200 or not isinstance(cur, dict):
            msg = cur.get("message") if isinstance(cur, dict) else None
            raise Refused(status if 400 <= status < 600 else 502,
                          f"reading {read} first: {msg or raw[:200]!r}")
        try:
            version = int(cur["Version"]["Index"])
            spec = cur["Spec"]
        except (KeyError, TypeError, ValueError):
            raise Refused(502, f"the engine's {read} has no Version.Index or Spec") from None
        said = "" if call.kind == "swarm-update" else wrong_object(
            cur, call.kind.removesuffix("-update"), obj[-2], as_path=True)
        if said:  # (checked, it was written: another object than the path names)
            raise Refused(502, f"reading {read} first: {said}")
        if call.kind != "swarm-update":
            self._no_other_by_prefix(call.kind.removesuffix("-update"), obj[-2], cur)
        if req.param("version") != str(version):
            # The engine's own words, so the daemon's client reads a version conflict
            # and reads again.
            raise Refused(500, f"update out of sequence: version {req.param('version')} "
                               f"is not the current {version}")
        if call.kind == "service-update" and self.server.own_service is not None and \
                cur.get("ID") == self.server.own_service:
            # A new spec restarts the proxy, and a restart empties its surge book.
            raise Refused(403, "this is the docker-proxy's own service: the daemon never "
                               "writes it (a write would restart the proxy)")
        try:
            self.server.checks[call.kind](spec, new)
        except ValueError as exc:
            raise Refused(403, str(exc)) from None
        query: dict[str, str] = {"version": str(version)}
        if call.kind == "swarm-update":
            query.update(_NO_ROTATION)
            target = "/swarm/update"
        else:
            ident = cur.get("ID")
            if not isinstance(ident, str) or not re.fullmatch(_ID, ident):
                raise Refused(502, f"the engine's {read} has no usable ID")
            target = f"/{'nodes' if call.kind == 'node-update' else 'services'}/" \
                     f"{ident}/update"
            if call.kind == "service-update":
                # Across writes: the check above sees one write only (``surges``); a
                # full book asks the engine which of its services are gone.
                try:
                    self.made = admit_or_sweep(self.server.surges, self._engine_json,
                                               ident, version, replicas(spec), replicas(new))
                except SurgeRefused as exc:
                    raise Refused(403, str(exc)) from None
                self.applied = (ident, version, replicas(new))
        return f"{target}?{urlencode(query)}", json.dumps(new).encode()

    # --- forwarding ----------------------------------------------------------------
    def _forward(self, call: Call, req: Request, target: str, body: bytes | None) -> None:
        sock = self.request
        try:
            up = self.server.connect_upstream()
        except OSError as exc:
            self._not_taken()
            self._refuse(Refused(502, f"the engine is unreachable: {exc}"), req)
            return
        try:
            try:
                up.sendall(request_bytes(req.method, target, req.header("user-agent"),
                                          body if req.method == "POST" else None))
            except OSError:
                self._not_taken()  # the engine never had the whole request
                raise
            self.server.forwarded += 1
            wire = Wire(up)
            stream = call.kind == "stream"
            deadline = None if stream else time.monotonic() + ENGINE_DEADLINE_S
            try:
                head = wire.head(time.monotonic() + ENGINE_DEADLINE_S)
                if head.status == 101:
                    raise Refused(502, "the engine switched protocols")
                if self.applied is not None and 200 <= head.status < 300:
                    self.server.surges.applied(*self.applied)
                headers = tuple((k.title(), v) for k, v in head.headers if k not in _HOP)
                if call.kind == "swarm" and head.status == 200:
                    data = json.dumps(without_join_tokens(load_answer(
                        wire.whole(head, ENGINE_DEADLINE_S + time.monotonic()), "GET /swarm"
                    ))).encode()
                    sock.settimeout(CLIENT_WRITE_TIMEOUT_S)
                    sock.sendall(_answer_head(200, headers, len(data), head.reason) + data)
                    return
                if self.made and head.status == 500:
                    data = wire.whole(head, ENGINE_DEADLINE_S + time.monotonic())
                    if out_of_sequence(data):
                        self._not_taken()
                    sock.settimeout(CLIENT_WRITE_TIMEOUT_S)
                    sock.sendall(_answer_head(500, headers, len(data), head.reason) + data)
                    return
            except (Refused, ValueError) as exc:
                r = exc if isinstance(exc, Refused) else Refused(502, str(exc) if isinstance(
                    exc, JsonTooLarge) else "GET /swarm: not JSON")
                self._refuse(r, req)
                return
            sock.settimeout(CLIENT_WRITE_TIMEOUT_S)
            sock.sendall(_answer_head(head.status, headers,
                                      0 if head.bodyless else head.length, head.reason))
            chunked = not head.bodyless and head.length is None
            with contextlib.suppress(Refused):  # a cut answer: the client sees it cut
                for piece in wire.body(head, deadline, sock if stream else None):
                    sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                if chunked:
                    sock.sendall(b"0\r\n\r\n")
        finally:
            up.close()


    def _not_taken(self) -> None:
        """The write let through is known not applied: a raise it booked goes."""
        if self.made and self.applied is not None:
            self.server.surges.withdraw(*self.applied[:2])


class ProxyServer(LoggedErrors, socketserver.ThreadingMixIn, socketserver.BaseServer):
    """Shared by the unix and TCP flavours (``serve`` picks one)."""

    daemon_threads = True
    # socketserver's backlog is 5: the sixth connection of a burst got EAGAIN before any
    # was accepted; the connections it serves at once, and as many again waiting.
    request_queue_size = 2 * MAX_CONNECTIONS
    connect_upstream: Callable[[], socket.socket]
    checks: WriteChecks
    surges: SurgeBook  # the daemon's replica raises, per service (this process only)
    own_service: str | None = None  # the proxy's own service ID: never written
    loopback_host_only = False  # TCP: a browser reaches it (DNS rebinding)
    refused = 0
    forwarded = 0
    slots: threading.BoundedSemaphore
    # One request at a time reads a JSON body or answer whole, parses and checks it:
    # a write from its body to the engine's answer, GET /swarm while the engine answers.
    whole: threading.Lock


class _UnixProxy(ProxyServer, socketserver.UnixStreamServer):
    pass


class _TcpProxy(ProxyServer, socketserver.TCPServer):
    allow_reuse_address = True
    loopback_host_only = True


class _Tcp6Proxy(_TcpProxy):
    address_family = socket.AF_INET6  # ::1 (an IPv4 socket could not bind it)


def upstream_connector(upstream: str) -> Callable[[], socket.socket]:
    """A function that opens a connection to the engine (``unix://PATH``)."""
    if not upstream.startswith("unix://"):
        raise ValueError(f"upstream {upstream!r}: use unix:///var/run/docker.sock")
    path = upstream.removeprefix("unix://")

    def connect() -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(path)
        return s

    return connect


def build_proxy(listen: str, upstream: str, checks: WriteChecks,
                own_service: str | None = None) -> ProxyServer:
    """Bind (``unix://PATH`` or ``tcp://127.0.0.1:PORT``); call ``serve_forever`` next.
    ``checks``: what each write may change (one per ``WRITE_KINDS``); ``own_service``:
    the ID of the Swarm service the proxy runs as, refused every write."""
    if set(checks) != set(WRITE_KINDS):
        raise ValueError(f"checks for {sorted(checks)}: one per write, {WRITE_KINDS}")
    if own_service and not _SERVICE_ID.fullmatch(own_service):
        # Compared with the engine's whole ID: a name, a short ID or an unexpanded
        # template would match no write and leave the proxy's service writable.
        raise ValueError(f"own service {own_service[:80]!r}: not a whole Swarm service ID "
                         "(25 lower-case letters and digits); give --own-service "
                         "(SWARMGPU_PROXY_SERVICE) {{.Service.ID}} in the stack, or "
                         "docker service inspect -f '{{.ID}}' NAME")
    connect = upstream_connector(upstream)
    server: ProxyServer
    try:
        server = _bind(listen)
    except OSError as exc:  # said with the option, not "[Errno 2] No such file..."
        raise ValueError(f"listen {listen!r}: cannot listen there ({exc.strerror or exc}); "
                         "give --listen a path in an existing folder, or a free port") from None
    server.connect_upstream = connect
    server.checks = checks
    server.surges = SurgeBook()
    server.own_service = own_service or None
    server.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
    server.whole = threading.Lock()
    return server


def _bind(listen: str) -> ProxyServer:
    if listen.startswith("unix://"):
        path = listen.removeprefix("unix://")
        if not path:  # Linux binds "" to an abstract name no client is told
            raise ValueError(f"listen {listen!r}: needs a path, e.g. "
                             "unix:///run/swarmgpu/docker.sock")
        with contextlib.suppress(FileNotFoundError):
            mode = os.lstat(path).st_mode
            if not stat.S_ISSOCK(mode):  # only a previous run's socket is ours to replace
                what = "a directory" if stat.S_ISDIR(mode) else "a regular file" \
                    if stat.S_ISREG(mode) else "not a socket"
                raise ValueError(f"listen {listen!r}: {what} is at that path; give --listen "
                                 "another path (only a stale socket there is replaced)")
            os.unlink(path)  # a stale socket of a previous run
        old = os.umask(0o117)  # owner and group only, like the engine's own socket
        try:
            return _UnixProxy(path, _Handler)
        finally:
            os.umask(old)
    if listen.startswith("tcp://"):
        host, port = tcp_listen(listen)
        return (_Tcp6Proxy if host == "::1" else _TcpProxy)((host, port), _Handler)
    raise ValueError(f"listen {listen!r}: use unix://PATH or tcp://127.0.0.1:PORT")


_M_ARENA_MAX = -8  # glibc's malloc.h


def few_heaps() -> None:
    """Two malloc heaps for the process, not one per thread that allocates while another
    does (glibc: up to 8 per core), each keeping what was freed in it: 32 writes checked
    one at a time still left 141 MiB on 16 heaps, 75 MiB on two
    (benchmarks/bench_proxy_memory.py). Without glibc (musl, macOS): nothing to do."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, 2)


def serve(listen: str, upstream: str, checks: WriteChecks,
          stop: threading.Event | None = None, own_service: str | None = None) -> None:
    few_heaps()  # before the first handler thread
    if stop is None:  # `swarmgpu docker-proxy`: SIGTERM/SIGINT end it cleanly (proxystop),
        stop_on_signals(stop := threading.Event())  # set before its socket exists
    server = build_proxy(listen, upstream, checks, own_service)
    _log.info("docker-proxy on {} -> {}: {} calls allowed (writes checked against the "
              "current spec); anything else is answered 400/403", listen, upstream,
              len(ALLOWED_CALLS))

    def _watch() -> None:
        stop.wait()
        _log.info("docker-proxy stopping: the turns in flight finish, no connection is taken")
        server.shutdown()

    threading.Thread(target=_watch, daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        finished = finish_turn(server.whole) if stop.is_set() else True
        _log.info("docker-proxy stopped{}", "" if finished else
                  f" (a turn still ran after {STOP_WAIT_S:g} s: cut)")
