"""`swarmgpu audit` exit codes on the real test swarm.

A cluster set up as the README and docs/deploy.md say (agents on the GPU nodes, the
GPUs advertised as generic resources, labels synced) audits clean; a GPU node whose
engine advertises no generic resources is only advisory under swarmgpu's default config
(exit 0; --strict exits 1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.gpu_nodes import (
    LOGS,
    RTX4090,
    FakeGpuNode,
    kwargs_for_logs,
    run_cli,
    stop,
    swarmgpu_env,
    wait_port,
)
from support.gpu_nodes import cfg_file as _cfg_file
from support.swarm_harness import SwarmCluster

pytestmark = pytest.mark.swarm
P = "swarmgpu."


def _audit(cfg: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    res = run_cli("audit", "--config", str(cfg), "--json", *extra)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    return res.returncode, json.loads(res.stdout)


def test_cluster_set_up_as_documented_audits_clean(
    swarm: SwarmCluster, agents: dict[str, Any], tmp_path: Path
) -> None:
    cfg = _cfg_file(tmp_path, swarm)
    assert run_cli("run", "--config", str(cfg), "--once").returncode == 0
    code, doc = _audit(cfg)
    hosts = {n.hostname for n in swarm.nodes}
    on_nodes = [f for f in doc["findings"] if f["subject"] in hosts]
    assert on_nodes == [], on_nodes
    # The shipped default, agents.identity swarm-pki, leaves no identity finding.
    assert not [f for f in doc["findings"] if f["kind"] == "agent-identity"], doc
    if not swarm.client(swarm.manager).api.services():
        plan = doc.pop("plan", None)  # where its placement findings' model came from
        assert code == 0 and doc == {"findings": [], "action": 0, "advisory": 0, "exit": 0}
        assert plan is not None and plan["holds"] == 0, plan
        table = run_cli("audit", "--config", str(cfg))
        assert table.returncode == 0 and "agent-identity" not in table.stdout, table.stdout


def test_node_without_generic_resources_is_advisory(
    swarm: SwarmCluster, agents: dict[str, Any], tmp_path: Path
) -> None:
    """mgr-1 advertises no generic resources; give it an agent, so it is a GPU node."""
    mgr = swarm.node("mgr-1")
    api = swarm.client(swarm.manager).api
    fake = FakeGpuNode("mgr-1", RTX4090.capture, RTX4090.product, RTX4090.memory_mib)
    proc = swarm.exec_in_netns(mgr, fake.agent_argv(mgr.addr, 9401, data_root=mgr.data_root),
                               env=swarmgpu_env(),
                               **kwargs_for_logs(LOGS / "agent-mgr-1.log"))
    try:
        wait_port(mgr.addr, 9401)
        cfg = _cfg_file(tmp_path, swarm)
        assert run_cli("run", "--config", str(cfg), "--once").returncode == 0
        code, doc = _audit(cfg)
        mine = [f for f in doc["findings"] if f["subject"] == "mgr-1"]
        assert [(f["kind"], f["severity"]) for f in mine] == [
            ("no-generic-resources", "advisory")], mine
        if doc["action"] == 0:  # nothing else in the shared swarm needs action
            assert code == 0 and doc["exit"] == 0
        table = run_cli("audit", "--config", str(cfg))
        assert "advisory (exit 0 unless --strict):" in table.stdout, table.stdout
        assert "[no-generic-resources] mgr-1" in table.stdout.split("advisory (exit 0")[1]
        strict, doc = _audit(cfg, "--strict")
        assert strict == 1 and doc["exit"] == 1
        # A config whose placement reserves generic resources needs them on every GPU node
        # (only with grants as mounts: under env Swarm's pick would override the grant).
        cfg = _cfg_file(tmp_path, swarm, placement={"generic_resource_kind": "NVIDIA-GPU",
                                                            "grants": "mounts"})
        code, doc = _audit(cfg)
        mine = [f for f in doc["findings"] if f["subject"] == "mgr-1"]
        assert [(f["kind"], f["severity"]) for f in mine] == [
            ("no-generic-resources", "action")], mine
        assert code == 1
    finally:
        stop(proc)
        # Nothing lost or left behind: the shared swarm's mgr-1 gets its labels back.
        spec = api.inspect_node(mgr.node_id)
        labels = {k: v for k, v in (spec["Spec"].get("Labels") or {}).items()
                  if not k.startswith(P)}
        api.update_node(mgr.node_id, spec["Version"]["Index"], {**spec["Spec"], "Labels": labels})
