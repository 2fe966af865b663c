"""Which node is answering, and who is asking: identity from Swarm's own PKI.

Every Swarm node holds a certificate signed by the swarm root CA
(``<data-root>/swarm/certificates/swarm-node.crt`` and ``swarm-node.key``) whose subject
is CN = its node ID, O = the swarm's cluster ID, OU = ``swarm-worker`` or
``swarm-manager``. With ``agents.identity: swarm-pki`` (the default):

* the agent serves HTTPS with its node's certificate and asks the caller for one: /facts
  and per-process metrics go only to a ``swarm-manager`` certificate of its own cluster
  (chain to the swarm root CA, O = the O of its own certificate);
* the daemon presents its manager node's certificate, verifies the agent's chain against
  the swarm root CA (``GET /swarm`` ``TLSInfo.TrustRoot``, or ``agents.ca_file``) and
  requires CN = the ID of the node at that address, O = this swarm's cluster ID
  (``docker info`` ``Swarm.Cluster.ID``), OU = a Swarm role.

Host names are not checked: a node certificate names no address; the CN ties the answer
to a node. Swarm rotates node certificates (every 90 days by default, and at ``docker
swarm ca --rotate``): the agent re-reads its files when they change, and the daemon
rebuilds its context (trust root, its own certificate) every few minutes.

``agents.token_file`` is the fallback for set-ups that cannot read the node's files
(``agents.identity: none``): a shared bearer token the agent requires on /facts and
/metrics. It proves "one of our agents", not which node. With swarm-pki a token only
opens /metrics without per-process detail: the way in for Prometheus.
"""

from __future__ import annotations

import hmac
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from swarmgpu.core.boundedfile import FileRefused, NotRegularFile, read_bounded_text, read_head

if TYPE_CHECKING:
    from swarmgpu.core.config import AgentsConfig, Config
    from swarmgpu.swarm.client import SwarmClient

IDENTITIES = ("none", "swarm-pki")
SWARM_CERT_DIR = "swarm/certificates"
SWARM_ROLES = ("swarm-worker", "swarm-manager")
MANAGER_ROLE = "swarm-manager"
CERT_NAMES = ("swarm-node.crt", "swarm-node.key", "swarm-root-ca.crt")
DEFAULT_DATA_ROOT = "/var/lib/docker"
TRUST_ROOT_TTL_S = 300.0
MAX_TOKEN_BYTES = 4096
# A bearer token that opens something from anywhere (the daemon's http.token_file: the
# map and /api; the agents' --token-file and agents.token_file: /metrics, and /facts in
# token mode): fewer characters than this are guessed (openssl rand -hex 32 makes 64).
MIN_TOKEN_CHARS = 16
# How to make the agents' token anew: the agents and the daemon hold the same one.
AGENT_TOKENS_FIX = (
    "the stack's secret: docker secret rm swarmgpu-agent-token, then openssl rand -hex 32 "
    "| docker secret create swarmgpu-agent-token -; the agents' --token-file and the "
    "daemon's agents.token_file hold the same token")


class IdentityError(ValueError):
    """A certificate, key or token that cannot be used, with the fix."""


class TokenRefused(IdentityError):
    """The token file was read, and what it holds is no token (malformed, too short):
    the file's content is wrong, not its path or permissions."""


def default_cert_paths(data_root: str = DEFAULT_DATA_ROOT) -> tuple[Path, Path, Path]:
    """(node certificate, node key, swarm root CA) under an engine's data root."""
    d = Path(data_root) / SWARM_CERT_DIR
    crt, key, ca = CERT_NAMES
    return d / crt, d / key, d / ca


def node_cert_paths(data_root: str = DEFAULT_DATA_ROOT,
                    env: Mapping[str, str] | None = None) -> tuple[Path, Path, Path]:
    """Where this node's certificate, key and root CA are: systemd's credentials
    directory when it holds them (``LoadCredential=``), else under the data root."""
    cred = (os.environ if env is None else env).get("CREDENTIALS_DIRECTORY", "")
    if cred and (Path(cred) / CERT_NAMES[0]).exists():
        crt, key, ca = CERT_NAMES
        return Path(cred) / crt, Path(cred) / key, Path(cred) / ca
    return default_cert_paths(data_root)


