"""GPU requests -> placement in Swarm terms. Pure: snapshot in, plan out.

How a placement is expressed (every piece verified on a real swarm, see README):

- node label ``<p>assign.<service>=UUID[@milli],...`` on each chosen node: the
  ledger. Node labels survive ``docker stack deploy``, so the daemon can always
  rebuild who holds which GPU from Swarm itself (no database, restarts lose nothing).
  Replicas packed on one node hold one entry per task slot:
  ``<p>assign.<service>=s1=UUID,...;s2=UUID,...``.
- service label ``<p>devices.<nodeID>=UUID,...``: the copy the env template reads:
  ``NVIDIA_VISIBLE_DEVICES={{or (index .Service.Labels (print "<p>devices." .Node.ID "."
  .Task.Slot)) (index .Service.Labels (print "<p>devices." .Node.ID)) "void"}}``
  (``env_template``; the older template without the per-slot lookup is still accepted
  for services that are not packed). Changing service labels restarts no task.
- node label ``<p>service.<service>=true``: the gate. The service carries the
  constraint ``node.labels.<p>service.<service>==true``; no node has the label until
  swarmgpu opens it, so the service cannot start anywhere else, and never before its
  devices are written (the service label is written first, the gate after).
- replicas spread one per node (``max_replicas_per_node=1`` when several replicas are
  placed: one device list per node), or, when they cannot be spread and one node holds
  them all (``<p>pack``: auto/always), packed on that one node: its gate alone opens,
  ``MaxReplicas`` is lifted, and each task slot reads its own list
  ``<p>devices.<nodeID>.<slot>``. Spread replicas never get per-slot lists: Swarm
  chooses which slot runs on which node, so two slots' lists on one node could
  collide; packed replicas cannot, because every slot runs on the one gated node.
  Whole GPUs only: a share or a MIG device keeps one replica per node.
- service labels ``<p>share.<field>.<nodeID>`` for a shared (fractional) holding: what
  the container is told of its share, read by env templates (``swarmgpu.manager.sharing``).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from swarmgpu.allocator.core import (
    Allocator,
    Choice,
    Demand,
    GpuSpec,
    NodeSpec,
    NodeState,
    Scorer,
    SwarmScorer,
    Unplaceable,
)
from swarmgpu.allocator.fragmentation import TaskShape
from swarmgpu.allocator.mig import MigChoice, MigProfileError, pick_mig_device
from swarmgpu.allocator.workload import WorkloadModel
from swarmgpu.core.model import NodeFacts, link_score
from swarmgpu.manager.requests import GpuRequest, Pack, Rebalance, RequestError, parse_all
from swarmgpu.manager.sharing import is_share_key, missing_env, want_labels
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask, reservations
from swarmgpu.swarm.constraints import node_satisfies, platform_ok
from swarmgpu.swarm.constraints import parse_all as parse_constraints

GATE = "service."
ASSIGN = "assign."
DEVICES = "devices."
MOVE_STATE = "state.move"  # service label: a rebalancing move in progress (JSON)
MAX_STATE = "state.max-replicas"  # service label: the MaxReplicas swarmgpu set (packed)
# service label: "<re-placements>@<epoch s of the last>" (``_converge``'s back-off, kept in
# Swarm so `plan`, `status` and a new leader see it)
REPLACED_STATE = "state.replaced"
ACTIVE_STATES = ("running", "starting", "preparing", "assigned", "accepted", "ready", "pending",
                 "new", "allocated")


def env_template(prefix: str) -> str:
    """The device list of the task's slot on its node, else of its node, else none
    (``void``). Swarm expands it when it creates the container (swarmkit's template
    context has ``.Task.Slot``)."""
    return (
        'NVIDIA_VISIBLE_DEVICES={{or (index .Service.Labels (print "'
        + prefix + DEVICES + '" .Node.ID "." .Task.Slot)) (index .Service.Labels (print "'
        + prefix + DEVICES + '" .Node.ID)) "void"}}'
    )


def env_template_per_node(prefix: str) -> str:
    """The template before per-slot lists: still read right for replicas spread one
    per node (services deployed with it keep working); packed replicas need
    ``env_template``."""
    return (
        'NVIDIA_VISIBLE_DEVICES={{or (index .Service.Labels (print "'
        + prefix + DEVICES + '" .Node.ID)) "void"}}'
    )


def device_env(prefix: str, env: Sequence[str]) -> str | None:
    """Which of swarmgpu's device templates ``env`` carries: ``"slot"``, ``"node"``
    (the older per-node one) or None."""
    if env_template(prefix) in env:
        return "slot"
    if env_template_per_node(prefix) in env:
        return "node"
    return None


ORDER_ENV = "CUDA_DEVICE_ORDER=PCI_BUS_ID"


def gate_key(prefix: str, service: str) -> str:
    return f"{prefix}{GATE}{service}"


def gate_constraint(prefix: str, service: str) -> str:
    return f"node.labels.{gate_key(prefix, service)}==true"


def assign_key(prefix: str, service: str) -> str:
    return f"{prefix}{ASSIGN}{service}"


def devices_key(prefix: str, node_id: str, slot: int | None = None) -> str:
    """The service label a task on ``node_id`` reads its devices from; with ``slot``,
    the one of that task slot (replicas packed on one node)."""
    return f"{prefix}{DEVICES}{node_id}" if slot is None else f"{prefix}{DEVICES}{node_id}.{slot}"


def owned_by_placement(key: str, prefix: str) -> bool:
    return key.startswith((prefix + GATE, prefix + ASSIGN))


# --- the ledger ------------------------------------------------------------------


@dataclass(frozen=True)
class Holding:
    """What one service holds on one node: device UUIDs and the share of each.

    ``slots`` is empty for one replica on the node; for replicas packed on it, the
    task slot each UUID belongs to (as long as ``uuids``, in slot order)."""

    service: str
    node_id: str
    uuids: tuple[str, ...]
    milli: tuple[int, ...]
    slots: tuple[int, ...] = ()

    @cached_property
    def _value(self) -> str:
        if not self.slots:
            return _uuid_list(self.uuids, self.milli)
        return ";".join(f"s{slot}={_uuid_list(u, m)}"
                        for slot, (u, m) in self.per_slot_milli().items())

    def label_value(self) -> str:
        return self._value

    @property
    def packed(self) -> bool:
        return bool(self.slots)

    @property
    def replicas(self) -> int:
        """Replicas the holding serves on its node."""
        return len(set(self.slots)) if self.slots else 1

    def per_slot_milli(self) -> dict[int, tuple[tuple[str, ...], tuple[int, ...]]]:
        """slot -> (uuids, milli), in slot order (packed holdings)."""
        out: dict[int, tuple[tuple[str, ...], tuple[int, ...]]] = {}
        for slot, u, m in zip(self.slots, self.uuids, self.milli, strict=True):
            got = out.get(slot, ((), ()))
            out[slot] = ((*got[0], u), (*got[1], m))
        return dict(sorted(out.items()))

    def per_slot(self) -> dict[int, tuple[str, ...]]:
        return {k: v[0] for k, v in self.per_slot_milli().items()}


def packed_holding(service: str, node_id: str,
                   per_slot: Mapping[int, tuple[Sequence[str], Sequence[int]]]) -> Holding:
    """A holding of replicas packed on one node: slot -> (uuids, milli)."""
    uuids: list[str] = []
    milli: list[int] = []
    slots: list[int] = []
    for slot in sorted(per_slot):
        u, m = per_slot[slot]
        uuids.extend(u)
        milli.extend(m)
        slots.extend(slot for _ in u)
    return Holding(service, node_id, tuple(uuids), tuple(milli), tuple(slots))


def _uuid_list(uuids: Sequence[str], milli: Sequence[int]) -> str:
    return ",".join(u if m >= 1000 else f"{u}@{m}" for u, m in zip(uuids, milli, strict=True))


_HOLD_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9\-_/:.]*?)(?:@(\d{1,4}))?$")
_SLOT_RE = re.compile(r"^s([1-9][0-9]{0,5})=(.*)$")


def _parse_list(value: str) -> tuple[list[str], list[int]] | None:
    uuids: list[str] = []
    milli: list[int] = []
    for part in value.split(","):
        m = _HOLD_RE.match(part.strip())
        if not m:
            return None
        uuids.append(m.group(1))
        milli.append(int(m.group(2)) if m.group(2) else 1000)
    if not uuids or any(not 0 < x <= 1000 for x in milli):
        return None
    return uuids, milli


def parse_holding(service: str, node_id: str, value: str) -> Holding | None:
    """A ledger value; None when it is not one (never a guess). ``s<slot>=`` groups
    separated by ``;`` are replicas packed on the node (a ledger from before packing
    has none, and reads as it always did)."""
    if "=" not in value:
        got = _parse_list(value)
        return None if got is None else Holding(service, node_id, tuple(got[0]),
                                                tuple(got[1]))
    per: dict[int, tuple[Sequence[str], Sequence[int]]] = {}
    for group in value.split(";"):
        m = _SLOT_RE.match(group.strip())
        got = _parse_list(m.group(2)) if m else None
        if m is None or got is None or int(m.group(1)) in per:
            return None
        per[int(m.group(1))] = got
    h = packed_holding(service, node_id, per)
    return h if len(set(h.uuids)) == len(h.uuids) else None  # a GPU in two slots: not ours


def read_ledger(nodes: Sequence[SwarmNode], prefix: str,
                cache: dict[str, tuple[int, list[Holding]]] | None = None,
                ) -> dict[str, dict[str, Holding]]:
    """service name -> node id -> holding, from the nodes' assign labels. ``cache`` (a
    long-lived planner's) keeps each node's parse while its spec version is unchanged."""
    out: dict[str, dict[str, Holding]] = {}
    ak = prefix + ASSIGN
    for n in nodes:
        got = cache.get(n.id) if cache is not None else None
        if got is None or got[0] != n.version:
            held = []
            for k, v in n.labels.items():
                if k.startswith(ak):
                    h = parse_holding(k[len(ak):], n.id, v)
                    if h is not None:
                        held.append(h)
            got = (n.version, held)
            if cache is not None:
                cache[n.id] = got
        for h in got[1]:
            out.setdefault(h.service, {})[n.id] = h
    return out


# --- plans ---------------------------------------------------------------------


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


def holdings_of(service: str, placements: Sequence[ReplicaPlacement]) -> dict[str, Holding]:
    """node id -> the ledger holding of a service's placements (packed ones merged)."""
    out: dict[str, Holding] = {}
    packed: dict[str, dict[int, tuple[Sequence[str], Sequence[int]]]] = {}
    for p in placements:
        if p.slot is None:
            out[p.node_id] = Holding(service, p.node_id, p.uuids, p.milli)
        else:
            packed.setdefault(p.node_id, {})[p.slot] = (p.uuids, p.milli)
    for nid, per in packed.items():
        out[nid] = packed_holding(service, nid, per)
    return out


@dataclass
class ServicePlan:
    name: str
    id: str
    request: GpuRequest | None
    request_text: str
    status: str  # placed | pending | invalid
    state: str  # Pending | Bound | Allocated | Active | Invalid
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
    replaced: str = ""  # moved off nodes where Swarm would not run it: why (``_converge``)

    @property
    def needs_service_write(self) -> bool:
        return bool(self.service_labels_set or self.service_labels_remove or self.add_constraints
                    or self.remove_constraints or self.add_env or self.replace_env
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
        }


@dataclass
class PlacementPlan:
    services: list[ServicePlan] = field(default_factory=list)
    # node id -> (labels to set, keys to remove); applied after the service writes
    node_set: dict[str, dict[str, str]] = field(default_factory=dict)
    node_remove: dict[str, list[str]] = field(default_factory=dict)
    released: list[str] = field(default_factory=list)  # services whose holdings go
    workload: dict[str, Any] = field(default_factory=dict)  # the model placement used

    def node_changes(self, node_id: str) -> tuple[dict[str, str], list[str]]:
        return self.node_set.get(node_id, {}), self.node_remove.get(node_id, [])

    @property
    def empty(self) -> bool:
        return not self.node_set and not self.node_remove and not any(
            s.needs_service_write for s in self.services
        )


