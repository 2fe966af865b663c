"""``python -m swarmgpu.core.healthcheck [URL]``: the image's ``HEALTHCHECK``.

The image has Python and no curl, and one image serves every role, so the probe finds
the role itself: the ``swarmgpu agent``, ``swarmgpu run`` or ``swarmgpu docker-proxy``
process in this container (``/proc/*/cmdline``), and where that process serves:

* agent: ``/healthz`` on its ``--listen`` (default 127.0.0.1:9401), HTTPS first unless
  ``--identity none`` (with ``swarm-pki``, and with ``auto`` where the node certificate
  is found, it serves HTTPS), the other scheme when the first one's answer is not HTTP;
  its ``--token-file`` is sent as the bearer token (none when the file holds no token
  the agent would take: nothing else is read whole or sent);
* daemon: ``/healthz`` on ``SWARMGPU_HTTP_LISTEN`` from its environment, else
  ``http.listen`` of its ``--config``, else 127.0.0.1:9402;
* docker-proxy: its ``--listen`` socket (``SWARMGPU_PROXY_LISTEN``, default
  unix:///run/swarmgpu/docker.sock) accepts a connection (it has no /healthz).

A wildcard host (``0.0.0.0``, ``::``) is probed on loopback. With a URL given, that is
probed instead.

Exit 0 healthy, 1 unhealthy (Docker's meaning): ``/healthz`` answered 200, or 401/403
(the server is up and asks for an identity this probe does not hold: a token it could
not read, a manager certificate). 503 (no facts yet), any other answer, a refused
connection or a timeout is unhealthy. Standard library only, so it runs in a few MiB
beside an agent limited to 128 MiB; it imports nothing of swarmgpu but this module.
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import stat
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

AGENT_LISTEN = "127.0.0.1:9401"
DAEMON_LISTEN = "127.0.0.1:9402"
TIMEOUT_S = 5.0
MAX_TOKEN_BYTES = 4096  # swarmgpu.swarm.identity's: the agent refuses a longer token
# What an HTTPS agent answers a plain-HTTP request (a 400, as nginx does), and the header
# that marks it: a client of ours reads it as "a TLS server", as it read the closed
# connection before (the body of an error is not read).
HTTPS_ONLY = "this agent speaks HTTPS, not plain HTTP"
HTTPS_ONLY_HEADER = "X-Swarmgpu-Https-Only"


PROXY_LISTEN = "unix:///run/swarmgpu/docker.sock"


@dataclass(frozen=True)
class Target:
    url: str  # http(s)://.../healthz, or unix:///PATH / tcp://HOST:PORT: connect only
    token_file: str | None = None
    fallback: str | None = None  # the other scheme, tried when the answer is not HTTP


def _argv(pid_dir: Path) -> list[str]:
    try:
        raw = (pid_dir / "cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _environ(pid_dir: Path) -> dict[str, str]:
    try:
        raw = (pid_dir / "environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.decode(errors="replace").partition("=")
        if sep:
            out[k] = v
    return out


def _command(argv: list[str]) -> tuple[str, list[str]] | None:
    """(``agent``|``run``|``docker-proxy``, its arguments) when argv is a swarmgpu
    process: the console script itself or Python running it (``docker-init --
    swarmgpu ...`` is not)."""
    for i, a in enumerate(argv[:3]):
        if i == 2 and argv[1] != "-m":
            break
        if a.endswith("/swarmgpu") or a == "swarmgpu" or (i == 2 and a == "swarmgpu.cli"):
            rest = argv[i + 1:]
            if rest and rest[0] in ("agent", "run", "docker-proxy"):
                return rest[0], rest[1:]
    return None


def _option(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a[len(name) + 1:]
    return None


def loopback(listen: str) -> str:
    """``HOST:PORT`` to connect to a server that listens on ``listen`` as swarmgpu binds
    it (brackets optional around an IPv6 host); a wildcard host on loopback."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0"):  # noqa: S104 (a wildcard bind, probed on loopback)
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _config_listen(path: str | None) -> str | None:
    if not path:
        return None
    try:
        # bounded (alias bombs, size): the same reader as the daemon's; lazy: only the daemon
        from swarmgpu.core.yamlfile import read_yaml

        # sole: what the daemon refuses (``010``, core.leadingzero) is no listen either
        doc = read_yaml(Path(path), "config", ValueError, sole=True)
    except Exception:  # unreadable or broken: the daemon itself says why; use the default
        return None
    http = doc.get("http") if isinstance(doc, dict) else None
    listen = http.get("listen") if isinstance(http, dict) else None
    return listen if isinstance(listen, str) else None


