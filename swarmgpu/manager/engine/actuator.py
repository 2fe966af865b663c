"""The only writer: applies plans to Swarm with dry-run, read-back and counting.

A plan is made from one snapshot, but the write re-derives it from the labels as
they are at write time (read-modify-write with the version), so a concurrent
user's edit between snapshot and write is kept, never overwritten.

``Writes`` is the gate every engine write of swarmgpu passes (label sync's, placement's,
the mover's, preemption's, the over-share restart's, the workload model's; a test scans
the package for any other). In dry-run it refuses the write and says so, whatever the
caller forgot to check. A write that would replace a task -- one that changes a
service's task spec, or removes a gate from a node, which stops the task Swarm runs
there -- must carry its decision (``Why``): the gate logs the decision with its reason
and what changes, and refuses such a write without one (logged as an error, counted).
Once the daemon is stopping, no write starts (``stop``: it raises ``Stopped``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from loguru import logger

from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
from swarmgpu.manager.engine.stop import TermEnded
from swarmgpu.manager.placement.keys import never_on_a_node
from swarmgpu.swarm.client import (
    NotLeader,
    SwarmClient,
    SwarmError,
    SwarmNode,
    SwarmService,
    SwarmTask,
)
from swarmgpu.swarm.constraints import equal_fold
from swarmgpu.swarm.labels import NodeLabelPlan, plan_node_labels
from swarmgpu.swarm.taskspec import describe, task_changes

# The decisions that may replace a task (docs/deploy.md, "What restarts a task"):
# placing a task (a new one, or one that runs without its devices), a rebalancing move,
# a preemption, an evacuation (failed GPU, a node Swarm will not run it on), the
# operator's word (a command or a setting that says so), a release (a service gone,
# scaled down or no longer annotated: nothing of it is meant to run there). ``none``:
# the writer has checked that no running task is replaced (nothing of the service runs,
# or a change of placement alone that the nodes its tasks run on satisfy).
DECISIONS = ("place", "move", "preempt", "evacuate", "operator", "release", "none")


class Why(NamedTuple):
    """A write's decision: one of ``DECISIONS`` and its reason, in words."""

    kind: str
    reason: str

    def text(self) -> str:
        return f"{self.kind}: {self.reason}"


class Writes:
    """The three writes swarmgpu makes (node labels, a service spec, the swarm object's
    labels), each refused in dry-run. Callers check dry-run first and log what they
    would do; a write that still arrives here in dry-run is a bug, logged as an error
    and counted in ``refused``. ``why``: the decision of this writer's writes that do
    not name their own (the mover's moves); ``refused_restarts`` counts writes refused
    because they would replace a task without one."""

    def __init__(self, swarm: SwarmClient, *, dry_run: bool, who: str,
                 prefix: str = "swarmgpu.", why: Why | None = None) -> None:
        self.swarm = swarm
        self.dry_run = dry_run
        self.who = who
        self.prefix = prefix
        self.why = why
        self.refused = 0
        self.refused_restarts = 0
        self.decided: list[tuple[str, Why, str]] = []  # (object, decision, what), newest last
        self._first: Callable[[], None] | None = None  # ``before_first``'s hook, until run

    def _refuse(self, what: str) -> bool:
        if self.dry_run:
            self.refused += 1
            logger.error("{}: dry-run refused a write of {} (the caller should not have "
                         "tried)", self.who, what)
            return True
        # The daemon's stop request (``stop.StopRequest.check``; the client carries it):
        # between two writes, never in one.
        # (getattr: a stand-in client may lack it; typed, so its call is checked)
        check: Callable[[], None] | None = getattr(self.swarm, "before_write", None)
        if check is not None:
            check()
        first, self._first = self._first, None
        if first is not None:
            first()
        return False

    @contextmanager
    def before_first(self, hook: Callable[[], None]) -> Iterator[None]:
        """Within: ``hook`` runs once, just before the first write this gate lets through
        (none in dry-run or once stopping); if it raises, that write is not made. For a
        caller's count of an operation that must be in Swarm before anything the
        operation writes is (preemption's hour, before a victim's move)."""
        self._first = hook
        try:
            yield
        finally:
            self._first = None

    def _undecided(self, what: str, changes: Sequence[str]) -> None:
        self.refused_restarts += 1
        logger.error("{}: refused a write of {} that would replace a task without a "
                     "decision ({}); a bug: every such write names its reason", self.who,
                     what, describe(changes))

    def _decided(self, what: str, why: Why, changes: Sequence[str], say: bool = True) -> None:
        """Record the decision; log it unless ``say`` is False (the caller said it once
        already: a renewal's, ``cycle.placement.WrittenSaid``), then at debug only."""
        if len(self.decided) >= 200:
            del self.decided[:100]
        self.decided.append((what, why, describe(changes)))
        if why.kind != "none":
            logger.log("INFO" if say else "DEBUG", "{}: decision ({}) for {}: {}",
                       self.who, why.text(), what, describe(changes))

    def node_labels(self, node_id: str,
                    compute: Callable[[Mapping[str, str]], Mapping[str, str] | None],
                    why: Why | None = None) -> bool:
        what = f"node {node_id[:12]} labels"
        if self._refuse(what):
            return False
        why = why or self.why
        gates = self.prefix + "service."
        closed: list[str] = []
        undecided = [False]

        def checked(cur: Mapping[str, str]) -> Mapping[str, str] | None:
            new = compute(cur)
            # Open as Swarm reads ``==true``: the value in any case (strings.EqualFold).
            closed[:] = [] if new is None else [
                f"close gate {k}" for k, v in cur.items()
                if k.startswith(gates) and _open(v) and not _open(new.get(k))]
            undecided[0] = bool(closed) and why is None
            return None if undecided[0] else new

        landed = self.swarm.update_node_labels(node_id, checked)
        if undecided[0]:
            self._undecided(what, closed)
        elif landed and closed and why is not None:
            self._decided(what, why, closed)
        return landed

    def service_spec(self, service_id: str,
                     compute: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
                     why: Why | None = None, say: bool = True) -> bool:
        """``say``: log the decision at info (``_decided``)."""
        what = f"service {service_id[:12]} spec"
        if self._refuse(what):
            return False
        why = why or self.why
        changes: list[str] = []
        undecided = [False]

        def checked(cur: Mapping[str, Any]) -> Mapping[str, Any] | None:
            new = compute(cur)
            changes[:] = [] if new is None else task_changes(cur, new)
            undecided[0] = bool(changes) and why is None
            return None if undecided[0] else new

        landed = self.swarm.update_service_spec(service_id, checked)
        if undecided[0]:
            self._undecided(what, changes)
        elif landed and changes and why is not None:
            self._decided(what, why, changes, say)
        return landed

    def reread(self, kind: str, obj_id: str) -> None:
        """Have the cache read this object afresh next cycle: a write found it changed
        since the snapshot its plan was made from (an event the cache missed). A client
        without a cache (a command's, a test's) has nothing to mark."""
        mark: Callable[[str, str], None] | None = getattr(self.swarm, "on_write", None)
        if mark is not None:
            mark(kind, obj_id)

    def swarm_labels(self, compute: Callable[[Mapping[str, str]],
                                             Mapping[str, str] | None]) -> bool:
        if self._refuse("the swarm object's labels"):
            return False
        return self.swarm.update_swarm_labels(compute)