# --- the allocator view of the cluster ------------------------------------------


def user_labels(labels: Mapping[str, str], prefix: str) -> dict[str, str]:
    """Node labels placement may filter on: everything but swarmgpu's own gates and
    ledger (those differ per node and would split nodes built alike into one group
    each, so the allocator could no longer answer once per group)."""
    return {k: v for k, v in labels.items() if not owned_by_placement(k, prefix)}


# (GPUs, links) -> a small id: nodes built alike share it (NodeSpec.shape)
_SHAPES: dict[tuple[object, ...], int] = {}


def node_spec(node: SwarmNode, facts: NodeFacts, prefix: str = "swarmgpu.") -> NodeSpec:
    links = facts.links
    numa = [g.numa_node for g in facts.gpus]

    def pair(a: int, b: int) -> int:
        if a == b:
            return 0
        # go-gpuallocator's score, plus 1 for sharing a NUMA node: among equally linked
        # GPUs (all NV12 on a DGX) the set stays local to one CPU socket.
        same = numa[a] is not None and numa[a] == numa[b]
        return link_score(links[a][b]) + (1 if same else 0)

    gpus = tuple(GpuSpec(index=i, product=g.product, memory_mib=g.memory_mib,
                         numa_node=g.numa_node, healthy=g.healthy, mig_enabled=g.mig_enabled)
                 for i, g in enumerate(facts.gpus))
    return NodeSpec(
        name=node.id,
        gpus=gpus,
        shape=_SHAPES.setdefault((gpus, links), len(_SHAPES)),
        cpu_milli=node.cpu_milli,
        memory_mib=node.memory_mib,
        labels=user_labels(node.labels, prefix),
        pair_score=pair if links else None,
    )


def demand_of(req: GpuRequest, cpu_milli: int = 0, memory_mib: int = 0) -> Demand:
    """The allocator's demand for one replica; CPU and memory are the service's Swarm
    reservations, which Swarm's scheduler checks against the node."""
    if req.mig_profile:
        return Demand(mig_profile=req.mig_profile, cpu_milli=cpu_milli, memory_mib=memory_mib)
    if req.is_fraction:
        return Demand(gpu_milli=req.gpu_milli, min_memory_mib=req.min_memory_mib or 0,
                      products=req.products, cpu_milli=cpu_milli, memory_mib=memory_mib)
    return Demand(num_gpu=req.gpus, min_memory_mib=req.min_memory_mib or 0,
                  products=req.products, topology=str(req.topology),
                  cpu_milli=cpu_milli, memory_mib=memory_mib)


def _schedulable(node: SwarmNode) -> bool:
    return node.state == "ready" and node.availability == "active"


@dataclass
class _Held:
    """One holding as committed on the allocator: the label value and reservation it
    was committed with, and what it took."""

    key: tuple[str, int, int]
    choice: Choice | None
    migs: tuple[str, ...]


class ClusterAllocator:
    """The production allocator over live nodes, kept across cycles.

    ``sync_nodes`` rebuilds only nodes whose facts, resources, labels or state changed;
    holdings are committed once and released when they go (``begin_holdings``); what
    other tasks reserve on a node is its usage. A cycle over an unchanged cluster
    therefore costs a pass over the nodes and holdings, not a rebuild, and identical
    nodes in the same state are scored once (``Allocator`` groups).
    """

    def __init__(self, nodes: Sequence[SwarmNode] = (),
                 facts: Mapping[str, NodeFacts] | None = None,
                 ledger: Mapping[str, Mapping[str, Holding]] | None = None, *,
                 scorer: Scorer | None = None, prefix: str = "swarmgpu.",
                 tasks: Sequence[SwarmTask] = ()) -> None:
        self.prefix = prefix
        self.alloc = Allocator(scorer or SwarmScorer(), mig_picker=self._pick_mig)
        self.nodes: dict[str, SwarmNode] = {}
        self.facts: dict[str, NodeFacts] = {}
        self.assigned_mig: dict[str, set[str]] = {}
        self.problems: list[str] = []
        self.node_gen: dict[str, int] = {}  # bumped when a node's spec is rebuilt
        self.tasks_on: set[tuple[str, str]] = set()  # (service id, node id) with a task
        self.timings: list[float] | None = None  # per placement decision, when measured
        self._host_text: dict[str, str] = {}
        # (node, MIG profile) with no free device: stays so until a release on the node
        self._mig_none: set[tuple[str, str]] = set()
        self._by_rank: list[NodeState] = []  # for MIG requests, rebuilt with the nodes
        self._names: tuple[tuple[str, str], ...] = ()
        self._gen = 0
        self._order: list[str] = []
        self._node_keys: dict[str, tuple[object, ...]] = {}
        self._held: dict[tuple[str, str], _Held] = {}
        # Demands no node could take, with the capacity generation they were asked at.
        self.unplaceable: dict[object, tuple[int, Unplaceable]] = {}
        if nodes or ledger:
            self.sync_nodes(nodes, facts or {})
            self.set_usage(tasks)
            self.begin_holdings(ledger or {})
            for svc, per_node in (ledger or {}).items():
                for node_id, h in per_node.items():
                    self.commit_holding(svc, node_id, h)

    @property
    def version(self) -> int:
        return self.alloc.capacity_gen

    # --- nodes -------------------------------------------------------------------
    def sync_nodes(self, nodes: Sequence[SwarmNode], facts: Mapping[str, NodeFacts]) -> None:
        """Bring the allocator's nodes in line with Swarm's and the agents' view."""
        order = sorted(nodes, key=lambda n: (n.hostname, n.id))
        ids = [n.id for n in order]
        if ids != self._order:  # ranks follow hostnames: a new set means a new order
            self.alloc = Allocator(self.alloc.scorer, mig_picker=self._pick_mig)
            self._node_keys.clear()
            self._held.clear()
            self.assigned_mig.clear()
            self.unplaceable.clear()
            self._order = ids
        self.nodes = {n.id: n for n in nodes}
        self.facts = dict(facts)
        names = tuple((n.id, n.hostname) for n in order)
        if names != self._names:
            self._names = names
            self._host_text.clear()
        self._by_rank = []
        for rank, n in enumerate(order):
            f = facts.get(n.id)
            present = n.id in self.alloc.nodes
            if f is None or not f.gpus:
                if present:
                    self._drop_node(n.id)
                continue
            key = (n.hostname, n.cpu_milli, n.memory_mib,
                   tuple(sorted(user_labels(n.labels, self.prefix).items())), f)
            old = self._node_keys.get(n.id)
            if old is None or old[:-1] != key[:-1] or (old[-1] is not f and old[-1] != f):
                if present:
                    self._drop_node(n.id)
                self.alloc.add_node(node_spec(n, f, self.prefix), rank=rank)
                self._node_keys[n.id] = key
                self._gen += 1
                self.node_gen[n.id] = self._gen
            self.alloc.set_blocked(n.id, not _schedulable(n))

    def _drop_node(self, node_id: str) -> None:
        self._mig_none = {k for k in self._mig_none if k[0] != node_id}
        self.alloc.remove_node(node_id)
        self._node_keys.pop(node_id, None)
        self.assigned_mig.pop(node_id, None)
        for k in [k for k in self._held if k[1] == node_id]:
            del self._held[k]

    def set_usage(self, tasks: Sequence[SwarmTask]) -> None:
        """CPU and memory that tasks reserve on each node (Swarm counts every task with
        desired state running, GPU or not); a holding's own reservation is counted by
        the holding until its task exists (``holding_reservation``)."""
        use: dict[str, list[int]] = {}
        on_nodes: dict[str, set[str]] = {}
        for t in tasks:
            if t.desired_state != "running" or not t.node_id:
                continue
            on_nodes.setdefault(t.service_id, set()).add(t.node_id)
            if t.cpu_milli or t.memory_mib:
                u = use.setdefault(t.node_id, [0, 0])
                u[0] += t.cpu_milli
                u[1] += t.memory_mib
        self.set_usage_of(use, on_nodes)

    def set_usage_of(self, use: Mapping[str, Sequence[int]],
                     on_nodes: Mapping[str, AbstractSet[str]]) -> None:
        """``set_usage`` from its sums: node id -> (CPU milli, memory MiB) reserved, and
        service id -> the nodes its tasks are on (``_tasks_by_service`` makes both in its
        one pass over the tasks)."""
        self.tasks_on = {(sid, nid) for sid, where in on_nodes.items() for nid in where}
        for nid in self.alloc.nodes:
            cpu, mem = use.get(nid, (0, 0))
            self.alloc.set_usage(nid, cpu, mem)

    def add_usage(self, node_id: str, cpu_milli: int, memory_mib: int) -> None:
        """More (or less) reserved on a node by a task placed between cycles."""
        cpu, mem = self.alloc.usage(node_id)
        self.alloc.set_usage(node_id, cpu + cpu_milli, mem + memory_mib)

    def held_items(self) -> list[tuple[tuple[str, str], _Held]]:
        return list(self._held.items())

    def moved(self, svc: str, old: str, new: Choice, uuids: Sequence[str]) -> str:
        """Record a move the fragmentation policy made on this allocator (released from
        ``old``, ``new`` committed with the task's reservation): the task now runs on the
        new node, whose usage counts it, so the holding itself reserves no CPU. Returns
        the ledger value."""
        self.alloc.release(new)
        bare = replace(new, cpu_milli=0, memory_mib=0)
        self.alloc.commit(bare)
        self._held.pop((svc, old), None)
        h = Holding(svc, new.node, tuple(uuids), new.milli)
        self._held[(svc, new.node)] = _Held((h.label_value(), 0, 0), bare, ())
        return h.label_value()

    def holding_reservation(self, service_id: str, node_id: str, res: tuple[int, int],
                            replicas: int = 1) -> tuple[int, int]:
        """What a holding reserves itself: the service's reservation (per replica it
        serves) while no task of it is on the node yet (then the tasks' own count)."""
        if (service_id, node_id) in self.tasks_on:
            return (0, 0)
        return (res[0] * replicas, res[1] * replicas)

    def release_holding(self, svc: str, node_id: str) -> None:
        """Give back what ``svc`` holds on ``node_id`` on this allocator (a choice made
        in this cycle that is replaced by another)."""
        held = self._held.get((svc, node_id))
        if held is not None:
            self._release((svc, node_id), held)

    # --- holdings ------------------------------------------------------------------
    def begin_holdings(self, wanted: Mapping[str, Mapping[str, Holding]],
                       res: Mapping[tuple[str, str], tuple[int, int]] | None = None) -> None:
        """Release every committed holding that is not wanted (as it is) any more; call
        before ``commit_holding`` so a GPU that changed hands is free for its new owner."""
        res = res or {}
        for key, held in list(self._held.items()):
            svc, nid = key
            h = wanted.get(svc, {}).get(nid)
            cpu, mem = res.get(key, (0, 0))
            if h is None or held.key != (h.label_value(), cpu, mem):
                self._release(key, held)

    def _release(self, key: tuple[str, str], held: _Held) -> None:
        del self._held[key]
        if held.choice is not None and key[1] in self.alloc.nodes:
            self.alloc.release(held.choice)
        for u in held.migs:
            self.assigned_mig.get(key[1], set()).discard(u)
        if held.migs:
            self._mig_none = {k for k in self._mig_none if k[0] != key[1]}

    def commit_holding(self, svc: str, node_id: str, h: Holding,
                       res: tuple[int, int] = (0, 0)) -> bool:
        """Count a holding as used; False when it is not valid on this node (any more)."""
        if node_id not in self.alloc.nodes:
            return False
        key = (svc, node_id)
        want = (h.label_value(), res[0], res[1])
        held = self._held.get(key)
        if held is not None and held.key == want:
            return True
        if held is not None:
            self._release(key, held)
        index = self._uuid_index(node_id)
        gpus: list[int] = []
        milli: list[int] = []
        migs: list[str] = []
        for u, m in zip(h.uuids, h.milli, strict=True):
            if u not in index:
                self.problems.append(f"{svc}: holds {u} on {self.nodes[node_id].hostname}, "
                                     "which that node's facts no longer list")
                return False
            i, is_mig = index[u]
            if is_mig:
                if u in self.assigned_mig.get(node_id, set()) or u in migs:
                    self.problems.append(f"{svc}: MIG device {u} is held twice")
                    return False
                migs.append(u)
                continue
            gpus.append(i)
            milli.append(m)
        choice: Choice | None = None
        if gpus or res != (0, 0):
            choice = Choice(node=node_id, gpus=tuple(gpus), milli=tuple(milli), score=0.0,
                            explanation=f"held by {svc}", cpu_milli=res[0], memory_mib=res[1])
            try:
                self.alloc.commit(choice)
            except ValueError as exc:
                self.problems.append(f"{svc}: {exc}")
                return False
        self.assigned_mig.setdefault(node_id, set()).update(migs)
        self._held[key] = _Held(want, choice, tuple(migs))
        return True

    def _uuid_index(self, node_id: str) -> dict[str, tuple[int, bool]]:
        f = self.facts.get(node_id)
        out: dict[str, tuple[int, bool]] = {}
        if f is None:
            return out
        for i, g in enumerate(f.gpus):
            out[g.uuid] = (i, False)
            for m in g.mig_devices:
                out[m.uuid] = (i, True)
        return out

    def _pick_mig(self, spec: NodeSpec, _free: tuple[int, ...], d: Demand) -> object | None:
        f = self.facts.get(spec.name)
        if f is None or d.mig_profile is None:
            return None
        got = pick_mig_device(f.gpus, d.mig_profile, self.assigned_mig.get(spec.name, set()))
        return got if isinstance(got, MigChoice) else None

    # --- decisions -------------------------------------------------------------------
    def place(self, d: Demand, allowed: Callable[[NodeState], bool] | None = None, *,
              exclude: AbstractSet[str] = frozenset(),
              where: Callable[[NodeState], bool] | None = None) -> Choice | Unplaceable:
        """Best node for ``d``: the core's scorer over one node per group of nodes in the
        same state. ``exclude`` names nodes that may not take it, ``where`` filters on
        what a group shares (labels); ``allowed`` (any per-node test) scans every node."""
        if self.timings is None:
            return self._place(d, allowed, exclude, where)
        t0 = time.perf_counter()
        try:
            return self._place(d, allowed, exclude, where)
        finally:
            self.timings.append(time.perf_counter() - t0)

    def _place(self, d: Demand, allowed: Callable[[NodeState], bool] | None,
               exclude: AbstractSet[str], where: Callable[[NodeState], bool] | None,
               ) -> Choice | Unplaceable:
        a = self.alloc
        if d.mig_profile:
            if len(self._by_rank) != len(a.nodes):
                self._by_rank = sorted(a.nodes.values(), key=lambda n: n.rank)
            for node in self._by_rank:
                if (node.blocked or node.spec.name in exclude
                        or (where is not None and not where(node))
                        or (allowed is not None and not allowed(node))
                        or (node.spec.name, d.mig_profile) in self._mig_none
                        or not a.fits(node, Demand(cpu_milli=d.cpu_milli,
                                                   memory_mib=d.memory_mib))):
                    continue
                got = self._pick_mig(node.spec, tuple(node.free), d)
                if got is None:
                    self._mig_none.add((node.spec.name, d.mig_profile))
                else:
                    return Choice(node=node.spec.name, gpus=(), milli=(), score=0.0,
                                  explanation=f"{d.describe()} on {node.spec.name}", mig=got,
                                  cpu_milli=d.cpu_milli, memory_mib=d.memory_mib)
            return Unplaceable(f"needs {d.describe()}; no allowed node has one free")
        if allowed is not None:
            exclude = frozenset(exclude) | {n for n, ns in a.nodes.items() if not allowed(ns)}
        got = a.place(d, exclude=exclude, where=where)
        if isinstance(got, Choice):
            return Choice(node=got.node, gpus=got.gpus, milli=got.milli, score=got.score,
                          explanation=f"{d.describe()} on {got.node}",
                          cpu_milli=d.cpu_milli, memory_mib=d.memory_mib)
        return got

    def hostnames(self, text: str) -> str:
        """Node ids in the allocator's words, as the hostnames people know (identical
        pending requests share one reason: each text is rewritten once per node set)."""
        got = self._host_text.get(text)
        if got is None:
            got = text
            for nid, n in self.nodes.items():
                if nid in got:
                    got = got.replace(nid, n.hostname)
            if len(self._host_text) > 10_000:
                self._host_text.clear()
            self._host_text[text] = got
        return got

    def to_replica(self, choice: Choice) -> ReplicaPlacement:
        f = self.facts[choice.node]
        host = self.nodes[choice.node].hostname
        if isinstance(choice.mig, MigChoice):
            return ReplicaPlacement(choice.node, host, (choice.mig.gpu_index,),
                                    (choice.mig.mig_uuid,), (1000,), choice.score)
        return ReplicaPlacement(choice.node, host, choice.gpus,
                                tuple(f.gpus[i].uuid for i in choice.gpus), choice.milli,
                                choice.score if math.isfinite(choice.score) else None)

    def commit(self, choice: Choice, service: str = "") -> None:
        if isinstance(choice.mig, MigChoice):
            self.assigned_mig.setdefault(choice.node, set()).add(choice.mig.mig_uuid)
        elif choice.gpus or choice.cpu_milli or choice.memory_mib:
            self.alloc.commit(choice)
        if service:  # recorded as the holding the ledger will show next cycle
            rp = self.to_replica(choice)
            h = Holding(service, choice.node, rp.uuids, rp.milli)
            migs = (choice.mig.mig_uuid,) if isinstance(choice.mig, MigChoice) else ()
            self._held[(service, choice.node)] = _Held(
                (h.label_value(), choice.cpu_milli, choice.memory_mib),
                choice if (choice.gpus or choice.cpu_milli or choice.memory_mib) else None,
                migs)