@dataclass(frozen=True)
class PeerName:
    """The subject fields of a Swarm node certificate that say who it is, and its
    validity dates (seconds since the epoch; None: not given, as in hand-made names)."""

    cn: str | None = None  # node ID
    o: str | None = None  # cluster ID
    ou: str | None = None  # swarm-worker | swarm-manager
    not_before: float | None = None
    not_after: float | None = None

    def short(self) -> str:
        return f"CN={(self.cn or '?')[:25]} O={(self.o or '?')[:25]} OU={(self.ou or '?')[:20]}"

    def dates_refusal(self, now: float | None = None) -> str | None:
        """Why the certificate is not valid at ``now`` (None: it is). OpenSSL checks the
        dates in the handshake already; this says so again where the name is used, so
        that no context built without that check (a flag, a verify callback) lets an
        expired or not-yet-valid certificate through."""
        now = time.time() if now is None else now
        if self.not_before is not None and now < self.not_before:
            return f"is not valid before {_stamp(self.not_before)}"
        if self.not_after is not None and now > self.not_after:
            return f"expired at {_stamp(self.not_after)}"
        return None


def _stamp(t: float) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
    except (OverflowError, ValueError, OSError):
        return "(an unreadable date)"


_FIELDS = {"commonName": "cn", "organizationName": "o", "organizationalUnitName": "ou"}


def _cert_time(value: object) -> float:
    """A ``getpeercert()`` date ("Jun  1 00:00:00 2030 GMT") in seconds; 0.0 when it
    cannot be read (``peer_name`` then makes the certificate never valid)."""
    try:
        return float(ssl.cert_time_to_seconds(str(value)))
    except (ValueError, OverflowError):
        return 0.0


def peer_name(cert: Mapping[str, object] | None) -> PeerName | None:
    """CN, O, OU and the validity dates of a certificate as ``SSLSocket.getpeercert()``
    decodes it (None when there is no verified certificate). A field given twice counts
    as absent; a missing or unreadable date makes the certificate invalid."""
    if not cert:
        return None
    subject = cert.get("subject", ())
    if not isinstance(subject, tuple):
        return None
    got: dict[str, list[str]] = {}
    for rdn in subject:
        for pair in rdn if isinstance(rdn, tuple) else ():
            if isinstance(pair, tuple) and len(pair) == 2 and pair[0] in _FIELDS:
                got.setdefault(_FIELDS[pair[0]], []).append(str(pair[1]))
    one = {k: v[0] for k, v in got.items() if len(v) == 1}
    # Unreadable dates: valid from the far future until the epoch, i.e. never.
    not_before = _cert_time(cert["notBefore"]) if "notBefore" in cert else float("inf")
    not_after = _cert_time(cert["notAfter"]) if "notAfter" in cert else 0.0
    if not_before == 0.0:
        not_before = float("inf")
    return PeerName(one.get("cn"), one.get("o"), one.get("ou"), not_before, not_after)


def cert_file_name(path: str | os.PathLike[str]) -> PeerName:
    """The subject of a PEM certificate file (this node's own: its cluster ID). Only of
    a file swarmgpu wrote itself (``_load_chain``'s private copy): OpenSSL opens it."""
    # The ssl module decodes files only through this helper (no third-party parser).
    import _ssl

    decode = cast(Callable[[str], Mapping[str, object]],
                  _ssl._test_decode_cert)  # type: ignore[attr-defined]
    try:
        name = peer_name(decode(str(path)))
    except (OSError, ssl.SSLError) as exc:
        raise IdentityError(f"certificate {path}: cannot be read ({exc})") from None
    if name is None:
        raise IdentityError(f"certificate {path}: no subject")
    return name


def node_refusal(peer: PeerName | None, node_id: str, hostname: str,
                 cluster_id: str | None) -> str | None:
    """Why a verified certificate does not prove it is node ``node_id`` of this swarm
    (None: it does). The chain was checked by the TLS handshake; here CN, O and OU."""
    who = f"{hostname} ({node_id[:12]})"
    if peer is None:
        return f"presented no verified certificate; {who} must present its node certificate"
    if (dates := peer.dates_refusal()) is not None:
        return (f"presented a certificate that {dates} (now {_stamp(time.time())}); {who} "
                "renews it with Swarm (docker swarm ca --rotate), or its clock is wrong")
    if peer.cn != node_id:
        return (f"presented the certificate of node {(peer.cn or '?')[:25]!r}, not of {who} "
                "(another node's agent, or a stray service on that port)")
    if cluster_id and peer.o != cluster_id:
        return (f"presented a certificate of cluster {(peer.o or '?')[:25]!r}, not of this "
                f"swarm ({cluster_id[:12]}); {who}")
    if peer.ou not in SWARM_ROLES:
        return (f"presented a certificate with OU {(peer.ou or '?')[:20]!r}, not a Swarm "
                f"role (swarm-worker, swarm-manager); {who}")
    return None


