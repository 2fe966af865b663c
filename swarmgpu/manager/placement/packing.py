"""Replicas packed on one node: placing them, keeping them, their env and ``MaxReplicas``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from swarmgpu.allocator.values import Choice, NodeState, Unplaceable
from swarmgpu.manager.placement.cycle import Cycle
from swarmgpu.manager.placement.envs import device_env, env_template, env_template_per_node
from swarmgpu.manager.placement.keys import MAX_STATE, devices_key
from swarmgpu.manager.placement.ledger import Holding, packed_holding
from swarmgpu.manager.placement.records import EMPTY, ReplicaPlacement
from swarmgpu.manager.placement.replicas import (
    any_zone,
    replicas_of,
    want_slots,
    zone_orders,
)
from swarmgpu.manager.placement.specs import demand_of
from swarmgpu.manager.services.requests import GpuRequest
from swarmgpu.swarm.client import SwarmService


def place_packed(s: SwarmService, r: GpuRequest, slots: Sequence[int],
                 have: Mapping[int, tuple[tuple[str, ...], tuple[int, ...]]],
                 res: tuple[int, int], cyc: Cycle, node: str | None = None,
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
            for tier in zone_orders(r, set(), cyc.all_zones):  # preferred, not avoided
                def where(ns: NodeState, tier: Callable[[str | None], bool] = tier) -> bool:
                    return tier(ns.spec.labels.get(cyc.zone_label, ""))
                first = cluster.place(demand, room, exclude=swarm_no | tried,
                                      where=None if tier is any_zone else where)
                if isinstance(first, Choice):
                    break
            if isinstance(first, Unplaceable):
                return [], why
            target = first.node
            cluster.unrecorded.add(target)  # (a commit raising once it counted: isolate)
            cluster.alloc.commit(first)
            choices.append(first)
        ok = target in cluster.alloc.nodes
        cluster.unrecorded.add(target)
        try:  # a probe: released whatever happens (placement.isolate.restore relies on it)
            while ok and len(choices) < len(new):
                got = cluster.alloc.place_on(target, demand)
                if isinstance(got, Unplaceable):
                    why = cluster.hostnames(got.reason)
                    ok = False
                    break
                cluster.alloc.commit(got)
                choices.append(got)
        finally:
            for c in choices:
                cluster.alloc.release(c)
        cluster.unrecorded.discard(target)  # (every probe commit given back)
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
    return replicas_of(h, cyc.by_id[target], f), ""


@dataclass(frozen=True, slots=True)
class Spread:
    """Where a service's replicas are (kept and new), or why some are not; packed: on
    one node, where and why; ``draining``: a packed service's slots gone whose GPUs stay
    held one more cycle (their lists are removed)."""

    placements: tuple[ReplicaPlacement, ...]
    reasons: tuple[str, ...] = ()
    packed: str | None = None
    draining: Mapping[int, tuple[tuple[str, ...], tuple[int, ...]]] = EMPTY
    new: bool = False  # placements chosen now


def repack(s: SwarmService, r: GpuRequest, h: Holding, replicas: int,
           live: Mapping[int, str], res: tuple[int, int], cyc: Cycle) -> Spread:
    """A packed service keeps its node: the slots of its tasks keep their GPUs, a slot
    gone (scale-down) gives them back, a new slot (scale-up) gets GPUs on the node."""
    node = cyc.by_id.get(h.node_id)
    host = node.hostname if node is not None else h.node_id
    packed = f"packed on {host}"
    if node is None:
        return Spread((), (f"packed on {h.node_id}, which is gone",), packed)
    facts = cyc.facts.get(h.node_id)
    want = want_slots(live, replicas)
    per = h.per_slot_milli()
    have = {k: v for k, v in per.items() if k in want}
    # A gone slot's GPUs stay held while its device list is still on the service: the
    # gate stays open, so a task Swarm creates for that slot before the list's removal
    # lands would run on them (the next cycle sees that task, and the slot is kept).
    draining = {k: v for k, v in per.items()
                if k not in want and devices_key(cyc.prefix, h.node_id, k) in s.labels}
    if all(k in have for k in want):
        _recommit(s, h, {**have, **draining}, res, cyc)
        return Spread(tuple(replicas_of(packed_holding(s.name, h.node_id, have), node, facts)),
                      (), packed, draining)
    placed, why = place_packed(s, r, want, have, res, cyc, node=h.node_id, extra=draining)
    if placed:
        return Spread(tuple(placed), (), packed, draining, new=True)
    # Scale-up beyond the node's room: what is held stays, the rest waits.
    _recommit(s, h, {**have, **draining}, res, cyc)
    return Spread(tuple(replicas_of(packed_holding(s.name, h.node_id, have), node, facts))
                  if have else (),
                  (f"packed on {host}, which has no room for {replicas - len(have)} more "
                   f"replica(s): {why}",), packed, draining)


def _recommit(s: SwarmService, h: Holding,
              per: Mapping[int, tuple[Sequence[str], Sequence[int]]], res: tuple[int, int],
              cyc: Cycle) -> None:
    """Hold ``per`` (slot -> GPUs) on the packed holding's node instead of ``h``."""
    got = packed_holding(s.name, h.node_id, per)
    if got == h:
        return
    cyc.cluster.release_holding(s.name, h.node_id)
    if got.uuids:
        cyc.cluster.commit_holding(s.name, h.node_id, got, cyc.cluster.holding_reservation(
            s.id, h.node_id, res, got.replicas))


