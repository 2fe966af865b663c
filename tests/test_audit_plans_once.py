"""``swarmgpu audit`` plans once a run: its placement findings and its ungranted-access
check read the one plan of the snapshot. Before, each made its own (two plans a run, the
second with the swarm read for the first's holds and model). Counted by ``Planner.plan``.
Pure: the swarm is in memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.counted import calls
from support.forged import FACTS, RecordingSwarm, sw_node, sw_svc

from swarmgpu.cli import main
from swarmgpu.manager.nodes import sync
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.placement import Planner
from swarmgpu.swarm import client


def _audit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swarm: RecordingSwarm) -> Any:
    monkeypatch.setattr(client, "SwarmClient", lambda *_a, **_k: swarm)
    monkeypatch.setattr(sync, "fetch_agents", lambda *_a, **_k: {"n-4090": FactsResult(
        "n-4090", "node-4090", "", FACTS["n-4090"], None, 1.0)})
    (tmp_path / "config.yml").write_text(f"state_dir: {tmp_path}\n")
    res = CliRunner().invoke(main, ["audit", "--json", "--config",
                                    str(tmp_path / "config.yml")], catch_exceptions=False)
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.output)


def test_audit_plans_the_snapshot_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plans = calls(monkeypatch, Planner, "plan")
    swarm = RecordingSwarm([sw_node("n-4090", "node-4090")],
                           [sw_svc("llm", {"swarmgpu.gpus": "1"})], [])
    _audit(tmp_path, monkeypatch, swarm)
    assert len(plans) == 1, f"audit planned {len(plans)} times"


def test_audit_planning_with_the_swarm_writes_nothing_and_finds_as_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The one plan is made with the swarm connection (the placement findings' was made
    without it): audit stays read-only, and where Swarm keeps no workload model its
    findings are those of a plan made without the swarm."""
    from swarmgpu.manager.cycle import placement

    def swarm() -> RecordingSwarm:
        return RecordingSwarm([sw_node("n-4090", "node-4090")],
                              [sw_svc("llm", {"swarmgpu.gpus": "1"}),
                               sw_svc("big", {"swarmgpu.gpus": "9"})], [])

    with_swarm = swarm()
    got = _audit(tmp_path, monkeypatch, with_swarm)
    assert with_swarm.writes == 0 and not with_swarm.calls, with_swarm.calls
    real = placement.OnePlan.__init__

    def swarmless(self: Any, cfg: Any, _swarm: Any = None, *a: Any) -> None:
        real(self, cfg, None, *a)

    monkeypatch.setattr(placement.OnePlan, "__init__", swarmless)
    assert _audit(tmp_path, monkeypatch, swarm()) == got
    assert any(f["kind"] == "pending" for f in got["findings"]), got
