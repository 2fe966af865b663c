"""What a plan says: each service's placements and writes, and the node label changes."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from swarmgpu.manager.services.requests import GpuRequest
from swarmgpu.swarm.client import SwarmNode


class Status(StrEnum):
    """A service plan's outcome (its JSON and text say the value)."""

    PLACED = "placed"  # every replica it needs now holds its GPUs
    PENDING = "pending"  # some replica waits: ``reason`` says why
    INVALID = "invalid"  # its request, or its mode, is nothing swarmgpu places
    RELEASED = "released"  # its request labels were removed: its device lists go
    DONE = "done"  # a job whose every task completed (placement.jobs)
    # planning it raised: a swarmgpu fault, or its spec cannot be read (``ServicePlan.
    # unread``); nothing written, what it holds stays held (placement.isolate)
    FAILED = "failed"


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
    FAILED = "Failed"  # planning it raised: what it holds stays held (placement.isolate)


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


class _NoEntries(Mapping[Any, Any]):
    """An empty mapping that is a constant (the default of a frozen record's mappings:
    a ``dict`` default would be shared and mutable, a factory costs a call per plan)."""

    __slots__ = ()

    def __getitem__(self, key: Any) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "{}"


EMPTY: Mapping[Any, Any] = _NoEntries()


@dataclass(frozen=True, slots=True)
class SpecWrites:
    """What a plan writes to its service's spec (``specwrite.service_compute`` applies
    it). Each part empty: no write."""

    service_labels_set: Mapping[str, str] = EMPTY
    service_labels_remove: tuple[str, ...] = ()
    add_constraints: tuple[str, ...] = ()
    remove_constraints: tuple[str, ...] = ()  # gates naming others, the hold
    add_env: tuple[str, ...] = ()
    replace_env: tuple[tuple[str, str], ...] = ()  # (old line, new)
    add_mounts: tuple[Mapping[str, Any], ...] = ()  # placement.grants: mounts
    set_max_replicas: int | None = None
    force_update: bool = False  # replace tasks created before their device map existed
    set_update_parallelism: int | None = None
    set_generic: tuple[str, int] | None = None  # (kind, count) discrete reservation
    remove_env: tuple[str, ...] = ()  # swarmgpu's own lines, exactly as written (ungate)
    # (env line, service label): set to "true" when this write itself appends the line
    # (none of the service's own was there), the record that the line is swarmgpu's
    record_env: tuple[tuple[str, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.service_labels_set or self.service_labels_remove
                    or self.add_constraints or self.remove_constraints or self.add_env
                    or self.replace_env or self.remove_env or self.add_mounts
                    or self.set_max_replicas is not None or self.force_update
                    or self.set_update_parallelism is not None
                    or self.set_generic is not None)


NO_WRITES = SpecWrites()


@dataclass(frozen=True, slots=True)
class ServicePlan:
    """One service's plan: the decision (status, placements, reason, warnings) and what
    to write for it (its spec, then its nodes' ledger entries and gates). Built once from
    the steps' results (``placement.service.plan_service``); never changed after."""

    name: str
    id: str
    request: GpuRequest | None
    request_text: str
    status: Status
    state: str  # a ``State``, or the rebalancer's (cli plan, the map)
    placements: tuple[ReplicaPlacement, ...] = ()
    reason: str | None = None
    warnings: tuple[str, ...] = ()
    writes: SpecWrites = NO_WRITES
    # its ledger entries and gates: node id -> labels to set / keys to remove (the
    # planner gathers every plan's into ``PlacementPlan.node_set``/``node_remove``)
    node_set: Mapping[str, Mapping[str, str]] = EMPTY
    node_remove: Mapping[str, tuple[str, ...]] = EMPTY
    packed: str | None = None  # replicas packed on one node: where and why
    state_labels: Mapping[str, str] = EMPTY  # swarmgpu's own records (in ``writes``)
    gates_deferred: bool = False  # a gate waits for tasks that carry the device map
    new: bool = False  # placements chosen in this plan (not yet in Swarm)
    replaced: str = ""  # moved off nodes where Swarm would not run it: why (``converge``)
    mode: str = "replicated"  # Swarm's service mode (global, replicated-job, global-job)
    nodes_waiting: Mapping[str, str] = EMPTY  # global: host -> why
    progress: str | None = None  # a job's run: "n of m complete, k GPU holding(s) now"
    # Why this plan's spec write may replace tasks: (kind, reason), a decision the
    # actuator's gate logs (``actuator.DECISIONS``); None: it changes no task spec.
    decision: tuple[str, str] | None = None
    # Task spec changes held back because they would restart a running task without a
    # decision (placement.restarts): each as it would change the spec. They go with the
    # service's next decided write, or the operator's ``swarmgpu apply --service``.
    held: tuple[str, ...] = ()
    # The clause of ``reason`` that moves each cycle while nothing else does (the
    # back-off's countdown, the renewal: ``converge``), and whether this plan renews its
    # waiting task: the daemon's log says the reason once, then counts the renewals.
    transient: str = ""
    renewed: bool = False
    # Failed because a part of its spec cannot be read (``swarm.specread.UnreadSpec``):
    # ``reason`` names the field and its fix; not a swarmgpu fault to report.
    unread: bool = False
    # A holding kept where Swarm will not run its task, no other node taking it
    # (``converge``): it needs GPUs elsewhere, though all its replicas are placed.
    stuck: bool = False
    # Pending at its gate step (``gating``: its own device line, adoption off): no room
    # places it, so no move is made to make room for it (``cycle.rebalance.pending_of``).
    gate_waits: bool = False

    @property
    def needs_service_write(self) -> bool:
        return bool(self.writes)

    @property
    def node_writes(self) -> bool:
        """This plan changes node labels for it."""
        return bool(self.node_set or self.node_remove)

    # What it writes to its spec, by name (the fields of ``writes``).
    @property
    def service_labels_set(self) -> Mapping[str, str]:
        return self.writes.service_labels_set

    @property
    def service_labels_remove(self) -> tuple[str, ...]:
        return self.writes.service_labels_remove

    @property
    def add_constraints(self) -> tuple[str, ...]:
        return self.writes.add_constraints

    @property
    def remove_constraints(self) -> tuple[str, ...]:
        return self.writes.remove_constraints

    @property
    def add_env(self) -> tuple[str, ...]:
        return self.writes.add_env

    @property
    def replace_env(self) -> tuple[tuple[str, str], ...]:
        return self.writes.replace_env

    @property
    def remove_env(self) -> tuple[str, ...]:
        return self.writes.remove_env

    @property
    def add_mounts(self) -> tuple[Mapping[str, Any], ...]:
        return self.writes.add_mounts

    @property
    def set_max_replicas(self) -> int | None:
        return self.writes.set_max_replicas

    @property
    def force_update(self) -> bool:
        return self.writes.force_update

    @property
    def set_update_parallelism(self) -> int | None:
        return self.writes.set_update_parallelism

    @property
    def set_generic(self) -> tuple[str, int] | None:
        return self.writes.set_generic

    def noted(self, *warnings: str) -> ServicePlan:
        """This plan with more warnings (a cycle's problems, a dry-run's preemption)."""
        return replace(self, warnings=(*self.warnings, *warnings))

    def without_node_writes(self) -> ServicePlan:
        """This plan once its node label writes landed (``placement.memo``)."""
        return replace(self, node_set=EMPTY, node_remove=EMPTY)

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
            **({"unread": True} if self.unread else {}),
        }


