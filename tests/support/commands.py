"""`swarmgpu plan`/`status` run in-process over a recording swarm: what a one-shot
command shows of the snapshot a daemon cycle plans from (``tests/support/forged.py``);
``empty_cluster``: over no cluster at all."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from click.testing import CliRunner

from swarmgpu.cli import main
from swarmgpu.cli import manager as cli_manager
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.swarm import client


def command_json(
    sw: Any,
    cfg: str,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    facts: Mapping[str, tuple[str, NodeFacts]],
) -> dict[str, Any]:
    """``swarmgpu <command> --config <cfg> --json`` over ``sw`` (a ``RecordingSwarm``),
    each agent's facts (node id -> (hostname, facts)) as a daemon's book has them; the
    daemon's port not reachable."""
    got = {nid: FactsResult(nid, host, "", f, None, 1.0) for nid, (host, f) in facts.items()}
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), got, swarm_labels=sw.swarm_labels())
    monkeypatch.setattr(cli_manager, "_snapshot", lambda _cfg, _tenants, *_: snap)
    monkeypatch.setattr(client, "SwarmClient", lambda *_a, **_k: sw)
    monkeypatch.setattr(cli_manager, "_daemon_moves", lambda _cfg: None)
    res = CliRunner().invoke(main, [command, "--config", cfg, "--json"])
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = json.loads(res.output)
    return doc


def empty_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-shot command (``plan``, ``status``) over an empty cluster, no engine asked:
    its snapshot the two GPU nodes' agents and nothing of Swarm's, no grants to find, the
    daemon's plan empty."""
    from support.forged import snapshot
    from swarmgpu.manager.cycle import grants, oneshot_plan
    from swarmgpu.manager.placement import PlacementPlan

    monkeypatch.setattr(cli_manager, "_snapshot", lambda cfg, _tenants, *_: snapshot([], [], []))
    monkeypatch.setattr(client, "SwarmClient", lambda *a, **k: None)
    monkeypatch.setattr(grants, "find", lambda *a, **k: [])
    monkeypatch.setattr(oneshot_plan, "plan_as_daemon", lambda *a, **k: PlacementPlan([]))
