"""agent.py over real HTTP on 127.0.0.1, plus the scripted metrics profile."""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from swarmgpu.agent.facts.profile import ProfileError, ProfileSampler, load_profile
from swarmgpu.agent.server import (
    AgentServer,
    FactsCache,
    GuardedSampler,
    build_server,
    empty_samples,
    parse_listen,
    serve,
)
from swarmgpu.core.config import AgentsConfig
from swarmgpu.core.metrics_in import parse_metrics
from swarmgpu.core.model import Gpu, MigDevice, NodeFacts
from swarmgpu.core.samples import GpuSample
from swarmgpu.manager.nodes import boundedhttp
from swarmgpu.manager.nodes.agent_client import fetch_facts
from swarmgpu.manager.rebalance.scrape import scrape_node
from swarmgpu.swarm.client import SwarmNode

FACTS = NodeFacts(
    hostname="node-a",
    gpus=(
        Gpu(0, "GPU-aaaa", "NVIDIA A100-SXM4-40GB", 40960, pci_bus_id="00000000:07:00.0"),
        Gpu(1, "GPU-bbbb", "NVIDIA A100-SXM4-40GB", 40960, mig_capable=True, mig_enabled=True,
            mig_devices=(MigDevice("3g.20gb", "MIG-1111", 19968, gi_id=1, ci_id=0),)),
    ),
    source="fake:test",
)


@dataclass
class Source:
    """A tiny in-test FactSource: returns facts, raises, or hangs on demand."""

    facts: NodeFacts = FACTS
    spec: str = "fake:test"
    mode: str = "ok"  # ok | raise | hang
    reads: int = 0
    release: threading.Event = field(default_factory=threading.Event)

    def read(self) -> NodeFacts:
        self.reads += 1
        if self.mode == "raise":
            raise RuntimeError("NVML_ERROR_UNKNOWN")
        if self.mode == "hang":
            self.release.wait(30)
        return self.facts


@pytest.fixture
def run_agent() -> Iterator[Callable[..., tuple[AgentServer, str]]]:
    servers: list[tuple[AgentServer, threading.Thread]] = []

    def start(source: Source, **kw: Any) -> tuple[AgentServer, str]:
        srv = build_server(source, "127.0.0.1:0", **kw)
        t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                             daemon=True)
        t.start()
        servers.append((srv, t))
        host, port = srv.server_address[:2]
        assert isinstance(host, str)
        return srv, f"http://{host}:{port}"

    yield start
    for srv, t in servers:
        srv.shutdown()
        t.join(5)


def get(url: str, method: str = "GET", timeout: float = 5) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def wait_for(cond: Callable[[], bool], timeout: float = 5) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def raw(base: str, data: bytes) -> bytes:
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                break
            if not b:
                break
            chunks.append(b)
    return b"".join(chunks)


# --- endpoints --------------------------------------------------------------------


def test_endpoints(run_agent: Callable[..., tuple[AgentServer, str]]) -> None:
    src = Source()
    started = time.monotonic()
    srv, base = run_agent(src, refresh_s=60)
    wait_for(lambda: srv.cache.view().facts is not None)

    code, headers, body = get(base + "/facts")
    assert code == 200 and headers["Content-Type"] == "application/json"
    assert headers["X-Swarmgpu-Facts-Stale"] == "0"
    assert NodeFacts.from_dict(json.loads(body)) .gpus == FACTS.gpus

    code, headers, body = get(base + "/metrics")
    assert code == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    res = parse_metrics(body.decode())
    assert res.errors == [] and res.hostname == "node-a"
    a = res.samples_by_uuid["GPU-aaaa"]
    assert a.fb_free_mib == 40960 and a.fb_used_mib == 0 and a.util_pct is None
    assert res.samples_by_uuid["GPU-bbbb"].mig[1].values["DCGM_FI_DEV_FB_FREE"] == 19968

    code, _, body = get(base + "/healthz")
    h = json.loads(body)
    assert code == 200 and h["status"] == "ok" and h["errors"] == []
    # No older than the agent (rounded to the ms): the facts are the first read's.
    assert 0 <= h["facts_age_s"] <= round(time.monotonic() - started, 3) + 0.001

    code, headers, body = get(base + "/metrics", method="HEAD")
    assert code == 200 and body == b"" and int(headers["Content-Length"]) > 100


