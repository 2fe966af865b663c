"""`swarmgpu status --json` says how the daemon's last cycle ended, as the daemon says
it on its /healthz (``http.listen``): the daemon keeps it in memory, and the command
gave null always, unsaid why. Where no daemon answers, null with ``last_cycle_unread``
saying why."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.commands import empty_cluster

from swarmgpu.cli import main

HEALTH: dict[str, Any] = {"status": "degraded", "last_cycle": "over_budget",
                          "last_cycle_at": 1_790_000_000.5}


class Healthz(BaseHTTPRequestHandler):
    said: bytes = json.dumps(HEALTH).encode()

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 404)
        self.send_header("Content-Length", str(len(self.said)))
        self.end_headers()
        self.wfile.write(self.said)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def healthz() -> Iterator[ThreadingHTTPServer]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Healthz)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, port: int) -> dict[str, Any]:
    empty_cluster(monkeypatch)
    cfg = tmp_path / "swarmgpu.yaml"
    cfg.write_text(f"state_dir: {tmp_path}\nhttp:\n  listen: 127.0.0.1:{port}\n")
    res = CliRunner().invoke(main, ["status", "--json", "--config", str(cfg)])
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = json.loads(res.output)
    return doc


def test_status_json_says_the_daemons_last_cycle_from_its_healthz(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, healthz: ThreadingHTTPServer) -> None:
    doc = _status(tmp_path, monkeypatch, healthz.server_address[1])
    assert doc["last_cycle"] == "over_budget", doc.get("last_cycle_unread")
    assert doc["last_cycle_at"] == HEALTH["last_cycle_at"]
    assert doc["last_cycle_unread"] is None


def test_status_json_without_a_daemon_says_why_last_cycle_is_null(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, healthz: ThreadingHTTPServer) -> None:
    port = healthz.server_address[1]
    healthz.shutdown()
    healthz.server_close()  # nothing listens there now
    doc = _status(tmp_path, monkeypatch, port)
    assert doc["last_cycle"] is None and doc["last_cycle_at"] is None
    why = doc["last_cycle_unread"]
    assert f"no daemon answered http://127.0.0.1:{port}/healthz" in why, why
    assert "http.listen" in why


@pytest.mark.parametrize("said", [
    {"status": "ok"}, {"last_cycle": "fine", "last_cycle_at": 1.0},
    {"last_cycle": "ok", "last_cycle_at": "noon"}, ["not", "a", "document"]])
def test_a_healthz_of_no_form_the_daemon_gives_is_not_taken(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, healthz: ThreadingHTTPServer,
        said: object) -> None:
    monkeypatch.setattr(Healthz, "said", json.dumps(said).encode())
    doc = _status(tmp_path, monkeypatch, healthz.server_address[1])
    assert doc["last_cycle"] is None and doc["last_cycle_at"] is None
    assert "healthz answered" in doc["last_cycle_unread"], doc["last_cycle_unread"]


def test_a_healthz_nested_past_the_recursion_limit_is_not_taken(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, healthz: ThreadingHTTPServer) -> None:
    # (json.loads raises RecursionError, no ValueError: the command ended in a traceback)
    monkeypatch.setattr(Healthz, "said", b"[" * 100_000)
    doc = _status(tmp_path, monkeypatch, healthz.server_address[1])
    assert doc["last_cycle"] is None and doc["last_cycle_at"] is None
    assert "healthz answered" in doc["last_cycle_unread"], doc["last_cycle_unread"]


@pytest.mark.parametrize(("listen", "url"), [
    ("[::1:9402", "http://[::1]:9402/healthz"), (":::9402", "http://[::1]:9402/healthz"),
    ("[::]:9402", "http://[::1]:9402/healthz"), ("0.0.0.0:9402", "http://127.0.0.1:9402/healthz")])
def test_the_daemons_healthz_is_asked_where_it_binds_http_listen(
        monkeypatch: pytest.MonkeyPatch, listen: str, url: str) -> None:
    # The daemon binds HOST with its brackets stripped; read as a URL, '[::1:9402' raised
    # ValueError (a traceback) and ':::9402' was "no daemon answered" though one did.
    from swarmgpu.cli import lastcycle
    from swarmgpu.core.config import Config, HttpConfig
    from swarmgpu.manager.nodes import boundedhttp

    asked: list[str] = []

    def get(at: str, **_kw: object) -> boundedhttp.Fetched:
        asked.append(at)
        return boundedhttp.Fetched(200, json.dumps(HEALTH).encode())

    monkeypatch.setattr(boundedhttp, "get", get)
    got = lastcycle.last_cycle(Config(http=HttpConfig(listen=listen)))
    assert asked == [url]
    assert got["last_cycle"] == "over_budget", got


def test_plain_status_asks_the_daemon_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the JSON document carries last_cycle: the table waited on a hung daemon for it.
    from swarmgpu.manager.nodes import boundedhttp

    asked: list[str] = []

    def get(at: str, **_kw: object) -> boundedhttp.Fetched:
        asked.append(at)
        raise boundedhttp.FetchError("closed the connection before answering")

    monkeypatch.setattr(boundedhttp, "get", get)
    empty_cluster(monkeypatch)
    cfg = tmp_path / "swarmgpu.yaml"
    cfg.write_text(f"state_dir: {tmp_path}\n")
    res = CliRunner().invoke(main, ["status", "--config", str(cfg)])
    assert res.exit_code == 0, res.output
    assert asked == []
