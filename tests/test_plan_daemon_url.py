"""``swarmgpu plan`` asks the leader daemon for its move proposals at ``http.listen``,
as ``lastcycle`` and the healthcheck reach it (``healthcheck.loopback``): an IPv6 host
in brackets, a wildcard on loopback."""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from swarmgpu.cli import manager as cli_manager
from swarmgpu.core.config import Config


@pytest.mark.parametrize(("listen", "host"), [
    ("::1:9402", "::1"), ("[::1]:9402", "::1"), ("[::]:9402", "::1"),
    ("0.0.0.0:9402", "127.0.0.1"), ("127.0.0.1:9402", "127.0.0.1"),
])
def test_the_daemons_moves_are_asked_at_a_url_of_its_listen_address(
        monkeypatch: pytest.MonkeyPatch, listen: str, host: str) -> None:
    # 'http://::1:9402/...' is no URL: requests raised, and plan said the daemon was
    # not reachable.
    asked: list[str] = []

    def get(url: str, **_: Any) -> Any:
        asked.append(url)
        raise requests.ConnectionError("stand-in")

    monkeypatch.setattr(requests, "get", get)
    cfg = Config()
    cfg = replace(cfg, http=replace(cfg.http, listen=listen, token_file=""))
    assert cli_manager._daemon_moves(cfg) is None
    assert len(asked) == 1
    parts = urlsplit(asked[0])
    assert (parts.hostname, parts.port) == (host, 9402), asked
