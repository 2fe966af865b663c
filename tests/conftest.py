"""Shared pytest fixtures.

Real-swarm fixtures (see tests/swarm_harness.py): `swarm` (session: mgr-1 + gpu-node-1,
gpu-node-2 advertising the GPUs of tests/gpu_nodes.py), `swarm3` (module: 3 managers +
1 worker, for fail-over), `swarm_factory` (session: start any other shape; all torn
down at the end of the session), `swarm_required` (fail/skip check only).
They FAIL when the machine cannot run a swarm (not root, no dockerd...), unless
SWARMGPU_SKIP_SWARM=1 is set, which turns that into a skip.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from swarm_harness import (
    SwarmCluster,
    cleanup_stale,
    gpu_resource_args,
    preflight,
)

REPO = Path(__file__).resolve().parent.parent
SWARM_ARTIFACTS = REPO / "artifacts" / "swarm"  # dockerd logs per run and node
_KEEP_RUN_LOGS = 10


def _require_swarm() -> None:
    problems = preflight()
    if not problems:
        return
    reason = "the real test swarm cannot start here: " + "; ".join(problems)
    if os.environ.get("SWARMGPU_SKIP_SWARM") == "1":
        pytest.skip(reason + " (skipped: SWARMGPU_SKIP_SWARM=1)")
    pytest.fail(
        reason + ". Run as root with docker.io installed (see .ci/run), "
        "or set SWARMGPU_SKIP_SWARM=1 to skip swarm tests.",
        pytrace=False,
    )


def _prune_old_logs() -> None:
    runs = sorted(SWARM_ARTIFACTS.glob("sgt*"), key=lambda p: p.stat().st_mtime)
    for old in runs[:-_KEEP_RUN_LOGS]:
        shutil.rmtree(old, ignore_errors=True)


SwarmFactory = Callable[..., SwarmCluster]


@pytest.fixture
def swarm_required() -> None:
    """For tests that drive a SwarmCluster themselves: fail/skip like `swarm` does."""
    _require_swarm()


@pytest.fixture(scope="session")
def swarm_factory() -> Iterator[SwarmFactory]:
    """`swarm_factory(managers=.., workers=.., extra_args={...})` -> a started cluster."""
    started: list[SwarmCluster] = []
    prepared = False

    def make(**kwargs: Any) -> SwarmCluster:
        nonlocal prepared
        _require_swarm()
        if not prepared:
            cleanup_stale()  # only runs whose owner process is gone
            SWARM_ARTIFACTS.mkdir(parents=True, exist_ok=True)
            _prune_old_logs()
            prepared = True
        kwargs.setdefault("log_dir", SWARM_ARTIFACTS)
        cluster = SwarmCluster(**kwargs)
        started.append(cluster)
        return cluster.start()

    try:
        yield make
    finally:
        for cluster in started:
            cluster.teardown()


@pytest.fixture(scope="session")
def swarm(swarm_factory: SwarmFactory) -> Iterator[SwarmCluster]:
    """mgr-1 + gpu-node-1 + gpu-node-2; each worker advertises, as NVIDIA-GPU generic
    resources, the GPU UUIDs of the machine it stands in for (tests/gpu_nodes.py)."""
    from gpu_nodes import GPU_NODES  # lazy: imports swarmgpu, only needed with a swarm

    cluster = swarm_factory(
        managers=1,
        workers=2,
        extra_args={host: gpu_resource_args(n.uuids()) for host, n in GPU_NODES.items()},
    )
    try:
        yield cluster
    finally:
        cluster.teardown()


@pytest.fixture(scope="module")
def swarm3(swarm_factory: SwarmFactory) -> Iterator[SwarmCluster]:
    """mgr-1..mgr-3 (a real raft quorum) + gpu-node-1; fresh per module.

    Raft election tick 3 (swarmkit default 10, 1 s ticks): fail-over tests wait about
    8-11 s for a new leader instead of 11-19 s (both measured here).
    """
    cluster = swarm_factory(
        managers=3, workers=1, swarm_spec={"election_tick": 3, "heartbeat_tick": 1}
    )
    try:
        yield cluster
    finally:
        cluster.teardown()