def _replicas_of(holding: Holding, node: SwarmNode, facts: NodeFacts | None
                 ) -> list[ReplicaPlacement]:
    """The replicas a holding serves: one, or one per slot when packed."""
    where: dict[str, int] = {}
    if facts is not None:
        where = {g.uuid: i for i, g in enumerate(facts.gpus)}
        for i, g in enumerate(facts.gpus):
            for m in g.mig_devices:
                where[m.uuid] = i

    def one(uuids: tuple[str, ...], milli: tuple[int, ...], slot: int | None
            ) -> ReplicaPlacement:
        idx = tuple(where[u] for u in uuids if u in where)
        return ReplicaPlacement(node.id, node.hostname, idx, uuids, milli, slot=slot)

    if not holding.packed:
        return [one(holding.uuids, holding.milli, None)]
    return [one(u, m, slot) for slot, (u, m) in holding.per_slot_milli().items()]


def _holding_fits(h: Holding, req: GpuRequest, facts: NodeFacts | None) -> str | None:
    """Why an existing holding no longer satisfies the request (None: it does)."""
    if facts is None:
        return None  # agent unreachable: keep what is there
    gpus = {g.uuid: g for g in facts.gpus}
    migs = {m.uuid: m for g in facts.gpus for m in g.mig_devices}
    if req.mig_profile:
        return None if len(h.uuids) == 1 and h.uuids[0] in migs else "not a MIG device"
    want = 1 if req.is_fraction else req.gpus
    if h.packed:
        if not req.can_pack:
            return "replicas packed on one node; the request keeps one per node"
        bad = [slot for slot, u in h.per_slot().items() if len(u) != want]
        if bad:
            return f"slot {bad[0]} holds a GPU count other than the request's {want}"
    elif len(h.uuids) != want:
        return f"holds {len(h.uuids)} GPU(s), request wants {want}"
    for u, m in zip(h.uuids, h.milli, strict=True):
        g = gpus.get(u)
        if g is None:
            return f"{u} is gone from the node"
        if req.min_memory_mib and g.memory_mib < req.min_memory_mib:
            return f"{u} has {g.memory_mib} MiB < {req.min_memory_mib} MiB"
        if not req.matches_product(g.product):
            return f"{u} is a {g.product}"
        if req.is_fraction and m != req.gpu_milli:
            return f"share {m} != requested {req.gpu_milli}"
    return None


def _zone_orders(req: GpuRequest, used_zones: set[str],
                 all_zones: set[str]) -> list[Callable[[str | None], bool]]:
    """Node-zone filters to try in order: preferred & unused, unused, any allowed, avoided."""
    avoid = set(req.zone_avoid)
    prefer = set(req.zone_prefer)
    tiers: list[Callable[[str | None], bool]] = []
    if prefer:
        tiers.append(lambda z: z in prefer and z not in used_zones)
        tiers.append(lambda z: z in prefer)
    if len(all_zones) > 1:
        tiers.append(lambda z: z not in avoid and z not in used_zones)
    tiers.append(lambda z: z not in avoid)
    if avoid:
        tiers.append(lambda z: True)  # soft: avoided zones only when nothing else fits
    return tiers


# (constraints, platforms (os, arch), generic reservations (kind, count))
ExcludeKey = tuple[tuple[str, ...], tuple[tuple[str, str], ...], tuple[tuple[str, int], ...]]


@dataclass
class _Cycle:
    """What every service's planning in one cycle reads (and the plan it writes to)."""

    cluster: ClusterAllocator
    by_id: Mapping[str, SwarmNode]
    facts: Mapping[str, NodeFacts]
    prefix: str
    zone_label: str
    all_zones: set[str]
    adopt_ungated: bool
    plan: PlacementPlan
    exclude: Callable[[SwarmService], frozenset[str]]
    most_gpus: int = 0  # GPUs of the largest node: no more replicas are ever packed
    now: float = 0.0
    backoff: dict[str, Backoff] = field(default_factory=dict)  # the planner's, by service id
    open_since: Mapping[tuple[str, str], float] = field(default_factory=dict)  # last cycle's
    open_seen: dict[tuple[str, str], float] = field(default_factory=dict)  # this cycle's
    avoid: dict[str, frozenset[str]] = field(default_factory=dict)  # nodes it is moved off

    def swarm_no(self, s: SwarmService) -> frozenset[str]:
        """Nodes the service's replicas may not take: those Swarm refuses, and those it
        is being moved off in this cycle (``_converge``)."""
        avoid = self.avoid.get(s.id)
        return self.exclude(s) | avoid if avoid else self.exclude(s)


# Re-placing a GPU task Swarm will not run where its devices are (``_converge``).
REPLACE_BACKOFF_S = 10.0  # the wait after the first re-placement (or failure seen)
REPLACE_BACKOFF_MAX_S = 600.0
GATE_GRACE_S = 5.0  # a gate must have been open this long before Swarm's refusal counts
_FAILURES_KEPT = 16  # failed/rejected task ids remembered per service (2**16 >> the cap)


