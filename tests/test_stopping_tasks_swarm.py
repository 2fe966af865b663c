"""Tasks Swarm is stopping, on the real test swarm: a scaled-down or removed service's
task that ignores SIGTERM runs on for its ``stop_grace_period`` with desired state
``shutdown`` or ``remove`` and actual state ``running``; the daemon's snapshot lists it
apart (``Snapshot.stopping``, through the engine's ``desired-state`` filter), never
among the tasks meant to run, and drops it once it has stopped. The pure tests
(tests/test_stopping_tasks.py) take this shape of Swarm's answer as given."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from support.swarm_harness import IMAGE, SwarmCluster

from swarmgpu.core.config import Config
from swarmgpu.manager.nodes import sync
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.swarm.client import SwarmClient

pytestmark = pytest.mark.swarm

GRACE_S = 30


def _until(ok: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


def _stubborn(swarm: SwarmCluster, name: str) -> None:
    """One replica that ignores SIGTERM: Swarm stops it at the end of its grace period."""
    swarm.cli(swarm.manager, "service", "create", "--detach", "--no-resolve-image",
              "--name", name, "--stop-grace-period", f"{GRACE_S}s",
              "--constraint", "node.role==manager", IMAGE,
              "sh", "-c", "trap '' TERM; while true; do sleep 1; done")


@pytest.mark.parametrize("how", ["scale", "remove"])
def test_a_stopping_task_is_listed_apart_while_it_runs(
        swarm: SwarmCluster, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    monkeypatch.setattr(sync, "fetch_agents", lambda *_a, **_k: {})
    client = SwarmClient(swarm.manager.docker_host)
    name = f"stubborn-{how}"
    _stubborn(swarm, name)
    try:
        sid = next(s.id for s in client.services() if s.name == name)

        def snap() -> Snapshot:
            return sync.take_snapshot(client, Config())

        _until(lambda: any(t.service_id == sid and t.state == "running"
                           for t in snap().tasks), 60, "the task did not start")
        (tid,) = [t.id for t in snap().tasks if t.service_id == sid]
        if how == "scale":
            swarm.cli(swarm.manager, "service", "scale", "--detach", f"{name}=0")
        else:
            swarm.cli(swarm.manager, "service", "rm", name)
        _until(lambda: tid not in {t.id for t in snap().tasks}, 10, "still meant to run")
        s = snap()
        (t,) = [t for t in s.stopping if t.id == tid]
        assert t.state == "running" and t.desired_state in ("shutdown", "remove"), t
        assert t.node_id and tid not in {x.id for x in s.tasks}
        _until(lambda: tid not in {t.id for t in snap().stopping}, GRACE_S + 30,
               "the task stopped but is still listed as stopping")
    finally:
        swarm.cli(swarm.manager, "service", "rm", name, check=False)
