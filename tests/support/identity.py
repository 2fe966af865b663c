"""A swarm-like PKI made with openssl (the ``pki`` fixture), a fake facts source, and the
daemon's side of a fetch from a loopback agent (its node, its TLS context).

First written in tests/test_identity.py."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest

from support.gpu_nodes import RTX4090
from swarmgpu.swarm.client import SwarmNode
from swarmgpu.swarm.identity import client_context


class FakeSource:
    spec = "fake:identity"

    def read(self) -> Any:
        return RTX4090.facts()


CLUSTER = "clusterA0123456789abcdefg"


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A swarm-like PKI: a root CA and node certificates with Swarm's subject layout
    (CN node ID, O cluster ID, OU role), plus the forgeries a reviewer would try."""
    d = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"),
             "-subj", "/CN=swarm-ca", "-days", "2")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", str(d / "rogue.key"), "-out", str(d / "rogue.crt"),
             "-subj", "/CN=swarm-ca", "-days", "2")
    out = {"ca": d / "ca.crt"}
    for name, subj, ca in (
            ("node1", f"/O={CLUSTER}/OU=swarm-worker/CN=node1", "ca"),
            ("mgr", f"/O={CLUSTER}/OU=swarm-manager/CN=mgr1", "ca"),
            ("badou", f"/O={CLUSTER}/OU=not-a-swarm-role/CN=node1", "ca"),
            ("othercluster", "/O=clusterB/OU=swarm-worker/CN=node1", "ca"),
            ("othermgr", "/O=clusterB/OU=swarm-manager/CN=mgr9", "ca"),
            ("roguenode", f"/O={CLUSTER}/OU=swarm-worker/CN=node1", "rogue"),
            ("roguemgr", f"/O={CLUSTER}/OU=swarm-manager/CN=mgr1", "rogue")):
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"),
                 "-subj", subj)
        openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / f"{ca}.crt"),
                 "-CAkey", str(d / f"{ca}.key"), "-CAcreateserial", "-days", "2",
                 "-out", str(d / f"{name}.crt"))
        out[name] = d / f"{name}.crt"
    return out


def loopback_node(node_id: str = "node1") -> SwarmNode:
    """A worker node whose agent listens on 127.0.0.1 (the port comes from the config)."""
    return SwarmNode(node_id, RTX4090.hostname, "127.0.0.1", "worker", "ready", "active",
                     {}, {}, 1, {}, {})


def daemon_context(pki: dict[str, Path], cert: str | None = "mgr",
                   cluster: str = CLUSTER) -> ssl.SSLContext:
    """The daemon's TLS context for agents: ``pki``'s CA, the cluster ID it expects, and
    the client certificate ``cert`` (None: no certificate)."""
    c = pki[cert] if cert else None
    return client_context(pki["ca"].read_text(), cluster, c,
                          c.with_suffix(".key") if c else None)