@dataclass
class Backoff:
    """One service's re-placements, and the failed or rejected tasks Swarm reported for
    it: each doubles the wait before the next re-placement (``REPLACE_BACKOFF_S`` up
    to ``REPLACE_BACKOFF_MAX_S``), so a service whose tasks keep failing to start is
    not moved around in a loop. Dropped once all its replicas run."""

    attempts: int = 0
    since: float | None = None  # the last re-placement, or the first failure seen
    failures: set[str] = field(default_factory=set)

    def saw_failures(self, ids: Sequence[str], now: float) -> None:
        for i in ids:
            if len(self.failures) >= _FAILURES_KEPT:
                break
            if i not in self.failures:
                self.failures.add(i)
                if self.since is None:
                    self.since = now

    def replaced(self, now: float) -> None:
        self.attempts += 1
        self.since = now

    def adopt(self, label: str | None) -> None:
        """Take the count and time recorded on the service (``REPLACED_STATE``) when
        they are newer than what this planner saw itself (a restart, a new leader, a
        one-shot `plan`). A value that does not parse, or one from the future, is none:
        it could only delay its own service anyway."""
        attempts, _, at = (label or "").partition("@")
        if not (attempts.isascii() and attempts.isdigit() and len(attempts) <= 3
                and at.isascii() and at.isdigit() and len(at) <= 12):
            return
        if int(attempts) > self.attempts:
            self.attempts, self.since = int(attempts), float(at)

    def label(self) -> str:
        return f"{self.attempts}@{int(self.since or 0)}"

    def delay(self) -> float:
        n = self.attempts + len(self.failures)
        return 0.0 if n == 0 else min(REPLACE_BACKOFF_MAX_S, REPLACE_BACKOFF_S * 2 ** (n - 1))

    def wait_left(self, now: float) -> float:
        return 0.0 if self.since is None else max(0.0, self.since + self.delay() - now)

    def key(self) -> tuple[int, int]:
        return (self.attempts, len(self.failures))

    def describe(self) -> str:
        return (f"{self.attempts} re-placement(s), {len(self.failures)} task(s) failed or "
                f"rejected; next wait {self.delay():.0f} s, at most "
                f"{REPLACE_BACKOFF_MAX_S:.0f} s")


class Planner:
    """The placement planner: snapshot in, plan out. One object lives as long as its
    user -- the daemon keeps it across cycles, ``simulate`` across a whole replay -- so
    what did not change since the last cycle is not recomputed: parsed requests, the
    allocator's nodes and holdings, unplaceable answers, the plans of settled services.

    Node choice is ``SwarmScorer`` with the workload model (``swarmgpu.allocator.workload``):
    learned from the services seen (``learn``), or pinned.
    """

    def __init__(self, *, prefix: str = "swarmgpu.", zone_label: str = "topology.zone",
                 adopt_ungated: bool = True, generic_kind: str = "",
                 workload: WorkloadModel | None = None) -> None:
        self.prefix = prefix
        self.zone_label = zone_label
        self.adopt_ungated = adopt_ungated
        self.generic_kind = generic_kind
        self.model = workload if workload is not None else WorkloadModel.prior()
        self.scorer = SwarmScorer(self.model.typical())
        self.cluster = ClusterAllocator(scorer=self.scorer, prefix=prefix)
        self._model_mark = self.model.seen
        self._requests: dict[str, tuple[int, GpuRequest | RequestError | None,
                                        tuple[int, int]]] = {}
        self._settled: dict[str, tuple[tuple[object, ...], ServicePlan, tuple[str, ...]]] = {}
        self._exclude: dict[ExcludeKey, frozenset[str]] = {}
        self._ledger_cache: dict[str, tuple[int, list[Holding]]] = {}
        self._exclude_sig: tuple[tuple[str, int], ...] = ()
        self._exclude_sig_gen = 0
        self._exclude_keys: dict[str, tuple[int, ExcludeKey | None]] = {}
        self._shapes: dict[str, TaskShape] = {}  # service id -> shape learned
        self._declared: dict[str, tuple[int, list[tuple[str, int | None, tuple[str, ...]]]]] = {}
        self._fits: dict[tuple[Holding, GpuRequest, int], str | None] = {}  # holding fits
        self._last_cycle: _Cycle | None = None  # what place_arrivals plans against
        self.model_changed = False  # since the owner last stored the model
        self._backoff: dict[str, Backoff] = {}  # service id -> its re-placements
        self._open_since: dict[tuple[str, str], float] = {}  # (service id, node): gate seen open

    # --- the workload model ------------------------------------------------------
    def _learn(self, parsed: Sequence[tuple[SwarmService, GpuRequest | RequestError]],
               cpu_only: Sequence[SwarmService] = (), *, forget: bool = True) -> None:
        """Count each service's shape once. Services without a GPU request count too,
        by the CPU they reserve: they compete for the CPU that GPU tasks need, and the
        policy's CPU reserve weighs them (``cpu_reserve_per_gpu_milli``). ``forget``:
        ``parsed`` and ``cpu_only`` are every live service (a full cycle), so the marks
        of the others are dropped."""
        model = self.model
        for s in cpu_only:
            if model.knows(s.id) and s.id in self._shapes:
                continue
            cpu = self._requests[s.id][2][0]
            shape = TaskShape(cpu, 0, 0)
            self._shapes[s.id] = shape
            count = max(1, s.replicas or 0) if s.mode == "replicated" else 1
            if model.observe(s.id, str(shape), shape, count):
                self.model_changed = True
        for s, r in parsed:
            if isinstance(r, RequestError) or s.mode != "replicated" or r.mig_profile:
                continue  # MIG slices are their own pool; they do not fragment shares
            if model.knows(s.id) and s.id in self._shapes:
                continue  # counted (per request: a changed request has a new version)
            cpu, _mem = self._requests[s.id][2]
            shape = demand_of(r, cpu).shape()
            self._shapes[s.id] = shape
            if model.observe(s.id, str(shape), shape, max(1, s.replicas or 0)):
                self.model_changed = True
        if forget and model.known_count() > len(parsed) + len(cpu_only):
            model.forget_keys([*(s.id for s, _ in parsed), *(s.id for s in cpu_only)])
        # Refresh the policy when the model grew by a tenth (or 20 tasks) since: a new
        # model drops the allocator's score cache, so not on every single arrival.
        if self.model.seen - self._model_mark >= max(20.0, 0.1 * self._model_mark):
            self.set_workload(self.model)

    def _learn_on_gpu_nodes(
            self, parsed: Sequence[tuple[SwarmService, GpuRequest | RequestError]],
            cpu_only: Sequence[SwarmService], on_nodes: Mapping[str, AbstractSet[str]], *,
            forget: bool = True) -> None:
        """``_learn``, unless the model is pinned. A CPU-only service competes for the GPU
        nodes' CPU only where its tasks run there; one on CPU-only nodes is none of
        placement's business."""
        if self.model.pinned:
            return
        gpu_nodes = self.cluster.alloc.nodes
        on_gpu_nodes = {sid for sid, where in on_nodes.items()
                        if any(n in gpu_nodes for n in where)}
        self._learn(parsed, [s for s in cpu_only if s.id in on_gpu_nodes], forget=forget)

    def set_workload(self, model: WorkloadModel) -> None:
        self.model = model
        self._model_mark = model.seen
        self.cluster.alloc.set_workload(model.typical())
        self.cluster.unplaceable.clear()

    # --- one cycle -----------------------------------------------------------------
    def _parse_all(self, services: Sequence[SwarmService]) -> tuple[
            list[tuple[SwarmService, GpuRequest | RequestError]], list[SwarmService],
            list[SwarmService]]:
        """By name: the services with a GPU request (or a broken one), those without one
        that reserve CPU, and all those without one."""
        parsed: list[tuple[SwarmService, GpuRequest | RequestError]] = []
        cpu_only: list[SwarmService] = []
        no_request: list[SwarmService] = []
        for s in sorted(services, key=lambda s: s.name):
            r = self._parse(s)
            if r is not None:
                parsed.append((s, r))
                continue
            no_request.append(s)
            if self._requests[s.id][2][0] > 0:
                cpu_only.append(s)
        return parsed, cpu_only, no_request

    def _parse(self, s: SwarmService) -> GpuRequest | RequestError | None:
        got = self._requests.get(s.id)
        if got is None or got[0] != s.version:
            self._shapes.pop(s.id, None)
            r = parse_all(s.labels, prefix=self.prefix, zone_label=self.zone_label)
            got = (s.version, r, reservations(s.spec))
            self._requests[s.id] = got
        return got[1]

    def _exclude_for(self, s: SwarmService) -> frozenset[str]:
        """Nodes Swarm would refuse the service's task on: its own constraints (not the
        gate, which swarmgpu opens), platforms and generic resources."""
        got = self._exclude_keys.get(s.id)
        if got is None or got[0] != s.version:
            got = (s.version, self._exclude_key(s))
            self._exclude_keys[s.id] = got
        key = got[1]
        if key is None:
            return frozenset()
        hit = self._exclude.get(key)
        if hit is None:
            cons, plats, generic = key
            parsed, _errors = parse_constraints(cons)
            hit = frozenset(n.id for n in self._cycle_nodes
                            if not node_satisfies(parsed, n)
                            or (plats and not any(platform_ok(n, o, a) for o, a in plats))
                            or any(_generic_count(n, k) < v for k, v in generic))
            self._exclude[key] = hit
        return hit

    def _exclude_key(self, s: SwarmService) -> ExcludeKey | None:
        gate_prefix = f"node.labels.{self.prefix}{GATE}"
        cons = tuple(c for c in s.constraints
                     if not c.replace(" ", "").lower().startswith(gate_prefix.lower()))
        plats = tuple((str(p.get("OS") or ""), str(p.get("Architecture") or ""))
                      for p in ((s.spec.get("TaskTemplate") or {}).get("Placement") or {})
                      .get("Platforms") or () if isinstance(p, Mapping))
        generic = dict(_generic_reservations(s.spec))
        r = self._requests.get(s.id, (0, None, (0, 0)))[1]
        if (self.generic_kind and isinstance(r, GpuRequest) and not r.mig_profile
                and not r.is_fraction):
            generic[self.generic_kind] = r.gpus  # what _reserve_generic will reserve
        if not cons and not plats and not generic:
            return None
        return (cons, plats, tuple(sorted(generic.items())))

    def plan(self, nodes: Sequence[SwarmNode], services: Sequence[SwarmService],
             tasks: Sequence[SwarmTask], facts: Mapping[str, NodeFacts], *,
             now: float | None = None) -> PlacementPlan:
        """Decide placements for every annotated service; say what to write, in order.
        ``now`` (epoch seconds; the back-off of ``_converge`` is kept in Swarm as such)."""
        now = time.time() if now is None else now
        prefix = self.prefix
        plan = PlacementPlan()
        ledger = read_ledger(nodes, prefix, self._ledger_cache)
        by_id = {n.id: n for n in nodes}
        cluster = self.cluster
        cluster.problems = []
        cluster.sync_nodes(nodes, facts)
        self._cycle_nodes = nodes
        sig = tuple((n.id, n.version) for n in nodes)
        if sig != self._exclude_sig:  # a node changed: Swarm's filters may answer anew
            self._exclude_sig = sig
            self._exclude_sig_gen += 1
            self._exclude = {}
        live_names = {s.name for s in services}
        most = max((len(ns.spec.gpus) for ns in cluster.alloc.nodes.values()), default=0)
        few = {s.id for s in services if (s.replicas or 0) <= most}
        tv = _tasks_by_service(tasks, few.__contains__)
        running, waiting, slots = tv.running, tv.waiting, tv.slots

        # Holdings of services that no longer exist are released (gate and ledger).
        for svc_name, per_node in ledger.items():
            if svc_name not in live_names:
                plan.released.append(svc_name)
                for node_id in per_node:
                    _node_remove(plan, node_id, [assign_key(prefix, svc_name),
                                                 gate_key(prefix, svc_name)])
        gk = prefix + GATE
        for n in nodes:  # stray gates without a holding
            for k in n.labels:
                if k.startswith(gk) and k[len(gk):] not in live_names:
                    _node_remove(plan, n.id, [k])

        parsed, cpu_only, no_request = self._parse_all(services)
        for s in no_request:
            if s.name in ledger:  # request labels removed: release its GPUs
                plan.released.append(s.name)
                for node_id in ledger[s.name]:
                    _node_remove(plan, node_id, [assign_key(prefix, s.name),
                                                 gate_key(prefix, s.name)])
                stale = [k for k in s.labels if k.startswith(prefix + DEVICES)]
                if stale:
                    plan.services.append(ServicePlan(
                        s.name, s.id, None, "", "released", "Released",
                        service_labels_remove=stale))
        self._learn_on_gpu_nodes(parsed, cpu_only, tv.on_nodes)

        # First commit every valid existing holding, so new placements never reuse GPUs.
        cluster.set_usage_of(tv.use, tv.on_nodes)
        kept = self._commit_existing(parsed, ledger, by_id, facts, running)

        live_ids = {s.id for s, _ in parsed}
        self._backoff = {k: v for k, v in self._backoff.items() if k in live_ids}
        for sid, ids in tv.failed.items():
            if sid in live_ids:
                self._backoff.setdefault(sid, Backoff()).saw_failures(ids, now)
        cyc = _Cycle(cluster, by_id, facts, prefix, self.zone_label,
                     {n.labels.get(self.zone_label, "") for n in nodes}, self.adopt_ungated,
                     plan, self._exclude_for, most_gpus=most, now=now,
                     backoff=self._backoff, open_since=self._open_since)
        self._last_cycle = cyc
        settled: dict[str, tuple[tuple[object, ...], ServicePlan, tuple[str, ...]]] = {}
        for s, r in parsed:
            mine = kept.get(s.name, {})
            mine_slots = slots.get(s.id, {})
            key = self._settled_key(s, mine, ledger.get(s.name, {}), by_id,
                                    running.get(s.id, {}), waiting.get(s.id, NO_WAITING))
            # Slots are read only where the replicas could be packed on one node.
            key += (tuple(sorted(mine_slots.items())) if s.id in few else None,)
            bo = self._backoff.get(s.id)
            key += (bo.key() if bo is not None else None,)
            if not mine:  # pending: the same answer while capacity and nodes are as they were
                key += (cluster.version, self._exclude_sig_gen)
            memo = self._settled.get(s.id)
            if memo is not None and memo[0] == key:
                sp = memo[1]  # last cycle's plan, no writes: it still holds
                sp.warnings = list(memo[2])
            else:
                sp = _plan_service(s, r, mine, ledger.get(s.name, {}), running.get(s.id, {}),
                                   waiting.get(s.id, NO_WAITING), self._requests[s.id][2], cyc,
                                   mine_slots)
                if self.generic_kind and sp.request is not None and sp.status != "invalid":
                    _reserve_generic(sp, s, self.generic_kind, bool(running.get(s.id)))
            if ((sp.status == "placed" or (sp.status == "pending" and not sp.placements))
                    and not sp.needs_service_write and not sp.node_writes and not sp.new):
                settled[s.id] = (key, sp, tuple(sp.warnings))
            plan.services.append(sp)
        self._settled = settled
        self._open_since = cyc.open_seen
        if len(self._fits) > 4 * len(settled) + 10_000:  # departed services' entries
            self._fits.clear()
        if len(self._requests) > 2 * len(services) + 1000:
            live = {s.id for s in services}
            for cache in (self._requests, self._shapes, self._declared, self._exclude_keys):
                for sid in [k for k in cache if k not in live]:
                    del cache[sid]
        for p in cluster.problems:
            for sp in plan.services:
                if p.startswith(sp.name + ":"):
                    sp.warnings.append(p)
        plan.workload = self.model.summary()
        return plan

    def place_arrivals(self, services: Sequence[SwarmService], tasks: Sequence[SwarmTask],
                       ) -> PlacementPlan:
        """Plan services created since the last cycle against the state it left (its
        holdings, CPU usage as changed since through ``cluster.add_usage``, and what
        this method committed since): the decisions a full cycle run right then would
        make for them while nothing else changed, at the cost of the new services only.

        ``simulate`` places each arrival this way. The daemon runs a cycle on every
        service-create event, so a new service is planned before the next one arrives
        whenever arrivals are further apart than a cycle takes (the openb trace: median
        161 s apart, 2% within a second); re-planning the whole cluster per arrival
        would make a replay hours long. tests/test_sim.py checks the decisions
        against a full cycle per arrival. ``services`` are the new ones, CPU-only
        ones included (the model learns them as a cycle would); ``tasks`` their tasks.
        """
        last = self._last_cycle
        if last is None:
            raise RuntimeError("place_arrivals needs a full cycle (plan) first")
        plan = PlacementPlan()
        cyc = replace(last, plan=plan)
        parsed, cpu_only, _ = self._parse_all(services)
        tv = _tasks_by_service(tasks)
        self._learn_on_gpu_nodes(parsed, cpu_only, tv.on_nodes, forget=False)
        for s, r in parsed:
            sp = _plan_service(s, r, {}, {}, {}, tv.waiting.get(s.id, NO_WAITING),
                               self._requests[s.id][2], cyc, tv.slots.get(s.id, {}))
            if self.generic_kind and sp.request is not None and sp.status != "invalid":
                _reserve_generic(sp, s, self.generic_kind, False)
            plan.services.append(sp)
        plan.workload = self.model.summary()
        return plan

    def _commit_existing(
        self, parsed: Sequence[tuple[SwarmService, GpuRequest | RequestError]],
        ledger: Mapping[str, Mapping[str, Holding]], by_id: Mapping[str, SwarmNode],
        facts: Mapping[str, NodeFacts], running: Mapping[str, Mapping[str, int]],
    ) -> dict[str, dict[str, Holding]]:
        """Holdings kept this cycle: every valid ledger entry, then declared device lists.

        The ledger (node labels only swarmgpu writes) is authoritative. A
        ``<p>devices.<node>`` service label without a ledger entry (a stack from ``swarmgpu
        render``, a lost node label) is adopted only onto GPUs that are still free, so a
        service cannot take another one's GPUs by naming their UUIDs: the declared list is
        reported and the service is placed anew, and the running owner keeps its GPUs.
        Declared lists of services with running tasks on that node are tried first.
        """
        cluster, prefix = self.cluster, self.prefix
        wanted: dict[str, dict[str, Holding]] = {}
        order: list[tuple[str, str, Holding]] = []
        gen, in_alloc, fits = cluster.node_gen, cluster.alloc.nodes, self._fits
        declared: list[tuple[bool, str, SwarmService, GpuRequest, Holding]] = []
        dk = prefix + DEVICES
        no_holdings: dict[str, Holding] = {}
        for s, r in parsed:
            mine = ledger.get(s.name, no_holdings)
            for node_id, h in mine.items():  # 1. the ledger
                if not isinstance(r, RequestError):  # invalid now: keep, never drop
                    if node_id not in by_id:
                        continue
                    fk = (h, r, gen.get(node_id, 0) if node_id in in_alloc else -1)
                    why = fits.get(fk, fk)
                    if why is fk:
                        why = fits[fk] = _holding_fits(h, r, facts.get(node_id))
                    if why is not None:
                        continue
                wanted.setdefault(s.name, {})[node_id] = h
                order.append((s.id, s.name, h))
            if isinstance(r, RequestError):
                continue
            got = self._declared.get(s.id)
            if got is None or got[0] != s.version:
                got = (s.version, _declared_lists(s.labels, dk))
                self._declared[s.id] = got
            per_slot: dict[str, dict[int, tuple[Sequence[str], Sequence[int]]]] = {}
            for nid, slot, uuids in got[1]:  # 2. declared device lists (below)
                if nid in mine or nid not in by_id or not uuids:
                    continue
                milli = r.gpu_milli if r.is_fraction else 1000
                if slot is not None:  # replicas packed on the node: one list per slot
                    per_slot.setdefault(nid, {})[slot] = (uuids, tuple(1000 for _ in uuids))
                    continue
                h = Holding(s.name, nid, uuids, tuple(milli for _ in uuids))
                declared.append((not running.get(s.id, {}).get(nid), s.name, s, r, h))
            for nid, per in per_slot.items():
                h = packed_holding(s.name, nid, per)
                if len(set(h.uuids)) == len(h.uuids):  # a GPU in two slots: not adopted
                    declared.append((not running.get(s.id, {}).get(nid), s.name, s, r, h))
        owner = {(nid, u): svc for svc, per in wanted.items() for nid, h in per.items()
                 for u in h.uuids} if declared else {}
        for _, name, s, r, h in sorted(declared, key=lambda d: (d[0], d[1])):
            # A share of a GPU may sit beside another service's share (capacity decides).
            taken = sorted({owner[(h.node_id, u)] for u, m in zip(h.uuids, h.milli, strict=True)
                            if m >= 1000 and owner.get((h.node_id, u), name) != name})
            if taken:
                cluster.problems.append(
                    f"{name}: its label {dk}{h.node_id} names GPU(s) that {', '.join(taken)} "
                    "hold(s) in the ledger; ignored, and the service is placed anew")
                continue
            if _holding_fits(h, r, facts.get(h.node_id)) is None:
                wanted.setdefault(name, {})[h.node_id] = h
                order.append((s.id, name, h))
                owner.update({(h.node_id, u): name for u in h.uuids})
        reqs = self._requests
        res = {(name, h.node_id): cluster.holding_reservation(sid, h.node_id, reqs[sid][2],
                                                              h.replicas)
               for sid, name, h in order}
        cluster.begin_holdings(wanted, res)
        kept: dict[str, dict[str, Holding]] = {}
        for _sid, name, h in order:
            if cluster.commit_holding(name, h.node_id, h, res[(name, h.node_id)]):
                kept.setdefault(name, {})[h.node_id] = h
        return kept

    def _settled_key(self, s: SwarmService, kept: Mapping[str, Holding],
                     old: Mapping[str, Holding], by_id: Mapping[str, SwarmNode],
                     running_on: Mapping[str, int], waiting: Waiting,
                     ) -> tuple[object, ...]:
        """Everything a settled service's plan reads: while it is unchanged, last
        cycle's plan (no writes) still holds."""
        gen = self.cluster.node_gen
        # A node's spec version moves with any label change on it (gates, ledger).
        nodes = tuple((nid, h, by_id[nid].version, gen.get(nid, 0))
                      for nid, h in kept.items() if nid in by_id)
        return (s.version, nodes, tuple(old.values()), tuple(running_on.items()), waiting)


