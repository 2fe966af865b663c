"""A service's replicas as held (one per node, or one per slot when packed), whether a
holding still fits its request, and the orders replicas are tried and listed in."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet

from swarmgpu.core.migprofile import canonical_profile
from swarmgpu.core.model import Gpu, NodeFacts
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.records import ReplicaPlacement
from swarmgpu.manager.placement.specs import unread
from swarmgpu.manager.services.requests import GpuRequest
from swarmgpu.swarm.client import SwarmNode


def replicas_of(holding: Holding, node: SwarmNode, facts: NodeFacts | None
                ) -> list[ReplicaPlacement]:
    """The replicas a holding serves: one, or one per slot when packed."""
    where = _gpu_index(facts) if facts is not None else {}

    def one(uuids: tuple[str, ...], milli: tuple[int, ...], slot: int | None
            ) -> ReplicaPlacement:
        idx = tuple(where[u] for u in uuids if u in where)
        return ReplicaPlacement(node.id, node.hostname, idx, uuids, milli, slot=slot)

    if not holding.packed:
        return [one(holding.uuids, holding.milli, None)]
    return [one(u, m, slot) for slot, (u, m) in holding.per_slot_milli().items()]


# id(facts) -> (those facts, GPU or MIG uuid -> GPU index, GPU uuid -> GPU): each
# node's facts are read by every holding on it, every cycle. The facts are kept with
# their indexes, so the id names them while the entry lives.
_GPU_INDEX: dict[int, tuple[NodeFacts, dict[str, int], dict[str, Gpu]]] = {}


def _indexes(facts: NodeFacts) -> tuple[NodeFacts, dict[str, int], dict[str, Gpu]]:
    got = _GPU_INDEX.get(id(facts))
    if got is not None and got[0] is facts:
        return got
    where = {g.uuid: i for i, g in enumerate(facts.gpus)}
    for i, g in enumerate(facts.gpus):
        for m in g.mig_devices:
            where[m.uuid] = i
    if len(_GPU_INDEX) > 4096:
        _GPU_INDEX.clear()
    got = _GPU_INDEX[id(facts)] = (facts, where, {g.uuid: g for g in facts.gpus})
    return got


def _gpu_index(facts: NodeFacts) -> Mapping[str, int]:
    return _indexes(facts)[1]


def holding_fits(h: Holding, req: GpuRequest, facts: NodeFacts | None) -> str | None:
    """Why an existing holding no longer satisfies the request (None: it does)."""
    if facts is None or unread(facts):
        return None  # agent unreachable, or its GPUs unreadable: keep what is there
    if req.mig_profile:
        return _mig_fits(h, req, facts)
    gpus = _indexes(facts)[2]
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


def _mig_fits(h: Holding, req: GpuRequest, facts: NodeFacts) -> str | None:
    """Why a MIG holding no longer satisfies the request: a device of the profile and
    product asked now (a changed request re-places it, as a whole GPU's does)."""
    if len(h.uuids) != 1:
        return "not a MIG device"
    got = next(((g, m) for g in facts.gpus for m in g.mig_devices if m.uuid == h.uuids[0]),
               None)
    if got is None:
        return "not a MIG device"
    g, m = got
    if canonical_profile(m.profile) != req.mig_profile:
        return f"{m.uuid} is a {m.profile} MIG device, request wants {req.mig_profile}"
    if not req.matches_product(g.product):
        return f"{m.uuid} is on a {g.product}"
    return None


def any_zone(_zone: str | None) -> bool:
    """The zone filter that lets every node through: callers pass no filter for it
    (most services name no zone, and a per-node call on every decision cost more than
    the rest of the scan)."""
    return True


def zone_orders(req: GpuRequest, used_zones: set[str],
                all_zones: set[str]) -> list[Callable[[str | None], bool]]:
    """Node-zone filters to try in order: preferred & unused, unused, any allowed, avoided."""
    avoid = set(req.zone_avoid)
    prefer = set(req.zone_prefer)
    tiers: list[Callable[[str | None], bool]] = []
    if prefer:
        tiers.append(lambda z: z in prefer and z not in used_zones)
        tiers.append(lambda z: z in prefer)
    if len(all_zones) > 1:
        tiers.append((lambda z: z not in avoid and z not in used_zones)
                     if avoid or used_zones else any_zone)
    tiers.append((lambda z: z not in avoid) if avoid else any_zone)
    if avoid:
        tiers.append(any_zone)  # soft: avoided zones only when nothing else fits
    return tiers


def placement_order(p: ReplicaPlacement) -> tuple[str, int]:
    return (p.hostname, p.slot or 0)


def want_slots(live: Mapping[int, str] | AbstractSet[int], replicas: int) -> list[int]:
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