@dataclass
class NodeWrites:
    """Node label changes as the writer made them (``PlacementPlan.landed``): node id ->
    the labels it set, the keys it removed; ``written``: how many of its writes (nodes'
    and services') made a change, each counted as it landed (a phase ended by a stop or
    the cycle's budget keeps those it made: ``engine.writes.write_each``)."""

    set: dict[str, dict[str, str]] = field(default_factory=dict)
    remove: dict[str, list[str]] = field(default_factory=dict)
    written: int = 0

    def took(self, made: int, *, set_: Mapping[str, Mapping[str, str]] | None = None,
             remove: Mapping[str, Sequence[str]] | None = None) -> None:
        """One write landed: ``made`` changes counted, its labels set or keys removed
        recorded (``write_each``'s ``taken``, in one thread)."""
        self.written += made
        self.set.update((nid, dict(labels)) for nid, labels in (set_ or {}).items())
        self.remove.update((nid, list(keys)) for nid, keys in (remove or {}).items())

    def applied(self, nodes: Sequence[SwarmNode]) -> list[SwarmNode]:
        """``nodes`` with these changes made, removals first, as the writer makes them
        (a node they leave as it was is the same object)."""
        out = []
        for n in nodes:
            gone, put = set(self.remove.get(n.id, ())), self.set.get(n.id, {})
            if gone & n.labels.keys() or any(n.labels.get(k) != v for k, v in put.items()):
                n = replace(n, labels={**{k: v for k, v in n.labels.items() if k not in gone},
                                       **put})
            out.append(n)
        return out


