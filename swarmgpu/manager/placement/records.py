"""What a plan says: each service's placements and writes, and the node label changes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from swarmgpu.manager.services.requests import GpuRequest


class Status(StrEnum):
    """A service plan's outcome (its JSON and text say the value)."""

    PLACED = "placed"  # every replica it needs now holds its GPUs
    PENDING = "pending"  # some replica waits: ``reason`` says why
    INVALID = "invalid"  # its request, or its mode, is nothing swarmgpu places
    RELEASED = "released"  # its request labels were removed: its device lists go
    DONE = "done"  # a job whose every task completed (placement.jobs)


class State(StrEnum):
    """Where a service stands, as ``status`` and the map show it. The rebalancer's
    attribution gives two more (``Rebalancing`` while a move runs, ``IdleCleanup``)."""

    PENDING = "Pending"  # nothing placed
    BOUND = "Bound"  # placed in this plan: its writes are not in Swarm yet
    ALLOCATED = "Allocated"  # placed and written; not every task runs yet
    ACTIVE = "Active"  # every task runs on its GPUs
    INVALID = "Invalid"
    REBALANCING = "Rebalancing"  # a move owns it (rebalance.record.move_of)
    RELEASED = "Released"
    COMPLETE = "Complete"  # a job done


@dataclass(frozen=True)
class ReplicaPlacement:
    node_id: str
    hostname: str
    gpus: tuple[int, ...]
    uuids: tuple[str, ...]
    milli: tuple[int, ...]
    score: float | None = None
    slot: int | None = None  # the task slot, for replicas packed on one node

    def to_dict(self) -> dict[str, Any]:
        out = {"node": self.hostname, "node_id": self.node_id, "gpus": list(self.gpus),
               "uuids": list(self.uuids), "share_milli": list(self.milli),
               "score": self.score}
        if self.slot is not None:
            out["slot"] = self.slot
        return out


@dataclass
class ServicePlan:
    name: str
    id: str
    request: GpuRequest | None
    request_text: str
    status: Status
    state: str  # a ``State``, or the rebalancer's (cli plan, the map)
    placements: list[ReplicaPlacement] = field(default_factory=list)
    reason: str | None = None
    warnings: list[str] = field(default_factory=list)
    # what to write: service spec changes, then node label changes
    service_labels_set: dict[str, str] = field(default_factory=dict)
    service_labels_remove: list[str] = field(default_factory=list)
    add_constraints: list[str] = field(default_factory=list)
    add_env: list[str] = field(default_factory=list)
    set_max_replicas: int | None = None
    replace_env: list[tuple[str, str]] = field(default_factory=list)  # (old line, new)
    add_mounts: list[dict[str, Any]] = field(default_factory=list)  # grants: mounts
    packed: str | None = None  # replicas packed on one node: where and why
    # packed slots gone whose GPUs stay held one more cycle (their lists are removed)
    draining: dict[int, tuple[tuple[str, ...], tuple[int, ...]]] = field(default_factory=dict)
    state_labels: dict[str, str] = field(default_factory=dict)  # swarmgpu's own records
    force_update: bool = False  # replace tasks created before their device map existed
    set_update_parallelism: int | None = None
    set_generic: tuple[str, int] | None = None  # (kind, count) discrete reservation
    gates_deferred: bool = False  # a gate waits for tasks that carry the device map
    new: bool = False  # placements chosen in this plan (not yet in Swarm)
    node_writes: bool = False  # this plan changes node labels for it
    remove_constraints: list[str] = field(default_factory=list)  # gates naming others
    replaced: str = ""  # moved off nodes where Swarm would not run it: why (``converge``)
    mode: str = "replicated"  # Swarm's service mode (global, replicated-job, global-job)
    nodes_waiting: dict[str, str] = field(default_factory=dict)  # global: host -> why
    progress: str | None = None  # a job's run: "n of m complete, k GPU holding(s) now"
    # Why this plan's spec write may replace tasks: (kind, reason), a decision the
    # actuator's gate logs (``actuator.DECISIONS``); None: it changes no task spec.
    decision: tuple[str, str] | None = None
    # Task spec changes held back because they would restart a running task without a
    # decision (placement.restarts): each as it would change the spec. They go with the
    # service's next decided write, or the operator's ``swarmgpu apply --service``.
    held: list[str] = field(default_factory=list)

    @property
    def needs_service_write(self) -> bool:
        return bool(self.service_labels_set or self.service_labels_remove or self.add_constraints
                    or self.remove_constraints or self.add_env or self.replace_env
                    or self.add_mounts
                    or self.set_max_replicas is not None or self.force_update
                    or self.set_update_parallelism is not None
                    or self.set_generic is not None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "id": self.id, "request": self.request_text,
            "status": self.status, "state": self.state,
            "placements": [p.to_dict() for p in self.placements],
            "reason": self.reason, "warnings": list(self.warnings),
            "packed": self.packed,
            # other modes only: a replicated service's document is as it was
            **({"mode": self.mode, "nodes_waiting": dict(self.nodes_waiting),
                "progress": self.progress} if self.mode != "replicated" else {}),
            # with tenants in the config only (services.tenants): whose, and what was not given
            **({"tenant": self.request.tenant, "limits": list(self.request.limits)}
               if self.request is not None and self.request.tenant else {}),
            **({"held": list(self.held)} if self.held else {}),
        }


@dataclass
class PlacementPlan:
    services: list[ServicePlan] = field(default_factory=list)
    # node id -> (labels to set, keys to remove); applied after the service writes
    node_set: dict[str, dict[str, str]] = field(default_factory=dict)
    node_remove: dict[str, list[str]] = field(default_factory=dict)
    released: list[str] = field(default_factory=list)  # services whose holdings go
    workload: dict[str, Any] = field(default_factory=dict)  # the model placement used
    queues: list[dict[str, Any]] = field(default_factory=list)  # use against quota (queues)

    @property
    def empty(self) -> bool:
        return not self.node_set and not self.node_remove and not any(
            s.needs_service_write for s in self.services
        )


def set_node_labels(plan: PlacementPlan, node_id: str, labels: Mapping[str, str]) -> None:
    plan.node_set.setdefault(node_id, {}).update(labels)


def remove_node_labels(plan: PlacementPlan, node_id: str, keys: Sequence[str]) -> None:
    cur = plan.node_remove.setdefault(node_id, [])
    cur.extend(k for k in keys if k not in cur)
