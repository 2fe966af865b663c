"""`docker.engine` names where it asked dockerd: its finding said why the engine did not
answer (the SDK's "Error while fetching server API version: ... FileNotFoundError")
and not where, while plan, audit and render name the address and where it came from
(DOCKER_HOST, or the default socket), so an operator with DOCKER_HOST left pointing
elsewhere could not tell from the doctor which engine it had tried."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from swarmgpu.cli import main


def test_an_engine_that_does_not_answer_is_named_with_where_it_was_asked(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sock = f"unix://{tmp_path}/no-dockerd.sock"
    monkeypatch.setenv("DOCKER_HOST", sock)
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    res = CliRunner().invoke(main, ["doctor", "--root", "/", "--json", "--agents-service",
                                    "", "--source", "file:/nonexistent"])
    (check,) = [c for c in json.loads(res.output)["checks"] if c["id"] == "docker.engine"]
    assert check["status"] == "fail", check
    assert f"cannot ask dockerd at {sock} (DOCKER_HOST): " in check["found"], check
    assert "DOCKER_HOST" in check["fix"], check
