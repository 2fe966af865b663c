"""An engine that cannot be reached is named: the socket path or DOCKER_HOST tried."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from swarmgpu.cli import main
from swarmgpu.swarm.client import SwarmClient, SwarmUnavailable, engine_endpoint


def test_endpoint_names_where_it_came_from() -> None:
    assert engine_endpoint("unix:///x.sock", {}) == "unix:///x.sock"
    assert engine_endpoint(None, {"DOCKER_HOST": "tcp://10.0.0.1:2376"}) == (
        "tcp://10.0.0.1:2376 (DOCKER_HOST)")
    assert engine_endpoint(None, {}) == (
        "unix:///var/run/docker.sock (the default; DOCKER_HOST is not set)")


def test_missing_socket_is_named(tmp_path: Path) -> None:
    sock = tmp_path / "no-docker.sock"
    with pytest.raises(SwarmUnavailable, match=f"at unix://{sock}"):
        SwarmClient(f"unix://{sock}", timeout_s=2)


def test_docker_host_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sock = tmp_path / "elsewhere.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    with pytest.raises(SwarmUnavailable) as exc:
        SwarmClient(timeout_s=2)
    assert f"unix://{sock} (DOCKER_HOST)" in str(exc.value)


def test_a_command_says_which_engine_it_tried(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    sock = tmp_path / "gone.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    monkeypatch.delenv("SWARMGPU_DOCKER_HOST", raising=False)
    res = CliRunner().invoke(main, ["status"])
    assert res.exit_code != 0
    assert f"unix://{sock}" in res.output, res.output


def test_an_engine_that_cannot_be_reached_says_the_fix(tmp_path: Path) -> None:
    # `swarmgpu status` (or audit, plan) where no engine answers ended with the SDK's
    # "('Connection aborted.', FileNotFoundError(2, ...))" and no word of what to do.
    with pytest.raises(SwarmUnavailable) as exc:
        SwarmClient(f"unix://{tmp_path / 'none.sock'}", timeout_s=2)
    assert str(exc.value).endswith(
        "; fix: no engine socket there: run this on a Swarm manager, or give the "
        "engine's address in docker_host (the config) or DOCKER_HOST")
    dead = tmp_path / "dead.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(dead))  # bound, never listening: connections are refused
        with pytest.raises(SwarmUnavailable) as exc:
            SwarmClient(f"unix://{dead}", timeout_s=2)
    assert str(exc.value).endswith(
        "; fix: nothing listens there: start dockerd (systemctl start docker), or give "
        "the engine's address in docker_host (the config) or DOCKER_HOST")
