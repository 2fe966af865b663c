"""A ``mode: global`` service (and a ``global-job``) with a GPU request: one holding per
eligible GPU node, each node's own GPU set; a node without room waits, gate closed. A
request of no GPU (``gpus: "0"``) holds on the CPU-only nodes too (``placement.cpunodes``),
each judged by its own CPU and memory: a global service runs on every node it may.

Swarm's global orchestrator creates a task only on a node whose labels match the
service's constraints, so a node whose gate is closed (no room, or no GPU at all) gets
no task: nothing waits there, and the task a node gets once its gate opens is created
after its device map was written.

A global job's run makes its tasks once, when it starts (any write to its spec starts
one), on the nodes that match then: a node whose GPUs tasks Swarm is stopping still hold
for a few seconds (``nominated.StoppingGpus``) would run nothing that run. Its run waits
for such a node (``GlobalPlacement.run_waits``: no write to its spec while one waits)
while the hold ends within ``RUN_WAIT_S``; one held longer, or past its end, waits as a
node without free GPUs does (the run starts without it), said so. A run waits
``RUN_WAIT_CAP_S`` at most in all, from when it first waited (``Cycle.run_waited``):
while nodes keep getting new short stops (a rolling update across many) it was put off
again and again; past it, such nodes are left out of the run as one held longer is.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from swarmgpu.allocator.values import Choice, Demand, NodeState, Unplaceable
from swarmgpu.core.migprofile import MigProfileError
from swarmgpu.manager.placement.cpunodes import no_gpu, place_no_gpu
from swarmgpu.manager.placement.cycle import Cycle, Released, release_dropped
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.records import ReplicaPlacement
from swarmgpu.manager.placement.replicas import placement_order, replicas_of
from swarmgpu.manager.placement.specs import demand_of
from swarmgpu.manager.services.requests import GpuRequest
from swarmgpu.swarm.client import SwarmService
from swarmgpu.swarm.swarmnode import node_names

GLOBAL_MODES = frozenset(("global", "global-job"))
RUN_WAIT_S = 60.0  # the longest a global job's run waits for a stopping task's node
RUN_WAIT_CAP_S = 180.0  # the longest one run waits in all, from when it first waited


@dataclass(frozen=True, slots=True)
class GlobalPlacement:
    """A global service's holdings: kept and new, one per node, sorted; the nodes it
    no longer holds on; and the nodes that wait, by name (``swarmnode.node_names``), with
    why. ``kind``: the nodes it goes to, in words ("GPU node"; "node" for a request of
    no GPU, which CPU-only nodes take too)."""

    placements: tuple[ReplicaPlacement, ...]
    released: Released
    nodes_waiting: Mapping[str, str]
    new: bool
    kind: str = "GPU node"
    # a global job's nodes (by name) its run waits for: seconds left of their stopping
    # tasks' hold (the module's docstring)
    run_waits: Mapping[str, float] = field(default_factory=dict)
    # a node its run would have waited for, left out: the run waited ``RUN_WAIT_CAP_S``
    run_capped: bool = False

    def outcome(self, done_nodes: AbstractSet[str]) -> tuple[str | None, str | None]:
        """(why it is pending, or None; a warning about the nodes that wait, or None)."""
        waits, kind = self.nodes_waiting, self.kind
        if waits:
            text = grouped(waits)
            if self.placements:
                return None, f"{len(waits)} {kind}(s) wait, gate closed: {text}"
            return f"no {kind} has room: {text}", None
        if not self.placements and not done_nodes:
            return f"no {kind} Swarm would run it on", None
        return None, None


def grouped(waits: Mapping[str, str], named: int = 3) -> str:
    """The waits, the nodes sharing a why named together (the first ``named`` of them,
    the rest counted), the why once: a long hint (placement.memsize) came once a node."""
    by_why: dict[str, list[str]] = {}
    for host, why in sorted(waits.items()):
        by_why.setdefault(why, []).append(host)
    parts = []
    for why, hosts in by_why.items():
        more = f" and {len(hosts) - named} more" if len(hosts) > named else ""
        parts.append(f"{', '.join(hosts[:named])}{more}: {why}")
    return "; ".join(parts)


def _place_on(cyc: Cycle, demand: Demand, nid: str) -> Choice | Unplaceable:
    """``demand`` on node ``nid`` alone: a CPU-only node judged on its own allocator (its
    reason then names it, not the GPU nodes), a GPU node on the GPU nodes'."""
    cluster = cyc.cluster

    def only(ns: NodeState) -> bool:
        return ns.spec.name == nid

    try:
        if nid in cluster.cpu.nodes:
            return place_no_gpu(cluster.cpu, demand, only, frozenset(), None, cluster.explain)
        return cluster.place(demand, allowed=only)
    except MigProfileError as exc:
        return Unplaceable(str(exc))


