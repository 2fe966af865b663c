"""Which node is answering: agent identity from Swarm's own PKI, or a shared token.

Every Swarm node holds a certificate signed by the swarm root CA whose CN is its node
ID (``<data-root>/swarm/certificates/swarm-node.crt`` and ``swarm-node.key``). With
``agents.identity: swarm-pki`` the agent serves HTTPS with its node's certificate, and
the daemon verifies the chain against the swarm root CA (``GET /swarm``:
``TLSInfo.TrustRoot``, or ``agents.ca_file``) and requires CN == the ID of the node it
is syncing. Host names are not checked: a node certificate names no address; the CN is
what ties the answer to a node. Swarm rotates node certificates (every 90 days by
default, and at ``docker swarm ca --rotate``): the agent re-reads its files when they
change, and the daemon re-reads the trust root every few minutes.

``agents.token_file`` is the fallback for set-ups that cannot read the node's files: a
shared bearer token (e.g. a Docker secret) that the agent requires on /facts and
/metrics. It proves "one of our agents", not which node; prefer swarm-pki.
"""

from __future__ import annotations

import hmac
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from swarmgpu.core.config import AgentsConfig, Config
    from swarmgpu.swarm.client import SwarmClient

IDENTITIES = ("none", "swarm-pki")
SWARM_CERT_DIR = "swarm/certificates"
TRUST_ROOT_TTL_S = 300.0
MAX_TOKEN_BYTES = 4096


class IdentityError(ValueError):
    """A certificate, key or token that cannot be used, with the fix."""


def default_cert_paths(data_root: str = "/var/lib/docker") -> tuple[Path, Path, Path]:
    """(node certificate, node key, swarm root CA) under an engine's data root."""
    d = Path(data_root) / SWARM_CERT_DIR
    return d / "swarm-node.crt", d / "swarm-node.key", d / "swarm-root-ca.crt"


def _plain_key_pem(text: str, where: str) -> str:
    """The key PEM without headers. Swarm managers keep ``raft-dek`` headers in the key
    file, which OpenSSL refuses; an encrypted key (autolock) cannot be used at all."""
    out: list[str] = []
    in_block = False
    for line in text.splitlines():
        if line.startswith("-----BEGIN "):
            in_block = True
            out.append(line)
            continue
        if line.startswith("-----END "):
            in_block = False
            out.append(line)
            continue
        if not in_block or not line.strip():
            continue
        if ":" in line:
            if line.startswith("Proc-Type:") and "ENCRYPTED" in line:
                raise IdentityError(
                    f"{where}: the key is encrypted (swarm autolock); the agent cannot use "
                    "it: use agents.token_file (token mode) on autolocked swarms")
            continue  # a PEM header (raft-dek...): not part of the key
        out.append(line)
    if not out:
        raise IdentityError(f"{where}: no PEM key in the file")
    return "\n".join(out) + "\n"


def load_server_context(cert: str | os.PathLike[str], key: str | os.PathLike[str]
                        ) -> ssl.SSLContext:
    """A TLS server context with the node's certificate chain and key."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        key_pem = _plain_key_pem(Path(key).read_text(), str(key))
    except OSError as exc:
        raise IdentityError(f"--tls-key {key}: cannot read it ({exc.strerror}); under "
                            "systemd pass it with LoadCredential= (docs/security.md)") from None
    # load_cert_chain takes paths only: the header-free key goes to a private temp file.
    with tempfile.TemporaryDirectory(prefix="swarmgpu-tls-") as d:
        kp = Path(d) / "key.pem"
        kp.touch(mode=0o600)
        kp.write_text(key_pem)
        try:
            ctx.load_cert_chain(str(cert), str(kp))
        except FileNotFoundError:
            raise IdentityError(f"--tls-cert {cert}: no such file") from None
        except (ssl.SSLError, OSError) as exc:
            raise IdentityError(f"--tls-cert {cert} / --tls-key {key}: cannot be used "
                                f"({exc.__class__.__name__}: {exc})") from None
    return ctx


class ReloadingServerContext:
    """The server context, rebuilt when the certificate or key file changes (rotation).
    Checked at most once a second, from the connection threads."""

    def __init__(self, cert: str | os.PathLike[str], key: str | os.PathLike[str]) -> None:
        self.cert, self.key = Path(cert), Path(key)
        self._lock = threading.Lock()
        self._stamp = self._files_stamp()
        self._ctx = load_server_context(self.cert, self.key)
        self._checked = time.monotonic()
        self.reloads = 0

    def _files_stamp(self) -> tuple[float, float, int, int]:
        c, k = self.cert.stat(), self.key.stat()
        return c.st_mtime, k.st_mtime, c.st_ino, k.st_ino

    def get(self) -> ssl.SSLContext:
        with self._lock:
            if time.monotonic() - self._checked >= 1.0:
                self._checked = time.monotonic()
                try:
                    stamp = self._files_stamp()
                    if stamp != self._stamp:
                        self._ctx = load_server_context(self.cert, self.key)
                        self._stamp = stamp
                        self.reloads += 1
                except (OSError, IdentityError):
                    pass  # mid-rotation: keep serving the last good pair, retry next time
            return self._ctx


def client_context(trust_root_pem: str) -> ssl.SSLContext:
    """The daemon's context: the chain must lead to the swarm root CA; the host name is
    not checked (the caller compares the certificate's CN with the node ID)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    try:
        ctx.load_verify_locations(cadata=trust_root_pem)
    except (ssl.SSLError, ValueError) as exc:
        raise IdentityError(f"the swarm root CA is not a usable PEM certificate ({exc})"
                            ) from None
    return ctx


def read_token(path: str | os.PathLike[str]) -> str:
    try:
        raw = Path(path).read_bytes()[:MAX_TOKEN_BYTES + 1]
    except OSError as exc:
        raise IdentityError(f"token file {path}: cannot read it ({exc.strerror})") from None
    token = raw.decode("utf-8", "replace").strip()
    if len(raw) > MAX_TOKEN_BYTES or not token or not token.isascii() or any(
            c.isspace() for c in token):
        raise IdentityError(f"token file {path}: expected one line of ASCII, no spaces, "
                            f"at most {MAX_TOKEN_BYTES} bytes (e.g. openssl rand -hex 32)")
    return token


def token_matches(header: str | None, token: str) -> bool:
    """A constant-time check of ``Authorization: Bearer <token>``."""
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[7:].strip().encode(), token.encode())


