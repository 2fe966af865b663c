"""Identity pieces that need no swarm: config rules, key files, tokens, audit and doctor
warnings on plain HTTP. The certificate checks themselves run on the real swarm
(tests/test_identity_swarm.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fifo import make_fifo, read_within
from support.gpu_nodes import RTX4090
from support.identity import CLUSTER, FakeSource, daemon_context, loopback_node
from support.traced import traced_peak

from swarmgpu.agent.doctor import Status, check_agent_identity, read_view
from swarmgpu.agent.server import build_server
from swarmgpu.core.config import AgentsConfig, ConfigError, describe_defaults, load_config
from swarmgpu.core.samples import GpuProcess, GpuSample
from swarmgpu.manager.commands.audit import identity_check
from swarmgpu.manager.nodes import boundedhttp
from swarmgpu.manager.nodes.agent_client import fetch_facts
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.rebalance.scrape import NodeScrape, for_moves, scrape_node
from swarmgpu.swarm.identity import (
    AuthSource,
    IdentityError,
    ReloadingServerContext,
    load_server_context,
    metrics_may_act,
    node_cert_paths,
    plain_key_pem,
    probe_agent_scheme,
    read_token,
    token_matches,
)

ROOT = Path(__file__).parent / "doctor_roots" / "healthy"


def test_swarm_pki_needs_https(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="https://"):
        load_config(None, env={"SWARMGPU_AGENTS_IDENTITY": "swarm-pki",
                               "SWARMGPU_AGENTS_URL_TEMPLATE": "http://{addr}:{port}"})
    f = tmp_path / "m.yml"
    f.write_text("rebalance: {metrics_url_template: 'http://{addr}:9401/metrics'}\n")
    with pytest.raises(ConfigError, match="metrics_url_template"):
        load_config(f, env={})
    f = tmp_path / "c.yml"
    f.write_text("agents: {identity: swarm-pki, url_template: 'https://{addr}:{port}'}\n"
                 "rebalance: {metrics_url_template: 'https://{addr}:9401/metrics'}\n")
    cfg = load_config(f, env={})
    assert cfg.agents.identity == "swarm-pki"
    with pytest.raises(ConfigError, match="swarm-pki or none"):
        load_config(None, env={"SWARMGPU_AGENTS_IDENTITY": "mtls"})


def test_manager_key_headers_are_stripped_and_autolock_is_named() -> None:
    body = "MHcCAQEEIByz\nAAAA\n"
    raft = ("-----BEGIN EC PRIVATE KEY-----\nraft-dek: abc\nkek-version: 3\n\n" + body
            + "-----END EC PRIVATE KEY-----\n")
    assert plain_key_pem(raft, "k") == ("-----BEGIN EC PRIVATE KEY-----\n" + body
                                         + "-----END EC PRIVATE KEY-----\n")
    locked = ("-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: x\n\n"
              + body + "-----END EC PRIVATE KEY-----\n")
    with pytest.raises(IdentityError, match="autolock"):
        plain_key_pem(locked, "k")


def test_tokens(tmp_path: Path) -> None:
    f = tmp_path / "t"
    f.write_text("abc123\n")
    assert read_token(f) == "abc123"
    assert token_matches("Bearer abc123", "abc123")
    for bad in (None, "", "Bearer abc12", "Basic abc123", "Bearerabc123", "Bearer\tabc123"):
        assert not token_matches(bad, "abc123")
    for content in ("", "two words", "x" * 5000):
        f.write_text(content)
        with pytest.raises(IdentityError):
            read_token(f)


def test_a_short_agents_token_is_refused_at_config_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agents' token opens their /metrics (and /facts in token mode) from anywhere,
    and had no least length: ``agents.token_file`` holding fewer than MIN_TOKEN_CHARS is
    a configuration error, naming the key and how to make one, as http.token_file is;
    the daemon's reads of the agents never take it either. A file not readable here
    (the secret lives in the container) is left to the daemon, as before."""
    from click.testing import CliRunner

    from swarmgpu.cli import main
    from swarmgpu.swarm.identity import MIN_TOKEN_CHARS, AuthSource, TokenRefused

    monkeypatch.delenv("SWARMGPU_AGENTS_TOKEN_FILE", raising=False)
    short = tmp_path / "short"
    short.write_text("s3cret\n")
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"agents:\n  identity: none\n  token_file: {short}\n")
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2, res.output
    assert f"{cfg}:3: agents.token_file:" in res.output, res.output
    assert f"at least {MIN_TOKEN_CHARS}" in res.output and "openssl rand -hex 32" in res.output
    assert "s3cret" not in res.output  # the token itself is never printed
    monkeypatch.setenv("SWARMGPU_AGENTS_TOKEN_FILE", str(short))
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2 and "SWARMGPU_AGENTS_TOKEN_FILE: agents.token_file:" in \
        res.output, res.output
    with pytest.raises(TokenRefused):
        AuthSource(AgentsConfig(identity="none", token_file=str(short)), None).get()  # type: ignore[arg-type]
    for ok in (tmp_path / "absent", tmp_path / "enough"):
        if ok.name == "enough":
            ok.write_text("x" * MIN_TOKEN_CHARS + "\n")
        monkeypatch.setenv("SWARMGPU_AGENTS_TOKEN_FILE", str(ok))
        res = CliRunner().invoke(main, ["config", "check", str(cfg)])
        assert res.exit_code == 0, (ok, res.output)