def test_garbage_paths_and_methods(run_agent: Callable[..., tuple[AgentServer, str]]) -> None:
    _, base = run_agent(Source())
    for path in ("/", "/facts/../etc/passwd", "/metricsX", "/%00", "/" + "a" * 4000):
        assert get(base + path)[0] == 404, path
    assert get(base + "/facts?x=1")[0] in (200, 503)  # query strings are ignored
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        code, headers, _ = get(base + "/facts", method=method)
        assert code == 405 and headers["Allow"] == "GET, HEAD"
    brew = raw(base, b"BREW /coffee HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert brew.startswith(b"HTTP/1.1 405")
    assert raw(base, b"\x16\x03\x01\x00\xa5garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert raw(base, b"GET /healthz HTTP/9.9\r\n\r\n").startswith(b"HTTP/1.1 505")


@pytest.mark.parametrize("line", [b"GET /facts", b"GET /facts HTTP/0.9", b"GET /facts HTTP/0.8"])
def test_an_http_0_9_request_gets_a_status_line_not_a_bare_body(
    run_agent: Callable[..., tuple[AgentServer, str]], line: bytes,
) -> None:
    """HTTP/0.9 has no status line: the standard library answered it with the body alone,
    so a 401 or a 421 read as the page ('bearer token required' as /facts). Refused with
    a status line naming the versions served."""
    srv, base = run_agent(Source(), refresh_s=60, token="s3cret")
    wait_for(lambda: srv.cache.view().facts is not None)
    resp = raw(base, line + b"\r\nAuthorization: Bearer s3cret\r\n\r\n")
    assert resp.startswith(b"HTTP/1.1 505"), resp[:80]
    assert b"HTTP/1.1" in resp.partition(b"\r\n\r\n")[2] and b"GPU-aaaa" not in resp


def test_a_request_line_is_logged_without_control_characters(
    run_agent: Callable[..., tuple[AgentServer, str]],
) -> None:
    """Anyone who reaches the port writes the request line the agent logs: an escape
    sequence in it must not reach the operator's terminal (core.peertext), nor a line
    of 8 KiB (the standard library's own log_message cleans it; the override did not)."""
    _, base = run_agent(Source())
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="DEBUG")
    try:
        resp = raw(base, b"GET /x\x1b]0;owned\x07\x1b[2J\x9b31m" + b"a" * 5000
                   + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        # (a target of other than visible ASCII is a malformed request line: 400, logged)
        assert resp.startswith(b"HTTP/1.1 400")
    finally:
        logger.remove(sink)
    logged = [ln for ln in lines if "/x" in ln]
    assert logged, lines
    assert not any(c in ln for ln in logged for c in "\x1b\x07\x9b"), logged
    assert all(len(ln) < 1000 for ln in logged), [len(ln) for ln in logged]


def test_a_query_is_never_logged(run_agent: Callable[..., tuple[AgentServer, str]]) -> None:
    """The agent's log line for each request repeated the whole target, its query too,
    which may hold a secret a client put there (a token, a key), and so did the line of
    a request refused as malformed: the path is logged, the query cut."""
    _, base = run_agent(Source(), refresh_s=60)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="DEBUG", diagnose=False)
    try:
        assert raw(base, b"GET /healthz?token=secret-one HTTP/1.1\r\nHost: 127.0.0.1"
                         b"\r\n\r\n").startswith(b"HTTP/1.1 ")
        assert raw(base, b"GET /x?key=secret-two HTTP/1.1 more\r\nHost: 127.0.0.1\r\n"
                         b"\r\n").startswith(b"HTTP/1.1 400")
    finally:
        logger.remove(sink)
    logged = [ln for ln in lines if "/healthz" in ln or "/x" in ln]
    assert len(logged) >= 2, lines
    assert not any("secret" in ln or "token=" in ln or "key=" in ln for ln in lines), logged


def _with_host(base: str, path: str, host: str, extra: str = "") -> bytes:
    return raw(base, f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode())


def test_without_credentials_only_a_host_it_serves_on_is_answered(
        run_agent: Callable[..., tuple[AgentServer, str]]) -> None:
    # Plain HTTP without a token reads to anyone who reaches the port, a browser too: a
    # page whose name is rebound to 127.0.0.1 (DNS rebinding) names its own Host.
    srv, base = run_agent(Source(), refresh_s=60)
    wait_for(lambda: srv.cache.view().facts is not None)
    port = base.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", "LOCALHOST", f"localhost:{port}", "[::1]:9401",
                 "10.0.0.7:9401", socket.gethostname(), "node-a:9401"):  # node-a: its facts
        for path in ("/facts", "/metrics", "/healthz"):
            assert _with_host(base, path, host).startswith(b"HTTP/1.1 200"), (host, path)
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.nip.io", "localhost.evil"):
        for path in ("/facts", "/metrics", "/healthz"):
            answer = _with_host(base, path, host)
            assert answer.startswith(b"HTTP/1.1 421"), (host, path)
            assert b"--allowed-hosts" in answer and b"GPU-aaaa" not in answer
    # The daemon's client by name (agents.url_template with {hostname}), and a name the
    # agent was told.
    assert boundedhttp.get(f"http://localhost:{port}/facts", timeout_s=5,
                           max_bytes=1 << 20).status == 200
    srv.allowed_hosts |= {"gpu-7.cluster.example"}
    assert _with_host(base, "/facts", "GPU-7.cluster.example.:9401").startswith(b"HTTP/1.1 200")
    # A name the agent does not know: the daemon says which, and the fix.
    srv.allowed_hosts = frozenset()
    node = SwarmNode("n0", "node-a", "127.0.0.1", "worker", "ready", "active", {}, {}, 1,
                     {}, {})
    got = fetch_facts(node, AgentsConfig(port=int(port), identity="none",
                                         url_template="http://localhost:{port}"))
    assert got.facts is None and got.cause == "HTTP 421: host not served"
    assert "--allowed-hosts" in (got.error or "") and "{addr}" in got.fix
    # The metrics scrape by that name says the same fix (it said only "HTTP 421").
    sc = scrape_node(node, f"http://localhost:{port}/metrics", 5)
    assert sc.result is None and "answered HTTP 421" in (sc.error or "")
    assert "--allowed-hosts" in (sc.error or "") and "{addr}" in (sc.error or "")


