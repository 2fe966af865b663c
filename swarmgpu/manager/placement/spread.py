"""Where a service's missing replicas go: one per node, else all packed on one node."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from swarmgpu.allocator.values import Choice, NodeState, Unplaceable
from swarmgpu.core.migprofile import MigProfileError
from swarmgpu.manager.placement.cycle import Cycle
from swarmgpu.manager.placement.keys import MAX_STATE
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.packing import Spread, place_packed, repack
from swarmgpu.manager.placement.records import ReplicaPlacement
from swarmgpu.manager.placement.replicas import (
    any_zone,
    replicas_of,
    want_slots,
    zone_orders,
)
from swarmgpu.manager.placement.specs import demand_of, host_ports
from swarmgpu.manager.services.requests import GpuRequest, Pack
from swarmgpu.swarm.client import SwarmService


def place_replicas(s: SwarmService, r: GpuRequest, holdings: Mapping[str, Holding],
                   replicas: int, live: Mapping[int, str], res: tuple[int, int],
                   cyc: Cycle) -> Spread:
    """Spread one replica per node, or pack them all on one node: a service packed
    stays packed (its slots follow the tasks' on scale-up and -down); a service that
    holds nothing is packed when its replicas cannot be spread (``pack: auto``) or
    always (``pack: always``), if one node can hold them all."""
    by_id = cyc.by_id
    packed = next((h for h in holdings.values() if h.packed), None)
    if packed is not None:
        return repack(s, r, packed, replicas, live, res, cyc)
    placements = [p for nid, h in holdings.items() if nid in by_id
                  for p in replicas_of(h, by_id[nid], cyc.facts.get(nid))]
    mrpn = s.max_replicas_per_node or 0
    if s.labels.get(cyc.prefix + MAX_STATE) == str(mrpn):
        mrpn = 0  # the value swarmgpu set when it last packed the service: not a limit
    # No node holds more replicas than it has GPUs: beyond that, packing is not tried
    # (and no slot list is built: a service of 100,000 replicas is just pending).
    ports = host_ports(s.spec)  # a node binds each for one task only: never packed
    fits_one = r.can_pack and not ports and replicas * r.gpus <= cyc.most_gpus
    may_pack = (not holdings and replicas > 1 and fits_one
                and not 1 < mrpn < replicas)
    if may_pack and r.pack is Pack.ALWAYS:
        got, why = place_packed(s, r, want_slots(live, replicas), {}, res, cyc)
        if got:
            return Spread(tuple(got), (), f"packed on {got[0].hostname} ({Pack.ALWAYS.value})",
                          new=True)
        return Spread((), (why,))
    base = len(placements)
    reasons, new = _place_missing(s, r, placements, replicas - len(placements), res, cyc)
    held = next(iter(holdings.items()), None)
    if (len(placements) < replicas and held is not None and len(holdings) == 1
            and replicas > 1 and fits_one and not 1 < mrpn < replicas):
        # Spread, one replica placed, no node for the others (a service from before
        # packing, or one whose nodes filled up): pack on the node it holds, its replica
        # there keeping its slot and GPUs, when that node has room for the rest.
        nid, h0 = held
        on = [k for k, n in live.items() if n == nid]
        want = want_slots(live, replicas)
        slot0 = on[0] if on else want[0]
        if len(on) <= 1 and slot0 in want:
            for p in placements[base:]:
                cyc.cluster.release_holding(s.name, p.node_id)
            got, _why = place_packed(s, r, want, {slot0: (h0.uuids, h0.milli)}, res, cyc,
                                     node=nid)
            if got:
                return Spread(tuple(got), (), (
                    f"packed on {got[0].hostname}: {replicas} replicas could not be spread "
                    f"one per node ({'; '.join(reasons)}); its replica there keeps its GPUs"),
                    new=True)
            del placements[base:]
            cyc.cluster.commit_holding(s.name, nid, h0, cyc.cluster.holding_reservation(
                s.id, nid, res))
            reasons, again = _place_missing(s, r, placements, replicas - base, res, cyc)
            new = new or again
    if len(placements) < replicas and may_pack:
        for p in placements:  # not enough nodes: try all of them on one node instead
            cyc.cluster.release_holding(s.name, p.node_id)
        got, _why = place_packed(s, r, want_slots(live, replicas), {}, res, cyc)
        if got:
            return Spread(tuple(got), (), (
                f"packed on {got[0].hostname}: {replicas} replicas could not be spread one "
                f"per node ({'; '.join(reasons)})"), new=True)
        placements = []
        reasons, again = _place_missing(s, r, placements, replicas, res, cyc)
        new = new or again
        reasons.append("no single node can hold all replicas either")
    elif len(placements) < replicas and r.can_pack and ports and replicas > 1:
        reasons.append(f"not packed on one node: it publishes host-mode port "
                       f"{', '.join(ports)}, which a node binds for one task only")
    elif len(placements) < replicas and r.can_pack and 1 < mrpn < replicas:
        reasons.append(f"not packed on one node: max_replicas_per_node {mrpn} is below "
                       f"{replicas} replicas (raise or remove it)")
    return Spread(tuple(placements), tuple(reasons), new=new)


def _place_missing(s: SwarmService, r: GpuRequest, placements: list[ReplicaPlacement],
                   missing_n: int, res: tuple[int, int], cyc: Cycle) -> tuple[list[str], bool]:
    """Choose nodes and GPUs for the replicas that hold nothing yet (added to
    ``placements``); reasons when not, and whether any was placed."""
    if missing_n <= 0:
        return [], False  # (most plans: every replica holds its GPUs)
    cluster, by_id = cyc.cluster, cyc.by_id
    demand = demand_of(r, *res)
    reasons: list[str] = []
    used_nodes = {p.node_id for p in placements}
    used_zones = {by_id[nid].labels.get(cyc.zone_label, "") for nid in used_nodes
                  if nid in by_id}
    swarm_no = cyc.swarm_no(s)
    base = len(placements)
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
            for tier in zone_orders(r, used_zones, cyc.all_zones):
                def where(node: NodeState, tier: Callable[[str | None], bool] = tier) -> bool:
                    return tier(node.spec.labels.get(cyc.zone_label, ""))
                try:
                    choice = cluster.place(demand, exclude=exclude,
                                           where=None if tier is any_zone else where)
                except MigProfileError as exc:
                    choice = Unplaceable(str(exc))
                if isinstance(choice, Choice):
                    break
            if isinstance(choice, Unplaceable) and not used_nodes:
                cluster.unplaceable[memo_key] = (cluster.version, choice)
        if isinstance(choice, Unplaceable):
            reason = choice.reason
            full = [nid for nid in used_nodes if (a := cluster.allocator_of(nid)) is not None
                    and a.fits(a.nodes[nid], demand)]
            if full:  # name the rule that stops it, not topology (and a few of the nodes)
                names = sorted(full)
                more = f" and {len(names) - 3} more" if len(names) > 3 else ""
                reason += (f"; {', '.join(names[:3])}{more} would have room but already "
                           "run(s) a replica (one replica per node: max_replicas_per_node 1)")
            ports = cyc.ports.why(s, by_id)
            if ports:  # nodes Swarm's HostPortFilter refuses: say which and whose task
                reason += f"; {ports}"
            lacks = cyc.filters.plugins_refused(s) if cyc.filters is not None else ""
            if lacks:  # nodes Swarm's PluginFilter refuses: say which plugin
                reason += f"; {lacks}"
            reasons.append(cluster.hostnames(reason))
            break
        cluster.commit(choice, s.name)
        rp = cluster.to_replica(choice)
        placements.append(rp)
        used_nodes.add(rp.node_id)
        used_zones.add(by_id[rp.node_id].labels.get(cyc.zone_label, ""))
    return reasons, len(placements) > base
