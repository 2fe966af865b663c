"""For a tenant that may not opt out, the over-share restart judges the replica on its
node alone (a replica left waiting elsewhere is no opt-out), and its cool-down by the
tasks on that node. So the daemon's restart of one replica left the next replica free
to restart a cycle later, while the first one's replacement had not yet run: two of
the service's replicas down at once, by the daemon's own doing. Now, within
``rebalance.move_timeout_s`` of a restart of that service the daemon recorded
(``<p>state.restarts``), a replica whose placed node runs no task of it holds the next
restart back; past it, or with no such record (its own code ended it, a crash loop),
it does not: that is no opt-out either. Pure, over the recording Swarm stand-in
(tests/support/forged.py)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from support.forged import FACTS, THIRD, P, RecordingSwarm, held_labels, snapshot, victim_cluster

from swarmgpu.core.config import Config, PlacementConfig
from swarmgpu.manager.services.overshare import Restarter
from swarmgpu.swarm.client import SwarmTask

MAY_NOT = {"ops": {"services": ["ops-*"], "may_opt_out": True}}  # third: default's


def _stamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + "Z"


def _restarts(tmp_path: Path, other_state: str, restarted_ago: float | None) -> int:
    """One cycle's restarts of THIRD (over its share on n-4090, its task there running
    since an hour) with a second replica placed on n-dgx whose task is ``other_state``,
    made after the daemon's restart of it ``restarted_ago`` seconds ago (None: no
    restart in the daemon's list)."""
    base = victim_cluster({})
    now = time.time()
    at = now - (restarted_ago if restarted_ago is not None else 30.0)
    third = replace(base.service("id-third"), replicas=2, max_replicas_per_node=1,
                    labels={**base.service("id-third").labels,
                            P + "state.moved-at": f"{at:.0f}"})
    dgx_gpu1 = FACTS["n-dgx"].gpus[1].uuid
    nodes = [replace(n, labels={**n.labels, **held_labels("third", "n-dgx", dgx_gpu1)})
             if n.id == "n-dgx" else n for n in base.nodes()]
    tasks = [replace(t, container_id="c" * 64, created_at=_stamp(now - 3600))
             if t.id == "t-third" else t for t in base.tasks()]
    tasks.append(SwarmTask("t-third-2", third.id, "n-dgx", 2, other_state, "running", (),
                           created_at=_stamp(at + 2)))
    listed = ({P + "state.restarts": f"id-third@{at:.0f}"}
              if restarted_ago is not None else {})
    services = [third if s.id == third.id else s for s in base.services()]
    sw = RecordingSwarm(nodes, services, tasks, {**base.swarm_labels(), **listed})
    cfg = Config(state_dir=str(tmp_path), dry_run=False, tenants=MAY_NOT,
                 placement=PlacementConfig(overshare="restart"))
    snap = snapshot(sw.nodes(), sw.services(), sw.tasks())
    return Restarter(sw, cfg, wait_s=0.0).run([THIRD], snap)  # type: ignore[arg-type]


@pytest.mark.parametrize("state", ["pending", "assigned", "preparing", "failed"])
def test_a_replica_is_not_restarted_while_the_daemons_last_restart_has_not_run_again(
        tmp_path: Path, state: str) -> None:
    assert _restarts(tmp_path, state, restarted_ago=30.0) == 0


@pytest.mark.parametrize(("state", "restarted_ago", "restarted"), [
    pytest.param("running", 30.0, 1, id="its-replacement-runs"),
    pytest.param("starting", 30.0, 1, id="its-replacement-held-starting-by-a-health-check"),
    pytest.param("pending", 600.0, 1, id="past-the-movers-timeout"),
    pytest.param("pending", None, 1, id="down-by-no-restart-of-the-daemons"),
])
def test_a_replica_down_by_no_recent_restart_of_the_daemons_is_no_opt_out(
        tmp_path: Path, state: str, restarted_ago: float | None, restarted: int) -> None:
    assert _restarts(tmp_path, state, restarted_ago) == restarted
