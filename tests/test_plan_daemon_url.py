"""``swarmgpu plan`` asks the leader daemon for its move proposals at ``http.listen``,
as ``lastcycle`` and the healthcheck reach it (``healthcheck.loopback``): an IPv6 host
in brackets, a wildcard on loopback."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from swarmgpu.cli import manager as cli_manager
from swarmgpu.core.config import Config
from swarmgpu.manager.nodes import boundedhttp


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
        raise boundedhttp.FetchError("stand-in", kind=boundedhttp.CONNECT, connected=False)

    monkeypatch.setattr(boundedhttp, "get", get)
    cfg = Config()
    cfg = replace(cfg, http=replace(cfg.http, listen=listen, token_file=""))
    assert "not reachable" in str(cli_manager._daemon_moves(cfg))
    assert len(asked) == 1
    parts = urlsplit(asked[0])
    assert (parts.hostname, parts.port) == (host, 9402), asked



def test_a_daemon_that_refuses_plan_is_said_so_not_unreachable(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A daemon that answered 401 (``http.auth: required``, no readable token here) was
    said "not reachable": the operator looked for a daemon that runs. Its answer and
    the key to set are said; a token file that cannot be read is named with why."""
    from click.testing import CliRunner
    from support.commands import empty_cluster

    from swarmgpu.cli import main

    empty_cluster(monkeypatch)
    monkeypatch.setattr(boundedhttp, "get", lambda url, **_: boundedhttp.Fetched(401, b""))
    for token_file, said in (("", "http.token_file is not set"),
                             (str(tmp_path / "none"), "cannot read it")):
        cfg = Config()
        cfg = replace(cfg, http=replace(cfg.http, auth="required", token_file=token_file))
        monkeypatch.setattr(cli_manager, "load_cfg", lambda _p, c=cfg: c)
        res = CliRunner().invoke(main, ["plan"])
        assert res.exit_code == 0, res.output
        (line,) = [ln for ln in res.output.splitlines() if ln.startswith("moves:")]
        assert "not reachable" not in line and "HTTP 401" in line, line
        assert said in line and "http.auth" in line, line


def test_plan_json_says_why_the_moves_are_null(monkeypatch: pytest.MonkeyPatch) -> None:
    """``plan --json`` gave ``"moves": null`` unsaid, where the text said why; now
    ``moves_unread`` says it (null when read), as ``last_cycle_unread`` in status."""
    import json

    from click.testing import CliRunner
    from support.commands import empty_cluster

    from swarmgpu.cli import main

    empty_cluster(monkeypatch)
    monkeypatch.setattr(cli_manager, "load_cfg", lambda _p: Config())
    doc = {"proposed": [], "recent": [], "dry_run": True}
    for got, moves, unread in (("the daemon is not reachable on x", None,
                                "the daemon is not reachable on x"), (doc, doc, None)):
        monkeypatch.setattr(cli_manager, "_daemon_moves", lambda _c, g=got: g)
        res = CliRunner().invoke(main, ["plan", "--json"])
        assert res.exit_code == 0, res.output
        out = json.loads(res.output)
        assert out["moves"] == moves and out["moves_unread"] == unread, out