def is_manager_of(peer: PeerName | None, cluster_id: str | None) -> bool:
    """A verified swarm-manager certificate of ``cluster_id``, valid now (what /facts
    requires)."""
    return bool(peer is not None and cluster_id and peer.o == cluster_id
                and peer.ou == MANAGER_ROLE and peer.cn and peer.dates_refusal() is None)


def plain_key_pem(text: str, where: str) -> str:
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


# A swarm root is ~1 KiB, a whole public CA bundle ~220 KiB: past 1 MiB it is not a CA.
MAX_CA_BYTES = 1 << 20
# A node certificate with its chain is ~2 KiB and a key ~300 bytes: past these it is a
# wrong path (a log, /dev/zero), not read whole.
MAX_CERT_BYTES = 1 << 20
MAX_KEY_BYTES = 64 << 10


def read_pem_file(option: str, path: str | os.PathLike[str], limit: int, fix: str) -> str:
    """The text of the PEM file ``option`` names, through the bounded reader: a FIFO or
    device is refused (not waited on, not read whole), and so is a file over ``limit``;
    IdentityError naming the option, the path and ``fix``."""
    try:
        return read_bounded_text(path, limit)
    except FileRefused as exc:
        raise IdentityError(f"{option} {path}: {exc.why}; {fix}") from None
    except FileNotFoundError:
        raise IdentityError(f"{option} {path}: no such file; {fix}") from None
    except OSError as exc:
        raise IdentityError(f"{option} {path}: cannot read it ({exc.strerror}); under "
                            "systemd pass it with LoadCredential= (docs/security.md)") from None
    except UnicodeDecodeError as exc:
        raise IdentityError(f"{option} {path}: not a PEM file ({exc}); {fix}") from None


def _load_chain(ctx: ssl.SSLContext, cert: str | os.PathLike[str],
                key: str | os.PathLike[str]) -> PeerName | None:
    """Load the node's certificate and key into ``ctx`` (server or client side); the
    subject of the certificate loaded (None: it has none), decoded from the same bytes."""
    cert_pem = read_pem_file("--tls-cert", cert, MAX_CERT_BYTES,
                             "give the node's certificate file (swarm-node.crt)")
    key_pem = plain_key_pem(read_pem_file("--tls-key", key, MAX_KEY_BYTES,
                                          "give the node's key file (swarm-node.key)"),
                            str(key))
    # load_cert_chain takes paths only: both go, as read, to a private temp directory,
    # so OpenSSL never opens the operator's paths (a FIFO there would block it) and
    # loads the very bytes checked here, not a file swapped in meanwhile.
    with tempfile.TemporaryDirectory(prefix="swarmgpu-tls-") as d:
        cp, kp = Path(d) / "cert.pem", Path(d) / "key.pem"
        kp.touch(mode=0o600)
        kp.write_text(key_pem)
        cp.write_text(cert_pem)
        try:
            ctx.load_cert_chain(str(cp), str(kp))
        except (ssl.SSLError, OSError) as exc:
            raise IdentityError(f"--tls-cert {cert} / --tls-key {key}: cannot be used "
                                f"({exc.__class__.__name__}: {exc})") from None
        # Its subject (the cluster whose managers may read /facts) from this copy too:
        # the operator's path read again could be another certificate by now, or a FIFO.
        try:
            return cert_file_name(cp)
        except IdentityError:
            return None


def load_server_context(cert: str | os.PathLike[str], key: str | os.PathLike[str],
                        client_ca: str | os.PathLike[str] | None = None) -> ssl.SSLContext:
    """A TLS server context with the node's certificate chain and key. With
    ``client_ca`` (the swarm root CA) it asks every caller for a certificate and
    verifies one that is offered; callers without one still connect (Prometheus with a
    token, /healthz), and the handler decides what each may read."""
    return _server_context(cert, key, client_ca)[0]


