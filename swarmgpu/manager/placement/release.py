"""The release pass of a cycle: the holdings of services that are gone or no longer ask
for GPUs leave the ledger and their gates close; gates that name no live service go."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from collections.abc import Set as AbstractSet

from swarmgpu.manager.placement.keys import GATE, assign_key, gate_key
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.memo import NodeGates
from swarmgpu.manager.placement.reads import ServiceRead
from swarmgpu.manager.placement.records import (
    PlacementPlan,
    ServicePlan,
    State,
    Status,
    remove_node_labels,
)
from swarmgpu.manager.placement.ungate import UNGATED, ungate
from swarmgpu.swarm.client import SwarmNode


def release(plan: PlacementPlan, nodes: Sequence[SwarmNode],
            ledger: Mapping[str, Mapping[str, Holding]], read: ServiceRead, prefix: str,
            gates: MutableMapping[str, NodeGates]) -> None:
    """Release the holdings of services that are gone or no longer ask for GPUs
    (their ledger entries and gates), and gates without a holding. ``gates``: each
    node's gates as last read (``PlannerMemo.node_gates``), kept up to date here."""
    live_names = read.names
    gone = set() if read.unnamed is not None else ledger.keys() - live_names  # (ServiceRead)
    for svc_name, per_node in ledger.items() if gone else ():
        if svc_name in gone:
            plan.released.append(svc_name)
            for node_id in per_node:
                remove_node_labels(plan, node_id, [assign_key(prefix, svc_name),
                                                   gate_key(prefix, svc_name)])
    if read.unnamed is None:
        stray_gates(plan, nodes, live_names, prefix, gates)
    for s in read.no_request:
        held = s.name in ledger
        try:  # (first: nothing is written for a service whose ungating raises)
            writes, notes = ungate(s, prefix, released=held)
        except Exception as exc:  # its fault is its own (placement.isolate)
            read.failed.setdefault(s.id, exc)
            read.ungate_failed.add(s.id)
            continue
        if held:  # request labels removed: release its GPUs
            plan.released.append(s.name)
            for node_id in ledger[s.name]:
                remove_node_labels(plan, node_id, [assign_key(prefix, s.name),
                                                   gate_key(prefix, s.name)])
        # ... and take swarmgpu's lines out of its spec, its gate first: closed, it
        # would match no node ever again (placement.ungate). Written after its gates
        # close (phase 1 of the write); a failed write is made again next cycle.
        if writes:
            plan.services.append(ServicePlan(
                s.name, s.id, None, "", Status.RELEASED, State.RELEASED,
                warnings=notes, writes=writes, decision=UNGATED))


def stray_gates(plan: PlacementPlan, nodes: Sequence[SwarmNode],
                live_names: AbstractSet[str], prefix: str,
                gates: MutableMapping[str, NodeGates]) -> None:
    """Remove the gates that name a service that is gone."""
    gk = prefix + GATE
    for n in nodes:
        got = gates.get(n.id)
        if got is None or got.version != n.version:  # a node's gates, per spec version
            pairs = [(k, k[len(gk):]) for k in n.labels if k.startswith(gk)]
            got = gates[n.id] = NodeGates(n.version, pairs,
                                          frozenset(name for _, name in pairs))
        if got.names and not got.names <= live_names:
            for k, name in got.gates:
                if name not in live_names:
                    remove_node_labels(plan, n.id, [k])
