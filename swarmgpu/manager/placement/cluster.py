"""The production allocator over live nodes, kept across cycles (``ClusterAllocator``)."""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

from loguru import logger

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.mig import MigChoice, pick_mig_device
from swarmgpu.allocator.scorer import Scorer, SwarmScorer
from swarmgpu.allocator.values import Choice, Demand, NodeSpec, NodeState, Unplaceable
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement.cpunodes import (
    CpuFit,
    no_gpu,
    place_no_gpu,
    sync_cpu_node,
    with_cpu_reason,
)
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.reasons import Reasons
from swarmgpu.manager.placement.records import ReplicaPlacement
from swarmgpu.manager.placement.specs import node_spec, schedulable, unread, user_labels
from swarmgpu.manager.placement.tasks import meant_to_run
from swarmgpu.manager.services.requests import matches_products
from swarmgpu.swarm.client import SwarmNode, SwarmTask


@dataclass
class _Held:
    """A holding as committed: its label value and reservation, and what it took."""

    key: tuple[str, int, int]
    choice: Choice | None
    migs: tuple[str, ...]


class ClusterAllocator:
    """The production allocator over live nodes, kept across cycles.

    ``sync_nodes`` rebuilds only nodes whose facts, resources, labels or state changed;
    holdings are committed once and released when they go (``begin_holdings``); what
    other tasks reserve on a node is its usage. Nodes without GPUs that Swarm alone
    describes (``placement.cpunodes``; one advertising ``generic_kind``, or running a task
    of the agents' service, ``agents``, has GPUs) are on
    a second allocator, ``cpu``, which only demands of no GPU are placed on. A cycle over
    an unchanged cluster therefore costs a pass over the nodes and holdings, not a
    rebuild, and identical nodes in the same state are scored once (``Allocator`` groups)."""

    def __init__(
        self,
        nodes: Sequence[SwarmNode] = (),
        facts: Mapping[str, NodeFacts] | None = None,
        ledger: Mapping[str, Mapping[str, Holding]] | None = None,
        *,
        scorer: Scorer | None = None,
        prefix: str = "swarmgpu.",
        tasks: Sequence[SwarmTask] = (),
        generic_kind: str = "", agents: AbstractSet[str] = frozenset(),
    ) -> None:
        self.prefix, self.generic_kind = prefix, generic_kind
        self.alloc = Allocator(scorer or SwarmScorer(), mig_picker=_mig_picker(self))
        self.cpu = Allocator(CpuFit())  # the CPU-only nodes (placement.cpunodes)
        self._cpu_keys: dict[str, tuple[object, ...]] = {}
        self.nodes: dict[str, SwarmNode] = {}
        self.facts: dict[str, NodeFacts] = {}
        self.assigned_mig: dict[str, set[str]] = {}
        self.problems: list[str] = []
        # bumped when a node's spec is rebuilt, and when it leaves for want of GPU facts
        self.node_gen: dict[str, int] = {}
        # Nodes whose agent's last facts are too old to place on (``agentbook.stale_nodes``,
        # set by the daemon each cycle): blocked as a paused node is, holdings kept.
        self.stale: frozenset[str] = frozenset()
        self._stale_was: frozenset[str] = frozenset()
        self.tasks_on: set[tuple[str, str]] = set()  # (service id, node id) with a task
        self.timings: list[float] | None = None  # per placement decision, when measured
        # Name the closest node when nothing fits (a scan of every node state); a
        # replay that reads no reasons turns it off, as the baselines' replay does.
        self.explain = True
        self.reasons = Reasons()  # why nothing fits, in words people read
        # (node, MIG profile, gpu-product globs) with no free device, till a release there
        self._mig_none: set[tuple[str, str, tuple[str, ...]]] = set()
        self._mig_gen = 0  # MIG devices freed: no GPU share grows, yet capacity does
        self._by_rank: list[NodeState] = []  # for MIG requests, rebuilt with the nodes
        self._gen = 0
        self._order: list[str] = []
        self._node_keys: dict[str, tuple[object, ...]] = {}
        self._node_version: dict[str, int] = {}  # spec version each node's key was read at
        self._held: dict[tuple[str, str], _Held] = {}
        # nodes where a commit counted GPUs it has not recorded yet: a fault between the
        # two leaves them here, and the service's isolation has them rebuilt (isolate)
        self.unrecorded: set[str] = set()
        self._uuid_indexes: dict[str, tuple[NodeFacts, dict[str, tuple[int, bool]]]] = {}
        # node id -> (the node, its facts) as last synced while on the allocator
        self._seen: dict[str, tuple[SwarmNode, NodeFacts | None]] = {}
        self._demands: dict[Demand, tuple[Demand, str]] = {}  # each with its description
        # Demands no node could take, with the capacity generation they were asked at.
        self.unplaceable: dict[object, tuple[int, Unplaceable]] = {}
        if nodes or ledger:
            self.sync_nodes(nodes, facts or {}, agents)
            self.set_usage(tasks)
            self.begin_holdings(ledger or {})
            for svc, per_node in (ledger or {}).items():
                for node_id, h in per_node.items():
                    self.commit_holding(svc, node_id, h)

    @property
    def version(self) -> int:
        return self.alloc.capacity_gen + self.cpu.capacity_gen + self._mig_gen  # any growing

    def allocator_of(self, node_id: str) -> Allocator | None:
        """The allocator a node is on: GPU nodes', CPU-only nodes', or none."""
        if node_id in self.alloc.nodes:
            return self.alloc
        return self.cpu if node_id in self.cpu.nodes else None

    def node_state(self, node_id: str) -> NodeState | None:
        """A node's state on whichever allocator it is on."""
        return None if (a := self.allocator_of(node_id)) is None else a.nodes[node_id]

    # --- nodes -------------------------------------------------------------------
    def sync_nodes(self, nodes: Sequence[SwarmNode], facts: Mapping[str, NodeFacts],
                   agents: AbstractSet[str] = frozenset()) -> None:
        """Bring the allocator's nodes in line with Swarm's view and the agents' (``agents``:
        the nodes Swarm runs the agents' service on, ``cpunodes.agent_nodes``)."""
        order = sorted(nodes, key=lambda n: (n.hostname, n.id))
        ids = [n.id for n in order]
        if ids != self._order:  # ranks follow hostnames: a new set means a new order
            self.alloc = Allocator(self.alloc.scorer, mig_picker=_mig_picker(self))
            self.cpu = Allocator(self.cpu.scorer)
            self._cpu_keys.clear()
            self._node_keys.clear()
            self._held.clear()
            self.assigned_mig.clear()
            self.unplaceable.clear()
            self._order = ids
        self.nodes = {n.id: n for n in nodes}
        self.facts = dict(facts)
        self.reasons.rename(tuple((n.id, n.hostname) for n in order))
        self._by_rank = []
        dropped: set[str] = set()
        seen = self._seen
        for rank, n in enumerate(order):
            f = facts.get(n.id)
            present = n.id in self.alloc.nodes
            last = seen.get(n.id)
            if present and last is not None and last[0] is n and last[1] is f:
                continue  # the very objects of the last sync (frozen): nothing to do
            if f is None or not f.gpus:
                if present:
                    self._drop_node(n.id, dropped)
                    # A plan reads a node's GPUs by its generation (a settled key, the
                    # quiet services): without facts it has none, a change as a rebuild is.
                    self._gen += 1
                    self.node_gen[n.id] = self._gen
                self._sync_cpu_node(n, f, rank, dropped, agents)
                continue
            if n.id in self.cpu.nodes:  # its agent answered: a GPU node now
                self._sync_cpu_node(n, f, rank, dropped, agents)
            old = self._node_keys.get(n.id)
            if (
                old is None
                or self._node_version.get(n.id) != n.version
                or old[:3] != (n.hostname, n.cpu_milli, n.memory_mib)
                or (old[-1] is not f and old[-1] != f)
            ):
                # Labels change only with the spec version (as the ledger's cache reads
                # them): the same version, resources and facts skip the label walk.
                key = (n.hostname, n.cpu_milli, n.memory_mib,
                       tuple(sorted(user_labels(n.labels, self.prefix).items())), f)
                if old is None or old[:-1] != key[:-1] or (old[-1] is not f and old[-1] != f):
                    if present:
                        self._drop_node(n.id, dropped)
                    self.alloc.add_node(node_spec(n, f, self.prefix), rank=rank)
                    self._node_keys[n.id] = key
                    self._gen += 1
                    self.node_gen[n.id] = self._gen
                self._node_version[n.id] = n.version
            self.alloc.set_blocked(n.id, not schedulable(n) or n.id in self.stale)
            seen[n.id] = (n, f)
        self._block_stale()
        if len(seen) > 2 * len(order) + 100:  # nodes that left
            self._seen = {k: v for k, v in seen.items() if k in self.nodes}
        if dropped:  # once for all the nodes dropped (each alone was a pass per node)
            self._mig_none = {k for k in self._mig_none if k[0] not in dropped}
            for k in [k for k in self._held if k[1] in dropped]:
                del self._held[k]

    def _block_stale(self) -> None:
        """Block the nodes newly stale, unblock those no longer (a node the loop above
        skipped, unchanged, keeps its last state otherwise), each said as it turns."""
        for nid in sorted(self.stale ^ self._stale_was):
            n = self.nodes.get(nid)
            if n is None or nid not in self.alloc.nodes:
                continue
            self.alloc.set_blocked(nid, not schedulable(n) or nid in self.stale)
            logger.bind(node=n.hostname).warning(
                "node {}: {}", n.hostname,
                "its agent's last facts are health.node_lost_grace_s old: nothing new is "
                "placed on it (what it holds is kept, its labels as they are) until its "
                "agent answers with fresh ones" if nid in self.stale else
                "its agent answers with fresh facts: placement may add to it")
        self._stale_was = self.stale & self.nodes.keys()

    def _sync_cpu_node(self, n: SwarmNode, f: NodeFacts | None, rank: int,
                       dropped: set[str], agents: AbstractSet[str]) -> None:
        """``cpunodes.sync_cpu_node``, each change a new generation of the node."""
        got = sync_cpu_node(self.cpu, self._cpu_keys, n, f, rank, self.prefix,
                            self.generic_kind, agents)
        if got:
            self._gen += 1
            self.node_gen[n.id] = self._gen
        if got in ("dropped", "rebuilt"):
            dropped.add(n.id)

    def rebuild_node(self, node_id: str) -> None:
        """Build ``node_id`` anew at the next ``sync_nodes``, its holdings committed again
        (``keep_holdings``): for usage this allocator lost count of (a release that raised)."""
        self._node_keys.pop(node_id, None)
        self._cpu_keys.pop(node_id, None)  # a CPU-only node's too (cpunodes.sync_cpu_node)
        self._seen.pop(node_id, None)

    def _drop_node(self, node_id: str, dropped: set[str]) -> None:
        """Forget a node; its holdings and MIG answers go once ``dropped`` is complete."""
        self.alloc.remove_node(node_id)
        self._node_keys.pop(node_id, None)
        self.assigned_mig.pop(node_id, None)
        dropped.add(node_id)

    def set_usage(self, tasks: Sequence[SwarmTask]) -> None:
        """CPU and memory tasks reserve per node (Swarm counts every task desired running or
        ready, GPU or not, and a job's live one: ``tasks.meant_to_run``, as placement's
        ``tasks_by_service``); a holding's counts until its task exists
        (``holding_reservation``)."""
        use: dict[str, list[int]] = {}
        on_nodes: dict[str, set[str]] = {}
        for t in tasks:
            if not meant_to_run(t) or not t.node_id:
                continue
            on_nodes.setdefault(t.service_id, set()).add(t.node_id)
            if t.cpu_milli or t.memory_mib:
                u = use.setdefault(t.node_id, [0, 0])
                u[0] += t.cpu_milli
                u[1] += t.memory_mib
        self.set_usage_of(use, on_nodes)

    def set_usage_of(self, use: Mapping[str, Sequence[int]],
                     on_nodes: Mapping[str, AbstractSet[str]],
                     tasks_on: AbstractSet[tuple[str, str]] | None = None) -> None:
        """``set_usage`` from its sums: node id -> (CPU milli, memory MiB) reserved, and
        service id -> the nodes its tasks are on (``tasks_by_service`` makes both in its
        one pass over the tasks); ``tasks_on``: those as (service id, node id) pairs,
        when the caller keeps them (``TaskBook``)."""
        self.tasks_on = (set(tasks_on) if tasks_on is not None
                         else {(sid, nid) for sid, where in on_nodes.items() for nid in where})
        for alloc in (self.alloc, self.cpu):
            for nid in alloc.nodes:
                cpu, mem = use.get(nid, (0, 0))
                alloc.set_usage(nid, cpu, mem)

    def add_usage(self, node_id: str, cpu_milli: int, memory_mib: int) -> None:
        """More (or less) reserved on a node by a task placed between cycles."""
        alloc = self.cpu if node_id in self.cpu.nodes else self.alloc
        cpu, mem = alloc.usage(node_id)
        alloc.set_usage(node_id, cpu + cpu_milli, mem + memory_mib)

    def held_items(self) -> list[tuple[tuple[str, str], _Held]]:
        return list(self._held.items())

    def held_at(self, svc: str, node_id: str) -> _Held | None:
        return self._held.get((svc, node_id))

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

    def holding_reservation(
        self, service_id: str, node_id: str, res: tuple[int, int], replicas: int = 1
    ) -> tuple[int, int]:
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
    def begin_holdings(
        self,
        wanted: Mapping[str, Mapping[str, Holding]],
        res: Mapping[tuple[str, str], tuple[int, int]] | None = None,
        keep: AbstractSet[str] = frozenset(),
    ) -> None:
        """Release every committed holding that is not wanted (as it is) any more; call
        before ``commit_holding`` so a GPU that changed hands is free for its new owner.
        ``keep``: services whose committed holdings stay as they are, unasked."""
        res = res or {}
        for key, held in list(self._held.items()):
            svc, nid = key
            if svc in keep:
                continue
            h = wanted.get(svc, {}).get(nid)
            cpu, mem = res.get(key, (0, 0))
            if h is None or held.key != (h.label_value(), cpu, mem):
                self._release(key, held)

    def keep_holdings(
        self,
        wanted: Mapping[str, Mapping[str, Holding]],
        order: Sequence[tuple[str, str, Holding]],
        reservation: Callable[[str], tuple[int, int]],
        keep: AbstractSet[str] = frozenset(),
        kept_count: int = 0,
    ) -> dict[str, dict[str, Holding]]:
        """``begin_holdings`` then ``commit_holding`` for each of ``order`` ((service id,
        name, holding), in commit order; ``reservation``: a service's per replica), with
        the same releases and commits in the same order, in one pass over what is
        already committed as it is (most of them, cycle after cycle). Returns service
        name -> node id -> holding committed. ``keep``: services not in ``order`` whose
        committed holdings stay as they are (a change-driven cycle's quiet ones: every
        one of their holdings would be committed as it is, so keeping them first is the
        order a full pass commits in); ``kept_count``: how many holdings they have committed.
        """
        with self.alloc.observed_once():
            return self._keep_holdings(wanted, order, reservation, keep, kept_count)

    def _keep_holdings(
        self,
        wanted: Mapping[str, Mapping[str, Holding]],
        order: Sequence[tuple[str, str, Holding]],
        reservation: Callable[[str], tuple[int, int]],
        keep: AbstractSet[str],
        kept_count: int,
    ) -> dict[str, dict[str, Holding]]:
        tasks_on, held_map, nodes = self.tasks_on, self._held, self.alloc.nodes
        cpu_nodes = self.cpu.nodes
        res: dict[tuple[str, str], tuple[int, int]] = {}
        same: set[tuple[str, str]] = set()  # committed as it is wanted
        as_is: list[bool] = []  # per entry of ``order``
        for sid, name, h in order:
            nid = h.node_id
            key = (name, nid)
            if (sid, nid) in tasks_on:
                cpu = mem = 0
            else:
                cpu, mem = reservation(sid)
                n = h.replicas
                cpu, mem = cpu * n, mem * n
            res[key] = (cpu, mem)
            held = held_map.get(key)
            if (
                held is not None
                and (nid in nodes or nid in cpu_nodes)  # either allocator: committed as is
                and held.key[1] == cpu
                and held.key[2] == mem
                and held.key[0] == h.label_value()
            ):
                same.add(key)
                as_is.append(True)
            else:
                as_is.append(False)
        if len(res) != len(order):  # a node listed twice for a service: the plain way
            self.begin_holdings(wanted, res, keep)
            return self._commit_each(order, res)
        if len(same) + kept_count != len(held_map):  # some committed one is not wanted
            for key, held in [
                (k, h) for k, h in held_map.items() if k not in same and k[0] not in keep
            ]:
                self._release(key, held)
        kept: dict[str, dict[str, Holding]] = {}
        for (_sid, name, h), ok in zip(order, as_is, strict=True):
            nid = h.node_id
            if ok or self.commit_holding(name, nid, h, res[(name, nid)]):
                got = kept.get(name)
                if got is None:
                    got = kept[name] = {}
                got[nid] = h
        return kept

    def _commit_each(
        self,
        order: Sequence[tuple[str, str, Holding]],
        res: Mapping[tuple[str, str], tuple[int, int]],
    ) -> dict[str, dict[str, Holding]]:
        kept: dict[str, dict[str, Holding]] = {}
        for _sid, name, h in order:
            if self.commit_holding(name, h.node_id, h, res[(name, h.node_id)]):
                kept.setdefault(name, {})[h.node_id] = h
        return kept

    def _release(self, key: tuple[str, str], held: _Held) -> None:
        del self._held[key]
        alloc = self.allocator_of(key[1])
        if held.choice is not None and alloc is not None:
            alloc.release(held.choice)
        self.free_migs(key[1], held.migs)

    def hold_migs(self, node_id: str, uuids: Sequence[str]) -> tuple[str, ...]:
        """Count those of ``uuids`` that are MIG devices of ``node_id`` and free used, as a
        holding's are (``assigned_mig``); the ones counted, for ``free_migs``."""
        index, taken = self._uuid_index(node_id), self.assigned_mig.setdefault(node_id, set())
        got = tuple(u for u in uuids if u in index and index[u][1] and u not in taken)
        taken.update(got)
        return got

    def free_migs(self, node_id: str, uuids: Sequence[str]) -> None:
        """MIG devices of ``node_id`` free again: the answers that found none there, and
        every pending request's memo'd one (``unplaceable``), read anew."""
        if not uuids:
            return
        for u in uuids:
            self.assigned_mig.get(node_id, set()).discard(u)
        self._mig_none = {k for k in self._mig_none if k[0] != node_id}
        self._mig_gen += 1

    def commit_holding(
        self, svc: str, node_id: str, h: Holding, res: tuple[int, int] = (0, 0)
    ) -> bool:
        """Count a holding as used; False when it is not valid on this node (any more)."""
        key = (svc, node_id)
        if node_id in self.cpu.nodes and not h.uuids:
            return self._commit_cpu_holding(key, h, res)
        if node_id not in self.alloc.nodes:
            if node_id not in self.nodes or (h.uuids and not unread(self.facts.get(node_id))):
                return False
            # Its GPUs cannot be read (agent unreachable, no facts to stand in, or its
            # source failed), or it holds none (its agent says no GPU): nothing says it is
            # gone, and dropping it would close the gate under its task. Kept, counted
            # nowhere (the node is on no allocator), under a key no commit wants, so once
            # the node is back on one it is committed there again.
            self.release_holding(svc, node_id)
            self._held[key] = _Held((h.label_value(), -1, -1), None, ())
            return True
        want = (h.label_value(), res[0], res[1])
        if self._kept_as(key, want):
            return True
        index = self._uuid_index(node_id)
        gpus: list[int] = []
        milli: list[int] = []
        migs: list[str] = []
        for u, m in zip(h.uuids, h.milli, strict=True):
            if u not in index:
                self.problems.append(
                    f"{svc}: holds {u} on {self.nodes[node_id].hostname}, "
                    "which that node's facts no longer list"
                )
                return False
            i, is_mig = index[u]
            if not self.facts[node_id].gpus[i].healthy:
                # No longer held: a failed GPU has no room (counted 0 free), a slice
                # fails with it (an XID names the GPU). Said so here: a commit would be
                # refused as "stale or released twice", a fault of the planner's count.
                what = f"MIG device {u} of failed GPU {i}" if is_mig else f"failed GPU {i} ({u})"
                self.problems.append(
                    f"{svc}: holds {what} on {self.nodes[node_id].hostname}; re-placed")
                return False
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
            choice = Choice(
                node=node_id,
                gpus=tuple(gpus),
                milli=tuple(milli),
                score=0.0,
                explanation=f"held by {svc}",
                cpu_milli=res[0],
                memory_mib=res[1],
            )
            self.unrecorded.add(node_id)  # (as in ``commit``)
            try:
                self.alloc.commit(choice)
            except ValueError as exc:  # (refused before anything is counted)
                self.unrecorded.discard(node_id)
                self.problems.append(f"{svc}: {exc}")
                return False
        self.assigned_mig.setdefault(node_id, set()).update(migs)
        self._held[key] = _Held(want, choice, tuple(migs))
        self.unrecorded.discard(node_id)
        return True

    def _commit_cpu_holding(self, key: tuple[str, str], h: Holding,
                            res: tuple[int, int]) -> bool:
        """A holding of no GPU on a CPU-only node: its reservation counted there."""
        want = (h.label_value(), res[0], res[1])
        if self._kept_as(key, want):
            return True
        choice: Choice | None = None
        if res != (0, 0):
            choice = Choice(node=key[1], gpus=(), milli=(), score=0.0,
                            explanation=f"held by {key[0]}", cpu_milli=res[0],
                            memory_mib=res[1])
            self.unrecorded.add(key[1])  # (as in ``commit``)
            self.cpu.commit(choice)
        self._held[key] = _Held(want, choice, ())
        self.unrecorded.discard(key[1])
        return True

    def _kept_as(self, key: tuple[str, str], want: tuple[str, int, int]) -> bool:
        """Whether ``key`` is committed as ``want``; if not, what it holds is released."""
        held = self._held.get(key)
        if held is not None and held.key != want:
            self._release(key, held)
        return held is not None and held.key == want

    def _uuid_index(self, node_id: str) -> Mapping[str, tuple[int, bool]]:
        """uuid -> (GPU index, a MIG device), per node, kept while its facts are the
        same object (every holding committed on the node reads it)."""
        f = self.facts.get(node_id)
        if f is None:
            return {}
        got = self._uuid_indexes.get(node_id)
        if got is not None and got[0] is f:
            return got[1]
        out: dict[str, tuple[int, bool]] = {}
        for i, g in enumerate(f.gpus):
            out[g.uuid] = (i, False)
            for m in g.mig_devices:
                out[m.uuid] = (i, True)
        if len(self._uuid_indexes) > 2 * len(self.facts) + 100:
            self._uuid_indexes.clear()
        self._uuid_indexes[node_id] = (f, out)
        return out

    def _pick_mig(self, spec: NodeSpec, _free: tuple[int, ...], d: Demand) -> object | None:
        f = self.facts.get(spec.name)
        if f is None or d.mig_profile is None:
            return None
        # gpu-product holds for a slice as for a whole GPU: of the parents it names only
        gpus = [g for g in f.gpus if matches_products(g.product, d.products)]
        got = pick_mig_device(gpus, d.mig_profile, self.assigned_mig.get(spec.name, set()))
        return got if isinstance(got, MigChoice) else None

    # --- decisions -------------------------------------------------------------------
    def place(
        self,
        d: Demand,
        allowed: Callable[[NodeState], bool] | None = None,
        *,
        exclude: AbstractSet[str] = frozenset(),
        where: Callable[[NodeState], bool] | None = None,
    ) -> Choice | Unplaceable:
        """Best node for ``d``: the core's scorer over one node per group of nodes in the
        same state. ``exclude`` names nodes that may not take it, ``where`` filters on
        what a group shares (labels); ``allowed`` (any per-node test) scans every node.
        A demand of no GPU goes to a CPU-only node with room first: no GPU is left there
        without the CPU to use it."""
        cpu = place_no_gpu(self.cpu, d, allowed, exclude, where, self.explain) \
            if self.cpu.nodes and no_gpu(d) else None
        if isinstance(cpu, Choice):
            return cpu
        if self.timings is None:
            return with_cpu_reason(self._place(d, allowed, exclude, where), cpu)
        t0 = time.perf_counter()
        try:
            return with_cpu_reason(self._place(d, allowed, exclude, where), cpu)
        finally:
            self.timings.append(time.perf_counter() - t0)

    def _place(
        self,
        d: Demand,
        allowed: Callable[[NodeState], bool] | None,
        exclude: AbstractSet[str],
        where: Callable[[NodeState], bool] | None,
    ) -> Choice | Unplaceable:
        a = self.alloc
        if d.mig_profile:
            if len(self._by_rank) != len(a.nodes):
                self._by_rank = sorted(a.nodes.values(), key=lambda n: n.rank)
            for node in self._by_rank:
                if (
                    node.blocked
                    or node.spec.name in exclude
                    or (where is not None and not where(node))
                    or (allowed is not None and not allowed(node))
                    or (node.spec.name, d.mig_profile, d.products) in self._mig_none
                    or not a.fits(node, Demand(cpu_milli=d.cpu_milli, memory_mib=d.memory_mib))
                ):
                    continue
                got = self._pick_mig(node.spec, tuple(node.free), d)
                if got is None:
                    self._mig_none.add((node.spec.name, d.mig_profile, d.products))
                else:
                    return Choice(
                        node=node.spec.name,
                        gpus=(),
                        milli=(),
                        score=0.0,
                        explanation=f"{d.describe()} on {node.spec.name}",
                        mig=got,
                        cpu_milli=d.cpu_milli,
                        memory_mib=d.memory_mib,
                    )
            why = self.reasons.not_offered(d, self.facts, self._stamp()) \
                or "no allowed node has one free"
            return Unplaceable(f"needs {d.describe()}; {why}")
        if allowed is not None:
            exclude = frozenset(exclude) | {n for n, ns in a.nodes.items() if not allowed(ns)}
        # One object per demand: the allocator's memos then find it by identity.
        known = self._demands.get(d)
        if known is None:
            if len(self._demands) > 10_000:
                self._demands.clear()
            known = self._demands[d] = (d, d.describe())
        got = a.place(known[0], exclude=exclude, where=where, explain=self.explain, note=known[1])
        if isinstance(got, Unplaceable) and d.min_memory_mib and self.explain:
            # no GPU has the memory: that, not the node that came closest, is the reason
            short = self.reasons.short_of(d, self.facts, self._stamp(), self.prefix)
            if short is not None:
                return Unplaceable(f"needs {known[1]}; {short}")
        return got

    def _stamp(self) -> tuple[int, int]:
        """The nodes' generation: a reason read at another one is read again."""
        return (self._gen, len(self.alloc.nodes))

    def hostnames(self, text: str) -> str:
        """Node ids in the allocator's words, as the hostnames people know
        (``Reasons.hostnames``)."""
        return self.reasons.hostnames(text, self.nodes)

    def to_replica(self, choice: Choice) -> ReplicaPlacement:
        host = self.nodes[choice.node].hostname
        if choice.node in self.cpu.nodes:  # no GPU there, no facts to read
            return ReplicaPlacement(choice.node, host, (), (), (), None)
        f = self.facts[choice.node]
        if isinstance(choice.mig, MigChoice):
            return ReplicaPlacement(choice.node, host, (choice.mig.gpu_index,),
                                    (choice.mig.mig_uuid,), (1000,), choice.score)
        return ReplicaPlacement(choice.node, host, choice.gpus,
                                tuple(f.gpus[i].uuid for i in choice.gpus), choice.milli,
                                choice.score if math.isfinite(choice.score) else None)

    def commit(self, choice: Choice, service: str = "") -> None:
        held: _Held | None = None
        if service:  # recorded as the holding the ledger will show next cycle
            rp = self.to_replica(choice)  # (made before anything is counted: it may raise)
            h = Holding(service, choice.node, rp.uuids, rp.milli)
            migs = (choice.mig.mig_uuid,) if isinstance(choice.mig, MigChoice) else ()
            held = _Held((h.label_value(), choice.cpu_milli, choice.memory_mib),
                         choice if (choice.gpus or choice.cpu_milli or choice.memory_mib)
                         else None, migs)
        self.unrecorded.add(choice.node)  # (the scorer is shown the commit last: it may raise)
        if isinstance(choice.mig, MigChoice):
            self.assigned_mig.setdefault(choice.node, set()).add(choice.mig.mig_uuid)
        elif choice.node in self.cpu.nodes:
            if choice.cpu_milli or choice.memory_mib:
                self.cpu.commit(choice)
        elif choice.gpus or choice.cpu_milli or choice.memory_mib:
            self.alloc.commit(choice)
        if held is not None:
            self._held[(service, choice.node)] = held
        self.unrecorded.discard(choice.node)


def _mig_picker(
    cluster: ClusterAllocator,
) -> Callable[[NodeSpec, tuple[int, ...], Demand], object | None]:
    """``cluster._pick_mig`` through a weak reference: a bound method kept by its own
    allocator would make a reference cycle, and everything the cluster holds would then
    wait for a full collection to be freed (``Planner.__init__`` says why that matters)."""
    ref = weakref.ref(cluster)

    def pick(spec: NodeSpec, free: tuple[int, ...], d: Demand) -> object | None:
        c = ref()
        return None if c is None else c._pick_mig(spec, free, d)

    return pick
