"""GPU requests -> placement in Swarm terms. Pure: snapshot in, plan out.

How a placement is expressed (every piece verified on a real swarm, see README):

- node label ``<p>assign.<service>=UUID[@milli],...`` on each chosen node: the
  ledger. Node labels survive ``docker stack deploy``, so the daemon can always
  rebuild who holds which GPU from Swarm itself (no database, restarts lose nothing).
- service label ``<p>devices.<nodeID>=UUID,...``: the copy the env template reads:
  ``NVIDIA_VISIBLE_DEVICES={{or (index .Service.Labels (print "<p>devices." .Node.ID)) "void"}}``.
  Changing service labels restarts no task.
- node label ``<p>service.<service>=true``: the gate. The service carries the
  constraint ``node.labels.<p>service.<service>==true``; no node has the label until
  swarmgpu opens it, so the service cannot start anywhere else, and never before its
  devices are written (the service label is written first, the gate after).
- ``max_replicas_per_node=1`` when several replicas are placed: one device list per node.
- service labels ``<p>share.<field>.<nodeID>`` for a shared (fractional) holding: what
  the container is told of its share, read by env templates (``swarmgpu.sharing``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from swarmgpu.allocator.core import (
    Allocator,
    Choice,
    Demand,
    GpuSpec,
    NodeSpec,
    NodeState,
    SwarmScorer,
    Unplaceable,
)
from swarmgpu.allocator.mig import MigChoice, MigProfileError, pick_mig_device
from swarmgpu.model import NodeFacts, link_score
from swarmgpu.requests import GpuRequest, Rebalance, RequestError, parse_all
from swarmgpu.sharing import is_share_key, missing_env, want_labels
from swarmgpu.swarm import SwarmNode, SwarmService, SwarmTask

GATE = "service."
ASSIGN = "assign."
DEVICES = "devices."
MOVE_STATE = "state.move"  # service label: a rebalancing move in progress (JSON)
ACTIVE_STATES = ("running", "starting", "preparing", "assigned", "accepted", "ready", "pending",
                 "new", "allocated")


def env_template(prefix: str) -> str:
    return (
        'NVIDIA_VISIBLE_DEVICES={{or (index .Service.Labels (print "'
        + prefix + DEVICES + '" .Node.ID)) "void"}}'
    )


ORDER_ENV = "CUDA_DEVICE_ORDER=PCI_BUS_ID"


def gate_key(prefix: str, service: str) -> str:
    return f"{prefix}{GATE}{service}"


def gate_constraint(prefix: str, service: str) -> str:
    return f"node.labels.{gate_key(prefix, service)}==true"


def assign_key(prefix: str, service: str) -> str:
    return f"{prefix}{ASSIGN}{service}"


def devices_key(prefix: str, node_id: str) -> str:
    return f"{prefix}{DEVICES}{node_id}"


def owned_by_placement(key: str, prefix: str) -> bool:
    return key.startswith((prefix + GATE, prefix + ASSIGN))


# --- the ledger ------------------------------------------------------------------


@dataclass(frozen=True)
class Holding:
    """What one service holds on one node: device UUIDs and the share of each."""

    service: str
    node_id: str
    uuids: tuple[str, ...]
    milli: tuple[int, ...]

    def label_value(self) -> str:
        return ",".join(u if m >= 1000 else f"{u}@{m}" for u, m in zip(self.uuids, self.milli,
                                                                        strict=True))


_HOLD_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9\-_/:.]*?)(?:@(\d{1,4}))?$")


def parse_holding(service: str, node_id: str, value: str) -> Holding | None:
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
    return Holding(service, node_id, tuple(uuids), tuple(milli))


def read_ledger(nodes: Sequence[SwarmNode], prefix: str) -> dict[str, dict[str, Holding]]:
    """service name -> node id -> holding, from the nodes' assign labels."""
    out: dict[str, dict[str, Holding]] = {}
    ak = prefix + ASSIGN
    for n in nodes:
        for k, v in n.labels.items():
            if k.startswith(ak):
                svc = k[len(ak):]
                h = parse_holding(svc, n.id, v)
                if h is not None:
                    out.setdefault(svc, {})[n.id] = h
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

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.hostname, "node_id": self.node_id, "gpus": list(self.gpus),
                "uuids": list(self.uuids), "share_milli": list(self.milli),
                "score": self.score}


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
    force_update: bool = False  # replace tasks created before their device map existed
    set_update_parallelism: int | None = None
    set_generic: tuple[str, int] | None = None  # (kind, count) discrete reservation
    gates_deferred: bool = False  # a gate waits for tasks that carry the device map
    new: bool = False  # placements chosen in this plan (not yet in Swarm)

    @property
    def needs_service_write(self) -> bool:
        return bool(self.service_labels_set or self.service_labels_remove or self.add_constraints
                    or self.add_env or self.set_max_replicas is not None or self.force_update
                    or self.set_update_parallelism is not None
                    or self.set_generic is not None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "id": self.id, "request": self.request_text,
            "status": self.status, "state": self.state,
            "placements": [p.to_dict() for p in self.placements],
            "reason": self.reason, "warnings": list(self.warnings),
        }


