"""Swarm's scheduler rule on a task that waits for a node, for the in-memory swarms of
the daemon-level tests: a task carries the service's spec version of when it was made
(``SpecVersion``); a pass of the scheduler that finds no node for it re-enqueues it only
while the service's version is not newer. Once any write of the service (labels only
included) has bumped the version, the first pass that finds no node drops it for good
(moby/swarmkit 807f25e, ``manager/scheduler/scheduler.go`` ``noSuitableNode``); only a
new task (ForceUpdate, a task template change) is tried again.

First written for tests/test_writes_per_cycle.py and tests/test_write_paths.py."""

from __future__ import annotations


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
