"""The docker socket proxy (swarmgpu docker-proxy): one list of calls, and only those.

``ALLOWED_CALLS`` is what the proxy lets through, what docs/security.md tables (both
tables: the calls, and what the proxy lets through per call) and what
swarmgpu/swarm/client.py calls: the first tests check that the three agree. The rest
run the real proxy in front of a recording stand-in for the engine's socket, to show
the bytes that reach it: a request the proxy rebuilt, never the client's. The real
engine behind it (smuggling, hostile writes, the daemon's cycles):
tests/test_dockerproxy_swarm.py; the parser alone: tests/test_httpframe.py.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.engine_stub import SERVICE, SWARM, Engine, start_engine
from support.paths import REPO

from swarmgpu.manager.engine.proxy_policy import write_checks
from swarmgpu.swarm import dockerproxy, jsonstrict, surges
from swarmgpu.swarm.dockerproxy import ALLOWED_CALLS, allowed, build_proxy, match
from swarmgpu.swarm.httpframe import ChunkDecoder
from swarmgpu.swarm.surges import SurgeBook, SurgeRefused

CLIENT = REPO / "swarmgpu" / "swarm" / "client.py"
SECURITY = REPO / "docs" / "security.md"
# APIClient's own plumbing, not Engine calls: how client.py posts what the SDK lacks.
_PLUMBING = {"_url", "_post_json", "_raise_for_status", "_result", "_get"}


def _section(title: str) -> str:
    return SECURITY.read_text().split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def _doc_rows() -> set[tuple[str, str]]:
    """(method, path) of every row of the Engine-calls table in docs/security.md."""
    rows = re.findall(r"^\| `(GET|POST|PUT|DELETE|HEAD) ([^`]+)` \|",
                      _section("The Docker socket is root-equivalent"), re.M)
    return {(m, p) for m, p in rows}


def _doc_allows() -> dict[tuple[str, str], str]:
    """(method, path) -> the "the proxy lets through" cell of the proxy's table."""
    rows = re.findall(r"^\| `(GET|POST) ([^`]+)` \| (.*) \|$",
                      _section("Least privilege on the engine: a socket proxy"), re.M)
    return {(m, p): text for m, p, text in rows}


