"""A task Swarm's scheduler no longer tries, on the real test swarm: a write of the
service (a label, by anyone) while its task waits for a node leaves that task of an
older revision pending for good (moby/swarmkit 807f25e, ``noSuitableNode``), even once
its node can take it. The daemon replaces it where it is once its gate has been open a
while: a forced update where nothing of the service runs, a change of placement alone
that every node meets beside a running replica (docs/requests.md; the pure side:
tests/test_stranded.py)."""

from __future__ import annotations

from typing import Any

import pytest
from support.daemon import ModuleDaemon
from support.stranded_swarm import strand
from support.swarm_harness import SwarmCluster
from support.swarm_services import P, deploy, wait_running

pytestmark = pytest.mark.swarm

DAEMON = ModuleDaemon("stranded-daemon.log", {"sync": {"interval_s": 2}},
                      remove_stacks=("strand",))
HOST = "gpu-node-1"


def test_a_task_left_behind_by_a_label_write_is_replaced_and_runs(
    swarm: SwarmCluster, daemon: dict[str, Any]
) -> None:
    """(1) ``x`` (gpus 0, pinned to one node) runs behind its gate. (2) Its node paused
    and a forced update: its new task waits, no node for it. (3) A label added by hand:
    the waiting task is now of an older revision; a node update makes Swarm's scheduler
    look at it (no node: dropped from its queue). (4) The node active again: Swarm never
    tries that task; the daemon, its gate open and Swarm's old message standing, replaces
    it where it is, and it runs there."""
    mgr = swarm.manager
    deploy(swarm, daemon["tmp"], "strand", {
        "x": {"labels": {f"{P}gpus": "0"}, "constraints": [f"node.hostname=={HOST}"]}})
    (first,) = wait_running(swarm, "strand_x", 1)
    pending = strand(swarm, "strand_x", HOST, lambda: swarm.cli(
        mgr, "service", "update", "--detach", "--force", "strand_x"),
        "x's new task waiting for a node")
    # Gate open for the grace (5 s), then a forced update (back-off: the first is at
    # once): a new task, which Swarm places.
    (t,) = wait_running(swarm, "strand_x", 1, timeout=90)
    assert t["ID"] not in (first["ID"], pending["ID"]), t
    assert swarm.node(t["NodeID"]).hostname == HOST
    api = swarm.client(mgr).api
    old = api.inspect_task(pending["ID"])
    assert old["DesiredState"] != "running", old["DesiredState"]


def test_a_task_left_behind_beside_a_running_replica_is_replaced_alone(
    swarm: SwarmCluster, daemon: dict[str, Any]
) -> None:
    """(1) ``y`` (gpus 0, two replicas, workers only: one per worker) runs behind its
    gates. (2) gpu-node-2 paused and its task's container killed: Swarm's replacement
    waits, no node for it (gpu-node-1 holds one replica already). (3) A label added by
    hand and a node update: that task, of an older revision, is dropped from the
    scheduler's queue. (4) gpu-node-2 active again: the daemon, its gate open and Swarm's
    old message standing, replaces the waiting task alone by a change of placement that
    every node meets (the renewal constraint): it runs on gpu-node-2, and the replica on
    gpu-node-1 keeps running, the same task."""
    mgr, other = swarm.manager, "gpu-node-2"
    deploy(swarm, daemon["tmp"], "strand", {
        "y": {"labels": {f"{P}gpus": "0"}, "replicas": 2,
              "constraints": ["node.role==worker"]}})
    first = wait_running(swarm, "strand_y", 2, timeout=90)
    on = {swarm.node(t["NodeID"]).hostname: t for t in first}
    assert set(on) == {HOST, other}, sorted(on)

    def kill() -> None:
        cid = on[other]["Status"]["ContainerStatus"]["ContainerID"]
        swarm.client(swarm.node(other)).api.kill(cid)

    pending = strand(swarm, "strand_y", other, kill, "y's replacement task waiting for a node")
    ts = wait_running(swarm, "strand_y", 2, timeout=90,
                      each=lambda t: t["ID"] != pending["ID"], what=", the waiting one replaced")
    now = {swarm.node(t["NodeID"]).hostname: t["ID"] for t in ts}
    assert now[HOST] == on[HOST]["ID"], "the running replica was replaced"
    assert now[other] not in (on[other]["ID"], pending["ID"])
    api = swarm.client(mgr).api
    cons = api.inspect_service("strand_y")["Spec"]["TaskTemplate"]["Placement"]["Constraints"]
    assert any(c.startswith(f"node.labels.{P}state.renew!=") for c in cons), cons
    assert api.inspect_task(pending["ID"])["DesiredState"] != "running"