def test_a_token_or_certificate_makes_the_host_check_moot(
        run_agent: Callable[..., tuple[AgentServer, str]]) -> None:
    # A browser cannot send the bearer token (nor a manager certificate): with one the
    # agent answers whatever Host a proved caller names (a name behind a proxy, say).
    srv, base = run_agent(Source(), refresh_s=60, token="s3cret")
    wait_for(lambda: srv.cache.view().facts is not None)
    bearer = "Authorization: Bearer s3cret\r\n"
    assert _with_host(base, "/facts", "evil.example", bearer).startswith(b"HTTP/1.1 200")
    assert _with_host(base, "/facts", "evil.example").startswith(b"HTTP/1.1 401")


def test_oversized_request_line_and_headers(
    run_agent: Callable[..., tuple[AgentServer, str]],
) -> None:
    _, base = run_agent(Source())
    resp = raw(base, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n")
    assert resp.startswith(b"HTTP/1.1 414")
    resp = raw(base, b"GET /healthz HTTP/1.1\r\n" + b"X-Junk: " + b"b" * 9000 + b"\r\n\r\n")
    assert resp.startswith(b"HTTP/1.1 431")
    many = b"".join(b"X-%d: 1234567890\r\n" % i for i in range(1000))
    assert raw(base, b"GET /healthz HTTP/1.1\r\n" + many + b"\r\n").startswith(b"HTTP/1.1 431")
    # a body is never read; the answer still comes
    resp = raw(base, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n"
               b"\r\nxyz")
    assert resp.startswith(b"HTTP/1.1 200")


def test_a_head_ending_in_a_bare_lf_then_crlf_is_answered_at_once(
    run_agent: Callable[..., tuple[AgentServer, str]],
) -> None:
    """A last header line ending in LF, then the blank line in CRLF: the head is whole
    (the request parser ends lines at LF), yet the reader looked only for CRLFCRLF or
    LFLF, waited out the head deadline and closed without an answer."""
    _, base = run_agent(Source())
    # Answered at all: the old reader closed at the head deadline with no answer.
    resp = raw(base, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\n\r\n")
    assert resp.startswith(b"HTTP/1.1 200"), resp[:80]


@pytest.mark.parametrize(("name", "fields", "why"), [
    ("no colon", b"X-Junk\r\nHost: evil.example\r\n", b"malformed header line"),
    ("space before the colon", b"Host : evil.example\r\n", b"malformed header line"),
    ("obsolete folding", b"Host: evil.example\r\n 127.0.0.1\r\n", b"line folding"),
    ("bare CR", b"X-A: 1\rHost: evil.example\r\n", b"bare CR"),
    ("NUL in a value", b"X-A: a\x00b\r\n", b"control character"),
])
def test_a_header_block_two_parsers_read_apart_is_refused(
    run_agent: Callable[..., tuple[AgentServer, str]], name: str, fields: bytes, why: bytes,
) -> None:
    """A line without a colon ended the headers for the request parser (a Host or
    Authorization after it was never seen: /facts answered 200 to 'Host: evil.example');
    'Host :' was no Host; a bare CR began a new field. A proxy in front reads each of
    these otherwise (RFC 9112 2.2, 5.1, 5.2: the server must refuse them), so 400, saying
    what is wrong."""
    srv, base = run_agent(Source(), refresh_s=60)
    wait_for(lambda: srv.cache.view().facts is not None)
    resp = raw(base, b"GET /facts HTTP/1.1\r\n" + fields + b"\r\n")
    assert resp.startswith(b"HTTP/1.1 400"), (name, resp[:80])
    assert why in resp and b"GPU-aaaa" not in resp, (name, resp)


def test_header_lines_a_strict_parser_reads_alike_are_answered(
    run_agent: Callable[..., tuple[AgentServer, str]],
) -> None:
    srv, base = run_agent(Source(), refresh_s=60)
    wait_for(lambda: srv.cache.view().facts is not None)
    for fields in (b"Host: 127.0.0.1\r\nX-Empty:\r\nX-Tab: a\tb\r\n",
                   b"Host:127.0.0.1\nUser-Agent: caf\xc3\xa9\n"):  # LF ends; obs-text
        resp = raw(base, b"GET /facts HTTP/1.1\r\n" + fields + b"\r\n")
        assert resp.startswith(b"HTTP/1.1 200"), (fields, resp[:80])


def test_silent_client_is_dropped(
    run_agent: Callable[..., tuple[AgentServer, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("swarmgpu.agent.server._Handler.timeout", 0.3)
    _, base = run_agent(Source())
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\n")  # never finishes the head
        # The server closed it: one that kept it would time this recv out (5 s, a
        # hang guard), and fail here.
        assert s.recv(100) == b""
    assert get(base + "/healthz")[0] == 200


def test_source_that_raises(run_agent: Callable[..., tuple[AgentServer, str]]) -> None:
    src = Source(mode="raise")
    srv, base = run_agent(src, refresh_s=0.05)
    # not ``src.reads``: it counts the read before its error reaches the cache
    wait_for(lambda: srv.cache.view().last_error is not None)
    code, _, body = get(base + "/facts")
    assert code == 503 and "NVML_ERROR_UNKNOWN" in json.loads(body)["last_error"]
    code, _, body = get(base + "/healthz")
    assert code == 503 and json.loads(body)["status"] == "degraded"
    code, _, body = get(base + "/metrics")
    assert code == 200 and b"swarmgpu_agent_facts_errors 1.0" in body
    # recovers, then fails again: last good facts stay, marked stale
    src.mode = "ok"
    wait_for(lambda: srv.cache.view().facts is not None)
    src.mode = "raise"
    wait_for(lambda: srv.cache.view().last_error is not None)
    code, headers, body = get(base + "/facts")
    assert code == 200 and headers["X-Swarmgpu-Facts-Stale"] == "1"
    facts = NodeFacts.from_dict(json.loads(body))
    assert facts.gpus == FACTS.gpus and any("stale" in e for e in facts.errors)
    h = json.loads(get(base + "/healthz")[2])
    assert h["status"] == "degraded" and any("NVML_ERROR_UNKNOWN" in e for e in h["errors"])


def test_source_that_hangs_does_not_block_requests(
    run_agent: Callable[..., tuple[AgentServer, str]],
) -> None:
    src = Source()
    srv, base = run_agent(src, refresh_s=0.05)
    wait_for(lambda: srv.cache.view().facts is not None)
    n = src.reads
    src.mode = "hang"
    wait_for(lambda: src.reads > n)  # the refresh thread is now stuck in read()
    time.sleep(0.2)  # > 2 * refresh_s: facts are stale by age
    # Each answered within its get's timeout (a hang guard): none waits on the read.
    code, headers, _ = get(base + "/facts", timeout=2)
    assert code == 200 and headers["X-Swarmgpu-Facts-Stale"] == "1"
    assert get(base + "/metrics", timeout=2)[0] == 200
    h = json.loads(get(base + "/healthz", timeout=2)[2])
    assert h["status"] == "degraded" and h["facts_age_s"] >= 0.1
    src.release.set()


def test_hanging_and_failing_sampler(run_agent: Callable[..., tuple[AgentServer, str]]) -> None:
    gate = threading.Event()
    calls = {"n": 0}
    mode = {"now": "ok"}

    def sampler() -> list[GpuSample]:
        calls["n"] += 1
        if mode["now"] == "ok":
            return [GpuSample("GPU-aaaa", 0, 77.0, 1, 2, None, None, None)]
        if mode["now"] == "boom":
            mode["now"] = "hang"
            raise RuntimeError("boom")
        gate.wait(10)
        return []

    srv, base = run_agent(Source(), sampler=sampler, sample_timeout_s=0.2)
    wait_for(lambda: srv.cache.view().facts is not None)
    body = get(base + "/metrics")[2].decode()
    assert "swarmgpu_agent_sampler_ok 1.0" in body
    before, mode["now"] = calls["n"], "boom"
    for _ in range(3):  # failing, then hanging twice: last samples, marked not ok
        # Answered while the sampler hangs (gate.wait(10)): a scrape that waited on it
        # would time out get's 5 s (a hang guard) first.
        body = get(base + "/metrics")[2].decode()
        assert "swarmgpu_agent_sampler_ok 0.0" in body
        assert parse_metrics(body).samples_by_uuid["GPU-aaaa"].util_pct == 77.0
    assert calls["n"] == before + 2  # the hung call is not piled up on
    gate.set()


def test_the_agent_takes_a_first_sample_at_start(
    run_agent: Callable[..., tuple[AgentServer, str]],
) -> None:
    """Rates need a previous reading: the agent samples once as it starts, so the first
    scrape already has them (and a first scrape whose sampler fails serves that one)."""
    calls = {"n": 0}

    def sampler() -> list[GpuSample]:
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("boom")
        return [GpuSample("GPU-aaaa", 0, 55.0, 1, 2, None, None, None)]

    _srv, base = run_agent(Source(), sampler=sampler, sample_timeout_s=0.5)
    wait_for(lambda: calls["n"] == 1)  # before any scrape
    body = get(base + "/metrics")[2].decode()
    assert parse_metrics(body).samples_by_uuid["GPU-aaaa"].util_pct == 55.0


def test_zero_gpus(run_agent: Callable[..., tuple[AgentServer, str]]) -> None:
    srv, base = run_agent(Source(facts=NodeFacts(hostname="cpu")))
    wait_for(lambda: srv.cache.view().facts is not None)
    assert json.loads(get(base + "/facts")[2])["gpus"] == []
    body = get(base + "/metrics")[2].decode()
    assert "DCGM_" not in body and "swarmgpu_agent_facts_errors 0.0" in body
    assert json.loads(get(base + "/healthz")[2])["status"] == "ok"


def test_unhealthy_gpu_degrades_health(
    run_agent: Callable[..., tuple[AgentServer, str]],
) -> None:
    bad = NodeFacts(hostname="n", gpus=(Gpu(0, "GPU-x", "T4", 15360, healthy=False,
                                           error="XID 79: fell off the bus"),))
    srv, base = run_agent(Source(facts=bad))
    wait_for(lambda: srv.cache.view().facts is not None)
    h = json.loads(get(base + "/healthz")[2])
    assert h["status"] == "degraded" and "XID 79" in h["errors"][0]
    assert b'swarmgpu_agent_gpu_healthy{UUID="GPU-x",gpu="0"} 0.0' in get(base + "/metrics")[2]


def test_concurrent_requests(run_agent: Callable[..., tuple[AgentServer, str]]) -> None:
    srv, base = run_agent(Source())
    wait_for(lambda: srv.cache.view().facts is not None)
    codes: list[int] = []

    def hit() -> None:
        for _ in range(10):
            codes.append(get(base + "/metrics")[0])

    # below the per-client connection cap (8): a closed connection's slot frees when its
    # handler ends, which a loaded machine may do after the client's next connect
    ts = [threading.Thread(target=hit) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
    assert codes == [200] * 60


def test_serve_stops_on_event(tmp_path: Path) -> None:
    stop = threading.Event()
    t = threading.Thread(target=serve, args=(Source(), "127.0.0.1:0"),
                         kwargs={"stop_event": stop, "refresh_s": 1}, daemon=True)
    t.start()
    time.sleep(0.3)
    stop.set()
    t.join(5)
    assert not t.is_alive()


@pytest.mark.parametrize(
    "listen, want",
    [("0.0.0.0:9401", ("0.0.0.0", 9401)), (":9401", ("0.0.0.0", 9401)),
     ("[::1]:0", ("::1", 0)), ("127.0.0.1:0", ("127.0.0.1", 0))],
)
def test_parse_listen(listen: str, want: tuple[str, int]) -> None:
    assert parse_listen(listen) == want


# '²' and '٩٤٠١' are digits to str.isdigit: the first raised int()'s own words, the
# second bound port 9401 (the daemon's http.listen refuses both).
@pytest.mark.parametrize("listen", ["9401", "host:", "host:99999", "host:http", "host:²",
                                    "0.0.0.0:\u0669\u0664\u0660\u0661"])
def test_parse_listen_rejects(listen: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_listen(listen)


def test_facts_cache_and_guarded_sampler_units() -> None:
    now = [100.0]
    cache = FactsCache(Source(), refresh_s=10, clock=lambda: now[0])
    assert cache.view().stale and cache.view().facts is None
    cache.refresh_once()
    assert not cache.view().stale and cache.view().age_s == 0
    now[0] += 25
    assert cache.view().stale  # older than twice the refresh period
    with pytest.raises(ValueError, match="refresh_s"):
        FactsCache(Source(), refresh_s=0)
    gs = GuardedSampler(lambda: empty_samples(FACTS), timeout_s=1)
    samples, err = gs.sample()
    assert err is None and [s.uuid for s in samples] == ["GPU-aaaa", "MIG-1111"]
    gs.close()


def test_guarded_sampler_keeps_a_late_or_primed_reading_as_the_last_good_one() -> None:
    """A reading that comes after its caller stopped waiting, or the one taken at start,
    is what a later failing scrape serves, not nothing."""
    gate = threading.Event()
    mode = ["block"]

    def sampler() -> list[GpuSample]:
        if mode[0] == "block":
            gate.wait(5)
        if mode[0] == "fail":
            raise RuntimeError("NVML went away")
        return empty_samples(FACTS)

    gs = GuardedSampler(sampler, timeout_s=0.05)
    samples, err = gs.sample()
    assert samples == [] and err is not None and "did not answer within" in err
    gate.set()  # the reading arrives late; nobody waits for it
    deadline = time.monotonic() + 5
    while gs._future is not None and not gs._future.done() and time.monotonic() < deadline:
        time.sleep(0.01)
    mode[0] = "fail"
    samples, err = gs.sample()
    assert err is not None and "NVML went away" in err
    assert [s.uuid for s in samples] == ["GPU-aaaa", "MIG-1111"]
    gs.close()

    mode[0] = "ok"
    primed = GuardedSampler(sampler, timeout_s=1)
    primed.prime()
    assert primed._future is not None
    primed._future.result(timeout=5)
    mode[0] = "fail"
    samples, err = primed.sample()
    assert err is not None and [s.uuid for s in samples] == ["GPU-aaaa", "MIG-1111"]
    primed.close()


# --- profile ----------------------------------------------------------------------

PROFILE = """
default: {util_pct: 5, fb_used_mib: 1000}
gpus:
  "0": [{at: 0, util_pct: 10}, {at: 30, util_pct: 95, temp_c: 70}, {at: 400, util_pct: 20}]
  MIG-1111: [{at: 0, fb_used_mib: 4000}, {at: 10, util_pct: null}]
"""


def _write(path: Path, text: str, bump: int = 0) -> None:
    path.write_text(text)
    st = path.stat()  # make the mtime change visible even within one clock tick
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump * 1_000_000_000))


def test_profile_step_function(tmp_path: Path) -> None:
    p = tmp_path / "profile.yaml"
    _write(p, PROFILE)
    now = [0.0]
    s = ProfileSampler(p, FACTS, clock=lambda: now[0])

    def at(t: float) -> dict[str, GpuSample]:
        now[0] = t
        return {x.uuid: x for x in s.sample()}

    g = at(0)["GPU-aaaa"]
    assert (g.util_pct, g.fb_used_mib, g.fb_free_mib, g.temp_c) == (10, 1000, 39960, None)
    g = at(30)["GPU-aaaa"]
    assert (g.util_pct, g.temp_c) == (95, 70)
    assert at(399.9)["GPU-aaaa"].util_pct == 95
    g = at(400)["GPU-aaaa"]
    assert (g.util_pct, g.temp_c) == (20, None)  # temp came from the 30 s entry only
    m = at(5)["MIG-1111"]
    assert (m.index, m.util_pct, m.fb_used_mib, m.fb_free_mib) == (1, 5, 4000, 15968)
    assert at(10)["MIG-1111"].util_pct is None  # null: unknown


def test_profile_reload_and_broken_reload(tmp_path: Path) -> None:
    p = tmp_path / "profile.yaml"
    _write(p, PROFILE)
    now = [50.0]
    s = ProfileSampler(p, FACTS, clock=lambda: 0.0 if now[0] == 50.0 else now[0])
    now[0] = 50.5
    assert s.sample()[0].util_pct == 95
    _write(p, "default: {util_pct: 1}\n", bump=1)
    assert s.sample()[0].util_pct == 1  # same time, new profile
    _write(p, "default: {util_pct: [oops\n", bump=2)
    assert s.sample()[0].util_pct == 1  # last good profile kept
    assert s.error is not None and "not valid YAML" in s.error
    _write(p, "default: {util_pct: 2}\n", bump=3)
    assert s.sample()[0].util_pct == 2 and s.error is None


def test_profile_error_shows_in_healthz(
    tmp_path: Path, run_agent: Callable[..., tuple[AgentServer, str]]
) -> None:
    p = tmp_path / "profile.yaml"
    _write(p, PROFILE)
    s = ProfileSampler(p, FACTS)
    srv, base = run_agent(Source(), sampler=s.sample)  # as the CLI passes it
    wait_for(lambda: srv.cache.view().facts is not None)
    body = get(base + "/metrics")[2].decode()
    assert parse_metrics(body).samples_by_uuid["GPU-aaaa"].util_pct == 10
    _write(p, "gpus: {'9': [{at: 0}]}\n", bump=1)
    get(base + "/metrics")
    h = json.loads(get(base + "/healthz")[2])
    assert h["status"] == "degraded" and any("no GPU with that index" in e for e in h["errors"])


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("[1, 2]", "expected a mapping"),
        ("default: {util: 5}", "unknown field(s) ['util']"),
        ("default: {util_pct: 150}", "above 100"),
        ("default: {util_pct: -1}", "number >= 0"),
        ("default: {util_pct: high}", "number >= 0"),
        ("gpus: {'7': [{at: 0}]}", "no GPU with that index"),
        ("gpus: {'0': []}", "non-empty list"),
        ("gpus: {'0': [{util_pct: 1}]}", ".at: expected seconds"),
        ("gpus: {'0': [{at: 5}, {at: 5}]}", "not after the previous"),
        ("gpus: {'0': [{at: 0}], GPU-aaaa: [{at: 0}]}", "listed twice"),
        ("repeat_s: 0", "repeat_s"),
        ("extra: 1", "unknown key(s) ['extra']"),
        ("a: [b", "not valid YAML"),
    ],
)
def test_profile_errors_name_the_problem(tmp_path: Path, text: str, fragment: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ProfileError) as e:
        load_profile(p, FACTS)
    assert fragment in str(e.value) and str(p) in str(e.value)


@pytest.mark.parametrize("text", [
    "default: {power_w: .inf}", "default: {temp_c: .nan}", "default: {fb_used_mib: 1e300}",
    "gpus: {'0': [{at: .nan}]}", "gpus: {'0': [{at: .inf}]}", "repeat_s: .nan",
    "repeat_s: .inf"])
def test_profile_numbers_no_gpu_reads_are_refused_at_their_field(
        tmp_path: Path, text: str) -> None:
    """.inf was served as +Inf and 1e300 as such, which the daemon's scrape reads as no
    reading (unknown); .nan was taken and served as nothing, like null; a NaN or infinite
    time or period made the script never step, silently."""
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    field = text.split(":", 1)[0] if text.startswith("repeat_s") else \
        ".at" if "at:" in text else text.split("{", 1)[1].split(":", 1)[0]
    with pytest.raises(ProfileError, match="finite") as e:
        load_profile(p, FACTS)
    assert field in str(e.value) and str(p) in str(e.value)


@pytest.mark.parametrize(("text", "fragment"), [
    ("1: a\nextra: b\n", "unknown key(s) [1, 'extra']"),
    ("default: {1: 5, x: 3}\n", "unknown field(s) [1, 'x']"),
])
def test_profile_unknown_keys_of_mixed_types_are_named(tmp_path: Path, text: str,
                                                       fragment: str) -> None:
    """An unknown number key beside an unknown text key: sorting them for the message
    raised TypeError (a traceback at start) instead of ProfileError naming them."""
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ProfileError) as e:
        load_profile(p, FACTS)
    assert fragment in str(e.value) and str(p) in str(e.value)


def test_profile_missing_file_and_repeat(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read"):
        ProfileSampler(tmp_path / "nope.yaml", FACTS)
    p = tmp_path / "loop.yaml"
    p.write_text("repeat_s: 60\ngpus: {'0': [{at: 0, util_pct: 1}, {at: 30, util_pct: 99}]}\n")
    prof = load_profile(p, FACTS)
    assert prof.values_at("GPU-aaaa", 75)["util_pct"] == 1
    assert prof.values_at("GPU-aaaa", 95)["util_pct"] == 99


def test_connection_limit_evicts_the_half_sent_request(
    run_agent: Callable[..., tuple[AgentServer, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Full, a newcomer is let in and the half-sent request goes (httpguard.GuardedServer).
    monkeypatch.setattr("swarmgpu.agent.server.MAX_CONNECTIONS", 1)
    _, base = run_agent(Source())
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as slow:
        slow.sendall(b"GET /healthz HTTP/1.1\r\n")  # holds the only slot
        time.sleep(0.1)
        assert get(base + "/healthz")[0] in (200, 503)
        assert slow.recv(100) == b""  # closed without an answer


def test_default_sampler_choice() -> None:
    from swarmgpu.agent.facts import nvml
    from swarmgpu.agent.server import default_sampler

    assert default_sampler(Source(spec="nvml"), lambda: None) is nvml.read_utilisation
    static = default_sampler(Source(spec="file:/x"), lambda: FACTS)
    assert [s.uuid for s in static()] == ["GPU-aaaa", "MIG-1111"]
    assert default_sampler(Source(spec="file:/x"), lambda: None)() == []


# --- stopping while NVML hangs (a GPU fallen off the bus can hold the driver for minutes) ---


def _stderr_until(proc: subprocess.Popen[str], text: str, timeout_s: float) -> str:
    """The agent's stderr up to the line holding ``text`` (it is then serving)."""
    assert proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    seen, end = "", time.monotonic() + timeout_s
    while text not in seen:
        assert time.monotonic() < end and sel.select(end - time.monotonic()), seen
        line = proc.stderr.readline()
        assert line, f"the agent ended before {text!r}: {seen}"
        seen += line
    return seen


@pytest.mark.parametrize("call", ["nvmlInit", "nvmlDeviceGetHandleByIndex"])
def test_the_agent_exits_on_sigterm_while_an_nvml_call_never_returns(call: str) -> None:
    """Before: SIGTERM stopped the server, then the exit hooks waited on the hung call
    (NVML's shutdown on the lock a hung init holds, the GPU-read and sampler pools on
    their threads), until Docker's or systemd's SIGKILL."""
    script = textwrap.dedent(f"""
        import threading, types
        import swarmgpu.agent.facts.nvml_session as session
        hung = types.SimpleNamespace(NVMLError=Exception, nvmlInit=lambda: None,
                                     nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1)
        setattr(hung, {call!r}, lambda *a: threading.Event().wait())
        session.load_pynvml = lambda: hung
        from swarmgpu.cli import main
        main(["agent", "--source", "nvml", "--listen", "127.0.0.1:0", "--identity", "none",
              "--hostname", "n"])
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        _stderr_until(proc, "agent serving nvml", 30)
        time.sleep(0.5)  # the facts thread and the sampler are in the hung call
        proc.send_signal(signal.SIGTERM)
        # The calls never return: an exit that waited on them would not come at all
        # (20 s, a hang guard).
        assert proc.wait(20) == 0
        assert proc.stderr is not None
        assert "agent stopped" in proc.stderr.read()  # the log was flushed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _agent_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`swarmgpu agent` on a topo capture, as an operator starts it; one that starts is
    stopped after 20 s (a bad option must end it at once)."""
    topo = Path(__file__).parent / "fixtures" / "topology" / "topo_dgx_a100_nv12.txt"
    return subprocess.run(
        [sys.executable, "-m", "swarmgpu.cli", "agent", "--source", f"topo:{topo}",
         "--product", "NVIDIA A100-SXM4-40GB", "--memory-mib", "40960", "--identity", "none",
         *args], capture_output=True, text=True, timeout=20, check=False)


def test_agent_refuses_a_trusted_proxy_it_cannot_read_with_the_fix() -> None:
    """--trusted-proxies (SWARMGPU_AGENT_TRUSTED_PROXIES) is parsed as the daemon's
    http.trusted_proxies: a name, or a network with host bits set, ends the agent at
    start naming the option, the entry and the fix."""
    for value, says in (("proxy.example", "names are not resolved"),
                        ("10.0.0.1/8", "host bits set"), ("fe80::1", "link-local")):
        r = _agent_cli("--listen", "127.0.0.1:0", "--trusted-proxies", value)
        assert r.returncode == 78, r.stderr
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith(f"swarmgpu agent: --trusted-proxies: {value!r}"), last
        assert says in last and "agent serving" not in r.stderr, last


@pytest.mark.parametrize("refresh", ["0", "-1", "nan", "inf", "1e308"])
def test_agent_refuses_a_refresh_period_it_cannot_keep(refresh: str) -> None:
    """Before: 0 and -1 were a traceback; nan read the source in a busy loop; inf and
    1e308 killed the refresher (OverflowError in its wait), its facts never read again."""
    r = _agent_cli("--listen", "127.0.0.1:0", "--refresh-s", refresh)
    assert r.returncode == 78, r.stderr
    said = f"swarmgpu agent: --refresh-s {float(refresh):g}: "
    assert r.stderr.strip().splitlines()[-1].startswith(said), r.stderr
    assert "Traceback" not in r.stderr and "agent serving" not in r.stderr


@pytest.mark.parametrize("refresh", ["1e-300", "0.01"])
def test_agent_refuses_a_refresh_period_under_a_second(refresh: str) -> None:
    """Before: taken, and the source was read in a busy loop (a core at 100 %, NVML
    asked without pause) while /facts and /healthz said the facts were stale (older
    than twice the period) nearly always: 1e-300 s, always."""
    r = _agent_cli("--listen", "127.0.0.1:0", "--refresh-s", refresh)
    assert r.returncode == 78, r.stderr
    said = f"swarmgpu agent: --refresh-s {float(refresh):g}: "
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(said) and "at least 1" in last, r.stderr
    assert "agent serving" not in r.stderr


@pytest.mark.parametrize("listen", ["bogus", "127.0.0.1:99999", ""])
def test_agent_refuses_a_listen_address_with_the_fix(listen: str) -> None:
    r = _agent_cli("--listen", listen)
    assert r.returncode == 78, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("swarmgpu agent: --listen") and "HOST:PORT" in last, last
    assert "Traceback" not in r.stderr


def test_agent_that_cannot_listen_says_where_and_exits_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = _agent_cli("--listen", f"127.0.0.1:{port}")
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"swarmgpu agent: --listen 127.0.0.1:{port}: cannot listen"), last
    assert "Address already in use" in last and "Traceback" not in r.stderr


def test_agent_refuses_a_short_token_with_the_fix(tmp_path: Path) -> None:
    """--token-file took any one-line token, "abc" too, which opens /metrics (and /facts
    without TLS) to whoever guesses it: fewer than 16 characters end the agent at start,
    naming the option and how to make one (never printing the token)."""
    short = tmp_path / "token"
    short.write_text("s3cret\n")
    r = _agent_cli("--listen", "127.0.0.1:0", "--token-file", str(short))
    assert r.returncode == 78, r.stderr  # a config error: the unit does not restart it
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"swarmgpu agent: --token-file: token file {short}: the token "
                           "is 6 characters, and at least 16 are needed"), last
    assert "openssl rand -hex 32" in last and "agents.token_file" in last, last
    assert "s3cret" not in r.stderr and "agent serving" not in r.stderr