def _declared_lists(labels: Mapping[str, str], dk: str
                    ) -> list[tuple[str, int | None, tuple[str, ...]]]:
    """(node id, slot or None, uuids) of each device list on a service (node ids have no
    dot; ``<node>.<slot>`` is a packed replica's list)."""
    out: list[tuple[str, int | None, tuple[str, ...]]] = []
    for k, v in labels.items():
        if not k.startswith(dk):
            continue
        rest = k[len(dk):]
        uuids = tuple(u for u in v.split(",") if u)
        nid, dot, slot = rest.rpartition(".")
        if dot and nid and slot.isascii() and slot.isdigit() and 0 < len(slot) <= 6 \
                and int(slot) > 0:
            out.append((nid, int(slot), uuids))
        else:
            out.append((rest, None, uuids))
    return out


@dataclass(frozen=True)
class Waiting:
    """A service's tasks meant to run that do not run yet, as placement reads them: how
    many, the oldest device map one was created with (``ForceUpdate``), and Swarm's
    reason when its scheduler refuses one. A summary, not a list: a service of 100,000
    replicas Swarm cannot run costs one pass over its tasks, and nothing after."""

    count: int = 0
    min_force_update: int = 0
    refused: str = ""  # Swarm's words ("no suitable node (insufficient resources ...)")

    def __bool__(self) -> bool:
        return self.count > 0

    def all_newer(self, gen: int) -> bool:
        """Every waiting task was created at device-map generation ``gen`` or later."""
        return not self.count or self.min_force_update >= gen


NO_WAITING = Waiting()
_ACTIVE = frozenset(ACTIVE_STATES) - {"running", "starting"}
_FAILED = frozenset(("failed", "rejected"))


@dataclass
class _TaskView:
    """Per service id, of its tasks meant to run: how many run on each node, the ones
    waiting (``Waiting``), each slot's node ("": not scheduled yet), the nodes its
    tasks are on; and the ids of tasks Swarm reports failed or rejected."""

    running: dict[str, dict[str, int]]
    waiting: dict[str, Waiting]
    slots: dict[str, dict[int, str]]
    on_nodes: dict[str, set[str]]
    failed: dict[str, list[str]]
    use: dict[str, list[int]]  # node id -> [CPU milli, memory MiB] its tasks reserve


