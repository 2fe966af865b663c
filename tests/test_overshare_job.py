"""A Swarm job (``replicated-job``, ``global-job``) holding a share over its size is never
restarted by ``placement.overshare: restart``: any write of a job's spec (the restart's
cool-down mark) starts a new run of it, and its gate closed on the node would have
Swarm reject its tasks completed there and run them again. It was said at info
("replicated-job service: never moved"), so a share deployed as a job with a
long-running command dodged the restart with no word to the operator. It is now a
warning once while it lasts, naming the service, why and the fix, and audit's
``over-share`` finding says the restart will not come. Pure, over the recording Swarm
stand-in (tests/support/forged.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from support.forged import THIRD, RecordingSwarm, snapshot, victim_cluster
from support.loglines import log_lines

from swarmgpu.core.config import Config, PlacementConfig
from swarmgpu.manager.services.overshare import Restarter, findings

MAY_NOT = {"ops": {"services": ["ops-*"], "may_opt_out": True}}  # third: default's


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    yield from log_lines("WARNING")


@pytest.mark.parametrize("mode", ["replicated-job", "global-job"])
@pytest.mark.parametrize("tenants", [None, MAY_NOT], ids=["no-tenants", "may-not-opt-out"])
def test_a_job_over_its_share_is_not_restarted_and_the_operator_is_warned_once(
        tmp_path: Path, warnings: list[str], mode: str, tenants: object) -> None:
    base = victim_cluster({})
    services = [replace(s, mode=mode, replicas=None if mode == "global-job" else 1)
                if s.id == "id-third" else s for s in base.services()]
    tasks = [replace(t, container_id="c" * 64) if t.id == "t-third" else t
             for t in base.tasks()]
    sw = RecordingSwarm(base.nodes(), services, tasks, base.swarm_labels())
    cfg = Config(state_dir=str(tmp_path), dry_run=False, tenants=tenants,
                 placement=PlacementConfig(overshare="restart"))
    snap = snapshot(sw.nodes(), sw.services(), sw.tasks())
    r = Restarter(sw, cfg, wait_s=0.0)  # type: ignore[arg-type]
    for _ in range(3):  # three cycles over its share
        assert r.run([THIRD], snap) == 0
    assert sw.calls == []  # no write: one would run the job anew
    said = [w for w in warnings if "third" in w]
    assert len(said) == 1, said
    assert f"a job ({mode})" in said[0] and "gpu-node-2" in said[0], said[0]
    assert "whole GPU" in said[0] and "SWARMGPU_GPU_MEMORY_MIB" in said[0], said[0]


def test_audit_says_a_job_over_its_share_is_not_restarted() -> None:
    job, = findings([THIRD], (), jobs={"third": "replicated-job"})
    assert job.kind == "over-share" and not job.advisory
    assert "never restarted" in job.message and "whole GPU" in job.message, job.message
    other, = findings([THIRD], ())
    assert "never restarted" not in other.message


def test_the_fix_said_keeps_a_jobs_memory_filter(tmp_path: Path,
                                                 warnings: list[str]) -> None:
    """The fix said to drop ``gpu-memory`` too, which is no share but the least memory
    each GPU must have: a job dropping it may be placed on a GPU too small for it. A
    share comes of ``gpu-fraction`` alone, named with the configured prefix."""
    job, = findings([THIRD], (), jobs={"third": "replicated-job"})
    assert "gpu-memory" not in job.message and "swarmgpu.gpu-fraction" in job.message
    base = victim_cluster({})
    services = [replace(s, mode="replicated-job", replicas=1) if s.id == "id-third" else s
                for s in base.services()]
    sw = RecordingSwarm(base.nodes(), services, base.tasks(), base.swarm_labels())
    cfg = Config(state_dir=str(tmp_path), dry_run=False,
                 placement=PlacementConfig(overshare="restart"))
    snap = snapshot(sw.nodes(), sw.services(), sw.tasks())
    Restarter(sw, cfg, wait_s=0.0).run([THIRD], snap)  # type: ignore[arg-type]
    said, = [w for w in warnings if "third" in w]
    assert "gpu-memory" not in said and "swarmgpu.gpu-fraction" in said, said
