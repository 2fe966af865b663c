"""The only writer: applies plans to Swarm with dry-run, read-back and counting.

A plan is made from one snapshot, but the write re-derives it from the labels as
they are at write time (read-modify-write with the version), so a concurrent
user's edit between snapshot and write is kept, never overwritten.

``Writes`` is the gate every write of a step passes (label sync's and the mover's): in
dry-run it refuses the write and says so, whatever the caller forgot to check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from loguru import logger

from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.daemon_metrics import DaemonMetrics
from swarmgpu.swarm.client import SwarmClient, SwarmError, SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.labels import NodeLabelPlan, plan_node_labels


class Writes:
    """The three writes swarmgpu makes (node labels, a service spec, the swarm object's
    labels), each refused in dry-run. Callers check dry-run first and log what they
    would do; a write that still arrives here in dry-run is a bug, logged as an error
    and counted in ``refused``."""

    def __init__(self, swarm: SwarmClient, *, dry_run: bool, who: str) -> None:
        self.swarm = swarm
        self.dry_run = dry_run
        self.who = who
        self.refused = 0

    def _refuse(self, what: str) -> bool:
        if self.dry_run:
            self.refused += 1
            logger.error("{}: dry-run refused a write of {} (the caller should not have "
                         "tried)", self.who, what)
        return self.dry_run

    def node_labels(self, node_id: str,
                    compute: Callable[[Mapping[str, str]], Mapping[str, str] | None]) -> bool:
        if self._refuse(f"node {node_id} labels"):
            return False
        return self.swarm.update_node_labels(node_id, compute)

    def service_spec(self, service_id: str,
                     compute: Callable[[Mapping[str, Any]], Mapping[str, Any] | None]) -> bool:
        if self._refuse(f"service {service_id} spec"):
            return False
        return self.swarm.update_service_spec(service_id, compute)

    def swarm_labels(self, compute: Callable[[Mapping[str, str]],
                                             Mapping[str, str] | None]) -> bool:
        if self._refuse("the swarm object's labels"):
            return False
        return self.swarm.update_swarm_labels(compute)


@dataclass(frozen=True)
class ApplyResult:
    node_id: str
    written: bool
    dry_run: bool
    error: str | None = None
    hostname: str = ""


class Actuator:
    def __init__(
        self,
        swarm: SwarmClient,
        metrics: DaemonMetrics,
        *,
        dry_run: bool = False,
        prefix: str = "swarmgpu.",
        allow_disruptive: bool = False,
    ) -> None:
        self.swarm = swarm
        self.metrics = metrics
        self.dry_run = dry_run
        self.prefix = prefix
        self.allow_disruptive = allow_disruptive
        self.writes = Writes(swarm, dry_run=dry_run, who="label sync")

    def label_compute(
        self,
        node: SwarmNode,
        facts: NodeFacts,
        services: Sequence[SwarmService],
        tasks: Sequence[SwarmTask],
    ) -> Callable[[Mapping[str, str]], Mapping[str, str] | None]:
        """Label sync's read-modify-write of one node: re-planned from the labels as they
        are at write time, so a concurrent edit is kept and only owned keys change."""

        def compute(current: Mapping[str, str]) -> Mapping[str, str] | None:
            fresh = plan_node_labels(
                replace(node, labels=dict(current)),
                facts,
                services=services,
                tasks=tasks,
                prefix=self.prefix,
                allow_disruptive=self.allow_disruptive,
            )
            return None if fresh.empty else fresh.apply_to(current)

        return compute

    def apply_labels(
        self,
        plan: NodeLabelPlan,
        node: SwarmNode,
        facts: NodeFacts,
        services: Sequence[SwarmService],
        tasks: Sequence[SwarmTask],
    ) -> ApplyResult:
        if plan.empty:
            return ApplyResult(node.id, False, self.dry_run)
        if self.dry_run:
            logger.bind(node=node.hostname).info(
                "dry-run: would set {} and remove {}", dict(plan.set), list(plan.remove))
            return ApplyResult(node.id, False, True)
        return self._write(node, self.label_compute(node, facts, services, tasks), plan)

    def record(self, node: SwarmNode, plan: NodeLabelPlan, written: bool,
               error: str | None) -> ApplyResult:
        """Count and log one label write's outcome (alone, or folded into placement's)."""
        if error is not None:
            self.metrics.errors.labels(kind="label_write").inc()
            logger.bind(node=node.hostname).error("label write failed: {}", error)
            return ApplyResult(node.id, False, False, error, node.hostname)
        if written:
            self.metrics.label_writes.inc()
            logger.bind(node=node.hostname).info(
                "labels updated: set {} removed {}", dict(plan.set), list(plan.remove)
            )
        return ApplyResult(node.id, written, False, hostname=node.hostname)

    def _write(
        self,
        node: SwarmNode,
        compute: Callable[[Mapping[str, str]], Mapping[str, str] | None],
        plan: NodeLabelPlan,
    ) -> ApplyResult:
        # Attempts counted per call, not from the client's shared write counter: label
        # writes to different nodes run in parallel (swarmgpu.manager.writes).
        tries = [0]

        def counted(current: Mapping[str, str]) -> Mapping[str, str] | None:
            new = compute(current)
            tries[0] += new is not None
            return new

        try:
            written = self.writes.node_labels(node.id, counted)
        except SwarmError as exc:
            return self.record(node, plan, False, str(exc))
        finally:
            attempts = tries[0]
            if attempts > 1:
                self.metrics.label_conflicts.inc(attempts - 1)
        return self.record(node, plan, written, None)