def _open(value: object) -> bool:
    """A gate label's value that meets its constraint ``==true``."""
    return isinstance(value, str) and equal_fold(value, "true")


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
        self.writes = Writes(swarm, dry_run=dry_run, who="label sync", prefix=prefix)
        # the keys no node carries: removed from every node, its agent answering or not
        # (a lambda: mypy checks a partial's return type only, not what it is called with)
        self.never: Callable[[str], bool] = lambda key: never_on_a_node(key, prefix)

    def label_compute(
        self,
        node: SwarmNode,
        facts: NodeFacts | None,
        services: Sequence[SwarmService],
        tasks: Sequence[SwarmTask],
    ) -> Callable[[Mapping[str, str]], Mapping[str, str] | None]:
        """Label sync's read-modify-write of one node: re-planned from the labels as they
        are at write time, so a concurrent edit is kept and only owned keys change. A
        change is guarded by the node's tasks as Swarm has them then too: the snapshot
        listed its tasks before the agents were read and the cycle planned, and a task
        placed there meanwhile is stopped by a change its constraints read. Every change
        is so checked, not only one of a key the snapshot's constraints read: a service
        created since, with its task there, is in no snapshot (one task list a write,
        and label writes are few: a node's facts changed)."""

        def plan(current: Mapping[str, str], tasks: Sequence[SwarmTask]) -> NodeLabelPlan:
            return plan_node_labels(
                replace(node, labels=dict(current)),
                facts,
                services=services,
                tasks=tasks,
                prefix=self.prefix,
                allow_disruptive=self.allow_disruptive,
                never=self.never,
            )

        def compute(current: Mapping[str, str]) -> Mapping[str, str] | None:
            fresh = plan(current, tasks)
            touched = {*fresh.set, *fresh.remove}
            if touched and not self.allow_disruptive:
                now = [t for t in self.swarm.tasks({"node": node.id}) if t.node_id == node.id]
                ids = {t.id for t in now}
                fresh = plan(current, [*now, *(t for t in tasks if t.id not in ids)])
            return None if fresh.empty else fresh.apply_to(current)

        return compute

    def apply_labels(
        self,
        plan: NodeLabelPlan,
        node: SwarmNode,
        facts: NodeFacts | None,
        services: Sequence[SwarmService],
        tasks: Sequence[SwarmTask],
    ) -> ApplyResult:
        if plan.empty:
            return ApplyResult(node.id, False, self.dry_run)
        if self.dry_run:
            logger.bind(node=node.hostname).info(
                "dry-run: would set {} and remove {}", dict(plan.set), list(plan.remove))
            return ApplyResult(node.id, False, True)
        return self._write(node, self.label_compute(node, facts, services, tasks),
                           plan)

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
        # writes to different nodes run in parallel (swarmgpu.manager.engine.writes).
        tries = [0]

        def counted(current: Mapping[str, str]) -> Mapping[str, str] | None:
            new = compute(current)
            tries[0] += new is not None
            return new

        try:
            written = self.writes.node_labels(node.id, counted)
        except NotLeader as exc:  # (no failed write: the term ended, the rest is left)
            raise TermEnded() from exc
        except SwarmError as exc:
            return self.record(node, plan, False, str(exc))
        finally:
            attempts = tries[0]
            if attempts > 1:
                self.metrics.label_conflicts.inc(attempts - 1)
        return self.record(node, plan, written, None)