@dataclass
class PlacementPlan:
    services: list[ServicePlan] = field(default_factory=list)
    # node id -> (labels to set, keys to remove); applied after the service writes
    node_set: dict[str, dict[str, str]] = field(default_factory=dict)
    node_remove: dict[str, list[str]] = field(default_factory=dict)
    released: list[str] = field(default_factory=list)  # services whose holdings go

    def node_changes(self, node_id: str) -> tuple[dict[str, str], list[str]]:
        return self.node_set.get(node_id, {}), self.node_remove.get(node_id, [])

    @property
    def empty(self) -> bool:
        return not self.node_set and not self.node_remove and not any(
            s.needs_service_write for s in self.services
        )


# --- the allocator view of the cluster ------------------------------------------


_UNSEEN = object()


def node_spec(node: SwarmNode, facts: NodeFacts) -> NodeSpec:
    links = facts.links
    numa = [g.numa_node for g in facts.gpus]

    def pair(a: int, b: int) -> int:
        if a == b:
            return 0
        # go-gpuallocator's score, plus 1 for sharing a NUMA node: among equally linked
        # GPUs (all NV12 on a DGX) the set stays local to one CPU socket.
        same = numa[a] is not None and numa[a] == numa[b]
        return link_score(links[a][b]) + (1 if same else 0)

    return NodeSpec(
        name=node.id,
        gpus=tuple(GpuSpec(index=i, product=g.product, memory_mib=g.memory_mib,
                           numa_node=g.numa_node, healthy=g.healthy,
                           mig_enabled=g.mig_enabled)
                   for i, g in enumerate(facts.gpus)),
        labels=dict(node.labels),
        pair_score=pair if links else None,
    )


def demand_of(req: GpuRequest) -> Demand:
    if req.mig_profile:
        return Demand(mig_profile=req.mig_profile)
    if req.is_fraction:
        return Demand(gpu_milli=req.gpu_milli, min_memory_mib=req.min_memory_mib or 0,
                      products=req.products)
    return Demand(num_gpu=req.gpus, min_memory_mib=req.min_memory_mib or 0,
                  products=req.products, topology=str(req.topology))


def _schedulable(node: SwarmNode) -> bool:
    return node.state == "ready" and node.availability == "active"


