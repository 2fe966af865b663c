"""The docker-proxy serves a connection whose file descriptor is past 1023.

It waited on its sockets with ``select.select``, which raises ValueError for a
descriptor of FD_SETSIZE (1024) or more: with a thousand connections open (a flood
of refused ones lingering, streams, a container's nofile limit well above 1024), every
request after that got no answer, a traceback instead, and a write already forwarded
lost the engine's answer (the daemon could not tell it applied, the surge book never
heard of it). Here the test holds 1,100 descriptors open so the proxy's next
connections (the client's and its own to the engine) get higher ones."""

from __future__ import annotations

import os
import resource
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.engine_stub import Engine, start_engine

from swarmgpu.manager.engine.proxy_policy import write_checks
from swarmgpu.swarm.dockerproxy import build_proxy

HELD = 1100


@pytest.fixture
def many_fds() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = HELD + 200
    if soft < want:  # (within the hard limit, which Linux sets far higher)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    held: list[int] = []
    try:
        while len(held) < HELD:
            held += os.pipe()
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_request_on_a_descriptor_past_1023_is_answered(tmp_path: Path, many_fds: None) -> None:
    engine: Engine = start_engine(str(tmp_path / "engine.sock"))
    srv = build_proxy(
        f"unix://{tmp_path / 'proxy.sock'}",
        f"unix://{engine.server_address}",
        write_checks("swarmgpu."),
    )
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(tmp_path / "proxy.sock"))
            assert s.fileno() >= 1024
            s.settimeout(20)
            s.sendall(b"GET /v1.43/tasks HTTP/1.1\r\nHost: d\r\n\r\n")
            got = b""
            while chunk := s.recv(4096):
                got += chunk
    finally:
        srv.shutdown()
        srv.server_close()
        engine.shutdown()
        engine.server_close()
    assert got.startswith(b"HTTP/1.1 200 "), got  # before: b"" (ValueError in select)
    assert len(engine.seen) == 1