def _stopping_held(cyc: Cycle, sid: str, nid: str, why: str,
                   run_waits: dict[str, float], capped: set[str]) -> str:
    """Global job ``sid``'s node ``nid`` where tasks Swarm is stopping hold GPUs and the
    job had no room (``why``): one whose hold ends within ``RUN_WAIT_S`` is waited for
    (put in ``run_waits``, seconds left) while the run has waited less than
    ``RUN_WAIT_CAP_S`` (else put in ``capped``); one held longer, or past its end, is
    said so."""
    left = cyc.stopping_until[nid] - cyc.now
    if 0 < left <= RUN_WAIT_S:
        if cyc.now - cyc.run_waited.get(sid, cyc.now) < RUN_WAIT_CAP_S:
            run_waits[nid] = left
            return why
        capped.add(nid)
        return (f"{why}; GPUs held for tasks Swarm is stopping there, and its run has "
                f"waited for such nodes the most it waits ({RUN_WAIT_CAP_S:g} s)")
    return (f"{why}; GPUs held for tasks Swarm is stopping there longer than a run waits "
            f"for them ({RUN_WAIT_S:g} s)")


def place_global(
    s: SwarmService,
    r: GpuRequest,
    kept: Mapping[str, Holding],
    old: Mapping[str, Holding],
    res: tuple[int, int],
    cyc: Cycle,
    done_nodes: AbstractSet[str] = frozenset(),
    most: tuple[int, str] | None = None,
) -> GlobalPlacement:
    """Keep the holdings on nodes Swarm still runs it on, place one on every other GPU
    node with room (and CPU-only node, for a request of no GPU), and say which nodes
    wait and why. ``done_nodes``: a global job's
    nodes whose task completed (they hold nothing). ``most``: its queue's max, as the
    most nodes it may hold on and why the others wait (``placement.queues``); a holding
    the ledger has is kept whatever it says, one adopted from the service's own device
    labels only within it."""
    cluster, by_id = cyc.cluster, cyc.by_id
    no = cyc.swarm_no(s)
    holdings = {
        nid: h
        for nid, h in kept.items()
        if nid in by_id and nid not in no and nid not in done_nodes
    }
    waits: dict[str, str] = {}  # node id -> why: two nodes may share a hostname
    if most is not None and len(holdings) > most[0]:
        for nid in sorted(nid for nid in holdings if nid not in old)[: len(holdings) - most[0]]:
            del holdings[nid]  # adopted, beyond the max: not held, free for the others
            cluster.release_holding(s.name, nid)
            waits[nid] = most[1]
    # a node gone, no longer matching, or its job task done
    released = release_dropped(cyc, old, holdings)
    placements = [
        p for nid, h in holdings.items() for p in replicas_of(h, by_id[nid], cyc.facts.get(nid))
    ]
    demand = demand_of(r, *res)
    new = False
    run_waits: dict[str, float] = {}  # node id -> the seconds left of its stopping hold
    capped: set[str] = set()  # nodes it would wait for, had its run not waited its most
    room = None if most is None else most[0] - len(holdings)
    cpu_too = no_gpu(demand)
    walk = [*cluster.alloc.nodes, *cluster.cpu.nodes] if cpu_too else cluster.alloc.nodes
    for nid in sorted(walk, key=lambda n: by_id[n].hostname if n in by_id else n):
        if nid in holdings or nid in done_nodes or nid not in by_id or nid in no:
            # held, done, or a node Swarm would never run it on (constraints); one where
            # another service's task binds its host-mode port, or one that lacks a
            # plugin it needs, is said
            if nid in no and (port := cyc.ports.refused(s).get(nid)):
                waits[nid] = port
            elif nid in no and nid in by_id and (lacks := cyc.plugins_why(s, by_id[nid])):
                waits[nid] = lacks
            continue
        if nid in waits:
            continue
        state = cluster.node_state(nid)
        if state is None or state.blocked:
            # (an unread node is blocked too: its answer's part named, with the fix)
            waits[nid] = by_id[nid].unread or "node is down, paused or drained"
            continue
        if room is not None and room <= 0 and most is not None:
            waits[nid] = most[1]  # its queue's max: no more nodes
            continue
        choice = _place_on(cyc, demand, nid)
        if isinstance(choice, Unplaceable):
            waits[nid] = cluster.hostnames(choice.reason)
            if s.mode == "global-job" and nid in cyc.stopping_until:
                waits[nid] = _stopping_held(cyc, s.id, nid, waits[nid], run_waits, capped)
            continue
        cluster.commit(choice, s.name)
        placements.append(cluster.to_replica(choice))
        new = True
        if room is not None:
            room -= 1
    names = node_names(by_id.values()) if waits else {}
    return GlobalPlacement(tuple(sorted(placements, key=placement_order)), released,
                           {names[nid]: why for nid, why in waits.items()}, new,
                           "node" if cpu_too else "GPU node",
                           {names[nid]: left for nid, left in run_waits.items()},
                           bool(capped))