def test_the_bearer_scheme_is_read_in_any_case() -> None:
    """RFC 9110 11.1: the scheme is case-insensitive. 'bearer TOKEN' (Prometheus sends its
    authorization type as written, curl what it is given) was refused with a 401 asking
    for the bearer token it carried."""
    for header in ("bearer abc123", "BEARER abc123", "bEaReR  abc123"):
        assert token_matches(header, "abc123"), header


def test_a_fifo_as_the_token_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = make_fifo(tmp_path / "token")
    got = read_within(lambda: read_token(fifo), fifo)
    assert isinstance(got, IdentityError), got
    assert str(got) == (f"token file {fifo}: a FIFO (a named pipe), not a regular file; "
                        "give the path of the file holding the token (a Docker secret)")


def test_a_fifo_as_the_ca_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = make_fifo(tmp_path / "ca.crt")
    cfg = AgentsConfig(identity="swarm-pki", ca_file=str(fifo))
    src = AuthSource(cfg, swarm=None)  # type: ignore[arg-type]  # not asked: ca_file given
    got = read_within(src.get, fifo)
    assert isinstance(got, IdentityError), got
    assert str(got) == (f"agents.ca_file {fifo}: a FIFO (a named pipe), not a regular file; "
                        "give the path of the swarm root CA's PEM file")


@pytest.mark.parametrize("which", ["--tls-cert", "--tls-key", "--tls-ca"])
def test_a_fifo_as_the_agents_tls_files_is_refused_not_waited_on(
        which: str, pki: dict[str, Path], tmp_path: Path) -> None:
    """The agent's --tls-key was read with an unbounded read_text and --tls-cert/--tls-ca
    opened by OpenSSL itself: a FIFO there held the agent's start for ever."""
    files = {"--tls-cert": pki["node1"], "--tls-key": _key(pki["node1"]),
             "--tls-ca": pki["ca"]}
    fifo = files[which] = make_fifo(tmp_path / "pipe.pem")
    got = read_within(lambda: load_server_context(
        files["--tls-cert"], files["--tls-key"], files["--tls-ca"]), fifo)
    assert isinstance(got, IdentityError), got
    assert str(got).startswith(f"{which} {fifo}: a FIFO (a named pipe), not a regular file; ")


