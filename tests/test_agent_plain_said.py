"""The agent's plain-HTTP warning names who can read it: it said "anyone on the
network can read /facts and /metrics" for an agent on loopback too (`swarmgpu agent`
alone listens on 127.0.0.1:9401), which no one on the network reaches; it names the
address it listens on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.loglines import log_lines

from swarmgpu.cli.node import agent_tls


@pytest.fixture
def warned() -> Iterator[list[str]]:
    yield from log_lines("WARNING")


@pytest.mark.parametrize("listen", ["127.0.0.1:9401", "0.0.0.0:9401"])
def test_the_plain_http_warning_names_the_address_served(
        warned: list[str], tmp_path: Path, listen: str) -> None:
    assert agent_tls("auto", str(tmp_path), None, None, None, listen=listen) is None
    (line,) = warned
    assert f"anyone who reaches {listen} can read /facts and /metrics" in line, line
    assert "anyone on the network" not in line, line
