"""A task Swarm's scheduler no longer tries, made on the real test swarm: with its node
paused a task of a service waits for a node, a label written by hand makes that task
of an older revision, and a node update has the scheduler drop it from its queue.

First written in tests/test_stranded_swarm.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from support.swarm_harness import SwarmCluster


def waiting(swarm: SwarmCluster, service: str) -> list[dict[str, Any]]:
    """``service``'s tasks meant to run that have no node yet."""
    api = swarm.client(swarm.manager).api
    return [t for t in api.tasks(filters={"service": service, "desired-state": "running"})
            if not t.get("NodeID") and t["Status"]["State"] == "pending"]


def strand(swarm: SwarmCluster, service: str, host: str, make_wait: Callable[[], object],
           what: str) -> dict[str, Any]:
    """``host`` paused, ``make_wait()`` leaves a task of ``service`` waiting for a node
    (``what``); a label added by hand and a node update: that task, of an older revision
    now, is out of Swarm's queue. Returns it, ``host`` active again (Swarm never tries
    it again)."""
    mgr = swarm.manager
    try:
        swarm.cli(mgr, "node", "update", "--availability", "pause", host)
        make_wait()
        (pending,) = swarm.wait_for(lambda: waiting(swarm, service), 30, what)
        swarm.cli(mgr, "service", "update", "--detach", "--label-add", "team=ml", service)
        # Any node update makes the scheduler try its queue: the task finds no node and,
        # of an older revision now, is not queued again.
        swarm.cli(mgr, "node", "update", "--label-add", "strand.nudge=1", host)
        time.sleep(1.0)  # (the scheduler's pass follows the update within 50 ms)
        assert [t["ID"] for t in waiting(swarm, service)] == [pending["ID"]]
    finally:
        swarm.cli(mgr, "node", "update", "--availability", "active", host, check=False)
        swarm.cli(mgr, "node", "update", "--label-rm", "strand.nudge", host, check=False)
    return pending