class ClusterAllocator:
    """The production allocator over live nodes, with the ledger already committed."""

    def __init__(self, nodes: Sequence[SwarmNode], facts: Mapping[str, NodeFacts],
                 ledger: Mapping[str, Mapping[str, Holding]]) -> None:
        self.alloc = Allocator(SwarmScorer(), mig_picker=self._pick_mig)
        self.nodes = {n.id: n for n in nodes}
        self.facts = dict(facts)
        self.assigned_mig: dict[str, set[str]] = {}
        self.problems: list[str] = []
        # Demands that no node could take, per allocator state: a cycle with many
        # identical pending requests asks the allocator once, not once per service.
        self.version = 0
        self.unplaceable: dict[tuple[Demand, tuple[str, ...], tuple[str, ...], int],
                               Unplaceable] = {}
        self.shape: dict[str, object] = {}
        self._score_memo: dict[tuple[object, ...], Any] = {}
        for rank, n in enumerate(sorted(nodes, key=lambda n: n.hostname)):
            f = facts.get(n.id)
            if f is None or not f.gpus:
                continue
            self.alloc.add_node(node_spec(n, f), rank=rank)
            self.shape[n.id] = (f.links, tuple(
                (g.product, g.memory_mib, g.numa_node, g.healthy, g.mig_enabled)
                for g in f.gpus))
        for svc, per_node in ledger.items():
            for node_id, h in per_node.items():
                self._commit_holding(svc, node_id, h)

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

    def _commit_holding(self, svc: str, node_id: str, h: Holding) -> bool:
        """Count a holding as used; False when it is not valid on this node (any more)."""
        if node_id not in self.alloc.nodes:
            return False
        index = self._uuid_index(node_id)
        gpus: list[int] = []
        milli: list[int] = []
        for u, m in zip(h.uuids, h.milli, strict=True):
            if u not in index:
                self.problems.append(f"{svc}: holds {u} on {self.nodes[node_id].hostname}, "
                                     "which that node's facts no longer list")
                return False
            i, is_mig = index[u]
            if is_mig:
                if u in self.assigned_mig.get(node_id, set()):
                    self.problems.append(f"{svc}: MIG device {u} is held twice")
                    return False
                self.assigned_mig.setdefault(node_id, set()).add(u)
                continue
            gpus.append(i)
            milli.append(m)
        if gpus:
            try:
                self.alloc.commit(Choice(node=node_id, gpus=tuple(gpus), milli=tuple(milli),
                                         score=0.0, explanation=f"held by {svc}"))
            except ValueError as exc:
                self.problems.append(f"{svc}: {exc}")
                return False
        return True

    def _pick_mig(self, spec: NodeSpec, _free: tuple[int, ...], d: Demand) -> object | None:
        f = self.facts.get(spec.name)
        if f is None or d.mig_profile is None:
            return None
        got = pick_mig_device(f.gpus, d.mig_profile, self.assigned_mig.get(spec.name, set()))
        return got if isinstance(got, MigChoice) else None

    def place(self, d: Demand, allowed: Callable[[NodeState], bool]) -> Choice | Unplaceable:
        """Best node among ``allowed`` ones: the core's own scorer and GPU-set choice."""
        a = self.alloc
        if d.mig_profile:
            for node in sorted(a.nodes.values(), key=lambda n: n.rank):
                if not allowed(node):
                    continue
                got = self._pick_mig(node.spec, tuple(node.free), d)
                if got is not None:
                    return Choice(node=node.spec.name, gpus=(), milli=(), score=0.0,
                                  explanation=f"{d.describe()} on {node.spec.name}", mig=got)
            return Unplaceable(f"needs {d.describe()}; no allowed node has one free")
        best: NodeState | None = None
        best_score = -math.inf
        for node in a.nodes.values():
            if not allowed(node):
                continue
            # Nodes built alike (same capture, same free GPUs) answer alike: ask once.
            key = (d, self.shape[node.spec.name], tuple(node.free), node.cpu_left,
                   node.mem_left)
            s = self._score_memo.get(key, _UNSEEN)
            if s is _UNSEEN:
                s = a.scorer.score(node, d) if a.fits(node, d) else None
                self._score_memo[key] = s
            if s is None:
                continue
            if s > best_score or (s == best_score and best is not None and node.rank < best.rank):
                best, best_score = node, s
        if best is None:
            return Unplaceable(a.explain_unplaceable(d))
        gpus = a.gpu_set(best, d)
        if gpus is None:
            return Unplaceable(a.explain_unplaceable(d))
        milli = tuple(d.gpu_milli or 1000 for _ in gpus)
        return Choice(node=best.spec.name, gpus=gpus, milli=milli, score=best_score,
                      explanation=f"{d.describe()} on {best.spec.name}")

    def hostnames(self, text: str) -> str:
        """Node ids in the allocator's words, as the hostnames people know."""
        for nid, n in self.nodes.items():
            text = text.replace(nid, n.hostname)
        return text

    def commit(self, choice: Choice) -> None:
        self.version += 1
        if isinstance(choice.mig, MigChoice):
            self.assigned_mig.setdefault(choice.node, set()).add(choice.mig.mig_uuid)
        elif choice.gpus:
            self.alloc.commit(choice)

    def to_replica(self, choice: Choice) -> ReplicaPlacement:
        f = self.facts[choice.node]
        host = self.nodes[choice.node].hostname
        if isinstance(choice.mig, MigChoice):
            return ReplicaPlacement(choice.node, host, (choice.mig.gpu_index,),
                                    (choice.mig.mig_uuid,), (1000,), choice.score)
        return ReplicaPlacement(choice.node, host, choice.gpus,
                                tuple(f.gpus[i].uuid for i in choice.gpus), choice.milli,
                                choice.score if math.isfinite(choice.score) else None)