def _tasks_by_service(tasks: Sequence[SwarmTask],
                      slots_of: Callable[[str], bool] | None = None) -> _TaskView:
    """``slots_of``: the services whose slots are wanted (those that could be packed on
    one node; default all): the others' slots are never read."""
    running: dict[str, dict[str, int]] = {}
    use: dict[str, list[int]] = {}
    slots: dict[str, dict[int, str]] = {}
    on_nodes: dict[str, set[str]] = {}
    failed: dict[str, list[str]] = {}
    acc: dict[str, list[Any]] = {}  # service id -> [count, min ForceUpdate, refusal]
    refusal: dict[tuple[str, str], str] = {}  # Swarm repeats one text over many tasks
    wanted: dict[str, bool] = {}
    for t in tasks:
        sid, state = t.service_id, t.state
        if state in _FAILED:
            failed.setdefault(sid, []).append(t.id)
        if t.desired_state != "running":
            continue
        nid = t.node_id
        if t.slot:
            at = slots.get(sid)
            if at is None:
                want = wanted.get(sid)
                if want is None:
                    want = wanted[sid] = slots_of is None or slots_of(sid)
                if want:
                    at = slots[sid] = {}
            if at is not None and not at.get(t.slot):
                at[t.slot] = nid
        if nid:
            on_nodes.setdefault(sid, set()).add(nid)
            if t.cpu_milli or t.memory_mib:
                u = use.get(nid)
                if u is None:
                    u = use[nid] = [0, 0]
                u[0] += t.cpu_milli
                u[1] += t.memory_mib
        if state == "running" or state == "starting":
            per = running.setdefault(sid, {})
            per[nid] = per.get(nid, 0) + 1
        elif state in _ACTIVE:
            a = acc.get(sid)
            if a is None:
                a = acc[sid] = [0, t.force_update, ""]
            a[0] += 1
            if t.force_update < a[1]:
                a[1] = t.force_update
            if not a[2] and (t.error or t.message):
                key = (t.error, t.message)
                text = refusal.get(key)
                if text is None:
                    text = refusal[key] = _refusal_text(t.error, t.message)
                a[2] = text
    waiting = {sid: Waiting(a[0], a[1], a[2]) for sid, a in acc.items()}
    return _TaskView(running, waiting, slots, on_nodes, failed, use)


def plan_placement(
    nodes: Sequence[SwarmNode],
    services: Sequence[SwarmService],
    tasks: Sequence[SwarmTask],
    facts: Mapping[str, NodeFacts],
    *,
    prefix: str = "swarmgpu.",
    zone_label: str = "topology.zone",
    adopt_ungated: bool = True,
    generic_kind: str = "",
    workload: WorkloadModel | None = None,
) -> PlacementPlan:
    """One cycle of a fresh ``Planner`` (``render``, ``plan`` and tests)."""
    return Planner(prefix=prefix, zone_label=zone_label, adopt_ungated=adopt_ungated,
                   generic_kind=generic_kind, workload=workload).plan(
        nodes, services, tasks, facts)


def _node_set(plan: PlacementPlan, node_id: str, labels: Mapping[str, str]) -> None:
    plan.node_set.setdefault(node_id, {}).update(labels)


def _node_remove(plan: PlacementPlan, node_id: str, keys: Sequence[str]) -> None:
    cur = plan.node_remove.setdefault(node_id, [])
    cur.extend(k for k in keys if k not in cur)


def _plan_service(
    s: SwarmService, r: GpuRequest | RequestError, kept: dict[str, Holding],
    old: Mapping[str, Holding], running_on: Mapping[str, int],
    waiting: Waiting, res: tuple[int, int], cyc: _Cycle,
    slots: Mapping[int, str] | None = None,
) -> ServicePlan:
    """One service's plan, in steps: can it be placed at all, is it gated, which
    holdings it keeps, where its missing replicas go, what to write, what to report."""
    if isinstance(r, RequestError):
        return ServicePlan(s.name, s.id, None, "", "invalid", "Invalid", reason=str(r))
    sp = ServicePlan(s.name, s.id, r, r.describe(), "placed", "Active")
    if s.mode != "replicated":
        sp.status, sp.state = "invalid", "Invalid"
        sp.reason = (f"{s.mode} services cannot carry GPU requests; use mode: replicated "
                     "with replicas")
        return sp
    if f"{cyc.prefix}{MOVE_STATE}" in s.labels:
        # A rebalancing move owns this service until it ends (swarmgpu.manager.rebalance.mover):
        # its holdings stay reserved (committed above), nothing is written here.
        sp.state = "Rebalancing"
        sp.placements = sorted((p for nid, h in kept.items() if nid in cyc.by_id
                                for p in _replicas_of(h, cyc.by_id[nid], cyc.facts.get(nid))),
                               key=_placement_order)
        sp.warnings.append("a rebalancing move is in progress; placement waits for it")
        return sp
    if not _gate_service(sp, s, cyc):
        return sp
    replicas = s.replicas or 0
    holdings = _keep_holdings(sp, s, kept, old, running_on, replicas, cyc)
    stuck = _converge(sp, s, r, holdings, running_on, waiting, res, cyc)
    placements, reasons = _place_replicas(sp, s, r, holdings, replicas, slots or {}, res, cyc)
    sp.placements = sorted(placements, key=_placement_order)
    if sp.packed is None and replicas > 1 and s.max_replicas_per_node != 1:
        sp.set_max_replicas = 1
    elif sp.packed is not None and not _packed_env(sp, s, cyc):
        return sp
    gates_open = _write_devices_and_gates(sp, s, running_on, waiting, cyc)
    # swarmgpu's own record of the MaxReplicas it set (not a device map: no restart)
    sp.service_labels_set.update({k: v for k, v in sp.state_labels.items()
                                  if s.labels.get(k) != v})
    if cyc.prefix + MAX_STATE in s.labels and cyc.prefix + MAX_STATE not in sp.state_labels:
        sp.service_labels_remove.append(cyc.prefix + MAX_STATE)
    if len(sp.placements) < replicas:
        sp.status = "pending"
        sp.reason = "; ".join(reasons) or "not enough nodes"
        if len(sp.placements) and reasons:
            sp.reason = f"{len(sp.placements)} of {replicas} replicas placed; {sp.reason}"
    elif gates_open and waiting.refused and not sp.replaced:
        # Placed by the ledger, but Swarm says it cannot run the task there: not placed.
        sp.status = "pending"
        sp.reason = f"Swarm cannot run its task: {waiting.refused}"
    if stuck:  # held where Swarm will not run it, and not moved: it waits
        sp.status = "pending"
        sp.reason = f"{sp.reason}; {stuck}" if sp.reason else stuck
    if sp.replaced:
        now_on = sorted({p.hostname for p in sp.placements})
        sp.replaced += f"; re-placed on {', '.join(now_on) or 'no node yet'}"
        sp.warnings.append(sp.replaced)
    if sp.status == "placed" and replicas and sum(running_on.values()) >= replicas:
        cyc.backoff.pop(s.id, None)  # converged: a later refusal starts afresh
        if cyc.prefix + REPLACED_STATE in s.labels:
            sp.service_labels_remove.append(cyc.prefix + REPLACED_STATE)
    sp.state = _state(sp, s, running_on, replicas)
    if r.rebalance is Rebalance.NEVER:
        sp.warnings.append("opted out of rebalancing")
    return sp


def _placement_order(p: ReplicaPlacement) -> tuple[str, int]:
    return (p.hostname, p.slot or 0)


def _place_replicas(sp: ServicePlan, s: SwarmService, r: GpuRequest,
                    holdings: Mapping[str, Holding], replicas: int, live: Mapping[int, str],
                    res: tuple[int, int], cyc: _Cycle
                    ) -> tuple[list[ReplicaPlacement], list[str]]:
    """Spread one replica per node, or pack them all on one node: a service packed
    stays packed (its slots follow the tasks' on scale-up and -down); a service that
    holds nothing is packed when its replicas cannot be spread (``pack: auto``) or
    always (``pack: always``), if one node can hold them all."""
    by_id = cyc.by_id
    packed = next((h for h in holdings.values() if h.packed), None)
    if packed is not None:
        return _repack(sp, s, r, packed, replicas, live, res, cyc)
    placements = [p for nid, h in holdings.items() if nid in by_id
                  for p in _replicas_of(h, by_id[nid], cyc.facts.get(nid))]
    mrpn = s.max_replicas_per_node or 0
    if s.labels.get(cyc.prefix + MAX_STATE) == str(mrpn):
        mrpn = 0  # the value swarmgpu set when it last packed the service: not a limit
    # No node holds more replicas than it has GPUs: beyond that, packing is not tried
    # (and no slot list is built: a service of 100,000 replicas is just pending).
    fits_one = r.can_pack and replicas * r.gpus <= cyc.most_gpus
    may_pack = (not holdings and replicas > 1 and fits_one
                and not 1 < mrpn < replicas)
    if may_pack and r.pack is Pack.ALWAYS:
        got, why = _place_packed(s, r, _want_slots(live, replicas), {}, res, cyc)
        if got:
            sp.packed = f"packed on {got[0].hostname} ({Pack.ALWAYS.value})"
            sp.new = True
            return got, []
        return [], [why]
    base = len(placements)
    reasons = _place_missing(sp, s, r, placements, replicas - len(placements), res, cyc)
    held = next(iter(holdings.items()), None)
    if (len(placements) < replicas and held is not None and len(holdings) == 1
            and replicas > 1 and fits_one and not 1 < mrpn < replicas):
        # Spread, one replica placed, no node for the others (a service from before
        # packing, or one whose nodes filled up): pack on the node it holds, its replica
        # there keeping its slot and GPUs, when that node has room for the rest.
        nid, h0 = held
        on = [k for k, n in live.items() if n == nid]
        want = _want_slots(live, replicas)
        slot0 = on[0] if on else want[0]
        if len(on) <= 1 and slot0 in want:
            for p in placements[base:]:
                cyc.cluster.release_holding(s.name, p.node_id)
            got, _why = _place_packed(s, r, want, {slot0: (h0.uuids, h0.milli)}, res, cyc,
                                      node=nid)
            if got:
                sp.packed = (f"packed on {got[0].hostname}: {replicas} replicas could not "
                             f"be spread one per node ({'; '.join(reasons)}); its replica "
                             "there keeps its GPUs")
                sp.new = True
                return got, []
            del placements[base:]
            cyc.cluster.commit_holding(s.name, nid, h0, cyc.cluster.holding_reservation(
                s.id, nid, res))
            reasons = _place_missing(sp, s, r, placements, replicas - base, res, cyc)
    if len(placements) < replicas and may_pack:
        for p in placements:  # not enough nodes: try all of them on one node instead
            cyc.cluster.release_holding(s.name, p.node_id)
        got, _why = _place_packed(s, r, _want_slots(live, replicas), {}, res, cyc)
        if got:
            sp.packed = (f"packed on {got[0].hostname}: {replicas} replicas could not be "
                         f"spread one per node ({'; '.join(reasons)})")
            sp.new = True
            return got, []
        placements = []
        reasons = _place_missing(sp, s, r, placements, replicas, res, cyc)
        reasons.append("no single node can hold all replicas either")
    elif len(placements) < replicas and r.can_pack and 1 < mrpn < replicas:
        reasons.append(f"not packed on one node: max_replicas_per_node {mrpn} is below "
                       f"{replicas} replicas (raise or remove it)")
    return placements, reasons


def _want_slots(live: Mapping[int, str] | AbstractSet[int], replicas: int) -> list[int]:
    """The task slots a packed service's replicas use: its tasks' (Swarm keeps a
    task's slot when it replaces the task), then the lowest missing numbers, which
    is where Swarm's replicated orchestrator puts new tasks."""
    out = sorted(live)[:replicas]
    have = set(out)  # linear: a list's ``in`` made 100,000 replicas take seconds
    k = 0
    while len(out) < replicas:
        k += 1
        if k not in have:
            out.append(k)
    return sorted(out)