@dataclass(frozen=True, slots=True)
class PackedEnv:
    """What packed replicas need of their service: the per-slot env template (present,
    or the per-node one replaced by adoption) and ``MaxReplicas``; or why they wait."""

    replace_env: tuple[tuple[str, str], ...] = ()
    max_state: str | None = None  # the MaxReplicas swarmgpu records (``<p>state.max-...``)
    set_max_replicas: int | None = None
    warnings: tuple[str, ...] = ()
    waits: str | None = None  # the per-slot template is missing: why it waits
    # the owner's MaxReplicas is below the replicas packed: why some wait (held, pending)
    limit: str | None = None


def packed_env(s: SwarmService, packed: str, placements: Sequence[ReplicaPlacement],
               cyc: Cycle) -> PackedEnv:
    """Packed replicas read per-slot lists: the service needs the per-slot template. One
    with the older per-node template is upgraded (adoption) or waits."""
    if device_env(cyc.prefix, s.env) == "slot":
        return _packed_max(s, packed, len(placements), (), cyc)
    old, new = env_template_per_node(cyc.prefix), env_template(cyc.prefix)
    if cyc.adopt_ungated and old in s.env:
        return _packed_max(s, packed, len(placements), (
            f"its replicas are {packed}: swarmgpu replaced its env template with the "
            f"per-slot one ({new}); put it in the stack file so a re-deploy keeps it",), cyc,
            replace_env=((old, new),))
    return PackedEnv(waits=f"its replicas would be {packed}, which needs the per-slot env "
                           f"template {new} (replace {old})")


def _packed_max(s: SwarmService, packed: str, want: int, then: tuple[str, ...], cyc: Cycle,
                replace_env: tuple[tuple[str, str], ...] = ()) -> PackedEnv:
    """Swarm runs no more of a packed service's tasks on its node than there are slot
    lists: ``MaxReplicas`` is the number of replicas packed (a task beyond them, on a
    scale-up past the node's room, would start with no GPU). swarmgpu owns the value
    when it is unset, its own one-per-node 1, or the value it recorded last
    (``<p>state.max-replicas``); a value of yours is left as it is (below the replicas
    packed, ``limit`` says why some wait). ``then``: warnings said after this one's."""
    key = cyc.prefix + MAX_STATE
    have = s.max_replicas_per_node or 0
    if have == want:
        return PackedEnv(replace_env, str(want), warnings=then)
    if have not in (0, 1) and s.labels.get(key) != str(have) and have < want:
        # Swarm runs ``have`` there and the others wait ("max replicas per node"): their
        # GPUs are on that node only. Named as swarmgpu's cause, with the fix.
        return PackedEnv(replace_env, warnings=then, limit=(
            f"max_replicas_per_node {have} (yours) is below the {want} replicas {packed}, "
            f"where their GPUs are held: Swarm runs {have} there and the others wait; raise "
            f"max_replicas_per_node to {want} or remove it (swarmgpu then sets it), or "
            f"scale the service to {have} replicas"))
    if have not in (0, 1) and s.labels.get(key) != str(have):
        return PackedEnv(replace_env, warnings=(
            (f"max_replicas_per_node {have} is yours and left as it is: tasks beyond the "
             f"{want} replicas {packed} may start there without a GPU",)
            if want < (s.replicas or 0) else ()) + then)
    return PackedEnv(replace_env, str(want), want, (
        (f"max_replicas_per_node 1 (swarmgpu's one-per-node rule) is now {want}: its "
         f"replicas are {packed}; set {cyc.prefix}pack: never to keep one replica per node",)
        if have == 1 else ()) + then)
