"""A share over its size whose task Swarm still calls ``starting`` is restarted all the
same, for a tenant that may not opt out. Swarm holds a task in ``starting`` until its
container's health check first passes (moby#24545; one the interval or start period of
which runs for hours keeps it there for hours, moby#35126) while the container runs and
uses the GPU. The restart judged the replica on its node settled only with its task
there ``running``: a health check that never passed was an opt-out. Pure, over the
recording Swarm stand-in (tests/support/forged.py)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.forged import THIRD, RecordingSwarm, snapshot, victim_cluster

from swarmgpu.core.config import Config, PlacementConfig
from swarmgpu.manager.services.overshare import Restarter
from swarmgpu.swarm.client import SwarmTask

MAY_NOT = {"ops": {"services": ["ops-*"], "may_opt_out": True}}  # third: default's
MAY = {"ops": {"services": ["third"], "may_opt_out": True}}


def _restarts(state: str, tenants: Any, tmp_path: Path) -> int:
    """One cycle's over-share restarts of victim_cluster's THIRD, its task ``state``
    (desired running, its container the one the reading was checked against)."""
    base = victim_cluster({})
    tasks = [replace(t, state=state, container_id="c" * 64) if t.id == "t-third" else t
             for t in base.tasks()]
    sw = RecordingSwarm(base.nodes(), base.services(), tasks, base.swarm_labels())
    cfg = Config(state_dir=str(tmp_path), dry_run=False, tenants=tenants,
                 placement=PlacementConfig(overshare="restart"))
    snap = snapshot(sw.nodes(), sw.services(), sw.tasks())
    return Restarter(sw, cfg, wait_s=0.0).run([THIRD], snap)  # type: ignore[arg-type]


@pytest.mark.parametrize("state", ["running", "starting"])
def test_a_task_held_starting_by_its_health_check_is_restarted_over_its_share(
        tmp_path: Path, state: str) -> None:
    assert _restarts(state, MAY_NOT, tmp_path) == 1


def test_a_tenant_that_may_opt_out_is_judged_as_before(tmp_path: Path) -> None:
    """(its own ``rebalance: never`` is its opt-out; nothing of its judging changed)"""
    assert _restarts("starting", MAY, tmp_path) == 0
    assert _restarts("running", MAY, tmp_path) == 1


def _stamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + "Z"


@pytest.mark.parametrize(("starting_for", "restarted"), [
    pytest.param(3600.0, 1, id="starting-past-the-movers-timeout"),
    pytest.param(10.0, 0, id="an-update-under-way"),
])
def test_an_update_whose_new_task_stays_starting_keeps_no_share_over_its_size(
        tmp_path: Path, starting_for: float, restarted: int) -> None:
    """A ``start-first`` update (``update_config.order``) keeps the old task running until
    the new one is running, which a health check whose start period runs for hours holds
    ``starting`` as long: two tasks on the node judged read as not converged, and the old
    one, over its share, was never restarted (its owner's update, an opt-out). A task
    there ``starting`` longer than ``rebalance.move_timeout_s`` (as long as the mover
    waits for a task it made to run) is no update the restart waits for; a younger one
    is."""
    base = victim_cluster({})
    tasks = [replace(t, container_id="c" * 64) if t.id == "t-third" else t
             for t in base.tasks()]
    assert _restarts_beside_an_update(tmp_path, base, tasks, starting_for) == restarted


@pytest.mark.parametrize(("starting_for", "restarted"), [
    pytest.param(3600.0, 1, id="both-starting-past-the-movers-timeout"),
    pytest.param(10.0, 0, id="an-update-under-way"),
])
def test_an_update_of_a_task_itself_held_starting_keeps_no_share_over_its_size(
        tmp_path: Path, starting_for: float, restarted: int) -> None:
    """The old task held ``starting`` too (a health check whose interval runs for hours
    never ran), and a ``start-first`` update beside it held so as well: no task there
    ``running``, so the rule above for a task held ``starting`` beside a running one did
    not apply, both read as running, two of one replica: not converged, the share over
    its size never restarted. Beside another task of the service there, running or
    held ``starting`` (as running), a task ``starting`` past ``move_timeout_s`` is left
    out."""
    base = victim_cluster({})
    old = time.time() - 7200.0
    tasks = [replace(t, state="starting", container_id="c" * 64, created_at=_stamp(old))
             if t.id == "t-third" else t for t in base.tasks()]
    assert _restarts_beside_an_update(tmp_path, base, tasks, starting_for) == restarted


def _restarts_beside_an_update(tmp_path: Path, base: Any, tasks: list[SwarmTask],
                               starting_for: float) -> int:
    """The restarts of THIRD's share with ``tasks`` and, beside them on its node, an
    update's new task held ``starting`` for ``starting_for`` seconds."""
    tasks = [*tasks, SwarmTask("t-third-new", "id-third", "n-4090", 1, "starting",
                               "running", (), created_at=_stamp(time.time() - starting_for))]
    sw = RecordingSwarm(base.nodes(), base.services(), tasks, base.swarm_labels())
    cfg = Config(state_dir=str(tmp_path), dry_run=False, tenants=MAY_NOT,
                 placement=PlacementConfig(overshare="restart"))
    snap = snapshot(sw.nodes(), sw.services(), sw.tasks())
    return Restarter(sw, cfg, wait_s=0.0).run([THIRD], snap)  # type: ignore[arg-type]
