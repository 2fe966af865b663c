"""Who may read the agent, over real HTTP(S) on loopback (swarmgpu/agent/access.py):
a client's wrong tokens are limited, a manager certificate and a proved token never."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from loguru import logger
from support.identity import FakeSource, daemon_context, loopback_node
from support.webauth import get, get_lines

from swarmgpu.agent.server import AgentServer, build_server
from swarmgpu.core.config import AgentsConfig
from swarmgpu.core.forwarded import parse_trusted
from swarmgpu.core.guesslimit import BURST, REFILL_S, GuessLimit
from swarmgpu.manager.nodes import boundedhttp
from swarmgpu.manager.nodes.agent_client import fetch_facts
from swarmgpu.manager.rebalance.scrape import scrape_node
from swarmgpu.swarm.identity import ReloadingServerContext

TOKEN = "agent-token-0123456789abcdef"
RIGHT = {"Authorization": f"Bearer {TOKEN}"}
WRONG = {"Authorization": "Bearer wrong-guess-0123456789"}


@pytest.fixture
def agent() -> Iterator[Callable[..., AgentServer]]:
    servers: list[AgentServer] = []

    def start(**kw: Any) -> AgentServer:
        srv = build_server(FakeSource(), "127.0.0.1:0", refresh_s=60, **kw)
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        servers.append(srv)
        end = time.monotonic() + 5
        while srv.cache.view().facts is None and time.monotonic() < end:
            time.sleep(0.02)
        return srv

    yield start
    for srv in servers:
        srv.shutdown()


def _port(srv: AgentServer) -> int:
    return int(srv.server_address[1])


def test_wrong_tokens_from_one_address_are_limited_and_no_one_else(
        agent: Callable[..., AgentServer]) -> None:
    """The agent compared any number of tokens at full speed (401 after 401): its token
    opens /facts in token mode and /metrics for Prometheus. Now a client's wrong tokens
    use up its bucket, then /facts and /metrics answer 429 with Retry-After, the right
    token too (no right guess told apart), said once in the log; /healthz answers
    without its detail (never 429: the healthcheck sends the token); other addresses
    and right tokens are untouched; wrong tokens on /healthz count too (its detail told
    a right guess)."""
    port = _port(agent(token=TOKEN))
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        for _ in range(BURST):
            assert get(port, "/facts", WRONG, src="127.0.0.3")[0] == 401
        for path, hdrs in (("/facts", WRONG), ("/facts", RIGHT), ("/metrics", RIGHT)):
            status, headers, body = get(port, path, hdrs, src="127.0.0.3")
            assert status == 429, (path, hdrs)
            assert 1 <= int(headers["retry-after"]) <= REFILL_S, headers
            assert b"gpus" not in body and b"DCGM" not in body
        status, _, body = get(port, "/healthz", RIGHT, src="127.0.0.3")
        assert status == 200 and "errors" not in json.loads(body)  # no detail, no 429
        assert get(port, "/facts", RIGHT, src="127.0.0.4")[0] == 200
        for _ in range(2 * BURST):  # a right token is never a guess used up
            assert get(port, "/facts", RIGHT, src="127.0.0.5")[0] == 200
        for _ in range(BURST):  # /healthz's detail told a right token from a wrong one
            assert get(port, "/healthz", WRONG, src="127.0.0.6")[0] == 200
        assert get(port, "/facts", RIGHT, src="127.0.0.6")[0] == 429
        status, _, body = get(port, "/nowhere", WRONG, src="127.0.0.6")
        assert status == 404  # no token compared: nothing to limit
    finally:
        logger.remove(sink)
    said = [ln for ln in lines if "answered 429" in ln]
    assert len(said) == 1 and "agent: 127.0.0.3" in said[0], said  # one line per 10 s


PROXY = "127.0.0.7"


def test_a_guesser_behind_a_trusted_proxy_locks_out_no_one_else(
        agent: Callable[..., AgentServer]) -> None:
    """Behind a reverse proxy (Prometheus through one) every client was the proxy's
    address: one guesser emptied the bucket and every scrape with the right token got
    429. With the proxy named (``--trusted-proxies``, as the daemon's
    ``http.trusted_proxies``), its X-Forwarded-For names whose tokens count: the
    right-most entry no trusted proxy; a header naming no one client, or ``Forwarded``
    beside it, 400; a peer not named never has it read."""
    port = _port(agent(token=TOKEN, trusted_proxies=parse_trusted(f"{PROXY}, 10.9.0.0/16")))
    for i in range(BURST):
        fwd = {"X-Forwarded-For": f"198.51.100.{i}, 203.0.113.9, 10.9.0.1"}
        assert get(port, "/metrics", {**WRONG, **fwd}, src=PROXY)[0] == 401
    guesser = {"X-Forwarded-For": "192.0.2.1, 203.0.113.9"}
    assert get(port, "/metrics", {**RIGHT, **guesser}, src=PROXY)[0] == 429
    assert get(port, "/metrics", {**RIGHT, "X-Forwarded-For": "203.0.113.10"},
               src=PROXY)[0] == 200
    assert get(port, "/facts", RIGHT, src=PROXY)[0] == 200  # the proxy's own
    right = [("Authorization", RIGHT["Authorization"])]
    for bad in ([("X-Forwarded-For", "203.0.113.9"), ("x-forwarded-for", "203.0.113.1")],
                [("X-Forwarded-For", "unknown")], [("X-Forwarded-For", "203.0.113.9:80")],
                [("X-Forwarded-For", "203.0.113.9"), ("Forwarded", "for=203.0.113.9")]):
        assert get_lines(port, "/metrics", right + bad, PROXY) == 400, bad
        assert get_lines(port, "/metrics", right + bad, "127.0.0.9") == 200, bad
    for i in range(BURST):  # not named: one bucket, whatever it writes
        fwd = {"X-Forwarded-For": f"203.0.113.{100 + i}"}
        assert get(port, "/metrics", {**WRONG, **fwd}, src="127.0.0.8")[0] == 401
    assert get(port, "/metrics", {**RIGHT, "X-Forwarded-For": "203.0.113.200"},
               src="127.0.0.8")[0] == 429


def test_the_daemons_reads_are_never_limited_by_guesses_from_other_addresses(
        agent: Callable[..., AgentServer]) -> None:
    """Token mode: the daemon's facts fetch and metrics scrape prove the token; a
    guesser's addresses, past the table of buckets, share one they keep empty, and the
    daemon's own bucket is kept for it, so its reads never get their 429."""
    srv = agent(token=TOKEN)
    srv.guesses = GuessLimit(server="agent", max_clients=4)
    cfg = AgentsConfig(port=_port(srv), identity="none", timeout_s=3)
    assert fetch_facts(loopback_node(), cfg, None, TOKEN).facts is not None
    for i in range(10, 17):
        for _ in range(BURST):
            get(_port(srv), "/facts", WRONG, src=f"127.0.0.{i}")
    assert get(_port(srv), "/facts", RIGHT, src="127.0.0.17")[0] == 429  # a newcomer shares
    for _ in range(3):
        res = fetch_facts(loopback_node(), cfg, None, TOKEN)
        assert res.facts is not None, res.error
        page = scrape_node(loopback_node(), f"http://{{addr}}:{_port(srv)}/metrics", 3,
                           None, TOKEN)
        assert page.result is not None, page.error