def test_the_cluster_served_is_the_one_of_the_certificate_loaded(
        pki: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent loaded --tls-cert from the bytes it read, then had OpenSSL open the
    path again for its cluster ID (whose managers may read /facts): a certificate
    swapped in between, another cluster's, was the one believed (and a FIFO swapped in
    hung the whole process there: the decoder holds the GIL while it opens the file)."""
    from swarmgpu.swarm import identity

    cert, key = tmp_path / "node.crt", tmp_path / "node.key"
    cert.write_bytes(pki["node1"].read_bytes())
    key.write_bytes(_key(pki["node1"]).read_bytes())
    read = identity.read_pem_file

    def read_then_swap(option: str, path: Any, limit: int, fix: str) -> str:
        text = read(option, path, limit, fix)
        if option == "--tls-cert":  # after the bounded read, before any other
            cert.write_bytes(pki["othercluster"].read_bytes())
        return text

    monkeypatch.setattr(identity, "read_pem_file", read_then_swap)
    tls = ReloadingServerContext(cert, key, pki["ca"])
    assert tls.cluster_id == CLUSTER, tls.cluster_id


def test_a_huge_tls_key_is_refused_without_reading_it_whole(
        pki: dict[str, Path], tmp_path: Path) -> None:
    key = tmp_path / "big.key"
    key.write_bytes(_key(pki["node1"]).read_bytes() + b"#" * (64 << 20))

    def refused() -> None:
        with pytest.raises(IdentityError, match=r"^--tls-key .*: larger than 64 KiB; not read"):
            load_server_context(pki["node1"], key, pki["ca"])

    _, peak = traced_peak(refused)
    assert peak < 4 << 20, peak


def test_a_huge_token_file_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_bytes(b"x" * (16 << 20))

    def refused() -> None:
        with pytest.raises(IdentityError, match="at most 4096 bytes"):
            read_token(f)

    _, peak = traced_peak(refused)
    assert peak < 1 << 20, f"{peak} bytes allocated to refuse it"  # was all 16 MiB


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.text(min_size=1, max_size=40))
def test_prop_token_only_exact_bearer_matches(header: str, token: str) -> None:
    if token_matches(header, token):
        assert header[:7].lower() == "bearer " and header[7:].strip() == token


def test_audit_warns_about_plain_http() -> None:
    snap = Snapshot([], [], [], {})
    (f,) = identity_check("none", "")(snap)
    assert not f.advisory, "plain HTTP to the agents needs action"
    assert "plain HTTP" in f.message and "swarm-pki" in f.message
    (f,) = identity_check("none", "/run/secrets/t")(snap)
    assert "token" in f.message
    assert identity_check("swarm-pki", "")(snap) == []


def test_doctor_warns_about_a_plain_http_agent() -> None:
    srv = build_server(FakeSource(), "127.0.0.1:0", refresh_s=60)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        scheme = probe_agent_scheme("127.0.0.1", srv.server_address[1])
    finally:
        srv.shutdown()
    assert scheme == "http"
    view = dataclasses.replace(read_view(str(ROOT)), agent_scheme=scheme)
    c = check_agent_identity(view)
    assert c.status is Status.WARN and "--identity swarm-pki" in c.fix and c.why
    assert check_agent_identity(dataclasses.replace(view, agent_scheme="https")).status \
        is Status.OK


@pytest.mark.parametrize("data_root", ["/var/lib/\u0000docker", "/var/lib/" + "d" * 300])
def test_doctor_names_a_docker_root_the_os_refuses_without_a_crash(data_root: str) -> None:
    # docker info's DockerRootDir is daemon.json's data-root: os.stat of the certificate
    # under it raised ValueError (a NUL) or ENAMETOOLONG (a part over 255 bytes)
    view = dataclasses.replace(read_view(str(ROOT)), agent_scheme="http",
                               docker_info={"DockerRootDir": data_root})
    c = check_agent_identity(view)
    assert c.status is Status.WARN and "\u0000" not in c.fix, c
    assert data_root[:20].replace("\u0000", "\\x00") in c.fix, c


# --- the whole identity, over real TLS on loopback (a CA made here with openssl) --------


def _key(crt: Path) -> Path:
    return crt.with_suffix(".key")


def _serve(pki: dict[str, Path], cert: str, token: str | None = None) -> Any:
    srv = build_server(FakeSource(), "127.0.0.1:0", refresh_s=60, sampler=_with_process,
                       tls=ReloadingServerContext(pki[cert], _key(pki[cert]), pki["ca"]),
                       token=token)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    return srv


def _with_process() -> list[GpuSample]:
    g = RTX4090.facts().gpus[0]
    return [GpuSample(uuid=g.uuid, index=0, util_pct=50.0, fb_used_mib=100, fb_free_mib=1,
                      mem_copy_util_pct=None, temp_c=None, power_w=None,
                      processes=(GpuProcess(pid=4242, used_mib=100, container="c0ffee"),))]


def _cfg(port: int) -> AgentsConfig:
    return AgentsConfig(port=port, timeout_s=3)


def test_the_daemon_checks_chain_cn_o_and_ou(pki: dict[str, Path]) -> None:
    """Only the node's own certificate from this swarm's CA, of this cluster and with a
    Swarm role, is accepted (a reviewer's OU=not-a-swarm-role certificate from the
    real CA was accepted while only the CN was checked)."""
    cases = {"node1": None, "badou": "OU 'not-a-swarm-role'", "othercluster": "cluster",
             "roguenode": "TLS", "mgr": "certificate of node"}
    for cert, refusal in cases.items():
        srv = _serve(pki, cert)
        try:
            port = srv.server_address[1]
            res = fetch_facts(loopback_node(), _cfg(port), daemon_context(pki))
        finally:
            srv.shutdown()
        if refusal is None:
            assert res.facts is not None and res.error is None, (cert, res.error)
        else:
            assert res.facts is None and res.error and refusal in res.error, (cert, res.error)
            assert "refused" in res.error or "TLS" in res.error


def test_scrapes_check_the_same_identity_and_say_whether_authenticated(
        pki: dict[str, Path]) -> None:
    srv = _serve(pki, "badou")
    good = _serve(pki, "node1")
    try:
        tmpl = "https://{addr}:%d/metrics"
        bad = scrape_node(loopback_node(), tmpl % srv.server_address[1], 3, daemon_context(pki))
        assert bad.result is None and bad.error and "not a Swarm role" in bad.error
        ok = scrape_node(loopback_node(), tmpl % good.server_address[1], 3, daemon_context(pki))
        assert ok.result is not None and ok.authenticated, ok.error
    finally:
        srv.shutdown()
        good.shutdown()


def _get(port: int, path: str, ctx: ssl.SSLContext, token: str | None = None
         ) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    got = boundedhttp.get(f"https://127.0.0.1:{port}{path}", timeout_s=3,
                          max_bytes=1 << 20, tls=ctx, headers=headers)
    return got.status, got.body


def test_only_a_manager_of_this_swarm_reads_facts_and_processes(pki: dict[str, Path]) -> None:
    """Mutual TLS: /facts and per-process metrics need a swarm-manager certificate of
    the agent's own cluster; the token opens /metrics without per-process detail."""
    srv = _serve(pki, "node1", token="prom-token-123")
    port = srv.server_address[1]
    try:
        code, body = _get(port, "/facts", daemon_context(pki))
        assert code == 200 and b'"gpus"' in body
        code, body = _get(port, "/metrics", daemon_context(pki))
        assert code == 200 and b"4242" in body, body[:300]
        for who in (None, "node1", "othermgr"):  # no cert, a worker's, another swarm's
            code, _ = _get(port, "/facts", daemon_context(pki, who, "any"))
            assert code == 403, who
            code, _ = _get(port, "/metrics", daemon_context(pki, who, "any"))
            assert code == 401, who
        code, _ = _get(port, "/facts", daemon_context(pki, None), token="prom-token-123")
        assert code == 403
        code, body = _get(port, "/metrics", daemon_context(pki, None), token="prom-token-123")
        assert code == 200 and b"DCGM_FI_DEV_FB_USED" in body and b"4242" not in body
        code, _ = _get(port, "/healthz", daemon_context(pki, None))
        assert code == 200
        # A manager certificate from a rogue CA fails the handshake itself.
        with pytest.raises(boundedhttp.FetchError):
            _get(port, "/facts", daemon_context(pki, "roguemgr"))
    finally:
        srv.shutdown()