@dataclass
class PlacementPlan:
    """One cycle's plan: every service's, and the node label changes of them all (and
    of the planner's own releases), applied after the service writes. The planner
    builds it; the daemon's writer drops the gates of a service whose write failed."""

    services: list[ServicePlan] = field(default_factory=list)
    # node id -> (labels to set, keys to remove); applied after the service writes
    node_set: dict[str, dict[str, str]] = field(default_factory=dict)
    node_remove: dict[str, list[str]] = field(default_factory=dict)
    released: list[str] = field(default_factory=list)  # services whose holdings go
    workload: dict[str, Any] = field(default_factory=dict)  # the model placement used
    queues: list[dict[str, Any]] = field(default_factory=list)  # use against quota (queues)
    # with tenants, service name -> what preemption reads for an invalid request, whose
    # holdings are kept (``Tenants.held_as``): it may still be a victim, never moved
    held_as: dict[str, GpuRequest] = field(default_factory=dict)
    # What of node_set and node_remove the daemon's writer landed (in dry-run: all of
    # it, as its log says it would), written as it goes: a release held back, refused
    # or failed is not in it. None: nothing written (``cycle.placement.apply_plan``).
    landed: NodeWrites | None = None
    # (node id, GPU uuid) -> (who, priority): the GPUs of tasks Swarm is stopping, held
    # while they stop (``nominated.StoppingGpus``); preemption counts them used too
    stopping_held: dict[tuple[str, str], tuple[str, int]] = field(default_factory=dict)
    # (node id, GPU uuid) -> the preemptor: of those GPUs, the ones held for a live
    # preemptor alone, its victim's task stopping there (``nominated.stopping_held`` holds
    # them from all for a reader that no longer has that preemptor's hold)
    stopping_spared: dict[tuple[str, str], str] = field(default_factory=dict)
    # Of ``stopping_held``, the share (milli) of each GPU its stopping tasks hold
    # (``nominated.held_shares``): the rebalancer judges a move onto it by share
    stopping_milli: dict[tuple[str, str], int] = field(default_factory=dict)
    # ids of the tasks Swarm is stopping past their hold's end (``keys.stop_overdue``):
    # preemption waits for their CPU, memory and ports no longer (``preemptroom.Room``)
    stopping_overdue: frozenset[str] = frozenset()
    # Of ``stopping_held``, (node id, GPU uuid) held for stopping tasks alone (none
    # spared) that have not outlived their grace period since first seen (one may never
    # stop: a process hung in the GPU driver): a preemptor waits for these, no victim
    stopping_waits: frozenset[tuple[str, str]] = frozenset()
    # (service name, node id): ledger entries read this cycle as a removed service's that
    # a live one recreated under its name found (``placement.recreated``), not kept
    disowned: frozenset[tuple[str, str]] = frozenset()
    # ``dropped`` as the finished plan has it (``finish``); None: worked out at each read
    _dropped: frozenset[tuple[str, str]] | None = field(default=None, init=False,
                                                       repr=False, compare=False)

    @property
    def dropped(self) -> frozenset[tuple[str, str]]:
        """Of ``disowned``, those whose service this plan did not place on that node
        again: no holding of it, as placement read it. Preemption and the rebalancer
        read the ledger without them (the entry may stay a while: its release held back
        or failed); before, they read it by name as the live service's holding."""
        if self._dropped is not None:
            return self._dropped
        if not self.disowned:
            return frozenset()
        return self.disowned - {(sp.name, p.node_id) for sp in self.services
                                for p in sp.placements}

    def finish(self) -> frozenset[tuple[str, str]]:
        """Planned: no placement changes after this (notes do), so ``dropped`` is worked
        out once here for its readers (the planner, preemption, the rebalancer); it is
        returned."""
        self._dropped = None
        self._dropped = self.dropped
        return self._dropped

    @property
    def empty(self) -> bool:
        return not self.node_set and not self.node_remove and not any(
            s.needs_service_write for s in self.services
        )

    def requests_by_name(self) -> dict[str, GpuRequest]:
        """Service name -> its request, as preemption reads them: an invalid one's holder
        as ``held_as`` says, the most its tenant's labels could ask (a victim like any
        other, never moved: a move would place its broken request again)."""
        return {**self.held_as, **{sp.name: sp.request for sp in self.services
                                   if sp.request is not None}}

    @property
    def failed(self) -> frozenset[str]:
        """The services whose planning raised this cycle (``placement.isolate``)."""
        return failed_names(self.services)

    def add(self, sp: ServicePlan) -> None:
        """``sp``, with its node label changes."""
        self.services.append(sp)
        self.add_node_writes(sp)

    def add_node_writes(self, sp: ServicePlan) -> None:
        for nid, keys in sp.node_remove.items():
            remove_node_labels(self, nid, keys)
        for nid, labels in sp.node_set.items():
            set_node_labels(self, nid, labels)


def unread_names(services: Iterable[ServicePlan]) -> frozenset[str]:
    """Of ``failed_names``, those whose spec cannot be read (``ServicePlan.unread``)."""
    return frozenset(sp.name for sp in services if sp.status == Status.FAILED and sp.unread)


def failed_names(services: Iterable[ServicePlan]) -> frozenset[str]:
    """The names of ``services`` whose planning raised (``Status.FAILED``)."""
    return frozenset(sp.name for sp in services if sp.status == Status.FAILED)


def set_node_labels(plan: PlacementPlan, node_id: str, labels: Mapping[str, str]) -> None:
    plan.node_set.setdefault(node_id, {}).update(labels)


def remove_node_labels(plan: PlacementPlan, node_id: str, keys: Sequence[str]) -> None:
    cur = plan.node_remove.setdefault(node_id, [])
    cur.extend(k for k in keys if k not in cur)


def leave_unread(plan: PlacementPlan, nodes: Iterable[SwarmNode]) -> None:
    """No label of an ``unread`` node is written: its ledger entries and gates stay as
    they are (its holdings kept, none freed) until the engine's answer for it reads."""
    for n in nodes:
        if n.unread:
            plan.node_set.pop(n.id, None)
            plan.node_remove.pop(n.id, None)
