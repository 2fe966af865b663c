"""Where a victim that can run elsewhere is said moved (``relocation``): free whole GPUs
and the CPU and memory its task reserves on another node (``preempt``'s rule)."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol

from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.preemptroom import Room
from swarmgpu.manager.placement.preemptview import usable_gpus
from swarmgpu.manager.services.requests import GpuRequest, Topology
from swarmgpu.swarm.client import SwarmNode, SwarmService


class Movable(Protocol):
    """A victim as ``relocation`` reads it (``preempt.Candidate``)."""

    @property
    def node_id(self) -> str: ...

    @property
    def holding(self) -> Holding | None: ...


@dataclass(frozen=True)
class Relocation:
    """Where a victim could run instead: free GPUs on another node (make-before-break
    through the rebalancer's mover, ``manager.cycle.preemption``)."""

    node_id: str
    hostname: str
    gpus: tuple[int, ...]
    uuids: tuple[str, ...]


def relocation(r: GpuRequest, s: SwarmService, v: Movable, by_node: Mapping[str, SwarmNode],
               facts: Mapping[str, NodeFacts], holdings: Mapping[str, Mapping[str, Holding]],
               taken: AbstractSet[tuple[str, str]], refused: AbstractSet[str],
               room: Room | None = None) -> Relocation | None:
    """Free whole GPUs for one replica of ``s`` on another node it does not hold on, with
    the CPU and memory its task reserves left there (``room``, the round's decisions
    counted; the node chosen is counted in it): the node left with the fewest free GPUs
    (best fit), then the hostname. Only a plain whole-GPU replica (no topology, not
    packed) is moved; the others are stopped. Moved where Swarm's ResourceFilter refuses
    its task, it stayed pending there until the move timed out and was rolled back, its
    preemptor waiting all that while."""
    h = v.holding
    if (r.is_fraction or r.mig_profile or r.topology is not Topology.ANY or h is None
            or h.packed or len(h.uuids) != r.gpus):
        return None
    best: tuple[tuple[int, str], Relocation] | None = None
    for nid, node in by_node.items():
        if nid == v.node_id or nid in refused or node.state != "ready" \
                or node.availability != "active" or node.unread or s.name in holdings.get(nid, {}):
            continue
        f = facts.get(nid)
        if f is None:
            continue
        held = {u for hh in holdings.get(nid, {}).values() for u in hh.uuids}
        free = [g for g in f.gpus if g.uuid in usable_gpus(r, f) and g.uuid not in held
                and (nid, g.uuid) not in taken]
        if len(free) < r.gpus:
            continue
        if room is not None and not room.fits(s, nid, (), 1):
            continue
        pick = sorted(free, key=lambda g: g.index)[:r.gpus]
        key = (len(free) - r.gpus, node.hostname)
        if best is None or key < best[0]:
            best = (key, Relocation(nid, node.hostname, tuple(g.index for g in pick),
                                    tuple(g.uuid for g in pick)))
    if best is not None and room is not None:
        room.moved(s, best[1].node_id)
    return best[1] if best is not None else None
