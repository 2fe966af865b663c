"""Identity pieces that need no swarm: config rules, key files, tokens, audit and doctor
warnings on plain HTTP. The certificate checks themselves run on the real swarm
(tests/test_identity_swarm.py)."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest
from gpu_nodes import RTX4090
from hypothesis import given, settings
from hypothesis import strategies as st

from swarmgpu.agent.doctor import Status, check_agent_identity, read_view
from swarmgpu.agent.server import build_server
from swarmgpu.core.config import ConfigError, load_config
from swarmgpu.manager.audit import identity_check
from swarmgpu.manager.sync import Snapshot
from swarmgpu.swarm.identity import (
    IdentityError,
    _plain_key_pem,
    probe_agent_scheme,
    read_token,
    token_matches,
)

ROOT = Path(__file__).parent / "doctor_roots" / "healthy"


class _Source:
    spec = "fake:identity"

    def read(self) -> Any:
        return RTX4090.facts()


def test_swarm_pki_needs_https(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="https://"):
        load_config(None, env={"SWARMGPU_AGENTS_IDENTITY": "swarm-pki"})
    with pytest.raises(ConfigError, match="metrics_url_template"):
        load_config(None, env={"SWARMGPU_AGENTS_IDENTITY": "swarm-pki",
                               "SWARMGPU_AGENTS_URL_TEMPLATE": "https://{addr}:{port}"})
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
    assert _plain_key_pem(raft, "k") == ("-----BEGIN EC PRIVATE KEY-----\n" + body
                                         + "-----END EC PRIVATE KEY-----\n")
    locked = ("-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: x\n\n"
              + body + "-----END EC PRIVATE KEY-----\n")
    with pytest.raises(IdentityError, match="autolock"):
        _plain_key_pem(locked, "k")


def test_tokens(tmp_path: Path) -> None:
    f = tmp_path / "t"
    f.write_text("abc123\n")
    assert read_token(f) == "abc123"
    assert token_matches("Bearer abc123", "abc123")
    for bad in (None, "", "Bearer abc12", "Basic abc123", "bearer abc123"):
        assert not token_matches(bad, "abc123")
    for content in ("", "two words", "x" * 5000):
        f.write_text(content)
        with pytest.raises(IdentityError):
            read_token(f)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.text(min_size=1, max_size=40))
def test_prop_token_only_exact_bearer_matches(header: str, token: str) -> None:
    if token_matches(header, token):
        assert header.startswith("Bearer ") and header[7:].strip() == token


def test_audit_warns_about_plain_http() -> None:
    snap = Snapshot([], [], [], {})
    (f,) = identity_check("none", "")(snap)
    assert f.advisory and "plain HTTP" in f.message and "swarm-pki" in f.message
    (f,) = identity_check("none", "/run/secrets/t")(snap)
    assert "token" in f.message
    assert identity_check("swarm-pki", "")(snap) == []


def test_doctor_warns_about_a_plain_http_agent() -> None:
    srv = build_server(_Source(), "127.0.0.1:0", refresh_s=60)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        scheme = probe_agent_scheme("127.0.0.1", srv.server_address[1])
    finally:
        srv.shutdown()
    assert scheme == "http"
    view = dataclasses.replace(read_view(str(ROOT)), agent_scheme=scheme)
    c = check_agent_identity(view)
    assert c.status is Status.WARN and "--tls-cert" in c.fix and c.why
    assert check_agent_identity(dataclasses.replace(view, agent_scheme="https")).status \
        is Status.OK
