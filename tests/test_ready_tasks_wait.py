"""A task Swarm made with desired state ``ready`` (swarmkit's restart supervisor during
a restart delay, its updater while the old task stops) is scheduled, or waits for a
node, as a desired-running one does: every write that must not leave a waiting task of
an older revision counts it (``placement.keys.MEANT_STATES``): a preemption victim's
spec write (``cycle.victimspec.renewed``), a repin's writes (``rebalance.repin.Waits``)
and the repin's step 3 (the gate reopens once Swarm wants no task on the node)."""

from __future__ import annotations

from support.forged import RecordingSwarm, sw_node, sw_svc

from swarmgpu.manager.cycle.victimspec import renewed
from swarmgpu.manager.rebalance.repin import Waits
from swarmgpu.swarm.client import SwarmTask


def _task(tid: str, node: str | None, desired: str, state: str) -> SwarmTask:
    return SwarmTask(tid, "id-v", node, None, state, desired, ())


def _victim(*tasks: SwarmTask) -> RecordingSwarm:
    return RecordingSwarm([sw_node("n-mgr", "manager", role="manager")],
                          [sw_svc("v", {}, replicas=2)], list(tasks))


def test_a_victims_task_waiting_in_its_restart_delay_is_renewed_by_its_write() -> None:
    """Before: only tasks desired running were read, so a replacement in its restart
    delay (desired ready, pending: no node fits) was left of the older revision by the
    victim's spec write, and Swarm's scheduler never tried it again."""
    sw = _victim(_task("t-run", "n-mgr", "running", "running"),
                 _task("t-old", None, "shutdown", "failed"),
                 _task("t-new", None, "ready", "pending"))
    got = renewed(sw, "id-v")  # type: ignore[arg-type]
    assert got is not None and got.id == "id-v"


def test_a_victim_whose_tasks_all_have_a_node_is_written_plain() -> None:
    sw = _victim(_task("t-run", "n-mgr", "running", "running"),
                 _task("t-new", "n-mgr", "ready", "assigned"),
                 _task("t-old", None, "shutdown", "failed"))
    assert renewed(sw, "id-v") is None  # type: ignore[arg-type]


def test_a_repin_counts_a_task_desired_ready_without_a_node_as_waiting() -> None:
    """Before: ``Waits`` saw nothing waiting, so a repin's spec write beside the running
    replica was made at once and left that task of an older revision for good."""
    w = Waits.of([_task("t-run", "n-mgr", "running", "running"),
                  _task("t-new", None, "ready", "pending")])
    assert w.held and w.ids == ("t-new",)
    alone = Waits.of([_task("t-new", None, "ready", "pending")])
    assert alone.renew and not alone.held