def test_plain_http_to_the_https_agent_is_told_to_use_https(pki: dict[str, Path]) -> None:
    """A plain-HTTP request (Prometheus with scheme: http, curl http://) failed the TLS
    handshake and met a closed connection: 'EOF', nothing saying why. Now a plain 400
    saying the agent speaks HTTPS, at once, and nothing of the node's."""
    srv = _serve(pki, "node1", token="prom-token-123")
    port = srv.server_address[1]
    try:
        # Answered, not closed at the handshake's deadline (5 s here: a hang guard).
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /facts HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Authorization: Bearer prom-token-123\r\n\r\n")
            resp = b""
            with contextlib.suppress(ConnectionResetError):
                while chunk := s.recv(65536):
                    resp += chunk
        assert resp.startswith(b"HTTP/1.1 400"), resp[:80]
        assert b"HTTPS" in resp and b"https://" in resp and b'"gpus"' not in resp
        code, body = _get(port, "/facts", daemon_context(pki))  # HTTPS as before
        assert code == 200 and b'"gpus"' in body
    finally:
        srv.shutdown()


class _SickSource:
    """Facts naming an unhealthy GPU and an error, read from a path on the node."""

    spec = "file:/etc/swarmgpu/private-facts.json"

    def read(self) -> Any:
        f = RTX4090.facts()
        g = dataclasses.replace(f.gpus[0], healthy=False, error="XID 79 on the bus")
        return dataclasses.replace(f, gpus=(g, *f.gpus[1:])).with_errors("nvml: odd reading")