def find_target(proc: Path = Path("/proc")) -> Target | None:
    """The /healthz of the swarmgpu server running in this container, if any."""
    me = str(os.getpid())
    try:
        pids = sorted((p for p in proc.iterdir() if p.name.isdigit() and p.name != me),
                      key=lambda p: int(p.name))
    except OSError:
        return None
    for pid_dir in pids:
        found = _command(_argv(pid_dir))
        if found is None:
            continue
        role, args = found
        if role == "agent":
            where = loopback(_option(args, "--listen") or AGENT_LISTEN) + "/healthz"
            plain = _option(args, "--identity") == "none" and not _option(args, "--tls-cert")
            first, other = ("http", "https") if plain else ("https", "http")
            return Target(f"{first}://{where}", _option(args, "--token-file"),
                          f"{other}://{where}")
        if role == "docker-proxy":
            listen = (_option(args, "--listen")
                      or _environ(pid_dir).get("SWARMGPU_PROXY_LISTEN") or PROXY_LISTEN)
            if listen.startswith("tcp://"):
                listen = "tcp://" + loopback(listen.removeprefix("tcp://"))
            return Target(listen)
        listen = (_environ(pid_dir).get("SWARMGPU_HTTP_LISTEN")
                  or _config_listen(_option(args, "--config")) or DAEMON_LISTEN)
        return Target(f"http://{loopback(listen)}/healthz")
    return None


def _connect(url: str, timeout_s: float) -> tuple[bool, str]:
    """Whether a socket accepts a connection (docker-proxy has no /healthz)."""
    try:
        if url.startswith("unix://"):
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(timeout_s)
                s.connect(url.removeprefix("unix://"))
        else:
            host, _, port = url.removeprefix("tcp://").rpartition(":")
            socket.create_connection((host.strip("[]"), int(port)), timeout_s).close()
    except (OSError, ValueError) as e:
        return False, f"{url}: {e}"
    return True, f"{url}: accepts connections"


def probe(target: Target, timeout_s: float = TIMEOUT_S) -> tuple[bool, str]:
    """(healthy, what was seen)."""
    if target.url.startswith(("unix://", "tcp://")):
        return _connect(target.url, timeout_s)
    ok, seen, answered = _get(target, target.url, timeout_s)
    if not answered and target.fallback:
        ok2, seen2, answered2 = _get(target, target.fallback, timeout_s)
        return (ok2, seen2) if answered2 else (False, f"{seen}; {seen2}")
    return ok, seen


def _token(path: str) -> str | None:
    """The token as the agent reads it (swarm.identity.read_token: one line of ASCII, no
    spaces, at most 4 KiB, a regular file), or None: not read whole (a FIFO waited on past
    Docker's timeout, /dev/zero), nor sent with a second line (http.client's refusal
    quotes the header: the token in the health log)."""
    try:
        # O_NONBLOCK: a FIFO with no writer opens at once, and is refused below
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            raw = os.read(fd, MAX_TOKEN_BYTES + 1) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        finally:
            os.close(fd)
    except OSError:
        return None
    token = raw.strip()
    if len(raw) > MAX_TOKEN_BYTES or not token.isascii() or len(token.split()) != 1:
        return None  # also empty: split() gives no word
    return token.decode("ascii")


def _get(target: Target, url: str, timeout_s: float) -> tuple[bool, str, bool]:
    """(healthy, what was seen, whether it was an answer: False when the exchange
    failed in a way the other scheme might not, TLS against plain HTTP or the reverse)."""
    headers = {}
    # None (unreadable, or not a token the agent would take): the answer (401) still
    # shows the server is up.
    token = _token(target.token_file) if target.token_file else None
    if token is not None:
        headers["Authorization"] = "Bearer " + token
    # Loopback, our own process: the question is whether it answers, not who it is.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if not url.startswith(("http://", "https://")):
        return False, f"{url}: not an http(s), unix or tcp URL", True
    req = urllib.request.Request(url, headers=headers)  # noqa: S310 (checked above)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s, context=ctx) as r:  # noqa: S310
            body = r.read(200).decode(errors="replace")
            return r.status == 200, f"{url}: {r.status} {body}", True
    except urllib.error.HTTPError as e:
        if e.code == 400 and e.headers.get(HTTPS_ONLY_HEADER):  # the other scheme may answer
            return False, f"{url}: {e.code} {e.reason} ({HTTPS_ONLY})", False
        return e.code in (401, 403), f"{url}: {e.code} {e.reason}", True
    except (OSError, ValueError, http.client.HTTPException) as e:
        reason = getattr(e, "reason", e)  # URLError wraps the socket's error
        final = isinstance(reason, ConnectionRefusedError | TimeoutError | socket.timeout)
        return False, f"{url}: {e}", final


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    target = Target(args[0]) if args else find_target()
    if target is None:
        print("no `swarmgpu agent` or `swarmgpu run` process in this container",
              file=sys.stderr)
        return 1
    ok, seen = probe(target)
    print(seen.strip(), file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
