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


class WriteRefusingSwarm(RecordingSwarm):
    """A swarm whose every write fails (and is noted, should a caller swallow it)."""

    def __init__(self, *a: Any, **k: Any) -> None:
        super().__init__(*a, **k)
        self.tried: list[str] = []

    def _refuse(self, what: str) -> bool:
        self.tried.append(what)
        raise AssertionError(f"audit wrote: {what}")

    def update_node_labels(self, node_id: str, *_a: Any, **_k: Any) -> bool:
        return self._refuse(f"node {node_id}")

    def update_service_spec(self, service_id: str, *_a: Any, **_k: Any) -> bool:
        return self._refuse(f"service {service_id}")

    def update_swarm_labels(self, *_a: Any, **_k: Any) -> bool:
        return self._refuse("swarm")


def _stored_model_swarm() -> WriteRefusingSwarm:
    """llm (1 GPU) and big (9: pending), the workload model stored in Swarm's labels."""
    from swarmgpu.allocator.workload import STATE_KEY, WorkloadModel

    return WriteRefusingSwarm([sw_node("n-4090", "node-4090")],
                              [sw_svc("llm", {"swarmgpu.gpus": "1"}),
                               sw_svc("big", {"swarmgpu.gpus": "9"})], [],
                              {f"swarmgpu.{STATE_KEY}": WorkloadModel.prior().dumps()})


def test_audit_with_a_stored_model_writes_nothing_and_says_where_its_plan_read_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """audit plans with the swarm connection, so its findings take in the workload model
    stored in Swarm and the holds its victims' records imply: on a swarm where any write
    fails it runs through, and its output says where the model and the holds came from
    (before, it said neither: the same findings could come from the prior or Swarm's)."""
    swarm = _stored_model_swarm()
    got = _audit(tmp_path, monkeypatch, swarm)
    assert not swarm.tried and swarm.writes == 0, swarm.tried
    assert got["plan"]["workload_model"] == "learned" and got["plan"]["holds"] == 0, got
    assert ("workload model stored in Swarm (the swarm's label swarmgpu.state.workload); "
            "0 GPU hold(s) for preemptors") in got["plan"]["said"], got["plan"]
    assert any(f["kind"] == "pending" for f in got["findings"]), got


def test_audit_text_says_the_holds_its_plan_took_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from swarmgpu.manager.cycle import placement
    from swarmgpu.manager.placement.nominated import Nomination

    held = [Nomination("big", 0, "n-4090", (FACTS["n-4090"].gpus[0].uuid,))]
    monkeypatch.setattr(placement, "one_shot_nominations", lambda *_a, **_k: held)
    swarm = _stored_model_swarm()
    monkeypatch.setattr(client, "SwarmClient", lambda *_a, **_k: swarm)
    monkeypatch.setattr(sync, "fetch_agents", lambda *_a, **_k: {})
    (tmp_path / "config.yml").write_text(f"state_dir: {tmp_path}\n")
    res = CliRunner().invoke(main, ["audit", "--config", str(tmp_path / "config.yml")],
                             catch_exceptions=False)
    assert not swarm.tried, swarm.tried
    assert ("placement findings from one plan made as the daemon would, written nowhere: "
            "workload model stored in Swarm") in res.output, res.output
    assert ("1 GPU hold(s) for preemptors, read from their victims' records "
            "(swarmgpu.state.preempted)") in res.output, res.output
