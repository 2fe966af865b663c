"""The cluster document (`/api/v1/cluster`, whole and light, and so the GPU map) says
how the daemon's last cycle ended, in the word /healthz says (``last_cycle``) and when
(``last_cycle_at``). Before, a cycle cut at its engine budget left the map drawing the
last whole cycle's document with nothing to tell it was old. Pure: an empty swarm, the
daemon's own steps."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from support.empty_swarm import EmptySwarm

from swarmgpu.core.config import AgentsConfig, Config, HttpConfig, SyncConfig
from swarmgpu.manager import daemon as daemon_module
from swarmgpu.manager.cycle.wiring import daemon_steps
from swarmgpu.manager.daemon import Daemon


def leader(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Daemon:
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    cfg = Config(state_dir=str(tmp), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(timeout_s=0.5, identity="none", watch_s=0),
                 http=HttpConfig(listen="127.0.0.1:0"))
    d = Daemon(cfg, swarm=EmptySwarm())  # type: ignore[arg-type]
    d.use(daemon_steps(d))
    return d


def cluster(d: Daemon, query: str = "") -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(d.http_query_routes["/api/v1/cluster"](query)[1])
    return doc


def test_the_cluster_document_says_the_last_cycle_ended_at_its_budget_and_when(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = leader(tmp_path, monkeypatch)
    before = cluster(d)
    assert before["last_cycle"] is None and before["last_cycle_at"] is None, before
    d.cycle()
    doc = cluster(d)
    assert doc["last_cycle"] == "ok" == d.health()["last_cycle"], doc
    ok_at = doc["last_cycle_at"]
    assert abs(ok_at - time.time()) < 60, doc
    keys = list(doc)
    monkeypatch.setattr(daemon_module, "engine_budget_s", lambda *_: 0.0, raising=False)
    time.sleep(0.01)
    d.cycle()
    for query in ("", "view=map", "view=map&first=3"):
        cut = cluster(d, query)
        assert cut["last_cycle"] == "over_budget" == d.health()["last_cycle"], (query, cut)
        assert cut["last_cycle_at"] > ok_at, (query, cut)
    whole = cluster(d)
    # (the last whole cycle's document, its keys as they were: the outcome added)
    assert list(whole) == keys and whole["generated_at"] == doc["generated_at"], whole
    plain = json.loads(d.http_routes["/api/v1/cluster"]()[1])
    assert plain["last_cycle"] == "over_budget", plain
