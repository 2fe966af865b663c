"""A request that fails past its handler's own catch (a bug of ours in the agent's, the
daemon's or the docker-proxy's server) is said in the service's log, with its
traceback. socketserver's ``handle_error`` printed it to stderr: raw text beside the
JSON log under ``--log-format json``, in no log a search of the service's finds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.loglines import log_lines

from swarmgpu.core.httpguard import GuardedServer, OneRequestHandler
from swarmgpu.manager.engine.proxy_policy import write_checks
from swarmgpu.swarm.dockerproxy import build_proxy


@pytest.fixture
def errors() -> Iterator[list[str]]:
    yield from log_lines("ERROR")


def _fail(server: GuardedServer | object, peer: object) -> None:
    try:
        raise KeyError("a handler's fault")
    except KeyError:
        server.handle_error(None, peer)  # type: ignore[attr-defined]


def test_the_http_servers_say_a_failed_request_in_their_log(
        errors: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    srv = GuardedServer(("127.0.0.1", 0), OneRequestHandler)
    try:
        _fail(srv, ("203.0.113.9", 4242))
    finally:
        srv.server_close()
    assert capsys.readouterr().err == ""
    assert len(errors) == 1 and "203.0.113.9" in errors[0], errors
    assert "Traceback" in errors[0] and "a handler's fault" in errors[0]


def test_the_docker_proxy_says_a_failed_request_in_its_log(
        tmp_path: Path, errors: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    srv = build_proxy(f"unix://{tmp_path / 'proxy.sock'}", "unix:///var/run/docker.sock",
                      write_checks("swarmgpu."))
    try:
        _fail(srv, "")  # (a unix socket's peer has no address)
    finally:
        srv.server_close()
    assert capsys.readouterr().err == ""
    assert len(errors) == 1 and "a local client" in errors[0], errors
    assert "Traceback" in errors[0] and "a handler's fault" in errors[0]


def test_a_connection_that_failed_is_a_warning_not_a_fault(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A timed-out or reset connection is the peer's: said in one line, no traceback."""
    said = log_lines("WARNING")
    warned = next(said)
    srv = GuardedServer(("127.0.0.1", 0), OneRequestHandler)
    try:
        try:
            raise TimeoutError("timed out")
        except TimeoutError:
            srv.handle_error(None, ("203.0.113.9", 4242))
    finally:
        srv.server_close()
        next(said, None)  # (its sink removed)
    assert capsys.readouterr().err == ""
    assert len(warned) == 1 and "WARNING" in warned[0] and "Traceback" not in warned[0]
    assert "the connection from 203.0.113.9:4242 failed: timed out" in warned[0]