def _server_context(cert: str | os.PathLike[str], key: str | os.PathLike[str],
                    client_ca: str | os.PathLike[str] | None = None
                    ) -> tuple[ssl.SSLContext, PeerName | None]:
    """``load_server_context``, and the subject of the certificate it loaded."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    subject = _load_chain(ctx, cert, key)
    if client_ca is not None:
        ca_pem = read_pem_file("--tls-ca", client_ca, MAX_CA_BYTES,
                               "it is the swarm root CA, swarm-root-ca.crt")
        try:
            ctx.load_verify_locations(cadata=ca_pem)
        except (ValueError, ssl.SSLError) as exc:
            raise IdentityError(f"--tls-ca {client_ca}: cannot be used ({exc}); it is the "
                                "swarm root CA, swarm-root-ca.crt") from None
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx, subject


def server_context_for_managers(cert: str | os.PathLike[str], key: str | os.PathLike[str],
                                trust_root_pem: str) -> ssl.SSLContext:
    """The daemon's HTTPS context: its manager's certificate, and a certificate asked of
    every caller and verified against the swarm root CA when offered (the handler then
    requires a swarm-manager one of this cluster, or the bearer token)."""
    ctx = load_server_context(cert, key)
    try:
        ctx.load_verify_locations(cadata=trust_root_pem)
    except (ssl.SSLError, ValueError) as exc:
        raise IdentityError(f"the swarm root CA is not a usable PEM certificate ({exc})"
                            ) from None
    ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


class ReloadingServerContext:
    """The server context, rebuilt when the certificate, key or CA file changes
    (rotation). Checked at most once a second, from the connection threads.
    ``cluster_id`` is the O of the node's own certificate: the cluster whose managers
    may read /facts."""

    def __init__(self, cert: str | os.PathLike[str], key: str | os.PathLike[str],
                 client_ca: str | os.PathLike[str] | None = None) -> None:
        self.cert, self.key = Path(cert), Path(key)
        self.client_ca = Path(client_ca) if client_ca is not None else None
        self._lock = threading.Lock()
        self._stamp = self._files_stamp()
        self._ctx, subject = _server_context(self.cert, self.key, self.client_ca)
        self.cluster_id = self._cluster_of(subject)
        self._checked = time.monotonic()
        self.reloads = 0

    @property
    def mutual(self) -> bool:
        return self.client_ca is not None

    def _cluster_of(self, subject: PeerName | None) -> str | None:
        """The cluster of the certificate loaded (its O), read from the bytes loaded."""
        if not self.client_ca:
            return None
        if subject is None:
            raise IdentityError(f"certificate {self.cert}: no subject")
        return subject.o

    def _files_stamp(self) -> tuple[float, ...]:
        files = [self.cert, self.key] + ([self.client_ca] if self.client_ca else [])
        stats = [f.stat() for f in files]
        return tuple(x for st in stats for x in (st.st_mtime, float(st.st_ino)))

    def get(self) -> ssl.SSLContext:
        with self._lock:
            if time.monotonic() - self._checked >= 1.0:
                self._checked = time.monotonic()
                try:
                    stamp = self._files_stamp()
                    if stamp != self._stamp:
                        ctx, subject = _server_context(self.cert, self.key, self.client_ca)
                        self._ctx, self.cluster_id = ctx, self._cluster_of(subject)
                        self._stamp = stamp
                        self.reloads += 1
                except (OSError, IdentityError):
                    pass  # mid-rotation: keep serving the last good pair, retry next time
            return self._ctx


class SwarmTLS(ssl.SSLContext):
    """The daemon's client context, carrying the cluster ID agents must belong to."""

    cluster_id: str = ""


