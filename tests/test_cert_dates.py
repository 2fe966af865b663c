"""Certificates count only between their validity dates (issue 32, item 7).

A swarm-like CA (tests/test_identity.py) signs, with ``openssl ca`` and explicit dates, a
manager certificate and a node certificate that expired in 2020 and ones that are valid
only from 2030. Both ends refuse them: the agent a caller's, the daemon an agent's, the
daemon's HTTP a client's. OpenSSL checks the dates in the handshake; the names are
checked again where they are used (``PeerName.dates_refusal``), which the last test
shows with OpenSSL's own check switched off.
"""

from __future__ import annotations

import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.identity import CLUSTER, FakeSource, loopback_node

from swarmgpu.agent.server import build_server
from swarmgpu.core.config import AgentsConfig
from swarmgpu.manager.nodes import boundedhttp
from swarmgpu.manager.nodes.agent_client import fetch_facts
from swarmgpu.swarm.identity import (
    PeerName,
    ReloadingServerContext,
    client_context,
    is_manager_of,
    node_refusal,
    peer_name,
)

NO_CHECK_TIME = 0x200000  # OpenSSL's X509_V_FLAG_NO_CHECK_TIME
PAST = ("20200101000000Z", "20200201000000Z")
FUTURE = ("20300101000000Z", "20300201000000Z")


def _openssl(*args: str, cwd: Path | None = None) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=cwd)


@pytest.fixture(scope="module")
def dated(pki: dict[str, Path]) -> dict[str, Path]:
    """Certificates of the same CA with dates in the past and in the future."""
    d = pki["ca"].parent / "dated"
    d.mkdir(exist_ok=True)
    (d / "index.txt").write_text("")
    (d / "serial").write_text("1000\n")
    (d / "ca.cnf").write_text(
        "[ca]\ndefault_ca = c\n[c]\ndatabase = index.txt\nnew_certs_dir = .\n"
        "serial = serial\ndefault_md = sha256\npolicy = p\nunique_subject = no\n"
        "[p]\norganizationName = supplied\norganizationalUnitName = supplied\n"
        "commonName = supplied\n")
    out: dict[str, Path] = {}
    for name, subj, (start, end) in (
            ("mgr-expired", f"/O={CLUSTER}/OU=swarm-manager/CN=mgr1", PAST),
            ("mgr-future", f"/O={CLUSTER}/OU=swarm-manager/CN=mgr1", FUTURE),
            ("node1-expired", f"/O={CLUSTER}/OU=swarm-worker/CN=node1", PAST),
            ("node1-future", f"/O={CLUSTER}/OU=swarm-worker/CN=node1", FUTURE)):
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"),
                 "-subj", subj)
        _openssl("ca", "-batch", "-config", "ca.cnf", "-cert", str(pki["ca"]), "-keyfile",
                 str(pki["ca"].with_suffix(".key")), "-in", f"{name}.csr", "-out",
                 f"{name}.crt", "-startdate", start, "-enddate", end, "-notext",
                 "-preserveDN", cwd=d)
        out[name] = d / f"{name}.crt"
    return out


def _key(crt: Path) -> Path:
    return crt.with_suffix(".key")


def _agent(cert: Path, ca: Path, no_time_check: bool = False) -> Any:
    tls = ReloadingServerContext(cert, _key(cert), ca)
    if no_time_check:  # the same object until the files change
        ctx = tls.get()
        ctx.verify_flags = ssl.VerifyFlags(int(ctx.verify_flags) | NO_CHECK_TIME)
    srv = build_server(FakeSource(), "127.0.0.1:0", refresh_s=60, tls=tls)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    return srv


def _facts(port: int, ctx: ssl.SSLContext) -> tuple[int | None, str]:
    """(status, error) of GET /facts over mutual TLS."""
    try:
        got = boundedhttp.get(f"https://127.0.0.1:{port}/facts", timeout_s=3,
                              max_bytes=1 << 20, tls=ctx)
    except boundedhttp.FetchError as exc:
        return None, str(exc)
    return got.status, ""


def _ctx(pki: dict[str, Path], cert: Path) -> ssl.SSLContext:
    return client_context(pki["ca"].read_text(), CLUSTER, cert, _key(cert))


