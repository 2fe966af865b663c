"""A global service over its share on a node is restarted there as a replicated one is:
the restart closes that node's gate and Swarm's global orchestrator makes a fresh task
there once it reopens (the repin's way, docs/rebalancing.md), every other node's task
left running. Judged as a move to another node, it was refused (``global service:
moved only between GPUs of its own node``) for every service, said at info: a share
over its size run as ``mode: global`` was an opt-out from the over-share restart, a
tenant's that may not opt out too. Pure, over the recording Swarm stand-in
(tests/support/forged.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.forged import (
    FACTS,
    T_UUID,
    THIRD,
    P,
    RecordingSwarm,
    held_labels,
    snapshot,
    sw_svc,
    victim_cluster,
)

from swarmgpu.core.config import Config, PlacementConfig
from swarmgpu.manager.placement import devices_key
from swarmgpu.manager.services.overshare import Restarter
from swarmgpu.swarm.client import SwarmTask

MAY_NOT = {"ops": {"services": ["ops-*"], "may_opt_out": True}}  # third: default's


def _global_third() -> RecordingSwarm:
    """victim_cluster's third as a global service holding a GPU on both GPU nodes, its
    task on each running (n-4090's the container its reading was checked against)."""
    base = victim_cluster({})
    dgx_gpu1 = FACTS["n-dgx"].gpus[1].uuid
    third = sw_svc("third", {f"{P}gpus": "1", devices_key(P, "n-4090"): T_UUID,
                             devices_key(P, "n-dgx"): dgx_gpu1}, mode={"Global": {}})
    nodes = [replace(n, labels={**n.labels, **held_labels("third", "n-dgx", dgx_gpu1)})
             if n.id == "n-dgx" else n for n in base.nodes()]
    tasks = [replace(t, container_id="c" * 64) if t.id == "t-third" else t
             for t in base.tasks()]
    tasks.append(SwarmTask("t-third-2", third.id, "n-dgx", 0, "running", "running", ()))
    services = [third if s.id == third.id else s for s in base.services()]
    return RecordingSwarm(nodes, services, tasks, base.swarm_labels())


@pytest.mark.parametrize("tenants", [
    pytest.param({}, id="no-tenants"),
    pytest.param(MAY_NOT, id="a-tenant-that-may-not-opt-out"),
])
def test_a_global_service_over_its_share_is_restarted_on_that_node_alone(
        tmp_path: Path, tenants: Mapping[str, Any]) -> None:
    sw = _global_third()
    assert sw.service("id-third").mode == "global"
    snap = snapshot(sw.nodes(), sw.services(), sw.tasks())
    cfg = Config(state_dir=str(tmp_path), dry_run=False, tenants=dict(tenants),
                 placement=PlacementConfig(overshare="restart"))
    assert Restarter(sw, cfg, wait_s=0.0).run([THIRD], snap) == 1  # type: ignore[arg-type]
    closed = [c for c in sw.calls if c[0] == "node"]
    assert closed and all(c[1] == "n-4090" for c in closed), sw.calls  # n-dgx untouched