def _replica_of(holding: Holding, node: SwarmNode, facts: NodeFacts | None) -> ReplicaPlacement:
    idx: list[int] = []
    if facts is not None:
        where = {g.uuid: i for i, g in enumerate(facts.gpus)}
        for i, g in enumerate(facts.gpus):
            for m in g.mig_devices:
                where[m.uuid] = i
        idx = [where[u] for u in holding.uuids if u in where]
    return ReplicaPlacement(node.id, node.hostname, tuple(idx), holding.uuids, holding.milli)


def _holding_fits(h: Holding, req: GpuRequest, facts: NodeFacts | None) -> str | None:
    """Why an existing holding no longer satisfies the request (None: it does)."""
    if facts is None:
        return None  # agent unreachable: keep what is there
    gpus = {g.uuid: g for g in facts.gpus}
    migs = {m.uuid: m for g in facts.gpus for m in g.mig_devices}
    if req.mig_profile:
        return None if len(h.uuids) == 1 and h.uuids[0] in migs else "not a MIG device"
    want = 1 if req.is_fraction else req.gpus
    if len(h.uuids) != want:
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
) -> PlacementPlan:
    """Decide placements for every annotated service; say what to write, in order."""
    plan = PlacementPlan()
    ledger = read_ledger(nodes, prefix)
    by_id = {n.id: n for n in nodes}
    cluster = ClusterAllocator(nodes, facts, {})
    live_names = {s.name for s in services}
    running: dict[str, dict[str, int]] = {}
    waiting: dict[str, list[SwarmTask]] = {}  # desired running, not running yet
    for t in tasks:
        if t.desired_state != "running":
            continue
        if t.state in ("running", "starting"):
            running.setdefault(t.service_id, {}).setdefault(t.node_id, 0)
            running[t.service_id][t.node_id] += 1
        elif t.state in ACTIVE_STATES:
            waiting.setdefault(t.service_id, []).append(t)

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

    parsed: list[tuple[SwarmService, GpuRequest | RequestError]] = []
    for s in sorted(services, key=lambda s: s.name):
        r = parse_all(s.labels, prefix=prefix, zone_label=zone_label)
        if r is not None:
            parsed.append((s, r))
        elif s.name in ledger:  # request labels removed: release its GPUs
            plan.released.append(s.name)
            for node_id in ledger[s.name]:
                _node_remove(plan, node_id, [assign_key(prefix, s.name), gate_key(prefix, s.name)])
            stale = [k for k in s.labels if k.startswith(prefix + DEVICES)]
            if stale:
                plan.services.append(ServicePlan(
                    s.name, s.id, None, "", "released", "Released",
                    service_labels_remove=stale))

    # First commit every valid existing holding, so new placements never reuse GPUs.
    kept = _commit_existing(parsed, ledger, by_id, facts, running, cluster, prefix)

    all_zones = {n.labels.get(zone_label, "") for n in nodes}
    for s, r in parsed:
        sp = _plan_service(s, r, kept.get(s.name, {}), ledger.get(s.name, {}), cluster, by_id,
                           facts, running.get(s.id, {}), waiting.get(s.id, []), prefix,
                           zone_label, all_zones, adopt_ungated, plan)
        if generic_kind and sp.request is not None and sp.status != "invalid":
            _reserve_generic(sp, s, generic_kind, bool(running.get(s.id)))
        plan.services.append(sp)
    for p in cluster.problems:
        for sp in plan.services:
            if p.startswith(sp.name + ":"):
                sp.warnings.append(p)
    return plan