def test_healthz_tells_a_stranger_no_uuids_or_error_texts(pki: dict[str, Path]) -> None:
    """/healthz is open; like the daemon's, it names GPU UUIDs, error texts and the
    facts path only to a caller who may read /facts (a manager of this swarm), and
    counts the errors for everyone else."""
    srv = build_server(_SickSource(), "127.0.0.1:0", refresh_s=60, sampler=_with_process,
                       tls=ReloadingServerContext(pki["node1"], _key(pki["node1"]), pki["ca"]),
                       token="prom-token-123")
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    port = srv.server_address[1]
    uuid = RTX4090.facts().gpus[0].uuid.encode()
    try:
        code, body = _get(port, "/healthz", daemon_context(pki))
        assert code == 200 and uuid in body and b"XID 79" in body and b"private-facts" in body
        for who in (None, "node1", "othermgr"):  # no cert, a worker's, another swarm's
            code, body = _get(port, "/healthz", daemon_context(pki, who, "any"))
            h = json.loads(body)
            assert code == 200 and h["status"] == "degraded" and h["error_count"] == 2, who
            assert uuid not in body and b"XID" not in body and b"nvml" not in body, who
            assert b"private-facts" not in body, who
        code, body = _get(port, "/healthz", daemon_context(pki, None), token="prom-token-123")
        assert code == 200 and uuid not in body  # the token reads /metrics, not /facts
    finally:
        srv.shutdown()