def _place_packed(s: SwarmService, r: GpuRequest, slots: Sequence[int],
                  have: Mapping[int, tuple[tuple[str, ...], tuple[int, ...]]],
                  res: tuple[int, int], cyc: _Cycle, node: str | None = None,
                  extra: Mapping[int, tuple[tuple[str, ...], tuple[int, ...]]] | None = None,
                  ) -> tuple[list[ReplicaPlacement], str]:
    """Every slot of ``slots`` on one node (``node``, or the best that takes them all),
    each a replica choice of its own (topology holds per replica); the slots in
    ``have`` keep their GPUs. Committed as one packed holding; ([], why) when no node
    takes them."""
    cluster = cyc.cluster
    demand = demand_of(r, *res)
    new = [k for k in slots if k not in have]
    need = len(new) * r.gpus
    swarm_no = cyc.swarm_no(s)
    tried: set[str] = set()
    why = f"no node can hold {len(new)} more replica(s) of {demand.describe()}"

    def room(ns: NodeState) -> bool:
        return sum(1 for f in ns.free if f >= 1000) >= need

    while True:
        choices: list[Choice] = []
        target = node
        if target is None:
            first: Choice | Unplaceable = Unplaceable(why)
            for tier in _zone_orders(r, set(), cyc.all_zones):  # preferred, not avoided
                def where(ns: NodeState, tier: Callable[[str | None], bool] = tier) -> bool:
                    return tier(ns.spec.labels.get(cyc.zone_label, ""))
                first = cluster.place(demand, room, exclude=swarm_no | tried, where=where)
                if isinstance(first, Choice):
                    break
            if isinstance(first, Unplaceable):
                return [], why
            target = first.node
            cluster.alloc.commit(first)
            choices.append(first)
        ok = target in cluster.alloc.nodes
        while ok and len(choices) < len(new):
            got = cluster.alloc.place_on(target, demand)
            if isinstance(got, Unplaceable):
                why = cluster.hostnames(got.reason)
                ok = False
                break
            cluster.alloc.commit(got)
            choices.append(got)
        for c in choices:
            cluster.alloc.release(c)
        if ok:
            break
        if node is not None:
            return [], why
        tried.add(target)
    f = cyc.facts[target]
    per: dict[int, tuple[Sequence[str], Sequence[int]]] = dict(have)
    for slot, c in zip(new, choices, strict=True):
        per[slot] = (tuple(f.gpus[i].uuid for i in c.gpus), c.milli)
    h = packed_holding(s.name, target, {k: per[k] for k in slots})
    held = packed_holding(s.name, target, {**(extra or {}), **{k: per[k] for k in slots}})
    cluster.release_holding(s.name, target)
    if not cluster.commit_holding(s.name, target, held, cluster.holding_reservation(
            s.id, target, res, held.replicas)):
        return [], f"{s.name}: the packed GPUs on {target} could not be committed"
    return _replicas_of(h, cyc.by_id[target], f), ""


def _repack(sp: ServicePlan, s: SwarmService, r: GpuRequest, h: Holding, replicas: int,
            live: Mapping[int, str], res: tuple[int, int], cyc: _Cycle,
            ) -> tuple[list[ReplicaPlacement], list[str]]:
    """A packed service keeps its node: the slots of its tasks keep their GPUs, a slot
    gone (scale-down) gives them back, a new slot (scale-up) gets GPUs on the node."""
    node = cyc.by_id.get(h.node_id)
    host = node.hostname if node is not None else h.node_id
    sp.packed = f"packed on {host}"
    if node is None:
        return [], [f"packed on {h.node_id}, which is gone"]
    facts = cyc.facts.get(h.node_id)
    want = _want_slots(live, replicas)
    per = h.per_slot_milli()
    have = {k: v for k, v in per.items() if k in want}
    # A gone slot's GPUs stay held while its device list is still on the service: the
    # gate stays open, so a task Swarm creates for that slot before the list's removal
    # lands would run on them (the next cycle sees that task, and the slot is kept).
    sp.draining = {k: v for k, v in per.items()
                   if k not in want and devices_key(cyc.prefix, h.node_id, k) in s.labels}
    if all(k in have for k in want):
        _recommit(s, h, {**have, **sp.draining}, res, cyc)
        return _replicas_of(packed_holding(s.name, h.node_id, have), node, facts), []
    placed, why = _place_packed(s, r, want, have, res, cyc, node=h.node_id,
                                extra=sp.draining)
    if placed:
        sp.new = True
        return placed, []
    # Scale-up beyond the node's room: what is held stays, the rest waits.
    _recommit(s, h, {**have, **sp.draining}, res, cyc)
    return (_replicas_of(packed_holding(s.name, h.node_id, have), node, facts) if have else [],
            [f"packed on {host}, which has no room for {replicas - len(have)} more "
             f"replica(s): {why}"])


def _recommit(s: SwarmService, h: Holding,
              per: Mapping[int, tuple[Sequence[str], Sequence[int]]], res: tuple[int, int],
              cyc: _Cycle) -> None:
    """Hold ``per`` (slot -> GPUs) on the packed holding's node instead of ``h``."""
    got = packed_holding(s.name, h.node_id, per)
    if got == h:
        return
    cyc.cluster.release_holding(s.name, h.node_id)
    if got.uuids:
        cyc.cluster.commit_holding(s.name, h.node_id, got, cyc.cluster.holding_reservation(
            s.id, h.node_id, res, got.replicas))


def _packed_env(sp: ServicePlan, s: SwarmService, cyc: _Cycle) -> bool:
    """Packed replicas read per-slot lists: the service needs the per-slot template. One
    with the older per-node template is upgraded (adoption) or waits; False: it waits."""
    if device_env(cyc.prefix, s.env) == "slot":
        _packed_max(sp, s, cyc)
        return True
    old, new = env_template_per_node(cyc.prefix), env_template(cyc.prefix)
    if cyc.adopt_ungated and old in s.env:
        sp.replace_env.append((old, new))
        _packed_max(sp, s, cyc)
        sp.warnings.append(f"its replicas are {sp.packed}: swarmgpu replaced its env "
                           f"template with the per-slot one ({new}); put it in the stack "
                           "file so a re-deploy keeps it")
        return True
    sp.status, sp.state = "pending", "Pending"
    sp.reason = (f"its replicas would be {sp.packed}, which needs the per-slot env "
                 f"template {new} (replace {old})")
    sp.placements = []
    return False


def _packed_max(sp: ServicePlan, s: SwarmService, cyc: _Cycle) -> None:
    """Swarm runs no more of a packed service's tasks on its node than there are slot
    lists: ``MaxReplicas`` is the number of replicas packed (a task beyond them, on a
    scale-up past the node's room, would start with no GPU). swarmgpu owns the value
    when it is unset, its own one-per-node 1, or the value it recorded last
    (``<p>state.max-replicas``); a value of yours is left as it is."""
    key = cyc.prefix + MAX_STATE
    have = s.max_replicas_per_node or 0
    want = len(sp.placements)
    sp.state_labels[key] = str(want)
    if have == want:
        return
    if have not in (0, 1) and s.labels.get(key) != str(have):
        sp.state_labels.pop(key)
        if want < (s.replicas or 0):
            sp.warnings.append(f"max_replicas_per_node {have} is yours and left as it is: "
                               f"tasks beyond the {want} replicas {sp.packed} may start "
                               "there without a GPU")
        return
    sp.set_max_replicas = want
    if have == 1:
        sp.warnings.append(f"max_replicas_per_node 1 (swarmgpu's one-per-node rule) is now "
                           f"{want}: its replicas are {sp.packed}; set {cyc.prefix}pack: "
                           "never to keep one replica per node")


def _gate_service(sp: ServicePlan, s: SwarmService, cyc: _Cycle) -> bool:
    """The gate constraint and env template: present, added (adopted), or reported.
    A gate naming another service (a stack rendered or deployed under another name) is
    replaced: with it the tasks would wait forever. False when the service waits."""
    prefix = cyc.prefix
    gate = gate_constraint(prefix, s.name)
    own = f"node.labels.{prefix}{GATE}".lower()
    foreign = [c for c in s.constraints
               if c.replace(" ", "").lower().startswith(own) and c.replace(" ", "") != gate]
    has_gate = any(c.replace(" ", "") == gate for c in s.constraints)
    tmpl = env_template(prefix)
    has_env = device_env(prefix, s.env) is not None
    _share_env(sp, s, cyc)
    if foreign:
        sp.warnings.append(
            f"its gate constraint {', '.join(foreign)} names another service (a stack "
            f"rendered or deployed under another name): swarmgpu replaces it with {gate}; "
            f"fix the stack file (render with -n matching the deploy name)")
        sp.remove_constraints.extend(foreign)
        if not has_gate:
            sp.add_constraints.append(gate)
        has_gate = True
    if has_gate and has_env:
        return True
    missing = [x for x, ok in ((f"constraint {gate}", has_gate),
                               (f"env {tmpl}", has_env)) if not ok]
    if not cyc.adopt_ungated:
        sp.status, sp.state = "pending", "Pending"
        sp.reason = ("not gated: add " + " and ".join(missing) +
                     " to the service (or deploy through `swarmgpu render`)")
        return False
    sp.warnings.append("adopted: swarmgpu added " + " and ".join(missing) +
                       "; put them in the stack file so a re-deploy keeps them")
    if not has_gate:
        sp.add_constraints.append(gate)
    if not has_env:
        sp.add_env.append(tmpl)
    if ORDER_ENV not in s.env:
        sp.add_env.append(ORDER_ENV)
    return True


def _share_env(sp: ServicePlan, s: SwarmService, cyc: _Cycle) -> None:
    """A shared GPU's containers are told their share (``swarmgpu.manager.sharing``)."""
    r = sp.request
    share_env = missing_env(cyc.prefix, s.env) if r is not None and r.is_fraction else []
    if share_env and cyc.adopt_ungated:
        sp.add_env.extend(share_env)
        sp.warnings.append("adopted: swarmgpu added the env lines that tell each container "
                           "its share; put them in the stack file so a re-deploy keeps them")
    elif share_env:
        sp.warnings.append("its containers are not told their share: add env "
                           + " and ".join(share_env))


def _keep_holdings(sp: ServicePlan, s: SwarmService, kept: Mapping[str, Holding],
                   old: Mapping[str, Holding], running_on: Mapping[str, int], replicas: int,
                   cyc: _Cycle) -> dict[str, Holding]:
    """Holdings the service keeps: valid ones up to its replica count (idle nodes are
    dropped first on a scale-down); the rest are released."""
    holdings = dict(kept)
    by_id = cyc.by_id
    if len(holdings) > replicas:
        order = sorted(holdings, key=lambda nid: (running_on.get(nid, 0), by_id[nid].hostname
                                                  if nid in by_id else nid))
        for nid in order[: len(holdings) - replicas]:
            del holdings[nid]
    for nid in old:
        if nid not in holdings:
            _node_remove(cyc.plan, nid, [assign_key(cyc.prefix, s.name),
                                         gate_key(cyc.prefix, s.name)])
            sp.node_writes = True
            where = by_id[nid].hostname if nid in by_id else nid
            sp.warnings.append(f"released its GPUs on {where}")
    return holdings