def _node_set(plan: PlacementPlan, node_id: str, labels: Mapping[str, str]) -> None:
    plan.node_set.setdefault(node_id, {}).update(labels)


def _node_remove(plan: PlacementPlan, node_id: str, keys: Sequence[str]) -> None:
    cur = plan.node_remove.setdefault(node_id, [])
    cur.extend(k for k in keys if k not in cur)


def _plan_service(
    s: SwarmService, r: GpuRequest | RequestError, kept: dict[str, Holding],
    old: Mapping[str, Holding], cluster: ClusterAllocator, by_id: Mapping[str, SwarmNode],
    facts: Mapping[str, NodeFacts], running_on: Mapping[str, int],
    waiting: Sequence[SwarmTask], prefix: str,
    zone_label: str, all_zones: set[str], adopt_ungated: bool, plan: PlacementPlan,
) -> ServicePlan:
    if isinstance(r, RequestError):
        return ServicePlan(s.name, s.id, None, "", "invalid", "Invalid", reason=str(r))
    sp = ServicePlan(s.name, s.id, r, r.describe(), "placed", "Active")
    if s.mode != "replicated":
        sp.status, sp.state = "invalid", "Invalid"
        sp.reason = (f"{s.mode} services cannot carry GPU requests; use mode: replicated "
                     "with replicas")
        return sp
    if f"{prefix}{MOVE_STATE}" in s.labels:
        # A rebalancing move owns this service until it ends (swarmgpu.rebalance.mover):
        # its holdings stay reserved (committed above), nothing is written here.
        sp.state = "Rebalancing"
        sp.placements = sorted((_replica_of(h, by_id[nid], facts.get(nid))
                                for nid, h in kept.items() if nid in by_id),
                               key=lambda p: p.hostname)
        sp.warnings.append("a rebalancing move is in progress; placement waits for it")
        return sp
    replicas = s.replicas or 0
    gate = gate_constraint(prefix, s.name)
    has_gate = any(c.replace(" ", "") == gate for c in s.constraints)
    tmpl = env_template(prefix)
    has_env = any(e == tmpl for e in s.env)
    if not has_gate or not has_env:
        missing = [x for x, ok in ((f"constraint {gate}", has_gate),
                                   (f"env {tmpl}", has_env)) if not ok]
        if not adopt_ungated:
            sp.status, sp.state = "pending", "Pending"
            sp.reason = ("not gated: add " + " and ".join(missing) +
                         " to the service (or deploy through `swarmgpu render`)")
            return sp
        sp.warnings.append("adopted: swarmgpu added " + " and ".join(missing) +
                           "; put them in the stack file so a re-deploy keeps them")
        if not has_gate:
            sp.add_constraints.append(gate)
        if not has_env:
            sp.add_env.append(tmpl)
        if ORDER_ENV not in s.env:
            sp.add_env.append(ORDER_ENV)
    share_env = missing_env(prefix, s.env) if r.is_fraction else []
    if share_env and adopt_ungated:
        sp.add_env.extend(share_env)
        sp.warnings.append("adopted: swarmgpu added the env lines that tell each container "
                           "its share; put them in the stack file so a re-deploy keeps them")
    elif share_env:
        sp.warnings.append("its containers are not told their share: add env "
                           + " and ".join(share_env))
    if replicas > 1 and s.max_replicas_per_node != 1:
        sp.set_max_replicas = 1

    # Scale down: drop holdings beyond the replica count, idle nodes first.
    holdings = dict(kept)
    if len(holdings) > replicas:
        order = sorted(holdings, key=lambda nid: (running_on.get(nid, 0), by_id[nid].hostname
                                                  if nid in by_id else nid))
        for nid in order[: len(holdings) - replicas]:
            del holdings[nid]
    # Holdings that no longer fit (or were dropped) are released.
    for nid in old:
        if nid not in holdings:
            _node_remove(plan, nid, [assign_key(prefix, s.name), gate_key(prefix, s.name)])
            where = by_id[nid].hostname if nid in by_id else nid
            sp.warnings.append(f"released its GPUs on {where}")

    placements = [_replica_of(h, by_id[nid], facts.get(nid)) for nid, h in holdings.items()
                  if nid in by_id]
    missing_n = replicas - len(placements)
    demand = demand_of(r)
    reasons: list[str] = []
    used_nodes = set(holdings)
    used_zones = {by_id[nid].labels.get(zone_label, "") for nid in used_nodes if nid in by_id}
    for _ in range(max(0, missing_n)):
        # Before a service holds anything, the question depends only on the demand and
        # its zone wishes: many identical pending requests share one answer per state.
        memo_key = (demand, r.zone_prefer, r.zone_avoid, cluster.version)
        known = cluster.unplaceable.get(memo_key) if not used_nodes else None
        choice: Choice | Unplaceable = known or Unplaceable("no candidate node")
        for tier in ([] if known else _zone_orders(r, used_zones, all_zones)):
            def allowed(node: NodeState, tier: Callable[[str | None], bool] = tier) -> bool:
                n = by_id.get(node.spec.name)
                return (n is not None and _schedulable(n) and node.spec.name not in used_nodes
                        and tier(n.labels.get(zone_label, "")))
            try:
                choice = cluster.place(demand, allowed)
            except MigProfileError as exc:
                choice = Unplaceable(str(exc))
            if isinstance(choice, Choice):
                break
        if isinstance(choice, Unplaceable):
            if not used_nodes:
                cluster.unplaceable[memo_key] = choice
            reasons.append(cluster.hostnames(choice.reason))
            break
        cluster.commit(choice)
        rp = cluster.to_replica(choice)
        placements.append(rp)
        used_nodes.add(rp.node_id)
        used_zones.add(by_id[rp.node_id].labels.get(zone_label, ""))
        sp.new = True

    sp.placements = sorted(placements, key=lambda p: p.hostname)
    # Desired Swarm state for this service: device labels, ledger, gates.
    want_devices = {devices_key(prefix, p.node_id): ",".join(p.uuids) for p in sp.placements}
    have_devices = {k: v for k, v in s.labels.items()
                    if k.startswith(prefix + DEVICES) or is_share_key(k, prefix)}
    # A shared GPU's container is told its share the same way (swarmgpu.sharing).
    want_devices.update(want_labels(prefix, ((p.node_id, p.uuids, p.milli)
                                             for p in sp.placements), facts, have_devices))
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
        running_on.get(p.node_id) and by_id[p.node_id].labels.get(assign_key(prefix, s.name))
        != Holding(s.name, p.node_id, p.uuids, p.milli).label_value()
        for p in sp.placements
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
    gate_ready = not sp.service_labels_set and not sp.force_update and all(
        t.force_update >= gen for t in waiting)
    # The rolling updater replaces one task at a time and waits for it to run, which a
    # closed gate never allows: replace all waiting tasks at once (parallelism 0) when
    # nothing runs yet, and give the user's parallelism back once the gates are open.
    par_key = f"{prefix}state.update-parallelism"
    current_par = int((s.spec.get("UpdateConfig") or {}).get("Parallelism", 1))
    if sp.force_update and not running_on and current_par != 0:
        sp.service_labels_set.setdefault(par_key, str(current_par))
        sp.set_update_parallelism = 0
    elif gate_ready and par_key in s.labels and current_par == 0:
        sp.set_update_parallelism = _int_or0(s.labels[par_key]) or 1
        sp.service_labels_remove.append(par_key)
    for p in sp.placements:
        node = by_id[p.node_id]
        h = Holding(s.name, p.node_id, p.uuids, p.milli)
        want = {assign_key(prefix, s.name): h.label_value()}
        if gate_ready or node.labels.get(gate_key(prefix, s.name)) == "true":
            want[gate_key(prefix, s.name)] = "true"
        else:
            sp.gates_deferred = True
        diff = {k: v for k, v in want.items() if node.labels.get(k) != v}
        if diff:
            _node_set(plan, p.node_id, diff)
    if len(sp.placements) < replicas:
        sp.status = "pending"
        sp.reason = "; ".join(reasons) or "not enough nodes"
        if len(sp.placements) and reasons:
            sp.reason = f"{len(sp.placements)} of {replicas} replicas placed; {sp.reason}"
    sp.state = _state(sp, s, running_on, replicas)
    if r.rebalance is Rebalance.NEVER:
        sp.warnings.append("opted out of rebalancing")
    return sp


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