def client_context(trust_root_pem: str, cluster_id: str = "",
                   cert: str | os.PathLike[str] | None = None,
                   key: str | os.PathLike[str] | None = None) -> SwarmTLS:
    """The daemon's context: the chain must lead to the swarm root CA; the host name is
    not checked (the caller compares CN, O and OU with the node: ``node_refusal``).
    With ``cert``/``key`` (the manager's node certificate) it presents them, which the
    agents require for /facts."""
    ctx = SwarmTLS(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.cluster_id = cluster_id
    try:
        ctx.load_verify_locations(cadata=trust_root_pem)
    except (ssl.SSLError, ValueError) as exc:
        raise IdentityError(f"the swarm root CA is not a usable PEM certificate ({exc})"
                            ) from None
    if cert is not None and key is not None:
        _load_chain(ctx, cert, key)
    return ctx


def read_token(path: str | os.PathLike[str], min_chars: int = 0) -> str:
    """The one-line token of ``path``; IdentityError when it cannot be read,
    TokenRefused when what it holds is no token (or shorter than ``min_chars``)."""
    try:
        # At most one byte past the limit: a wrong path (a log, /dev/zero) is not read
        # whole, and a FIFO is refused, not waited on (core.boundedfile).
        raw = read_head(path, MAX_TOKEN_BYTES)
    except NotRegularFile as exc:
        raise IdentityError(f"token file {path}: {exc.why}; give the path of the file "
                            "holding the token (a Docker secret)") from None
    except OSError as exc:
        raise IdentityError(f"token file {path}: cannot read it ({exc.strerror})") from None
    token = raw.decode("utf-8", "replace").strip()
    if len(raw) > MAX_TOKEN_BYTES or not token or not token.isascii() or any(
            c.isspace() for c in token):
        raise TokenRefused(f"token file {path}: expected one line of ASCII, no spaces, "
                           f"at most {MAX_TOKEN_BYTES} bytes (e.g. openssl rand -hex 32)")
    if len(token) < min_chars:
        raise TokenRefused(
            f"token file {path}: the token is {len(token)} characters, and at least "
            f"{min_chars} are needed (a short token is guessed): make a new one with "
            f"openssl rand -hex 32")
    return token


def read_agent_token(path: str | os.PathLike[str]) -> str:
    """The agents' bearer token (``--token-file``, ``agents.token_file``): IdentityError
    when the file cannot be read, TokenRefused when it holds no token or one shorter
    than MIN_TOKEN_CHARS."""
    return read_token(path, min_chars=MIN_TOKEN_CHARS)


def agent_token_problem(path: str) -> str | None:
    """Why ``agents.token_file`` is refused when the daemon's configuration is loaded:
    this process reads it and it holds no token, or a short one. None when it is good,
    or cannot be read here (a Docker secret exists only in the container: the daemon
    says so when it first reads the agents)."""
    try:
        read_agent_token(path)
    except TokenRefused as exc:
        return f"agents.token_file: {exc} ({AGENT_TOKENS_FIX})"
    except IdentityError:
        return None
    return None


def token_matches(header: str | None, token: str) -> bool:
    """A constant-time check of ``Authorization: Bearer <token>``, the scheme in any case
    (RFC 9110 11.1: Prometheus sends its ``authorization.type`` as written)."""
    if not header or header[:7].lower() != "bearer ":
        return False
    return hmac.compare_digest(header[7:].strip().encode(), token.encode())


@dataclass
class AgentAuth:
    """What the daemon presents to and expects from agents this cycle; with swarm-pki
    also what its own HTTP server needs to ask for manager certificates (the manager's
    certificate and key, the swarm root CA)."""

    tls: SwarmTLS | None = None
    token: str | None = None
    cert: Path | None = None
    key: Path | None = None
    trust_root: str = ""


class AuthSource:
    """The daemon's AgentAuth, rebuilt from the engine and the files now and then (root
    CA rotation, node certificate rotation, secret updates) instead of once at start."""

    def __init__(self, cfg: AgentsConfig, swarm: SwarmClient,
                 ttl_s: float = TRUST_ROOT_TTL_S) -> None:
        self.cfg = cfg
        self._swarm = swarm
        self._ttl = ttl_s
        self._at = -1e18
        self._auth = AgentAuth()
        self._lock = threading.Lock()

    def get(self) -> AgentAuth:
        with self._lock:
            if time.monotonic() - self._at < self._ttl:
                return self._auth
            cfg = self.cfg
            auth = AgentAuth()
            if cfg.identity == "swarm-pki":
                pem = _read_ca_file(cfg.ca_file) if cfg.ca_file else \
                    self._swarm.trust_root()
                if not pem.strip():
                    raise IdentityError("the engine reported no swarm root CA (GET /swarm "
                                        "TLSInfo.TrustRoot); set agents.ca_file")
                info = self._swarm.info()
                swarm_info = info.get("Swarm") or {}
                cluster = str((swarm_info.get("Cluster") or {}).get("ID") or "")
                if not cluster:
                    raise IdentityError("the engine names no swarm cluster ID (docker info: "
                                        "Swarm.Cluster.ID); the daemon must talk to a manager")
                cert, key = own_cert_paths(cfg, str(info.get("DockerRootDir") or
                                                    DEFAULT_DATA_ROOT))
                auth.tls = client_context(pem, cluster, cert, key)
                auth.cert, auth.key, auth.trust_root = cert, key, pem
            if cfg.token_file:
                auth.token = read_agent_token(cfg.token_file)
            self._auth, self._at = auth, time.monotonic()
            return auth


def _read_ca_file(path: str) -> str:
    """agents.ca_file's text: read under AuthSource's lock, which every fetch waits on,
    so a FIFO is refused, not waited on (core.boundedfile); OSError as before."""
    try:
        return read_bounded_text(path, MAX_CA_BYTES)
    except FileRefused as exc:
        raise IdentityError(f"agents.ca_file {path}: {exc.why}; give the path of the "
                            "swarm root CA's PEM file") from None
    except UnicodeDecodeError as exc:
        raise IdentityError(f"agents.ca_file {path}: not a PEM file ({exc})") from None


def own_cert_paths(cfg: AgentsConfig, data_root: str) -> tuple[Path, Path]:
    """The certificate and key the daemon presents to agents: agents.cert_file and
    key_file, else systemd's credentials, else the manager's own under its engine's
    data root, else under /var/lib/docker (where the stack mounts them)."""
    if cfg.cert_file or cfg.key_file:
        if not (cfg.cert_file and cfg.key_file):
            raise IdentityError("agents.cert_file and agents.key_file go together")
        return Path(cfg.cert_file), Path(cfg.key_file)
    crt, key, _ = node_cert_paths(data_root)
    if not crt.exists():  # in a container the files are mounted at the default root
        crt, key, _ = node_cert_paths(DEFAULT_DATA_ROOT)
    if not crt.exists():
        raise IdentityError(
            f"no manager certificate at {crt} (the engine's data root {data_root}): agents "
            "serve /facts only to a swarm-manager certificate; run the daemon on a manager "
            "with the engine's swarm/certificates readable (stack: mounted; systemd: "
            "LoadCredential=), or set agents.cert_file and agents.key_file")
    return crt, key


_SOURCES: dict[AgentsConfig, AuthSource] = {}
_LAST: dict[AgentsConfig, AgentAuth] = {}


def agent_auth(swarm: SwarmClient, cfg: AgentsConfig) -> AgentAuth:
    """This process's AgentAuth for ``cfg`` (rebuilt every TRUST_ROOT_TTL_S)."""
    if cfg.identity == "none" and not cfg.token_file:
        return AgentAuth()
    src = _SOURCES.get(cfg)
    if src is None:
        src = _SOURCES[cfg] = AuthSource(cfg, swarm)
    _LAST[cfg] = src.get()
    return _LAST[cfg]


def last_auth(cfg: AgentsConfig) -> AgentAuth:
    """The AgentAuth the last snapshot used, for scrapes that follow it (no engine call)."""
    return _LAST.get(cfg, AgentAuth())


def scrape_auth(cfg: Config) -> AgentAuth:
    """What a metrics scrape presents: the TLS check for an https:// template, and the
    token only when the template is the agents' own address (never to dcgm-exporter)."""
    auth = last_auth(cfg.agents)
    tmpl = cfg.rebalance.metrics_url_template
    agent_base = cfg.agents.url_template.replace("{port}", str(cfg.agents.port))
    return AgentAuth(auth.tls if tmpl.startswith("https://") else None,
                     auth.token if tmpl.startswith(agent_base.rstrip("/") + "/") else None)


def metrics_authenticated(cfg: Config) -> bool:
    """Whether scraped metrics prove where they come from: HTTPS with the node identity
    checked (swarm-pki). Plain HTTP (agents.identity none, or dcgm-exporter over http)
    informs the map but triggers no move or restart unless
    rebalance.trust_unauthenticated_metrics."""
    return cfg.agents.identity == "swarm-pki" and \
        cfg.rebalance.metrics_url_template.startswith("https://")


def metrics_may_act(cfg: Config) -> bool:
    """Whether scraped metrics may trigger moves and restarts."""
    return metrics_authenticated(cfg) or cfg.rebalance.trust_unauthenticated_metrics


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