def test_the_agent_refuses_an_expired_or_not_yet_valid_manager_certificate(
        pki: dict[str, Path], dated: dict[str, Path]) -> None:
    srv = _agent(pki["node1"], pki["ca"])
    port = srv.server_address[1]
    try:
        assert _facts(port, _ctx(pki, pki["mgr"]))[0] == 200  # the valid one
        for name in ("mgr-expired", "mgr-future"):
            status, err = _facts(port, _ctx(pki, dated[name]))
            assert status is None and err, (name, status)  # the handshake itself fails
        assert _facts(port, _ctx(pki, pki["mgr"]))[0] == 200  # and the agent lives on
    finally:
        srv.shutdown()


@pytest.mark.parametrize("name", ["node1-expired", "node1-future"])
def test_the_daemon_refuses_an_agent_whose_certificate_is_out_of_date(
        pki: dict[str, Path], dated: dict[str, Path], name: str) -> None:
    srv = _agent(dated[name], pki["ca"])
    port = srv.server_address[1]
    node = loopback_node()
    try:
        res = fetch_facts(node, AgentsConfig(port=port, timeout_s=3), _ctx(pki, pki["mgr"]))
    finally:
        srv.shutdown()
    assert res.facts is None and res.error and "certificate" in res.error.lower(), res.error


def test_out_of_date_certificates_are_refused_even_without_openssls_time_check(
        pki: dict[str, Path], dated: dict[str, Path]) -> None:
    """An agent whose context does not check times (a flag, a verify callback): the
    handshake passes, and the manager check still refuses the expired certificate."""
    srv = _agent(pki["node1"], pki["ca"], no_time_check=True)
    port = srv.server_address[1]
    try:
        assert _facts(port, _ctx(pki, dated["mgr-expired"]))[0] == 403
        assert _facts(port, _ctx(pki, dated["mgr-future"]))[0] == 403
        assert _facts(port, _ctx(pki, pki["mgr"]))[0] == 200
    finally:
        srv.shutdown()


def test_names_carry_their_dates_and_the_checks_say_which() -> None:
    now = time.time()
    cert = {"subject": ((("organizationName", CLUSTER),), (("organizationalUnitName",
                                                            "swarm-manager"),),
                        (("commonName", "mgr1"),)),
            "notBefore": "Jan  1 00:00:00 2020 GMT", "notAfter": "Feb  1 00:00:00 2020 GMT"}
    name = peer_name(cert)
    assert name is not None and name.cn == "mgr1"
    assert name.not_after == ssl.cert_time_to_seconds("Feb  1 00:00:00 2020 GMT")
    assert name.dates_refusal(now) == "expired at 2020-02-01T00:00:00Z"
    assert not is_manager_of(name, CLUSTER)
    assert is_manager_of(PeerName("mgr1", CLUSTER, "swarm-manager", now - 60, now + 60),
                         CLUSTER)
    future = PeerName("node1", CLUSTER, "swarm-worker", now + 3600, now + 7200)
    why = node_refusal(future, "node1", "gpu-node-2", CLUSTER)
    assert why and "not valid before" in why and "gpu-node-2" in why
    # Dates missing or unreadable: never valid.
    for bad in ({k: v for k, v in cert.items() if k != "notAfter"},
                {**cert, "notBefore": "yesterday", "notAfter": "Feb  1 00:00:00 2999 GMT"}):
        n = peer_name(bad)
        assert n is not None and n.dates_refusal(now) is not None, bad


def test_the_daemons_http_refuses_an_out_of_date_manager_certificate(
        tmp_path: Path, pki: dict[str, Path], dated: dict[str, Path]) -> None:
    from support.webauth import get, https_web_daemon

    with https_web_daemon(tmp_path, pki) as port:
        assert get(port, "/api/v1/cluster", ctx=_ctx(pki, pki["mgr"]))[0] == 200
        for name in ("mgr-expired", "mgr-future"):
            with pytest.raises((ssl.SSLError, ConnectionError)):
                get(port, "/api/v1/cluster", ctx=_ctx(pki, dated[name]))
