"""Label sync's write-time task check covers a service created after the snapshot.

Label sync plans a node's labels from the snapshot, whose task list was read before
the agents and the plan. At write time a change is checked against the node's tasks
as Swarm has them then (``Actuator.label_compute``): a task placed there meanwhile,
whose constraints read a key about to change, would be stopped by Swarm's constraint
enforcer. That re-read was skipped for keys no constraint of the snapshot read
(``sync._watched``): a service created after the snapshot, its task on the node and
constrained on such a key, was not seen, and the change stopped it. Pure, over the
recording Swarm stand-in (tests/support/write_time.py)."""

from __future__ import annotations

from pathlib import Path

from support.write_time import gpu_present_after_sync


def test_label_sync_holds_a_change_a_service_created_since_the_snapshot_reads(
        tmp_path: Path) -> None:
    # Created and placed after the snapshot: in Swarm's task list, in no snapshot.
    assert gpu_present_after_sync(tmp_path, "t-new", "s-new", "running") == "true"