def test_a_daemon_with_the_wrong_token_is_told_429_and_the_fix(
        agent: Callable[..., AgentServer]) -> None:
    """A daemon whose agents.token_file differs from the agents' --token-file uses up its
    own bucket: its error then says 429 and names the setting, not 'check the log'."""
    srv = agent(token=TOKEN)
    cfg = AgentsConfig(port=_port(srv), identity="none", timeout_s=3)
    for _ in range(BURST):
        res = fetch_facts(loopback_node(), cfg, None, "other-token-0123456789")
        assert res.error and "HTTP 401" in res.error
    res = fetch_facts(loopback_node(), cfg, None, "other-token-0123456789")
    assert res.facts is None and res.error and "HTTP 429" in res.error, res.error
    assert "agents.token_file" in res.error and "wrong tokens" in res.error


def _tls_get(port: int, path: str, ctx: ssl.SSLContext, headers: dict[str, str] | None
             ) -> int:
    return boundedhttp.get(f"https://127.0.0.1:{port}{path}", timeout_s=3,
                           max_bytes=1 << 20, tls=ctx, headers=headers).status


def test_a_manager_certificate_is_never_counted(
        agent: Callable[..., AgentServer], pki: dict[str, Path]) -> None:
    """swarm-pki with a token for Prometheus: a guesser on the daemon's own address uses
    up that address's bucket, and the daemon, which may send the token beside its
    certificate (agents.token_file), a stale one too, still reads everything."""
    srv = agent(tls=ReloadingServerContext(pki["node1"], pki["node1"].with_suffix(".key"),
                                           pki["ca"]), token=TOKEN)
    port, stranger = _port(srv), daemon_context(pki, None)
    for _ in range(BURST):
        assert _tls_get(port, "/metrics", stranger, WRONG) == 401
    assert _tls_get(port, "/metrics", stranger, RIGHT) == 429
    assert _tls_get(port, "/healthz", stranger, RIGHT) == 200
    for hdrs in (RIGHT, WRONG, None):
        assert _tls_get(port, "/facts", daemon_context(pki), hdrs) == 200, hdrs
        assert _tls_get(port, "/metrics", daemon_context(pki), hdrs) == 200, hdrs