def _client_calls() -> set[str]:
    """What client.py asks the engine for: APIClient methods on ``self._api`` and the
    raw paths it builds with ``_url``, plus the SDK's own version query (APIClient())."""
    tree = ast.parse(CLIENT.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and \
                node.value.attr == "_api" and node.attr not in _PLUMBING:
            out.add(node.attr)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "_url" and node.args and \
                isinstance(node.args[0], ast.Constant):
            out.add(str(node.args[0].value))
        if isinstance(node, ast.Attribute) and node.attr in ("APIClient", "from_env"):
            out.add("APIClient()")
    return out


def _client_params() -> dict[str, set[str]]:
    """The query names client.py passes to the raw paths it posts to (``params=``)."""
    tree = ast.parse(CLIENT.read_text())
    out: dict[str, set[str]] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        paths = [n.args[0].value for n in ast.walk(fn) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and n.func.attr == "_url"
                 and n.args and isinstance(n.args[0], ast.Constant)]
        names = {str(k.value) for n in ast.walk(fn) if isinstance(n, ast.keyword)
                 and n.arg == "params" and isinstance(n.value, ast.Dict)
                 for k in n.value.keys if isinstance(k, ast.Constant)}
        for p in paths:
            out[str(p)] = names
    return out


def test_docs_table_is_the_allow_list() -> None:
    assert _doc_rows() == {(c.method, c.path) for c in ALLOWED_CALLS}


def test_docs_say_what_the_proxy_lets_through_per_call() -> None:
    assert _doc_allows() == {(c.method, c.path): c.allows for c in ALLOWED_CALLS}


def test_the_docs_figures_are_the_codes() -> None:
    from swarmgpu.swarm import httpframe

    text = " ".join(_section("Least privilege on the engine: a socket proxy").split())
    for claim in (f"more than {httpframe.MAX_HEADERS} fields",
                  f"{httpframe.MAX_HEAD_BYTES // 1024} KiB of head",
                  f"≤ {httpframe.MAX_BODY_BYTES // (1024 * 1024)} MiB: 413",
                  "plain hex (≤ 8 digits)",
                  f"a chunk-size line over {httpframe.MAX_CHUNK_LINE} bytes",
                  f"more than {dockerproxy.REQUEST_DEADLINE_S:g} s to arrive (408)",
                  f"does not read for {dockerproxy.CLIENT_WRITE_TIMEOUT_S:g} s",
                  f"at most {dockerproxy.MAX_CONNECTIONS} connections at once (503;",
                  f"at most {surges.MAX_SURGES} raised services",
                  f"more than {jsonstrict.MAX_JSON_VALUES} values and keys refused",
                  f"waits for its turn up to {dockerproxy.REQUEST_DEADLINE_S:g} s (then 503"):
        assert claim in text, claim
    assert httpframe.ChunkDecoder(1).feed(b"00000001\r\n") == []
    with pytest.raises(httpframe.Refused):
        httpframe.ChunkDecoder(1 << 40).feed(b"000000001\r\n")


def test_client_code_makes_exactly_the_listed_calls() -> None:
    listed = {name for c in ALLOWED_CALLS for name in c.client}
    assert _client_calls() == listed


def test_the_query_the_client_posts_is_what_the_proxy_allows() -> None:
    """The raw posts' params (version, the rotation flags the client sends as false)
    each pass the call's own check, and the whole set is its allowed names."""
    for path, names in _client_params().items():
        (call,) = [c for c in ALLOWED_CALLS if path in c.client]
        assert names == set(call.params), path
        query = tuple((n, "7" if n == "version" else "false") for n in sorted(names))
        assert call.check_params(query) is None


@pytest.mark.parametrize(("method", "target", "ok"), [
    ("GET", "/version", True),
    ("GET", "/v1.43/nodes", True),
    ("GET", "/v1.43/nodes/abc123", True),
    ("POST", "/v1.43/nodes/abc123/update?version=12", True),
    ("POST", "/v1.43/services/svc_1/update?version=3", True),
    ("POST", "/v1.43/swarm/update?version=9&rotateWorkerToken=false", True),
    ("GET", "/v1.43/tasks?filters=%7B%7D", True),
    ("GET", "/v1.43/events?filters=x", True),
    ("GET", "/v1.43/images/json?filters=%7B%22reference%22%3A%5B%22a%3A1%22%5D%7D", True),
    ("GET", "/v1.43/images/0123abcd/json", True),
    ("GET", "/v1.43/images/local/app:1/json", False),
    ("GET", "/v1.43/images/a%40sha256%3Ab/json", False),
    ("POST", "/v1.43/images/create?fromImage=x", False),
    ("DELETE", "/v1.43/images/0123abcd", False),
    ("GET", "/v1.43/images/get?names=x", False),
    ("POST", "/v1.43/images/0123abcd/tag", False),
    ("POST", "/v1.43/containers/create", False),
    ("GET", "/v1.43/containers/json", False),
    ("DELETE", "/v1.43/nodes/abc123", False),
    ("POST", "/v1.43/nodes/abc123", False),
    ("GET", "/v1.43/swarm/unlockkey", False),
    ("POST", "/v1.43/swarm/leave", False),
    ("GET", "/v1.43/secrets", False),
    ("POST", "/v1.43/services/create", False),
    ("GET", "/v1.43/nodes/../containers/json", False),
    ("GET", "/v1.43/nodes/a%2F..%2Fb", False),
    ("GET", "/v1.43//nodes", False),
    ("GET", "http://docker/v1.43/nodes", False),
    ("GET", "/v1.43/services/x/logs", False),
    ("POST", "/v1.43/exec/abc/start", False),
    ("POST", "/v1.43/containers/abc/attach", False),
    ("get", "/v1.43/nodes", False),
])
def test_allow_list(method: str, target: str, ok: bool) -> None:
    assert (allowed(method, target) is not None) is ok


@pytest.mark.parametrize(("method", "path", "query", "ok"), [
    ("POST", "/swarm/update", (("version", "9"),), True),
    ("POST", "/swarm/update", (("version", "9"), ("rotateWorkerToken", "false")), True),
    ("POST", "/swarm/update", (("version", "9"), ("rotateWorkerToken", "true")), False),
    ("POST", "/swarm/update", (("version", "9"), ("rotateManagerToken", "1")), False),
    ("POST", "/swarm/update", (("version", "9"), ("rotateManagerUnlockKey", "yes")), False),
    ("POST", "/swarm/update", (("version", "9"), ("rotateworkertoken", "true")), False),
    ("POST", "/swarm/update", (), False),
    ("POST", "/services/x/update", (("version", "3"), ("rollback", "previous")), False),
    ("POST", "/services/x/update", (("version", "3"), ("registryAuthFrom", "spec")), False),
    ("POST", "/services/x/update", (("version", "-1"),), False),
    ("POST", "/nodes/x/update", (("version", "3"),), True),
    ("GET", "/nodes/x", (("force", "1"),), False),
    ("GET", "/services", (("status", "True"),), True),
    ("GET", "/tasks", (("filters", '{"service": ["a"]}'),), True),
])
def test_query_parameters_per_call(method: str, path: str,
                                   query: tuple[tuple[str, str], ...], ok: bool) -> None:
    call = match(method, path)
    assert call is not None
    assert (call.check_params(query) is None) is ok


# --- the proxy in front of a recording stand-in for the engine ---------------------

@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[Path, Engine, dockerproxy.ProxyServer]]:
    engine_sock = tmp_path / "engine.sock"
    engine = start_engine(str(engine_sock))
    path = tmp_path / "proxy.sock"
    srv = build_proxy(f"unix://{path}", f"unix://{engine_sock}", write_checks("swarmgpu."))
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    yield path, engine, srv
    srv.shutdown()
    srv.server_close()
    engine.shutdown()
    engine.server_close()


def _send(path: Path, raw: bytes, *, drip: float = 0.0) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(str(path))
        if drip:
            for i in range(len(raw)):
                try:
                    s.sendall(raw[i:i + 1])
                except OSError:
                    break
                time.sleep(drip)
        else:
            s.sendall(raw)
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_WR)  # all sent: an incomplete request ends here
        out = b""
        try:
            while chunk := s.recv(4096):
                out += chunk
        except OSError:
            pass
        return out


