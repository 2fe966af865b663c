"""A listen host of ``localhost`` binds the loopback address itself, never what the
resolver says the name is.

Both the docker-proxy's TCP listener and the daemon's ``http.listen`` judge
``localhost`` loopback by its name (the proxy: loopback only, it authenticates nobody;
the daemon: ``http.auth: auto`` asks no proof there) and then bound the name, which
``/etc/hosts``, DNS (a search domain first: ``localhost.corp.example``) or an NSS module
may resolve to a network address: an open door on the network where the check read
loopback. Now the name binds 127.0.0.1. The servers' ``server_bind`` is recorded before
it binds: the address they hand the kernel's resolver."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from swarmgpu.core.httpguard import GuardedServer
from swarmgpu.manager.engine.proxy_policy import write_checks
from swarmgpu.swarm import dockerproxy
from swarmgpu.swarm.dockerproxy import build_proxy
from swarmgpu.swarm.proxyhost import tcp_listen


@pytest.mark.parametrize("listen", ["tcp://localhost:0", "tcp://LocalHost.:0"])
def test_the_proxy_binds_localhost_as_the_loopback_address(
    monkeypatch: pytest.MonkeyPatch, listen: str
) -> None:
    bound: list[Any] = []
    original = dockerproxy.socketserver.TCPServer.server_bind

    def record(self: Any) -> None:
        bound.append(self.server_address[0])
        original(self)

    monkeypatch.setattr(dockerproxy.socketserver.TCPServer, "server_bind", record)
    srv = build_proxy(listen, "unix:///var/run/docker.sock", write_checks("swarmgpu."))
    srv.server_close()
    assert bound == ["127.0.0.1"]  # before: 'localhost', resolved by the system
    assert tcp_listen(listen.replace(":0", ":2375")) == ("127.0.0.1", 2375)


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST"])
def test_the_daemons_and_agents_server_binds_localhost_as_the_loopback_address(
    host: str,
) -> None:
    bound: list[Any] = []

    class Recording(GuardedServer):
        def server_bind(self) -> None:
            bound.append(self.server_address[0])
            super().server_bind()

    srv = Recording((host, 0), BaseHTTPRequestHandler)
    srv.server_close()
    assert bound == ["127.0.0.1"]  # before: the name, resolved by the system


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "0.0.0.0", "gpu-a.example"])
def test_any_other_host_is_bound_as_written(host: str) -> None:
    from swarmgpu.core.loopbackbind import bound_host

    assert bound_host(host) == host
