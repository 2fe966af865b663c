"""Swarm's scheduler rule on a task that waits for a node, for the in-memory swarms of
the daemon-level tests: a task carries the service's spec version of when it was made
(``SpecVersion``); a pass of the scheduler that finds no node for it re-enqueues it only
while the service's version is not newer. Once any write of the service (labels only
included) has bumped the version, the first pass that finds no node drops it for good
(moby/swarmkit 807f25e, ``manager/scheduler/scheduler.go`` ``noSuitableNode``); only a
new task (ForceUpdate, a task template change) is tried again. ``is_task_dirty``: which
tasks Swarm's updater replaces for a spec write (swarmkit ``IsTaskDirty``).

First written for tests/test_writes_per_cycle.py and tests/test_write_paths.py."""

from __future__ import annotations

from typing import Any


class SpecVersions:
    """The spec version each task was made at, and the tasks the scheduler dropped."""

    def __init__(self) -> None:
        self.made: dict[str, int] = {}  # task id -> the service's version when made
        self.dropped: set[str] = set()  # task ids no pass tries again

    def made_at(self, task_id: str, version: int) -> None:
        self.made[task_id] = version
        self.dropped.discard(task_id)  # a new task of the same id (the stand-in's names)

    def tries(self, task_id: str) -> bool:
        """Whether a scheduler pass still tries the waiting task."""
        return task_id not in self.dropped

    def no_node(self, task_id: str, service_version: int) -> None:
        """A pass found no node for the task: dropped if its service is newer."""
        if service_version > self.made.get(task_id, service_version):
            self.dropped.add(task_id)


def _meets(constraint: str, labels: dict[str, str]) -> bool:
    """One ``node.labels.<key>==|!=<value>`` constraint on a node's labels, as swarmkit's
    ``constraint.NodeMatches`` reads it: a missing label reads as "", values compared
    case-insensitively (the model knows node labels only)."""
    op = "==" if "==" in constraint else "!="
    field, value = (p.strip() for p in constraint.split(op, 1))
    assert field.startswith("node.labels."), f"not modelled: {constraint}"
    have = labels.get(field.removeprefix("node.labels."), "")
    return (have.lower() == value.lower()) == (op == "==")


def is_task_dirty(task_spec: dict[str, Any], service_spec: dict[str, Any],
                  node_labels: dict[str, str] | None) -> bool:
    """swarmkit ``orchestrator.IsTaskDirty`` for the updater: a task (``task_spec``: the
    TaskTemplate it was made from) is replaced when its spec differs from the service's,
    but not when only ``Placement`` differs and its node (``node_labels``; None: no node
    yet) meets the service's constraints (``IsTaskDirtyPlacementConstraintsOnly`` and
    ``nodeMatches``: a task without a node is always dirty then)."""
    new = service_spec.get("TaskTemplate") or {}
    if new == task_spec:
        return False
    rest = {k: v for k, v in new.items() if k != "Placement"}
    if rest == {k: v for k, v in task_spec.items() if k != "Placement"}:
        cons = (new.get("Placement") or {}).get("Constraints") or []
        if node_labels is not None and all(_meets(c, node_labels) for c in cons):
            return False
    return True
