"""A one-shot command (``plan``, ``status``, ``render``, ``audit``, ``apply``) builds the
operator's tenants once and hands them on, as the daemon does (``Daemon.tenants``).

Before: each reader built its own from the config: the snapshot (``take_snapshot``),
the planner (``new_planner``), preemption's preview (``Preempter``), ``render``'s check
and ``audit``'s two plans, two to four builds a run. Counted here by the parser behind
``Tenants.from_config`` (the config's own check at load is not a build). Pure: the
swarm is in memory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.forged import FACTS, RecordingSwarm, sw_node, sw_svc

from swarmgpu.cli import main
from swarmgpu.cli import manager as cli_manager
from swarmgpu.manager.nodes import sync
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.services import tenants as tenants_mod
from swarmgpu.swarm import client

CONFIG = """\
tenants:
  team-a: {stacks: ["ai*"], max_priority: 10}
"""
STACK = ('version: "3.8"\nservices:\n  llm:\n    image: x\n    deploy:\n'
         '      labels:\n        swarmgpu.gpus: "1"\n')


@pytest.fixture
def parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Each parse of the tenants behind ``Tenants.from_config``; the swarm one GPU node
    (its agent answering) running ``ai_llm``."""
    count: list[Any] = []
    real = tenants_mod.parse_tenants

    def counted(*a: Any, **k: Any) -> Any:
        count.append(a[0])
        return real(*a, **k)

    node = sw_node("n-4090", "node-4090")
    svc = sw_svc("ai_llm", {"swarmgpu.gpus": "1", "com.docker.stack.namespace": "ai"})
    monkeypatch.setattr(tenants_mod, "parse_tenants", counted)
    monkeypatch.setattr(client, "SwarmClient",
                        lambda *_a, **_k: RecordingSwarm([node], [svc], []))
    monkeypatch.setattr(sync, "fetch_agents", lambda *_a, **_k: {"n-4090": FactsResult(
        "n-4090", "node-4090", "", FACTS["n-4090"], None, 1.0)})
    monkeypatch.setattr(cli_manager, "_daemon_moves", lambda _cfg: None)
    (tmp_path / "config.yml").write_text(f"state_dir: {tmp_path}\n{CONFIG}")
    (tmp_path / "ai.yml").write_text(STACK)
    return count


@pytest.mark.parametrize("args", [["plan"], ["plan", "--json"], ["status", "--json"],
                                  ["audit"], ["render"], ["render", "--check"],
                                  ["apply", "--service", "ai_llm", "--dry-run"]])
def test_a_one_shot_command_builds_the_tenants_once(
        args: list[str], parses: list[Any], tmp_path: Path) -> None:
    if args[0] == "render":
        args = [*args, str(tmp_path / "ai.yml")]
    res = CliRunner().invoke(main, [*args, "--config", str(tmp_path / "config.yml")],
                             catch_exceptions=False)
    assert res.exit_code in (0, 1), res.output
    assert len(parses) == 1, f"{args}: tenants built {len(parses)} times"
    assert parses[0] == {"team-a": {"stacks": ["ai*"], "max_priority": 10}}


def test_the_tenants_handed_on_still_decide_the_plan(parses: list[Any], tmp_path: Path) -> None:
    """The one build is the one applied: ai_llm is team-a's in `plan --json`."""
    res = CliRunner().invoke(main, ["plan", "--json", "--config", str(tmp_path / "config.yml")],
                             catch_exceptions=False)
    (sp,) = json.loads(res.output)["services"]
    assert sp["name"] == "ai_llm" and sp["tenant"] == "team-a", sp


def test_status_json_has_every_field_of_the_cluster_document(
        parses: list[Any], tmp_path: Path) -> None:
    """`status --json` is documented as /api/v1/cluster's document: it lacked what the
    daemon sets on each answer (``webmap.LIVE_KEYS``: how its last cycle ended, and
    when). The command runs no cycle of the daemon's: those are null."""
    from swarmgpu.manager.web.webmap import LIVE_KEYS

    res = CliRunner().invoke(main, ["status", "--json", "--config",
                                    str(tmp_path / "config.yml")], catch_exceptions=False)
    doc = json.loads(res.output)
    assert set(LIVE_KEYS) <= set(doc), sorted(set(LIVE_KEYS) - set(doc))
    assert doc["last_cycle"] is None and doc["last_cycle_at"] is None, doc