@dataclass
class AgentAuth:
    """What the daemon presents to and expects from agents this cycle."""

    tls: ssl.SSLContext | None = None
    token: str | None = None


class AuthSource:
    """The daemon's AgentAuth, rebuilt from the trust root and token file now and then
    (root CA rotation, secret updates) instead of once at start."""

    def __init__(self, identity: str, token_file: str, ca_file: str,
                 trust_root: Callable[[], str], ttl_s: float = TRUST_ROOT_TTL_S) -> None:
        self.identity, self.token_file, self.ca_file = identity, token_file, ca_file
        self._trust_root = trust_root
        self._ttl = ttl_s
        self._at = -1e18
        self._auth = AgentAuth()
        self._lock = threading.Lock()

    def get(self) -> AgentAuth:
        with self._lock:
            if time.monotonic() - self._at < self._ttl:
                return self._auth
            auth = AgentAuth()
            if self.identity == "swarm-pki":
                pem = Path(self.ca_file).read_text() if self.ca_file else self._trust_root()
                if not pem.strip():
                    raise IdentityError("the engine reported no swarm root CA (GET /swarm "
                                        "TLSInfo.TrustRoot); set agents.ca_file")
                auth.tls = client_context(pem)
            if self.token_file:
                auth.token = read_token(self.token_file)
            self._auth, self._at = auth, time.monotonic()
            return auth


_SOURCES: dict[tuple[str, str, str], AuthSource] = {}
_LAST: dict[tuple[str, str, str], AgentAuth] = {}


def agent_auth(swarm: SwarmClient, cfg: AgentsConfig) -> AgentAuth:
    """This process's AgentAuth for ``cfg`` (rebuilt every TRUST_ROOT_TTL_S)."""
    key = (cfg.identity, cfg.token_file, cfg.ca_file)
    if cfg.identity == "none" and not cfg.token_file:
        return AgentAuth()
    src = _SOURCES.get(key)
    if src is None:
        src = _SOURCES[key] = AuthSource(*key, trust_root=swarm.trust_root)
    _LAST[key] = src.get()
    return _LAST[key]


def last_auth(cfg: AgentsConfig) -> AgentAuth:
    """The AgentAuth the last snapshot used, for scrapes that follow it (no engine call)."""
    return _LAST.get((cfg.identity, cfg.token_file, cfg.ca_file), AgentAuth())


def scrape_auth(cfg: Config) -> AgentAuth:
    """What a metrics scrape presents: the TLS check for an https:// template, and the
    token only when the template is the agents' own address (never to dcgm-exporter)."""
    auth = last_auth(cfg.agents)
    tmpl = cfg.rebalance.metrics_url_template
    agent_base = cfg.agents.url_template.replace("{port}", str(cfg.agents.port))
    return AgentAuth(auth.tls if tmpl.startswith("https://") else None,
                     auth.token if tmpl.startswith(agent_base.rstrip("/") + "/") else None)


def probe_agent_scheme(addr: str = "127.0.0.1", port: int = 9401, timeout_s: float = 2.0
                       ) -> str | None:
    """What the agent at addr:port speaks: "http", "https" or None (nothing answers);
    for ``swarmgpu doctor`` on the node itself."""
    import socket

    try:
        with socket.create_connection((addr, port), timeout=timeout_s) as s:
            s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
            if s.recv(5) == b"HTTP/":
                return "http"
    except OSError:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # only asking whether it speaks TLS at all
    try:
        with socket.create_connection((addr, port), timeout=timeout_s) as raw, \
                ctx.wrap_socket(raw):
            return "https"
    except OSError:
        return None