def test_healthz_is_answered_on_a_reserved_slot(agent: Callable[..., AgentServer]) -> None:
    """Every slot busy answering (here /metrics waiting on a hung sampler; anyone may ask
    an agent without identity or token): a newcomer gets a reserved slot, which answered
    only a proved peer, so the container's healthcheck (no token under swarm-pki) got
    503 and the agent was reported unhealthy. /healthz is small and quick: it is
    answered there, as the daemon's is; the rest still is not."""
    hung = threading.Event()
    srv = agent(sampler=lambda: hung.wait(20) and [], sample_timeout_s=10)
    srv.max_connections, srv.reserved = 3, 2
    port = _port(srv)
    holders = [socket.create_connection(("127.0.0.1", port), timeout=15) for _ in range(3)]
    try:
        for h in holders:
            h.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        end = time.monotonic() + 5
        while srv.connection_counts()[0] < 3 and time.monotonic() < end:
            time.sleep(0.02)
        time.sleep(0.3)  # their heads read: busy answering, no candidate for eviction
        assert get(port, "/facts")[0] == 503  # a reserved slot, no proof
        status, _, body = get(port, "/healthz")
        assert status == 200 and json.loads(body)["status"] in ("ok", "degraded")
    finally:
        hung.set()
        for h in holders:
            h.close()


def test_a_failing_sampler_is_logged_once_per_window_not_per_request(
        agent: Callable[..., AgentServer]) -> None:
    """Each /metrics answered while the sampler failed logged a warning: anyone who may
    ask (an agent without identity or token; a token holder) wrote the log at the rate
    of their requests. At most one line per 10 s now, with how many it stands for; the
    page still says sampler_ok 0 every time."""
    def broken() -> list[Any]:
        raise RuntimeError("NVML_ERROR_GPU_IS_LOST")

    port = _port(agent(sampler=broken))
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        for _ in range(40):
            status, _, body = get(port, "/metrics")
            assert status == 200 and b"swarmgpu_agent_sampler_ok 0.0" in body
    finally:
        logger.remove(sink)
    said = [ln for ln in lines if "GPU_IS_LOST" in ln]
    assert 1 <= len(said) <= 2, len(said)