# --- existing holdings: the ledger first ------------------------------------------------


def _commit_existing(
    parsed: Sequence[tuple[SwarmService, GpuRequest | RequestError]],
    ledger: Mapping[str, Mapping[str, Holding]], by_id: Mapping[str, SwarmNode],
    facts: Mapping[str, NodeFacts], running: Mapping[str, Mapping[str, int]],
    cluster: ClusterAllocator, prefix: str,
) -> dict[str, dict[str, Holding]]:
    """Holdings kept this cycle: every valid ledger entry, then declared device lists.

    The ledger (node labels only swarmgpu writes) is authoritative. A ``<p>devices.<node>``
    service label without a ledger entry (a stack from ``swarmgpu render``, a lost node
    label) is adopted only onto GPUs that are still free, so a service cannot take another
    one's GPUs by naming their UUIDs: the declared list is reported and the service is
    placed anew, and the running owner keeps its GPUs. Declared lists of services with
    running tasks on that node are tried first.
    """
    kept: dict[str, dict[str, Holding]] = {}
    for s, r in parsed:  # 1. the ledger
        for node_id, h in ledger.get(s.name, {}).items():
            if isinstance(r, RequestError):
                kept.setdefault(s.name, {})[node_id] = h  # invalid now: keep, never drop
                cluster._commit_holding(s.name, node_id, h)
                continue
            why = _holding_fits(h, r, facts.get(node_id)) if node_id in by_id else "node gone"
            if why is None and cluster._commit_holding(s.name, node_id, h):
                kept.setdefault(s.name, {})[node_id] = h
    owner = {(nid, u): svc for svc, per in kept.items() for nid, h in per.items()
             for u in h.uuids}
    declared: list[tuple[bool, str, SwarmService, GpuRequest, Holding]] = []
    dk = prefix + DEVICES
    for s, r in parsed:  # 2. declared device lists, onto free GPUs only
        if isinstance(r, RequestError):
            continue
        for k, v in s.labels.items():
            nid = k[len(dk):]
            if not k.startswith(dk) or nid in ledger.get(s.name, {}) or nid not in by_id:
                continue
            uuids = tuple(u for u in v.split(",") if u)
            milli = r.gpu_milli if r.is_fraction else 1000
            if uuids:
                h = Holding(s.name, nid, uuids, tuple(milli for _ in uuids))
                declared.append((not running.get(s.id, {}).get(nid), s.name, s, r, h))
    for _, name, _s, r, h in sorted(declared, key=lambda d: (d[0], d[1])):
        # A share of a GPU may sit beside another service's share (capacity decides).
        taken = sorted({owner[(h.node_id, u)] for u, m in zip(h.uuids, h.milli, strict=True)
                        if m >= 1000 and owner.get((h.node_id, u), name) != name})
        if taken:
            cluster.problems.append(
                f"{name}: its label {dk}{h.node_id} names GPU(s) that {', '.join(taken)} "
                "hold(s) in the ledger; ignored, and the service is placed anew")
            continue
        why = _holding_fits(h, r, facts.get(h.node_id))
        if why is None and cluster._commit_holding(name, h.node_id, h):
            kept.setdefault(name, {})[h.node_id] = h
            owner.update({(h.node_id, u): name for u in h.uuids})
    return kept
