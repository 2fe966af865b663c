"""The daemon's web side in-process (auth, token), a plain HTTP GET, and the sample map
served by it to a headless Chromium.

First written in tests/test_webauth.py."""

from __future__ import annotations

import http.client
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from support.identity import CLUSTER
from swarmgpu.core.config import load_config
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.web import webmap
from swarmgpu.swarm.identity import AgentAuth, client_context

if TYPE_CHECKING:
    from support.browser import Cdp

TOKEN = "web-token-0123456789abcdef"
BIG = 4 * 1024 * 1024  # past what socket buffers take: the document of ~500 nodes


class NoSwarm:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected engine call {name}")


def web_daemon(tmp: Path, auth: str = "required", listen: str = "127.0.0.1:0",
            token: bool = True, env: dict[str, str] | None = None) -> Daemon:
    (tmp / "token").write_text(TOKEN + "\n")
    env = {"SWARMGPU_HTTP_LISTEN": listen, "SWARMGPU_HTTP_AUTH": auth,
           "SWARMGPU_STATE_DIR": str(tmp), **(env or {})}
    if token:
        env["SWARMGPU_HTTP_TOKEN_FILE"] = str(tmp / "token")
    d = Daemon(load_config(None, env=env), swarm=NoSwarm())  # type: ignore[arg-type]
    d.http_routes["/api/v1/cluster"] = lambda: ("application/json", b'{"nodes": []}')
    big = b"x" * BIG
    d.http_routes["/big"] = lambda: ("text/plain", big)
    d._start_http()
    assert d._http is not None
    return d


@contextmanager
def https_web_daemon(tmp: Path, pki: dict[str, Path]) -> Iterator[int]:
    """A web daemon (``web_daemon``) given its manager's certificate and the root CA, as
    its cycle hands them over (HTTPS on the same port, plain HTTP still answers): its
    port; shut after. ``pki`` is conftest's."""
    d = web_daemon(tmp)
    assert d._http is not None
    mgr, key = pki["mgr"], pki["mgr"].with_suffix(".key")
    d.web_auth.update(AgentAuth(tls=client_context(pki["ca"].read_text(), CLUSTER, mgr, key),
                                cert=mgr, key=key, trust_root=pki["ca"].read_text()))
    try:
        yield d._http.server_address[1]
    finally:
        d._http.shutdown()
        d._http.server_close()


@contextmanager
def map_in_chromium(tmp: Path, chromium: str, auth: str = "required"
                    ) -> Iterator[tuple[Cdp, int]]:
    """A web daemon (``web_daemon``) serving the sample cluster's map, and a headless
    Chromium tab beside it: ``(cdp, port)``; both closed after."""
    from support.browser import Cdp, sample  # Chromium's helpers only where one runs

    d = web_daemon(tmp, auth=auth)
    assert d._http is not None
    try:
        doc = sample()
        webmap.register(d.http_routes, lambda: doc, query_routes=d.http_query_routes)
        cdp = Cdp(chromium, (1024, 768))
        try:
            yield cdp, d._http.server_address[1]
        finally:
            cdp.close()
    finally:
        d._http.shutdown()
        d._http.server_close()


def get(port: int, path: str, headers: dict[str, str] | None = None,
        ctx: ssl.SSLContext | None = None, src: str | None = None, timeout: float = 5
        ) -> tuple[int, dict[str, str], bytes]:
    conn: http.client.HTTPConnection
    if ctx is not None:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=ctx)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                          source_address=(src, 0) if src else None)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def get_lines(port: int, path: str, lines: list[tuple[str, str]], src: str) -> int:
    """The status of a GET from ``src`` with each header line of ``lines`` sent as
    given, a name repeated too (``get`` takes one value a name)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5, source_address=(src, 0))
    try:
        conn.putrequest("GET", path)
        for name, value in lines:
            conn.putheader(name, value)
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


FORM = "application/x-www-form-urlencoded"


def post(port: int, path: str, body: str, headers: dict[str, str] | None = None,
         ctx: ssl.SSLContext | None = None, timeout: float = 5, src: str | None = None,
         ) -> tuple[int, dict[str, str], bytes]:
    """A form POST (the sign-in page's), with ``headers`` as a browser would add them;
    from ``src`` (a loopback address) when given."""
    conn = (http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=ctx)
            if ctx is not None else http.client.HTTPConnection(
                "127.0.0.1", port, timeout=timeout, source_address=(src, 0) if src else None))
    try:
        conn.request("POST", path, body=body.encode(),
                     headers={"Content-Type": FORM, **(headers or {})})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def raw(port: int, request: bytes, timeout: float = 5) -> bytes:
    """What the daemon answers to ``request`` sent as is, until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out