def test_identity_is_one_key() -> None:
    """swarm-pki is the default and derives https:// templates; none derives http://;
    an explicit http:// template with swarm-pki is an error naming the key and fix."""
    cfg = load_config(None, env={})
    assert cfg.agents.identity == "swarm-pki"
    assert cfg.agents.url_template == "https://{addr}:{port}"
    assert cfg.rebalance.metrics_url_template == "https://{addr}:9401/metrics"
    assert not cfg.rebalance.trust_unauthenticated_metrics
    plain = load_config(None, env={"SWARMGPU_AGENTS_IDENTITY": "none"})
    assert plain.agents.url_template == "http://{addr}:{port}"
    assert plain.rebalance.metrics_url_template == "http://{addr}:9401/metrics"
    with pytest.raises(ConfigError, match=r"agents.url_template.*identity: none"):
        load_config(None, env={"SWARMGPU_AGENTS_URL_TEMPLATE": "http://{addr}:{port}"})
    assert "url_template: ''" in describe_defaults()
    assert "identity: swarm-pki" in describe_defaults()


def test_unauthenticated_metrics_never_move() -> None:
    """A plain-HTTP page (dcgm-exporter, identity none) informs the map; the
    rebalancer's signals see it as unusable unless the config trusts it."""
    from swarmgpu.core.metrics_in import ScrapeResult

    res = ScrapeResult()
    plain = NodeScrape("n1", "h1", "http://x:9400/metrics", 0.0, res, None, False)
    tls = NodeScrape("n2", "h2", "https://y:9401/metrics", 0.0, res, None, True)
    got = for_moves({"n1": plain, "n2": tls}, trust_unauthenticated=False)
    assert got["n1"].result is None and got["n1"].error and "unauthenticated" in \
        got["n1"].error
    assert got["n2"] is tls
    assert for_moves({"n1": plain}, trust_unauthenticated=True)["n1"] is plain
    base = load_config(None, env={})
    assert metrics_may_act(base)
    dcgm = dataclasses.replace(base, rebalance=dataclasses.replace(
        base.rebalance, metrics_url_template="http://{addr}:9400/metrics"))
    assert not metrics_may_act(dcgm)
    assert metrics_may_act(dataclasses.replace(dcgm, rebalance=dataclasses.replace(
        dcgm.rebalance, trust_unauthenticated_metrics=True)))
    assert not metrics_may_act(load_config(None, env={"SWARMGPU_AGENTS_IDENTITY": "none"}))


def test_agent_finds_its_certificate_or_says_how(tmp_path: Path, pki: dict[str, Path]
                                                 ) -> None:
    from swarmgpu.cli.node import agent_tls

    assert agent_tls("auto", str(tmp_path), None, None, None) is None  # not a member
    with pytest.raises(IdentityError, match="--identity none"):
        agent_tls("swarm-pki", str(tmp_path), None, None, None)
    d = tmp_path / "swarm" / "certificates"
    d.mkdir(parents=True)
    for src, name in ((pki["node1"], "swarm-node.crt"), (_key(pki["node1"]), "swarm-node.key"),
                      (pki["ca"], "swarm-root-ca.crt")):
        (d / name).write_bytes(src.read_bytes())
    tls = agent_tls("auto", str(tmp_path), None, None, None)
    assert tls is not None and tls.mutual and tls.cluster_id == CLUSTER
    assert node_cert_paths(str(tmp_path), {"CREDENTIALS_DIRECTORY": str(d)})[0] == \
        d / "swarm-node.crt"


def test_identity_off_warns_every_cycle_and_is_a_metric() -> None:
    from loguru import logger

    from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
    from swarmgpu.manager.nodes.agentbook import AgentBook
    from swarmgpu.manager.nodes.sync import LabelSync

    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        for identity, want in (("none", 1.0), ("swarm-pki", 0.0)):
            cfg = load_config(None, env={"SWARMGPU_AGENTS_IDENTITY": identity})
            metrics = DaemonMetrics()
            sync = LabelSync(None, cfg, metrics, AgentBook())  # type: ignore[arg-type]
            lines.clear()
            for _ in range(2):
                sync.cycle(Snapshot([], [], [], {}))
            assert metrics.identity_off._value.get() == want
            warned = [ln for ln in lines if "agents.identity is none" in ln]
            assert len(warned) == (2 if identity == "none" else 0), lines
    finally:
        logger.remove(sink)
