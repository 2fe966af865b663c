"""Two replicas of one service over their share on two nodes, with
``rebalance.max_moves_per_cycle`` 2 (one a node): the over-share restart judged both
from the cycle's snapshot, read before either restart (the service converged, no
cool-down mark yet), and restarted both in the same cycle: every replica of the
service down at once. Its first restart now holds the others back until a later cycle
reads its mark (a tenant that may opt out: the service's cool-down; one that may not:
the replacement's run, ``onereplica.down_elsewhere``). Pure, over the recording Swarm
stand-in (tests/support/forged.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.forged import FACTS, THIRD, P, RecordingSwarm, held_labels, snapshot, victim_cluster

from swarmgpu.core.config import Config, PlacementConfig, RebalanceConfig
from swarmgpu.manager.services.overshare import Restarter
from swarmgpu.swarm.client import SwarmTask

DGX_GPU1 = FACTS["n-dgx"].gpus[1].uuid
# its second replica over its share too, on n-dgx's GPU 1
OTHER = replace(THIRD, node_id="n-dgx", hostname="gpu-node-1", gpu=1, uuid=DGX_GPU1,
                tasks=("t-third-2",), containers=("d" * 12,))


@pytest.mark.parametrize("tenants", [
    pytest.param(None, id="no-tenants"),
    pytest.param({"ops": {"services": ["ops-*"], "may_opt_out": True}},
                 id="a-tenant-that-may-not-opt-out"),
])
def test_one_replica_of_a_service_is_restarted_a_cycle(tmp_path: Path, tenants: Any) -> None:
    base = victim_cluster({})
    third = replace(base.service("id-third"), replicas=2, max_replicas_per_node=1)
    nodes = [replace(n, labels={**n.labels, **held_labels("third", "n-dgx", DGX_GPU1)})
             if n.id == "n-dgx" else n for n in base.nodes()]
    tasks = [replace(t, container_id="c" * 64) if t.id == "t-third" else t
             for t in base.tasks()]
    tasks.append(SwarmTask("t-third-2", third.id, "n-dgx", 2, "running", "running", (),
                           container_id="d" * 64))
    services = [third if s.id == third.id else s for s in base.services()]
    sw = RecordingSwarm(nodes, services, tasks, base.swarm_labels())
    cfg = Config(state_dir=str(tmp_path), dry_run=False, tenants=tenants,
                 placement=PlacementConfig(overshare="restart"),
                 rebalance=RebalanceConfig(max_moves_per_cycle=2))
    snap = snapshot(sw.nodes(), sw.services(), sw.tasks())
    r = Restarter(sw, cfg, wait_s=0.0)  # type: ignore[arg-type]
    assert r.run([THIRD, OTHER], snap) == 1
    assert sw.service("id-third").labels.get(P + "state.moved-at")