def test_the_engine_gets_a_rebuilt_request_never_the_clients_bytes(proxy: Any) -> None:
    path, engine, _ = proxy
    got = _send(path, b"GET /v1.43/tasks?filters=%7B%22a%22%3A+1%7D HTTP/1.1\r\n"
                b"Host: whatever\r\nUser-Agent: docker-sdk-python/7.2.0\r\n"
                b"Accept-Encoding: gzip\r\nCookie: c=1\r\nX-Forwarded-For: 1.2.3.4\r\n"
                b"Connection: keep-alive\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 200 OK\r\n") and got.endswith(b"\r\n\r\n{}")
    assert b"Connection: close\r\n" in got and b"Api-Version: 1.43\r\n" in got
    assert engine.seen == [b"GET /v1.43/tasks?filters=%7B%22a%22%3A+1%7D HTTP/1.1\r\n"
                           b"Host: docker\r\nUser-Agent: docker-sdk-python/7.2.0\r\n"
                           b"Connection: close\r\n\r\n"]


def test_a_chunked_write_reaches_the_engine_with_a_content_length(proxy: Any) -> None:
    path, engine, _ = proxy
    body = json.dumps({"Name": "default", "Labels": {"swarmgpu.state.workload": "x"}})
    chunks = b"".join(b"%x;n=v\r\n%s\r\n" % (len(p), p.encode())
                      for p in (body[:7], body[7:])) + b"0\r\n\r\n"
    got = _send(path, b"POST /v1.43/swarm/update?version=7&rotateWorkerToken=false "
                b"HTTP/1.1\r\nHost: d\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" + chunks)
    assert got.startswith(b"HTTP/1.1 200"), got
    read, write = engine.seen
    assert read.startswith(b"GET /swarm HTTP/1.1\r\n")  # the proxy's own read
    sent = json.dumps(json.loads(body)).encode()
    assert write == (b"POST /swarm/update?version=7&rotateWorkerToken=false&"
                     b"rotateManagerToken=false&rotateManagerUnlockKey=false HTTP/1.1\r\n"
                     b"Host: docker\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(sent), sent))


@pytest.mark.parametrize("prefix", ["/v1.24", "/v1.40", "/v1.43", ""])
def test_a_write_reaches_the_engine_at_its_own_api_version(proxy: Any, prefix: str) -> None:
    """The engine reads a service update at the URL's API version and drops what that
    version lacked (moby's ``adjustForAPIVersion``: CapabilityAdd/Drop, Ulimits, Pids
    below 1.41; Privileges' NoNewPrivileges, Seccomp, AppArmor below 1.44; and below
    1.30 it re-pins the image to the registry's digest). So a body equal to the current
    spec, posted to ``/v1.40/...``, would give back every capability: the proxy reads
    and writes without the client's prefix, at the engine's own version, where the
    body means what was checked."""
    path, engine, _ = proxy
    body = json.dumps(SERVICE["Spec"]).encode()
    got = _send(path, b"POST %s/services/web/update?version=3 HTTP/1.1\r\nHost: d\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (prefix.encode(), len(body), body))
    assert got.startswith(b"HTTP/1.1 200"), got
    read, write = engine.seen
    assert read.startswith(b"GET /services/web HTTP/1.1\r\n")
    assert write.startswith(b"POST /services/svc1/update?version=3 HTTP/1.1\r\n")
    assert write.endswith(body)


@pytest.mark.parametrize(("content_type", "status"), [
    (b"Content-Type: text/plain\r\n", 400), (b"", 400),
    (b"Content-Type: application/x-www-form-urlencoded\r\n", 400),
    (b"Content-Type: application/json\r\n", 200),
    (b"Content-Type: Application/JSON; charset=utf-8\r\n", 200)])
def test_a_write_must_say_it_is_json(proxy: Any, content_type: bytes, status: int) -> None:
    """The engine refuses a body that is not ``Content-Type: application/json``
    (moby's CheckForJSON), which keeps a web page's form or ``text/plain`` POST (no CORS
    preflight) out; the proxy writes its own Content-Type, so it must not turn such a
    body into JSON for the engine: ``tcp://127.0.0.1`` is reachable from a browser."""
    path, engine, _ = proxy
    body = json.dumps({"Name": "default", "Labels": {"swarmgpu.state.workload": "x"}})
    got = _send(path, b"POST /v1.43/swarm/update?version=7 HTTP/1.1\r\nHost: d\r\n%s"
                b"Content-Length: %d\r\n\r\n%s" % (content_type, len(body), body.encode()))
    assert got.startswith(b"HTTP/1.1 %d " % status), got
    assert len(engine.seen) == (2 if status == 200 else 0)


def test_a_write_that_changes_more_never_reaches_the_engine(proxy: Any) -> None:
    path, engine, _ = proxy
    for spec, version, status in (({"Name": "other", "Labels": {}}, 7, 403),
                                  ({"Name": "default", "Labels": {"x": "1"}}, 7, 403),
                                  ({"Name": "default", "Labels": {}}, 6, 500)):
        body = json.dumps(spec).encode()
        got = _send(path, b"POST /v1.43/swarm/update?version=%d HTTP/1.1\r\nHost: d\r\n"
                    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                    % (version, len(body), body))
        assert got.startswith(b"HTTP/1.1 %d" % status), got
    assert all(s.startswith(b"GET /swarm ") for s in engine.seen)


def _update_service(path: Path, engine: Engine, edit: Any) -> bytes:
    """The daemon's read-modify-write of SERVICE through the proxy: its answer."""
    spec = copy.deepcopy(engine.service["Spec"])
    edit(spec)
    body = json.dumps(spec).encode()
    return _send(path, b"POST /v1.43/services/svc1/update?version=%d HTTP/1.1\r\n"
                 b"Host: d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                 b"\r\n%s" % (engine.service["Version"]["Index"], len(body), body))


def _replicas(n: int) -> Any:
    return lambda spec: spec["Mode"]["Replicated"].update(Replicas=n)


def test_repeated_writes_add_one_replica_above_the_owners_count(proxy: Any) -> None:
    """A make-before-break move raises replicas by one and its end lowers them; a
    daemon that raised them already gets no second replica by writing again (each
    write at the next version, a label write in between, or both): the proxy keeps the
    count it let the daemon raise a service to, per service ID."""
    path, engine, _ = proxy

    def label(spec: dict[str, Any]) -> None:
        spec["Labels"]["swarmgpu.state.move"] = "{}"

    assert _update_service(path, engine, _replicas(2)).startswith(b"HTTP/1.1 200")
    for edit in (_replicas(3), label, _replicas(3)):
        got = _update_service(path, engine, edit)
        if edit is label:
            assert got.startswith(b"HTTP/1.1 200"), got
            continue
        assert got.startswith(b"HTTP/1.1 403 "), got
        message = json.loads(got.split(b"\r\n\r\n", 1)[1])["message"]
        assert "Mode.Replicated.Replicas" in message and "already" in message
    assert engine.service["Spec"]["Mode"]["Replicated"]["Replicas"] == 2
    # The surge's end, then the next move's surge; the owner scales to 5: one more.
    for n, status in ((1, 200), (2, 200), (3, 403), (1, 200)):
        assert _update_service(path, engine, _replicas(n)).startswith(
            b"HTTP/1.1 %d" % status), n
    engine.service["Spec"]["Mode"]["Replicated"]["Replicas"] = 5
    engine.service["Version"]["Index"] += 1
    for n, status in ((6, 200), (7, 403)):
        assert _update_service(path, engine, _replicas(n)).startswith(
            b"HTTP/1.1 %d" % status), n


def test_the_proxys_own_service_is_never_written(proxy: Any) -> None:
    """The surge book is the proxy's memory: a write that restarts the proxy (a void
    device line added to its service, which any service may get) empties it, so the
    daemon could add one replica per restart. The proxy refuses every write to its own
    service (``{{.Service.ID}}`` in the stack); other services are written as before."""
    path, engine, srv = proxy
    srv.own_service = "svc1"

    def void(spec: dict[str, Any]) -> None:
        spec["TaskTemplate"]["ContainerSpec"]["Env"] = ["NVIDIA_VISIBLE_DEVICES=void"]

    got = _update_service(path, engine, void)
    assert got.startswith(b"HTTP/1.1 403 "), got
    assert "own service" in json.loads(got.split(b"\r\n\r\n", 1)[1])["message"]
    assert all(s.startswith(b"GET ") for s in engine.seen)
    srv.own_service = "svc2"
    assert _update_service(path, engine, void).startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("given", ["swarmgpu_docker-proxy", "k3j5x0q9w2e8",
                                   "{{.Service.ID}}", "K3J5X0Q9W2E8R7T6Y5U4I3O2P"])
def test_an_own_service_that_is_no_service_id_is_refused_at_start(
        tmp_path: Path, given: str) -> None:
    """The own-service check compares the engine's full service ID: a name, a short ID
    as ``docker service ls`` prints it, or a template Swarm did not expand (the env
    outside a stack) matched no write, and the proxy's own service stayed writable
    without a word. Each is refused at start, naming the option and the fix."""
    with pytest.raises(ValueError, match=r"own service .*--own-service.*Service\.ID"):
        build_proxy(f"unix://{tmp_path}/p.sock", "unix:///var/run/docker.sock",
                    write_checks("swarmgpu."), own_service=given)
    srv = build_proxy(f"unix://{tmp_path}/q.sock", "unix:///var/run/docker.sock",
                      write_checks("swarmgpu."), own_service="k3j5x0q9w2e8r7t6y5u4i3o2p")
    try:
        assert srv.own_service == "k3j5x0q9w2e8r7t6y5u4i3o2p"
    finally:
        srv.server_close()


def test_racing_writes_never_unlock_a_second_replica() -> None:
    """Writes checked at one version race to the engine, which takes one: only what
    the engine is known to hold past the raise's version ends a raise, never a write's
    intent (a lowering the engine then refused) nor a read from before the raise."""
    book = SurgeBook()
    book.admit("s", 5, 1, 2)  # the surge, checked at version 5
    book.admit("s", 5, 1, 1)  # a label write read at 5, before the surge applied
    book.applied("s", 5, 2)  # the surge won
    with pytest.raises(SurgeRefused, match="already"):
        book.admit("s", 7, 2, 3)
    with pytest.raises(SurgeRefused, match="older than the raise"):
        book.admit("s", 4, 0, 1)  # checked before the surge: must not replace its entry
    book.admit("s", 8, 2, 1)  # the surge's end, checked at 8...
    book.applied("s", 8, 2)  # ...but a label write at 8 won; the end was refused
    with pytest.raises(SurgeRefused, match="already"):
        book.admit("s", 9, 2, 3)
    book.applied("s", 9, 1)  # the end, applied
    assert len(book) == 0
    book.admit("s", 10, 1, 2)  # the next move's surge


def test_the_surge_book_is_bounded_and_refuses_when_full() -> None:
    """At the cap a raise that needs a new entry is refused (dropping one early would
    be one replica more); an entry goes once its service is seen at another count."""
    book = SurgeBook(cap=2)
    book.admit("a", 1, 1, 2)
    book.admit("b", 1, 1, 2)
    book.admit("a", 2, 2, 2)  # a write that keeps the surge: no new entry needed
    with pytest.raises(SurgeRefused, match="tracks 2 raised services"):
        book.admit("c", 1, 1, 2)
    book.admit("a", 3, 1, 1)  # a seen lowered (a later version, another count)
    book.admit("c", 1, 1, 2)
    assert len(book) == 2


def test_a_full_surge_book_forgets_the_services_the_engine_no_longer_lists(
        proxy: Any) -> None:
    """A stack removed mid-move left its raise in the book for good (the proxy never
    sees a removal), and a book full of those refused every raise until the proxy
    restarted. Full, the proxy asks the engine which booked services it still lists
    (its own GET /services, filtered by ID) and forgets the others."""
    path, engine, srv = proxy
    srv.surges = SurgeBook(cap=1)
    srv.surges.admit("removedmidmove0000000000a", 1, 1, 2)
    got = _update_service(path, engine, _replicas(2))
    assert got.startswith(b"HTTP/1.1 200"), got
    assert len(srv.surges) == 1  # svc1's raise, the removed service's gone
    assert any(s.startswith(b"GET /services?filters=") for s in engine.seen)
    got = _update_service(path, engine, _replicas(3))  # svc1 is listed: its raise holds
    assert got.startswith(b"HTTP/1.1 403"), got


def _owner_scales(engine: Engine, n: int) -> None:
    engine.service["Spec"]["Mode"]["Replicated"]["Replicas"] = n
    engine.service["Version"]["Index"] += 1


@pytest.mark.parametrize("failure", ["unreachable", "out of sequence"])
def test_a_raise_the_engine_never_took_leaves_no_entry(proxy: Any, failure: str) -> None:
    """A raise the engine did not take (the proxy could not reach it; the engine
    answered "update out of sequence": another writer came between) stayed booked, so
    the owner's scale to that very count read as the daemon's raise and the move's one
    surge above it was refused."""
    path, engine, srv = proxy
    if failure == "unreachable":
        connect, calls = srv.connect_upstream, []

        def flaky() -> socket.socket:
            calls.append(1)
            if len(calls) == 2:  # the write, after its check's read
                raise ConnectionRefusedError("engine restarting")
            return connect()

        srv.connect_upstream = flaky
    else:
        engine.before_write = lambda: _owner_scales(engine, 2)
    got = _update_service(path, engine, _replicas(2))
    assert got.startswith(b"HTTP/1.1 502" if failure == "unreachable" else b"HTTP/1.1 500")
    engine.before_write = None
    if failure == "unreachable":
        _owner_scales(engine, 2)
    assert len(srv.surges) == 0
    assert _update_service(path, engine, _replicas(3)).startswith(b"HTTP/1.1 200")


def test_a_refusal_repeats_no_control_character(proxy: Any) -> None:
    """A refused write names the key it changes: a key carrying an escape sequence or
    a newline must not forge a log line or rewrite a terminal."""
    path, _, _ = proxy
    body = json.dumps({"Name": "default", "Labels": {}, "\x1b[2J\nFAKE LOG LINE": 1})
    got = _send(path, b"POST /v1.43/swarm/update?version=7 HTTP/1.1\r\nHost: d\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(body), body.encode()))
    assert got.startswith(b"HTTP/1.1 403 ")
    message = json.loads(got.split(b"\r\n\r\n", 1)[1])["message"]
    assert "FAKE LOG LINE" in message and not any(c in message for c in "\x1b\n\r")


def test_a_body_of_too_many_json_values_is_refused_with_413_naming_the_limit(
        proxy: Any) -> None:
    """A hostile body built to expand once parsed (``[{},{},...]``: 3 bytes each, 64 as a
    dict) is refused from its text, before the proxy parses it or reads the spec."""
    path, engine, _ = proxy
    body = b'{"Name": "default", "Labels": {}, "X": [' + b",".join([b"{}"] * 100_000) + b"]}"
    got = _send(path, b"POST /v1.43/swarm/update?version=7 HTTP/1.1\r\nHost: d\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(body), body))
    assert got.startswith(b"HTTP/1.1 413 "), got[:200]
    message = json.loads(got.split(b"\r\n\r\n", 1)[1])["message"]
    assert "more than 100000 JSON values and keys" in message, message
    assert not engine.seen


def test_a_number_of_5000_digits_gets_an_answer_not_a_dropped_connection(
        proxy: Any) -> None:
    path, engine, _ = proxy
    body = b'{"Name": "default", "Labels": {"swarmgpu.x": ' + b"9" * 5000 + b"}}"
    got = _send(path, b"POST /v1.43/swarm/update?version=7 HTTP/1.1\r\nHost: d\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(body), body))
    assert got.startswith(b"HTTP/1.1 400 "), got
    assert "5000 digits" in json.loads(got.split(b"\r\n\r\n", 1)[1])["message"]
    assert not engine.seen


@pytest.mark.parametrize("write", [b"/v1.43/swarm/update?version=7",
                                   b"/v1.43/services/svc1/update?version=3"])
def test_a_body_nested_deeper_than_a_spec_gets_an_answer_not_a_dropped_connection(
        proxy: Any, write: bytes) -> None:
    """600 arrays deep parses (Python's parser holds some 1000), but the write check's
    deep copy and comparison recurse twice a level: a RecursionError dropped the
    connection unanswered, with a traceback in the log. A spec nests some 8 deep."""
    path, engine, _ = proxy
    spec = engine.swarm["Spec"] if b"swarm" in write else engine.service["Spec"]
    body = json.dumps(spec)[:-1].encode() + b', "X": ' + b"[" * 600 + b"]" * 600 + b"}"
    got = _send(path, b"POST %s HTTP/1.1\r\nHost: d\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (write, len(body), body))
    assert got.startswith(b"HTTP/1.1 400 "), got[:200]
    assert "nested more than 64 deep" in json.loads(got.split(b"\r\n\r\n", 1)[1])["message"]
    assert not [s for s in engine.seen if s.startswith(b"POST ")]


@pytest.mark.parametrize(("answer", "says"), [
    # 100,001 empty objects: 0.3 MB of text, some 7 MB once parsed; a 4 MiB answer ~90 MB.
    (b"[" + b",".join([b"{}"] * 100_001) + b"]", "holds more than 100000 JSON values"),
    # Within the count, nested past Python's recursion limit: a RecursionError dropped
    # the connection without an answer.
    (b"[" * 100_000 + b"]" * 100_000, "nested more than 64 deep"),
    # Within Python's parser, but past what the write check's recursion holds.
    (b"[" * 600 + b"]" * 600, "nested more than 64 deep"),
])
def test_an_engine_answer_of_too_many_values_is_refused_with_502_naming_it(
        proxy: Any, answer: bytes, says: str) -> None:
    """The engine's answers the proxy parses (the spec a write is checked against, GET
    /swarm's) are read as a write's body is: the same value count (it had none)."""
    path, engine, _ = proxy
    engine.raw = {b"/services/svc1": answer, b"/swarm": answer}
    for got, read in ((_update_service(path, engine, _replicas(1)), "GET /services/svc1"),
                      (_send(path, b"GET /v1.43/swarm HTTP/1.1\r\nHost: d\r\n\r\n"),
                       "GET /swarm")):
        assert got.startswith(b"HTTP/1.1 502 "), got[:200]
        message = json.loads(got.split(b"\r\n\r\n", 1)[1])["message"]
        assert read in message and says in message, message
    assert not [s for s in engine.seen if s.startswith(b"POST ")]


def test_writes_are_read_and_checked_one_at_a_time(proxy: Any) -> None:
    """Each write is parsed whole, deep-copied by its check, and the spec it is checked
    against read whole: 32 at once took the 128M proxy to 1.4 GiB
    (benchmarks/bench_proxy_memory.py). Writes take turns, from their body to the
    engine's answer (the daemon writes one at a time anyway)."""
    path, _engine, srv = proxy
    inside, most, lock = [0], [0], threading.Lock()

    def slow(_cur: Any, _new: Any) -> None:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.1)
        with lock:
            inside[0] -= 1

    srv.checks = {**srv.checks, "swarm-update": slow}
    body = json.dumps({"Name": "default", "Labels": {}}).encode()
    raw = (b"POST /v1.43/swarm/update?version=7 HTTP/1.1\r\nHost: d\r\n"
           b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
           % (len(body), body))
    answers: list[bytes] = []
    threads = [threading.Thread(target=lambda: answers.append(_send(path, raw)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [a[:12] for a in answers] == [b"HTTP/1.1 200"] * 4
    assert most[0] == 1


def test_a_write_waits_its_turn_until_the_request_deadline_then_503(
        proxy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a write (or GET /swarm, read whole too) holds the turn, another waits up
    to the request deadline, then gets 503 saying why; reads that stream go on."""
    path, engine, srv = proxy
    monkeypatch.setattr(dockerproxy, "REQUEST_DEADLINE_S", 0.5)
    body = json.dumps({"Name": "default", "Labels": {}}).encode()
    write = (b"POST /v1.43/swarm/update?version=7 HTTP/1.1\r\nHost: d\r\n"
             b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
             % (len(body), body))
    with srv.whole:
        for raw in (write, b"GET /v1.43/swarm HTTP/1.1\r\nHost: d\r\n\r\n"):
            got = _send(path, raw)
            assert got.startswith(b"HTTP/1.1 503 "), got
            assert "one at a time" in json.loads(got.split(b"\r\n\r\n", 1)[1])["message"]
        assert not engine.seen
        assert _send(path, b"GET /v1.43/nodes HTTP/1.1\r\nHost: d\r\n\r\n").startswith(
            b"HTTP/1.1 200 ")
    assert _send(path, write).startswith(b"HTTP/1.1 200 ")


def test_get_swarm_comes_back_without_join_tokens(proxy: Any) -> None:
    path, _, _ = proxy
    api = docker.APIClient(base_url=f"unix://{path}", version="1.43", timeout=5)
    got = api.inspect_swarm()
    assert got == {k: v for k, v in SWARM.items() if k != "JoinTokens"}


def test_events_stream_through_in_chunks_until_the_client_leaves(proxy: Any) -> None:
    path, _engine, srv = proxy
    api = docker.APIClient(base_url=f"unix://{path}", version="1.43", timeout=5)
    stream = api.events(decode=True, filters={"type": ["node"]})
    assert [next(stream)["n"] for _ in range(3)] == [0, 1, 2]
    stream.close()
    api.close()
    # the proxy's thread ends with the client: its connection slot is free again
    deadline = time.monotonic() + 5
    while srv.slots._value != dockerproxy.MAX_CONNECTIONS and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.slots._value == dockerproxy.MAX_CONNECTIONS


def test_refused_requests_never_reach_the_engine(proxy: Any) -> None:
    path, engine, _ = proxy
    for raw, status in (
            (b"POST /v1.43/containers/create HTTP/1.1\r\nHost: d\r\nContent-Length: 0"
             b"\r\n\r\n", 403),
            (b"GET /v1.43/secrets HTTP/1.1\r\nHost: d\r\n\r\n", 403),
            (b"DELETE /v1.43/nodes/abc HTTP/1.1\r\nHost: d\r\n\r\n", 403),
            (b"GET /v1.43/nodes HTTP/1.1\r\nHost: d\n\nPOST /v1.43/containers/create "
             b"HTTP/1.1\r\nHost: d\r\nContent-Length: 0\r\n\r\n", 400),
            (b"GET /v1.43/nodes HTTP/1.1\r\nHost: d\r\nConnection: keep-alive\r\n\r\n"
             b"POST /v1.43/containers/create HTTP/1.1\r\nHost: d\r\nContent-Length: 0"
             b"\r\n\r\n", 400),
            (b"POST /v1.43/nodes/a/update?version=1 HTTP/1.1\r\nHost: d\r\n\r\n", 411),
            (b"GET /v1.43/nodes HTTP/1.1\r\nHost: d\r\n" + b"X: y\r\n" * 100 + b"\r\n", 431),
            (b"POST /v1.43/nodes/a/update?version=1 HTTP/1.1\r\nHost: d\r\n"
             b"Content-Length: 99999999\r\n\r\n", 413)):
        got = _send(path, raw)
        assert got.startswith(b"HTTP/1.1 %d " % status), (raw[:60], got)
        assert b"swarmgpu docker-proxy" in got
    assert not engine.seen, "a refused request reached the engine"


_SEEDS = [
    b"GET /v1.43/nodes HTTP/1.1\r\nHost: d\r\n\r\n",
    b"GET /v1.43/tasks?filters=%7B%7D HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n",
    b"POST /v1.43/swarm/update?version=7 HTTP/1.1\r\nHost: d\r\nContent-Length: 34\r\n"
    b"Content-Type: application/json\r\n\r\n"
    b'{"Name": "default", "Labels": {}}\n',
    b"POST /v1.43/swarm/update?version=7 HTTP/1.1\r\nHost: d\r\n"
    b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n21\r\n"
    b'{"Name": "default", "Labels": {}}\r\n0\r\n\r\n',
]
_NOISE = [b"\n", b"\r", b"\r\n", b" ", b"\t", b":", b";", b"%2f", b"/..", b"//", b"0",
          b"\r\n\r\n", b"Transfer-Encoding: chunked\r\n", b"Content-Length: 3\r\n",
          b"POST /v1.43/containers/create HTTP/1.1\r\nHost: d\r\nContent-Length: 2\r\n\r\n{}"]
_HEAD = re.compile(rb"(GET|POST) (?:/v[0-9]{1,2}\.[0-9]{1,3})?/(nodes|tasks|swarm|swarm/update)"
                   rb"(\?[A-Za-z0-9%+._~=&-]+)? HTTP/1\.1\r\nHost: docker\r\n"
                   rb"(Content-Type: application/json\r\nContent-Length: ([0-9]+)\r\n)?"
                   rb"Connection: close\r\n\r\n")


def _own_form(got: bytes) -> bool:
    """A request the proxy wrote: its own head, and a write's body the checked JSON
    with its exact length."""
    m = _HEAD.match(got)
    if m is None:
        return False
    body = got[m.end():]
    if m.group(1) == b"GET":
        return body == b"" and m.group(4) is None
    return (m.group(2) == b"swarm/update" and int(m.group(5)) == len(body)
            and json.loads(body) == {"Name": "default", "Labels": {}}
            and b"rotateWorkerToken=false&rotateManagerToken=false&"
                b"rotateManagerUnlockKey=false" in got.split(b"\r\n", 1)[0])


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.sampled_from(_SEEDS), edits=st.lists(st.tuples(
    st.integers(0, 400), st.sampled_from(_NOISE)), max_size=3))
def test_prop_only_the_proxys_own_requests_reach_the_engine(
        proxy: Any, seed: bytes, edits: list[tuple[int, bytes]]) -> None:
    """Whatever a client sends (good requests with smuggling noise put anywhere), each
    request the engine gets is one the proxy wrote, in its own form, one per
    connection."""
    path, engine, _ = proxy
    raw = seed
    for at, noise in edits:
        at %= len(raw) + 1
        raw = raw[:at] + noise + raw[at:]
    engine.seen.clear()
    _send(path, raw)
    assert len(engine.seen) <= 2  # a write: the proxy's own read, then the write
    for got in engine.seen:
        assert _own_form(got), got
        assert b"containers" not in got


def test_a_slow_client_is_cut_at_the_deadline_and_holds_nothing(
        proxy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    path, engine, _srv = proxy
    monkeypatch.setattr(dockerproxy, "REQUEST_DEADLINE_S", 0.5)
    # 408: cut at the deadline (the whole drip, some 2 s, would have been answered).
    got = _send(path, b"GET /v1.43/nodes HTTP/1.1\r\nHost: d\r\n\r\n", drip=0.05)
    assert got.startswith(b"HTTP/1.1 408 "), got
    assert not engine.seen


def test_connections_beyond_the_limit_get_503(proxy: Any) -> None:
    path, _engine, srv = proxy
    srv.slots = threading.BoundedSemaphore(1)
    with socket.socket(socket.AF_UNIX) as hold:
        hold.connect(str(path))
        hold.sendall(b"GET /v1.43/no")  # holds the only slot
        time.sleep(0.2)
        got = _send(path, b"GET /v1.43/nodes HTTP/1.1\r\nHost: d\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 503 "), got


def test_chunked_answers_are_decoded_strictly() -> None:
    dec = ChunkDecoder(100)
    assert dec.feed(b"3\r\nabc\r\n0\r\n\r\nrest") == [b"abc"]
    assert dec.done and dec.leftover == b"rest"


@pytest.mark.parametrize(("host", "ok"), [
    ("127.0.0.1:{port}", True), ("localhost:{port}", True), ("[::1]:{port}", True),
    ("127.0.0.1", True), ("attacker.example:{port}", False), ("attacker.example", False),
    ("127.0.0.1.nip.io:{port}", False), ("LOCALHOST:{port}", True)])
def test_over_tcp_only_a_loopback_host_is_served(proxy: Any, host: str, ok: bool) -> None:
    """DNS rebinding: a page on attacker.example, rebound to 127.0.0.1, makes same-origin
    requests (reads, JSON writes) to the loopback listener with its own name in Host;
    the engine checks no Host either. Over TCP the proxy serves only a loopback Host."""
    _, engine, _ = proxy
    tcp = build_proxy("tcp://127.0.0.1:0", f"unix://{engine.server_address}",
                      write_checks("swarmgpu."))
    threading.Thread(target=tcp.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        port = tcp.server_address[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /v1.43/tasks HTTP/1.1\r\nHost: %s\r\n\r\n"
                      % host.format(port=port).encode())
            got = b""
            while chunk := s.recv(4096):
                got += chunk
    finally:
        tcp.shutdown()
        tcp.server_close()
    assert got.startswith(b"HTTP/1.1 200 " if ok else b"HTTP/1.1 421 "), got
    assert len(engine.seen) == (1 if ok else 0)


def test_tcp_beyond_loopback_and_missing_checks_are_refused() -> None:
    checks = write_checks("swarmgpu.")
    with pytest.raises(ValueError, match="loopback"):
        build_proxy("tcp://0.0.0.0:2375", "unix:///var/run/docker.sock", checks)
    with pytest.raises(ValueError, match="one per write"):
        build_proxy("unix:///tmp/x.sock", "unix:///var/run/docker.sock",
                    {k: v for k, v in checks.items() if k != "service-update"})
    with pytest.raises(ValueError, match="upstream"):
        build_proxy("unix:///tmp/x.sock", "tcp://127.0.0.1:2375", checks)


def test_a_burst_of_connections_up_to_the_limit_is_queued_not_refused(tmp_path: Path) -> None:
    # socketserver's listen backlog is 5: the sixth connection of a burst, before the
    # proxy had accepted any, got EAGAIN from connect (the daemon's client: an error),
    # though the proxy serves 32 at once.
    path = tmp_path / "proxy.sock"
    srv = build_proxy(f"unix://{path}", f"unix://{tmp_path / 'engine.sock'}",
                      write_checks("swarmgpu."))  # not serving: nothing accepted yet
    socks = []
    try:
        for _ in range(dockerproxy.MAX_CONNECTIONS):
            s = socket.socket(socket.AF_UNIX)
            s.setblocking(False)
            socks.append(s)
            s.connect(str(path))  # BlockingIOError (EAGAIN) past the backlog
    finally:
        for s in socks:
            s.close()
        srv.server_close()


def test_only_a_stale_socket_at_the_listen_path_is_replaced(tmp_path: Path) -> None:
    """Before: whatever was at the path was unlinked (``--listen unix:///etc/x`` deleted
    a file), and a directory there was "[Errno 21] Is a directory" naming no option."""
    checks, upstream = write_checks("swarmgpu."), "unix:///var/run/docker.sock"
    kept = tmp_path / "notes.txt"
    kept.write_text("kept")
    with pytest.raises(ValueError, match=r"listen 'unix://.*notes\.txt': a regular file") as e:
        build_proxy(f"unix://{kept}", upstream, checks)
    assert "--listen" in str(e.value) and kept.read_text() == "kept"
    with pytest.raises(ValueError, match=r"a directory.*--listen"):
        build_proxy(f"unix://{tmp_path}", upstream, checks)
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(stale))  # a previous run's, left behind
    build_proxy(f"unix://{stale}", upstream, checks).server_close()


@pytest.mark.parametrize("listen", ["tcp://127.0.0.1:99999", "tcp://127.0.0.1:", "unix://",
                                    "unix:///nonexistent-folder/p.sock", "tcp://127.0.0.1:²",
                                    "tcp://127.0.0.1:\u0662\u0663\u0667\u0665"])
def test_a_listen_address_it_cannot_use_is_said_with_the_fix(listen: str) -> None:
    """Before: port 99999 was an OverflowError traceback, ``unix://`` bound an abstract
    socket nobody could name, a missing folder was "[Errno 2] No such file or directory",
    ``:²`` int()'s own words and ``:٢٣٧٥`` (digits to isdigit) port 2375."""
    with pytest.raises(ValueError, match=r"^listen '") as e:
        build_proxy(listen, "unix:///var/run/docker.sock", write_checks("swarmgpu."))
    assert "--listen" in str(e.value) or "e.g." in str(e.value)