def _place_missing(sp: ServicePlan, s: SwarmService, r: GpuRequest,
                   placements: list[ReplicaPlacement], missing_n: int,
                   res: tuple[int, int], cyc: _Cycle) -> list[str]:
    """Choose nodes and GPUs for the replicas that hold nothing yet; reasons when not."""
    cluster, by_id = cyc.cluster, cyc.by_id
    demand = demand_of(r, *res)
    reasons: list[str] = []
    used_nodes = {p.node_id for p in placements}
    used_zones = {by_id[nid].labels.get(cyc.zone_label, "") for nid in used_nodes
                  if nid in by_id}
    swarm_no = cyc.swarm_no(s)
    for _ in range(max(0, missing_n)):
        # Before a service holds anything the answer depends only on the demand, its
        # zone wishes and constraints: identical pending requests share one answer
        # while the cluster's capacity has not grown.
        memo_key = (demand, r.zone_prefer, r.zone_avoid, swarm_no)
        known = cluster.unplaceable.get(memo_key) if not used_nodes else None
        choice: Choice | Unplaceable = Unplaceable("no candidate node")
        if known is not None and known[0] == cluster.version:
            choice = known[1]
        else:
            exclude = swarm_no | used_nodes if used_nodes else swarm_no
            for tier in _zone_orders(r, used_zones, cyc.all_zones):
                def where(node: NodeState, tier: Callable[[str | None], bool] = tier) -> bool:
                    return tier(node.spec.labels.get(cyc.zone_label, ""))
                try:
                    choice = cluster.place(demand, exclude=exclude, where=where)
                except MigProfileError as exc:
                    choice = Unplaceable(str(exc))
                if isinstance(choice, Choice):
                    break
            if isinstance(choice, Unplaceable) and not used_nodes:
                cluster.unplaceable[memo_key] = (cluster.version, choice)
        if isinstance(choice, Unplaceable):
            reason = choice.reason
            full = [nid for nid in used_nodes if nid in cluster.alloc.nodes
                    and cluster.alloc.fits(cluster.alloc.nodes[nid], demand)]
            if full:  # name the rule that stops it, not topology (and a few of the nodes)
                names = sorted(full)
                more = f" and {len(names) - 3} more" if len(names) > 3 else ""
                reason += (f"; {', '.join(names[:3])}{more} would have room but already "
                           "run(s) a replica (one replica per node: max_replicas_per_node 1)")
            reasons.append(cluster.hostnames(reason))
            break
        cluster.commit(choice, s.name)
        rp = cluster.to_replica(choice)
        placements.append(rp)
        used_nodes.add(rp.node_id)
        used_zones.add(by_id[rp.node_id].labels.get(cyc.zone_label, ""))
        sp.new = True
    return reasons


def _converge(sp: ServicePlan, s: SwarmService, r: GpuRequest, holdings: dict[str, Holding],
              running_on: Mapping[str, int], waiting: Waiting, res: tuple[int, int],
              cyc: _Cycle) -> str:
    """Holdings where Swarm will not run the service's task -- its node drained, down
    or paused, its constraints no longer allowing the node, the node without the CPU or
    memory the task reserves, or Swarm's scheduler refusing it there -- are dropped
    when another node can take the replica (it is placed anew in this cycle, off those
    nodes, and ``sp.replaced`` says why). Otherwise, or while the service's back-off
    runs, they stay and the returned text says why the service is pending."""
    if not waiting:
        return ""
    stuck: dict[str, str] = {}
    for nid, h in holdings.items():
        if h.packed or running_on.get(nid):
            continue  # a task runs there: Swarm does run it
        why = _stuck_on(s, nid, waiting, res, cyc)
        if why:
            stuck[nid] = why
    if not stuck:
        return ""
    what = "Swarm cannot run its task where its GPUs are (" + "; ".join(stuck.values()) + ")"
    b = cyc.backoff.setdefault(s.id, Backoff())
    b.adopt(s.labels.get(cyc.prefix + REPLACED_STATE))
    if b.since is not None and b.since > cyc.now + 60:
        b.since = cyc.now  # a recorded time ahead of this clock: count from now
    if (left := b.wait_left(cyc.now)) > 0:
        return f"{what}; re-placing it is backed off for {left:.0f} s more ({b.describe()})"
    cluster = cyc.cluster
    for nid in stuck:
        cluster.release_holding(s.name, nid)
    exclude = cyc.exclude(s) | set(holdings)
    try:
        probe = cluster.place(demand_of(r, *res), exclude=exclude)
    except MigProfileError as exc:
        probe = Unplaceable(str(exc))
    if isinstance(probe, Unplaceable):  # nowhere better: it keeps its GPUs and waits
        for nid in stuck:
            cluster.commit_holding(s.name, nid, holdings[nid],
                                   cluster.holding_reservation(s.id, nid, res))
        return f"{what}; no other node can take it: {cluster.hostnames(probe.reason)}"
    for nid in stuck:
        del holdings[nid]
        _node_remove(cyc.plan, nid, [assign_key(cyc.prefix, s.name),
                                     gate_key(cyc.prefix, s.name)])
    sp.node_writes = True
    cyc.avoid[s.id] = frozenset(stuck)
    b.replaced(cyc.now)
    sp.state_labels[cyc.prefix + REPLACED_STATE] = b.label()  # written with the device map
    sp.replaced = what
    return ""


def _stuck_on(s: SwarmService, nid: str, waiting: Waiting, res: tuple[int, int],
              cyc: _Cycle) -> str:
    """Why Swarm will not run the service's waiting task on ``nid``, its held node
    ("" when nothing says so). Read from Swarm's own state: the node's status, the
    service's constraints against the node, the reservations of the node's tasks, and
    the scheduler's message once the gate has been open ``GATE_GRACE_S`` (a message
    written before the gate opened is no refusal)."""
    node = cyc.by_id.get(nid)
    if node is None:
        return ""
    host = node.hostname
    if not _schedulable(node):
        return f"{host} is {node.availability if node.availability != 'active' else node.state}"
    if nid in cyc.exclude(s):
        return f"its constraints, platform or generic resources exclude {host}"
    ns = cyc.cluster.alloc.nodes.get(nid)
    if ns is not None and (s.id, nid) not in cyc.cluster.tasks_on and (
            (res[0] and ns.cpu_left is not None and ns.cpu_left < 0)
            or (res[1] and ns.mem_left is not None and ns.mem_left < 0)):
        return f"{host} has not the CPU or memory its task reserves left"
    key = (s.id, nid)
    if node.labels.get(gate_key(cyc.prefix, s.name)) == "true":
        since = cyc.open_since.get(key, cyc.now)
        cyc.open_seen[key] = since
        if waiting.refused and cyc.now - since >= GATE_GRACE_S:
            return f"on {host}, Swarm says: {waiting.refused}"
    return ""


def _write_devices_and_gates(sp: ServicePlan, s: SwarmService, running_on: Mapping[str, int],
                             waiting: Waiting, cyc: _Cycle) -> bool:
    """The desired Swarm state for the service: device labels, ledger, gates. True when
    every gate is open (or opens in this plan)."""
    prefix, by_id = cyc.prefix, cyc.by_id
    want_devices = {devices_key(prefix, p.node_id, p.slot): ",".join(p.uuids)
                    for p in sp.placements}
    held = holdings_of(s.name, sp.placements)
    for nid, h in list(held.items()):
        if h.packed and sp.draining:  # the ledger keeps them until the lists are gone
            held[nid] = packed_holding(s.name, nid, {**sp.draining, **h.per_slot_milli()})
    have_devices = {k: v for k, v in s.labels.items()
                    if k.startswith(prefix + DEVICES) or is_share_key(k, prefix)}
    # A shared GPU's container is told its share the same way (swarmgpu.manager.sharing).
    want_devices.update(want_labels(prefix, ((p.node_id, p.uuids, p.milli)
                                             for p in sp.placements if p.slot is None),
                                    cyc.facts, have_devices))
    sp.service_labels_set = {k: v for k, v in want_devices.items() if have_devices.get(k) != v}
    sp.service_labels_remove = sorted(k for k in have_devices if k not in want_devices)
    # Swarm copies the service's labels into a task when it creates it, and a pending
    # task exists from the moment the service does: a task created before its device
    # map was written would start with NVIDIA_VISIBLE_DEVICES=void. So when the map
    # changes, waiting tasks are replaced (ForceUpdate, whose new value is recorded in
    # <p>state.devices-gen) and gates open only once every waiting task is newer.
    gen_key = f"{prefix}state.devices-gen"
    gen = _int_or0(s.labels.get(gen_key))
    changed_for_running = any(
        running_on.get(nid) and by_id[nid].labels.get(assign_key(prefix, s.name))
        != h.label_value() for nid, h in held.items()
    )
    if sp.service_labels_set:
        gen = s.force_update  # tasks created from now on carry the map
    if sp.service_labels_set and (waiting or not running_on or changed_for_running):
        sp.force_update = True
        gen = s.force_update + 1
        if running_on:
            sp.warnings.append("its running replicas restart once (rolling) so that every "
                               "task carries the new device map")
    if gen and s.labels.get(gen_key) != str(gen):
        sp.service_labels_set[gen_key] = str(gen)
    gate_ready = not sp.service_labels_set and not sp.force_update and waiting.all_newer(gen)
    # The rolling updater replaces one task at a time and waits for it to run, which a
    # closed gate never allows: replace all waiting tasks at once (parallelism 0) when
    # nothing runs yet, and give the user's parallelism back once the gates are open.
    par_key = f"{prefix}state.update-parallelism"
    current_par = _int_or0(str((s.spec.get("UpdateConfig") or {}).get("Parallelism", 1)))
    if sp.force_update and not running_on and current_par != 0:
        sp.service_labels_set.setdefault(par_key, str(current_par))
        sp.set_update_parallelism = 0
    elif gate_ready and par_key in s.labels and current_par == 0:
        sp.set_update_parallelism = _int_or0(s.labels[par_key]) or 1
        sp.service_labels_remove.append(par_key)
    all_open = True
    for nid, h in held.items():
        node = by_id[nid]
        want = {assign_key(prefix, s.name): h.label_value()}
        if gate_ready or node.labels.get(gate_key(prefix, s.name)) == "true":
            want[gate_key(prefix, s.name)] = "true"
        else:
            sp.gates_deferred = True
            all_open = False
        diff = {k: v for k, v in want.items() if node.labels.get(k) != v}
        if diff:
            _node_set(cyc.plan, nid, diff)
            sp.node_writes = True
    return all_open


# What Swarm's scheduler writes into a task it cannot place (swarmkit scheduler/filter.go).
_REFUSED = ("no suitable node", "insufficient resources")


def _refusal_text(*texts: str) -> str:
    for text in texts:
        if any(x in text.lower() for x in _REFUSED):
            return text
    return ""


def _reserve_generic(sp: ServicePlan, s: SwarmService, kind: str, running: bool) -> None:
    """Whole GPUs also reserved as Swarm generic resources, where Swarm's own accounting
    should hold. A reservation change rolls tasks, so it is only made before any runs."""
    req = sp.request
    if req is None or req.mig_profile or req.is_fraction:
        return
    res = (s.spec.get("TaskTemplate") or {}).get("Resources") or {}
    have = 0
    for gr in (res.get("Reservations") or {}).get("GenericResources") or []:
        d = gr.get("DiscreteResourceSpec") or {}
        if d.get("Kind") == kind:
            have = int(d.get("Value") or 0)
    if have == req.gpus:
        return
    if running:
        sp.warnings.append(f"reserves {have} {kind} generic resources, request is "
                           f"{req.gpus}; left as it is while tasks run")
        return
    sp.set_generic = (kind, req.gpus)


def _generic_reservations(spec: Mapping[str, Any]) -> list[tuple[str, int]]:
    res = (spec.get("TaskTemplate") or {}).get("Resources") or {}
    out: list[tuple[str, int]] = []
    for gr in (res.get("Reservations") or {}).get("GenericResources") or []:
        d = gr.get("DiscreteResourceSpec") or {}
        if d.get("Kind"):
            out.append((str(d["Kind"]), _int_or0(str(d.get("Value") or 0))))
    return out


def _generic_count(node: SwarmNode, kind: str) -> int:
    """Generic resources of ``kind`` the node advertises (a node must have at least a
    task's reservation; what other tasks hold of them is Swarm's to count)."""
    return node.discrete_resources.get(kind, 0) + len(node.generic_resources.get(kind, ()))


def _int_or0(v: str | None) -> int:
    try:
        return int(v or 0)
    except ValueError:
        return 0


def _state(sp: ServicePlan, s: SwarmService, running_on: Mapping[str, int], replicas: int) -> str:
    if not sp.placements:
        return "Pending"
    if sp.service_labels_set or sp.new or sp.gates_deferred:
        return "Bound"
    if sum(running_on.values()) >= replicas and replicas > 0:
        return "Active"
    return "Allocated"
