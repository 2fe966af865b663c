"""GPU quotas per queue (``swarmgpu.queue``; the config's ``queues``), kept small after
KAI-Scheduler's queues: each queue has a ``guaranteed`` and a ``max`` in GPUs.

* ``max``: a request of a service that holds nothing yet and would take its queue above
  its max stays pending, all of it, with the quota as its reason. A service that
  already holds replicas and scales up gets only the replicas that fit under the max;
  the others stay pending, with the quota as the reason. ``QueueBook.limit`` says
  either as a ``QueueLimit``; ``placement.service`` composes it into the plan.
  Holdings already kept are never taken away by the max (a max lowered later is
  reported in ``status``, not enforced by stopping).
* ``guaranteed``: work of a queue above its guarantee may be preempted for work of a
  queue below its own (``placement.preempt``; see ``reclaimable``) while that queue's
  tenant's queues together stay within the sum of their guarantees
  (``within_guarantee``; KAI-Scheduler compares a queue with another parent's at
  their parents' level),
  from the queue furthest above its guarantee first (``over_guarantee``), never below
  it; nor does another queue's priority take it below (``guarded_queue``): by priority,
  as KAI-Scheduler, a queue's guarantee gives way only to its own work. Work of no
  queue, or of one not in the config, is guaranteed nothing (``reclaimable``), as
  KAI-Scheduler's default queue.

Use is counted in thousandths of a GPU, per holding (a share its fraction, a MIG device
its profile's compute slices over its GPU's, ``_PARTS``, that GPU's model read from its
node's facts, ``mig_parts``): the GPUs of the ledger entries
kept this cycle, plus what the cycle places, less what it releases (``QueueBook.count``: the
number the ledger holds once the cycle's writes land, which ``status`` and the
guarantee's reclaim read). A queue not in the config has no limit.

Only the ledger (node labels only swarmgpu writes) says what a service holds. A device
list in the service's own labels that the cycle adopts (``existing``) is the stack's
claim: adopting it is placing it, so it is counted and limited as a new placement (else
a stack naming free GPUs in ``<p>devices.<node>`` labels had them whatever its max).
The max holds for every mode: a replicated job's holdings are the tasks that may run
now; a global service's, one per GPU node, are bounded by the room left
(``QueueLimit.replicas``: the most nodes it holds on), the other nodes waiting.

With tenants, the queues of one tenant that each have a max also bound its new work
together, by the sum of their maxes (``Together``): a holder whose ``swarmgpu.queue``
its stack moves to another of its tenant's queues keeps its GPUs, counted there, and
the queue it left reads empty, so each such move would otherwise buy the tenant a new
placement past what the operator gave it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from swarmgpu.core.migprofile import canonical_profile, compute_share
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.peertext import peer_text
from swarmgpu.manager.placement.keys import assign_key
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.records import ServicePlan, Status
from swarmgpu.manager.services.requests import GpuRequest, RequestError
from swarmgpu.swarm.client import SwarmService

Quotas = Mapping[str, tuple[int, int | None]]  # name -> (guaranteed, max or None), milli

# A queue's use is summed in parts of 1/28000 GPU: a thousandth is 28, a MIG slice of a
# 7-slice GPU 4000, of a 4-slice GPU (A30) 7000, all exact. It is read in thousandths
# rounded up once per queue: seven 1g slices of one GPU are 1000, never 7 x 143 = 1001
# (which a max of 1 GPU would refuse the seventh of) nor less than their share.
_PARTS = 28
_GPU = 1000 * _PARTS
# A max that bounds a queue's new work: (its words, the max in thousandths, the use
# it bounds in _PARTS): the queue's own, or its tenant's queues' together
_Bound = tuple[str, int, int]
# (``QueueBook.start``'s ``unknown``: a service whose queue cannot be told at all)
ALL_QUEUES = "*"


def replica_parts(r: GpuRequest, products: Iterable[str | None] = (None,)) -> int:
    """One replica's holding, in ``_PARTS``; a MIG slice's the largest of its shares on
    ``products``, the GPU models it may land on (None, or none: its profile's table)."""
    if r.mig_profile:
        return max((mig_parts(r.mig_profile, p) for p in products),
                   default=mig_parts(r.mig_profile, None))
    return _PARTS * (r.gpu_milli if r.is_fraction else 1000 * r.gpus)


def mig_parts(profile: str, product: str | None) -> int:
    """A device of ``profile`` on a GPU of ``product`` (None: unknown), in ``_PARTS``."""
    slices, total = compute_share(profile, product)
    return _GPU * slices // total


def parent_product(facts: NodeFacts | None, uuid: str) -> str | None:
    """The model of the GPU a MIG device is on, from its node's facts; None unknown."""
    for g in facts.gpus if facts is not None else ():
        if uuid.startswith(f"MIG-{g.uuid}/") or any(m.uuid == uuid for m in g.mig_devices):
            return g.product or None
    return None


def mig_products(facts: Iterable[NodeFacts]) -> dict[str, set[str | None]]:
    """Profile -> the models of the GPUs that have a device of it (where one is placed)."""
    raw: dict[str, set[str | None]] = {}
    for f in facts:
        for g in f.gpus:
            for m in g.mig_devices:
                raw.setdefault(m.profile, set()).add(g.product or None)
    out: dict[str, set[str | None]] = {}
    for k, v in raw.items():  # (two spellings of one profile: one entry)
        out.setdefault(canonical_profile(k), set()).update(v)
    return out


def replica_milli(r: GpuRequest) -> int:
    return _milli(replica_parts(r))


def _milli(parts: int) -> int:
    return -(-parts // _PARTS)


def held_parts(r: GpuRequest | RequestError | None, uuids: Sequence[str],
               milli: Sequence[int], facts: NodeFacts | None = None) -> int:
    """A holding (a ledger entry's or a placement's GPUs), in ``_PARTS``. The ledger holds
    a MIG device as 1000; one of a MIG request counts its profile's share of the GPU it
    is on (``facts``: its node's; without them, its profile's table), its GPU's share a
    request without a readable profile, a broken one, cannot say."""
    if not isinstance(r, GpuRequest) or not r.mig_profile:
        return _PARTS * sum(milli)
    profile = r.mig_profile
    return sum(mig_parts(profile, parent_product(facts, u)) if u.startswith("MIG-")
               else _PARTS * m for u, m in zip(uuids, milli, strict=True))


def holding_milli(r: GpuRequest | RequestError | None, h: Holding,
                  facts: Mapping[str, NodeFacts] | None = None) -> int:
    """What a holding of ``r`` counts in its queue, in thousandths (rounded up);
    ``facts``: the nodes', where its MIG devices' GPUs are read."""
    return _milli(held_parts(r, h.uuids, h.milli, (facts or {}).get(h.node_id)))


def _gpus(milli: int | None) -> float | None:
    return None if milli is None else milli / 1000


def _gpus_of(parts: int) -> float:
    return _milli(parts) / 1000


class Moving(frozenset[str]):
    """The services with a move in flight (``rebalance.record.moving``), a set of names
    as every reader takes it, with each move's (source, target) node ids: between its
    steps 2 and 3 the ledger holds both for the one replica moved, which its queue counts
    once (the daemon's move never takes a queue to its max or above its guarantee).
    ``unread``: name -> why of each service whose move record cannot be read, in the set
    too (its move may be under way), with no nodes (unknown: all its holdings count)."""

    nodes: Mapping[str, tuple[str, str]]
    unread: Mapping[str, str]

    def __new__(cls, nodes: Mapping[str, tuple[str, str]],
                unread: Mapping[str, str] | None = None) -> Moving:
        self = super().__new__(cls, [*nodes, *(unread or {})])
        self.nodes, self.unread = dict(nodes), dict(unread or {})
        return self

    def __reduce__(self) -> tuple[type[Moving], tuple[dict[str, tuple[str, str]],
                                                      dict[str, str]]]:
        # (a frozenset's would pass the names alone)
        return Moving, (dict(self.nodes), dict(self.unread))


@dataclass(frozen=True, slots=True)
class QueueLimit:
    """The queue step's answer for a service its queue's max holds back: at most
    ``replicas`` are placed (0: it holds nothing, and all of it waits), and why."""

    replicas: int
    reason: str
    wanted: int | None = None  # the holdings it asks for (None: a global service's)

    @property
    def whole(self) -> bool:
        """All of the service waits (it holds nothing yet)."""
        return self.replicas == 0


@dataclass(frozen=True, slots=True)
class Together:
    """One tenant's queues that each have a max: its new work stays within their sum."""

    tenant: str
    queues: tuple[str, ...]
    most: int  # thousandths of a GPU


def together(owned: Mapping[str, Sequence[str]], quotas: Quotas) -> dict[str, Together]:
    """queue -> its tenant's ``Together`` (``owned``: tenant -> its queues), for each
    tenant with two queues or more, every one with a max (one with none bounds nothing)."""
    out: dict[str, Together] = {}
    for tenant, queues in owned.items():
        tops = [quotas[q][1] if q in quotas else None for q in queues]
        if len(queues) > 1 and all(m is not None for m in tops):
            t = Together(tenant, tuple(queues), sum(m for m in tops if m is not None))
            out.update((q, t) for q in queues)
    return out


@dataclass
class QueueBook:
    """One cycle's use per queue, as the planner goes through the services."""

    quotas: Quotas
    used: dict[str, int] = field(default_factory=dict)  # queue -> _PARTS
    blocked: dict[str, list[str]] = field(default_factory=dict)  # queue -> services held
    facts: Mapping[str, NodeFacts] = field(default_factory=dict)  # node id -> the cycle's
    together: Mapping[str, Together] = field(default_factory=dict)  # queue -> its tenant's
    owner: Mapping[str, str] = field(default_factory=dict)  # queue -> its tenant (reclaim)
    unknown: dict[str, str] = field(default_factory=dict)  # queue -> why its use is unknown
    _mig: dict[str, set[str | None]] | None = None  # mig_products of ``facts``, when asked

    def start(self, parsed: Any, kept: Mapping[str, Mapping[str, Holding]],
              ledger: Mapping[str, Mapping[str, Holding]],
              broken: Mapping[str, str] | None = None,
              moving: AbstractSet[str] = frozenset(),
              facts: Mapping[str, NodeFacts] | None = None,
              failed: MutableMapping[str, Exception] | None = None,
              unknown: Mapping[str, str] | None = None) -> None:
        """Count the holdings kept this cycle that the ledger has (a device list adopted
        from a service's own labels is counted when its service is visited, as new);
        ``broken``: the queue of each invalid request (service name -> queue), whose
        holdings are kept and so count; ``moving``: a move's source is not counted
        while its target is held too (``Moving``); ``facts``: the nodes', where a MIG
        device's GPU is read. A service whose count raises is named in ``failed``
        (service id -> the fault; raised when None), and its queue's use is not known
        this cycle (``unknown``): no new work is admitted to it (``limit``), as counting
        its use without that service's would admit more than its max. ``unknown``: queue
        -> why, the queues already known not countable (``reads``: an invalid request's
        queue lookup that raised; ``ALL_QUEUES``: every configured queue)."""
        self.used, self.blocked = {}, {}
        self.unknown = {q: why for k, why in (unknown or {}).items()
                        for q in (self.quotas if k == ALL_QUEUES else (k,))}
        self.facts, self._mig = facts or {}, None
        moves = moving.nodes if isinstance(moving, Moving) else {}
        for s, r in parsed:
            q = r.queue if isinstance(r, GpuRequest) else (broken or {}).get(s.name, "")
            if not q:
                continue
            try:
                held = held_in_ledger(kept.get(s.name, {}), ledger.get(s.name, {}))
                source, target = moves.get(s.name, ("", ""))
                got = sum(held_parts(r, h.uuids, h.milli, self.facts.get(nid))
                          for nid, h in held.items()
                          if nid != source or target == source or target not in held)
            except Exception as exc:  # its fault is its own (placement.isolate)
                if failed is None:
                    raise
                failed.setdefault(s.id, exc)
                self.unknown.setdefault(q, (
                    f"counting the use of {s.name} raised ({type(exc).__name__}: "
                    f"{peer_text(str(exc), 200)})"))
                continue
            self.used[q] = self.used.get(q, 0) + got

    def limit(self, s: SwarmService, r: GpuRequest | RequestError,
              mine: Mapping[str, Holding], wanted: int | None) -> QueueLimit | None:
        """How its queue's max holds ``s`` back (``mine``: its holdings kept this cycle
        that the ledger has, ``held_in_ledger``; ``wanted``: the holdings it asks for now,
        None for a global service); None when it does not."""
        if not isinstance(r, GpuRequest) or not r.queue or r.cpu_only:
            return None  # (gpus: "0" counts no GPU quota, so no max holds it back)
        bound = self._bound(r.queue)
        if bound is None:
            return None
        if self.unknown:
            t = self.together.get(r.queue)
            for q in (r.queue, *(t.queues if t is not None else ())):
                if q in self.unknown:
                    return self._unknown(s, r, mine, wanted, q)
        if wanted is None:
            return self._nodes(s, r, mine, bound)
        return self._refuse(s, r, bound, wanted) if not mine else self._cap(
            s, r, mine, bound, wanted)

    def _unknown(self, s: SwarmService, r: GpuRequest, mine: Mapping[str, Holding],
                 wanted: int | None, queue: str) -> QueueLimit | None:
        """``s`` keeps what it holds and gets nothing new: ``queue`` (its own, or one of
        its tenant's) has a use this cycle could not count (``start``)."""
        held = len(mine) if wanted is None else sum(h.replicas for h in mine.values())
        if wanted is not None and held >= wanted:
            return None
        self.blocked.setdefault(r.queue, []).append(s.name)
        return QueueLimit(held, (
            f"queue {queue}'s use is not known this cycle, so no new work is admitted "
            f"to it: {self.unknown[queue]}; fix: this is a swarmgpu fault, report it with "
            "the daemon's log, which has the traceback"), wanted)

    def _bound(self, queue: str) -> _Bound | None:
        """The max that leaves ``queue``'s new work the least room: its own, or its
        tenant's queues' together (``Together``); the queue's on a tie."""
        out: list[_Bound] = []
        quota = self.quotas.get(queue)
        if quota is not None and quota[1] is not None:
            out.append((f"queue {queue} at its quota", quota[1], self.used.get(queue, 0)))
        t = self.together.get(queue)
        if t is not None:
            out.append((f"tenant {t.tenant} at its quota (its queues "
                        f"{', '.join(t.queues)} together)", t.most,
                        sum(self.used.get(q, 0) for q in t.queues)))
        return min(out, key=lambda b: b[1] * _PARTS - b[2], default=None)

    def _refuse(self, s: SwarmService, r: GpuRequest, bound: _Bound,
                wanted: int) -> QueueLimit | None:
        """All of ``s`` waits when placing it would take its queue above its max."""
        if not wanted:
            return None
        what, most, used = bound
        need = self._each(r) * wanted
        if used + need <= most * _PARTS:
            return None
        self.blocked.setdefault(r.queue, []).append(s.name)
        return QueueLimit(0, f"{what}: max {_gpus(most):g} GPUs, "
                             f"{_gpus_of(used):g} used, this service needs "
                             f"{_gpus_of(need):g}", wanted)

    def _cap(self, s: SwarmService, r: GpuRequest, mine: Mapping[str, Holding],
             bound: _Bound, wanted: int) -> QueueLimit | None:
        """The replicas it may hold when a replicated service (or job) that holds some
        asks for more than its queue's max leaves room for. Its kept replicas always
        count as allowed (the max never stops running work)."""
        if s.mode not in ("replicated", "replicated-job") or not wanted:
            return None
        held = sum(h.replicas for h in mine.values())
        if held >= wanted:
            return None
        each = self._each(r)
        what, most, used = bound  # this service's kept holdings included in used
        room = max(0, most * _PARTS - used)
        more = room // each if each else wanted
        if held + more >= wanted:
            return None
        self.blocked.setdefault(r.queue, []).append(s.name)
        return QueueLimit(held + more, (
            f"{what}: max {_gpus(most):g} GPUs, {_gpus_of(used):g} "
            f"used, {wanted - held - more} more replica(s) need "
            f"{_gpus_of((wanted - held - more) * each):g}"), wanted)

    def _nodes(self, s: SwarmService, r: GpuRequest, mine: Mapping[str, Holding],
               bound: _Bound) -> QueueLimit:
        """A global service: the most nodes it may hold on (its kept ones and as many
        new ones as the room left takes); all of it waits when it holds none and the
        room takes none. Which nodes Swarm runs it on is known only once placed, so the
        bound is given whether or not it binds."""
        each = self._each(r)
        what, most, used = bound  # this service's kept holdings included in used
        more = max(0, most * _PARTS - used) // each if each else 0
        reason = (f"{what}: max {_gpus(most):g} GPUs, "
                  f"{_gpus_of(used):g} used, each node's holding needs {_gpus_of(each):g}")
        if not mine and not more:
            self.blocked.setdefault(r.queue, []).append(s.name)
        return QueueLimit(len(mine) + more, reason)

    def count(self, r: GpuRequest | RequestError, mine: Mapping[str, Holding],
              sp: ServicePlan, prefix: str) -> None:
        """Count the service as the cycle leaves it: what it places (a packed holding per
        slot, as placements are) and what it keeps unplaced, less what ``start`` counted
        (``mine``); a holding the plan releases (its ledger entry removed:
        a scale-down, a node it is moved off) no longer counts."""
        if not isinstance(r, GpuRequest) or not r.queue or sp.status == Status.INVALID:
            return
        assign = assign_key(prefix, sp.name)
        placed = {p.node_id for p in sp.placements}
        f = self.facts
        after = sum(held_parts(r, p.uuids, p.milli, f.get(p.node_id))
                    for p in sp.placements) + sum(
            held_parts(r, h.uuids, h.milli, f.get(nid)) for nid, h in mine.items()
            if nid not in placed and assign not in sp.node_remove.get(nid, ()))
        before = sum(held_parts(r, h.uuids, h.milli, f.get(nid)) for nid, h in mine.items())
        if after != before:
            self.used[r.queue] = self.used.get(r.queue, 0) + after - before

    def _each(self, r: GpuRequest) -> int:
        """A replica not placed yet, in ``_PARTS``: a MIG slice its largest share on the
        GPUs with a device of its profile that its gpu-product lets it land on, wherever
        it lands the max holds (its profile's table where no facts have one). A GPU it
        may not use is left out: its larger share held the queue below its max."""
        if not r.mig_profile:
            return replica_parts(r)
        if self._mig is None:
            self._mig = mig_products(self.facts.values())
        products = self._mig.get(canonical_profile(r.mig_profile), set())
        return replica_parts(r, [p for p in products
                                 if p is None or r.matches_product(p)])

    def summary(self) -> list[dict[str, Any]]:
        """Each queue's use against its quota (``status``, the map's document), with its
        tenant (None: no tenants, or no tenant's), whose queues reclaim together;
        ``used_unknown``: why the use of a queue is not known this cycle (``start``), else
        None. Its ``used_gpus`` is then only what was counted: preemption's reclaim skips
        the queue that cycle (``within_guarantee``, ``reclaimable``); a reader showing
        the use says unknown."""
        out = []
        for name in sorted(self.quotas.keys() | self.used.keys() | self.unknown.keys()):
            g, m = self.quotas.get(name, (0, None))
            out.append({"queue": name, "used_gpus": _gpus_of(self.used.get(name, 0)),
                        "guaranteed_gpus": _gpus(g), "max_gpus": _gpus(m),
                        "configured": name in self.quotas, "tenant": self.owner.get(name),
                        "blocked": sorted(self.blocked.get(name, [])),
                        "used_unknown": self.unknown.get(name)})
        return out


def held_in_ledger(kept: Mapping[str, Holding], ledger: Mapping[str, Holding],
                   ) -> Mapping[str, Holding]:
    """The holdings of ``kept`` (one service's, by node) that its ledger entries back;
    the others were adopted this cycle from its own device labels (not held yet)."""
    if len(kept) == len(ledger) and kept.keys() == ledger.keys():
        return kept
    return {nid: h for nid, h in kept.items() if nid in ledger}


def _used_milli(row: Mapping[str, Any]) -> int:
    return round(1000 * (row.get("used_gpus") or 0))


def _guaranteed_milli(row: Mapping[str, Any]) -> int:
    return round(1000 * float(row.get("guaranteed_gpus") or 0))


def _unknown(queues: Mapping[str, Mapping[str, Any]], q: str) -> bool:
    """``q``'s use could not be counted this cycle: its ``used_gpus`` is too low, no
    ground to judge it below or above its guarantee (no reclaim by it or from it)."""
    row = queues.get(q)
    return row is not None and bool(row.get("used_unknown"))


def unknown_of(queue: str, queues: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The queue, ``queue`` or one of its tenant's, whose use is not known this cycle
    (its row's ``used_unknown``), which keeps ``queue``'s work from reclaiming by its
    guarantee (``within_guarantee``); None: all known, or no such queue."""
    row = queues.get(queue)
    if row is None:
        return None
    if row.get("used_unknown"):
        return queue
    tenant = row.get("tenant")
    return next((q for q, r in sorted(queues.items()) if tenant and r.get("tenant") == tenant
                 and r.get("used_unknown")), None)


def within_guarantee(preemptor: GpuRequest, queues: Mapping[str, Mapping[str, Any]],
                     taken: Sequence[tuple[str, int]] = (), given: Mapping[str, int] | None = None,
                     gone: Mapping[str, int] | None = None, replicas: int = 1) -> bool:
    """The preemptor's queue stays within its guarantee with the request, and its tenant's
    queues together (the rows' ``tenant``) within the sum of theirs: all they hold, what
    the cycle's earlier preemptions placed there (``given``: milli per queue), less what
    its victims free there (``gone``) and this set's of them (``taken``: (queue, milli)),
    so one of its queues may still take back from another. ``replicas``: placed at once
    (a packed service's, on its node), each counted. A holder its stack relabels to
    another of its tenant's queues keeps its GPUs and leaves the one it left below its
    guarantee, the tenant not: without the sum, each such relabel reclaimed one more
    holding of another tenant's past what the operator guaranteed it."""
    p, given, gone = queues.get(preemptor.queue), given or {}, gone or {}
    if p is None or not p.get("configured") or unknown_of(preemptor.queue, queues):
        return False
    need = replica_milli(preemptor) * replicas
    if _used_milli(p) + given.get(preemptor.queue, 0) + need > _guaranteed_milli(p):
        return False
    tenant = p.get("tenant")
    if not tenant:
        return True
    mine = {q: row for q, row in queues.items() if row.get("tenant") == tenant}
    used = sum(_used_milli(row) + given.get(q, 0) - gone.get(q, 0) for q, row in mine.items())
    freed = sum(milli for q, milli in taken if q in mine)
    return used - freed + need <= sum(_guaranteed_milli(row) for row in mine.values())


def within_max(preemptor: GpuRequest, queues: Mapping[str, Mapping[str, Any]],
               given: Mapping[str, int], replicas: int = 1) -> bool:
    """The preemptor's queue stays within its max with ``replicas`` more (a packed
    preemptor's: all it lacks, which it preempts for at once), counted with
    what the round's earlier preemptors place there (``given``: milli per queue), and its
    tenant's queues within the sum of theirs when each has one (``Together``). The
    planner holds back a service its queue's max refuses, one service at a time: each
    of a queue's waiting services fits alone, and without this each stopped a victim for
    work the max then kept waiting."""
    p = queues.get(preemptor.queue) if preemptor.queue else None
    if p is None:
        return True
    need = replica_milli(preemptor) * replicas
    most = _gpus_milli(p.get("max_gpus"))
    if most is not None and _used_milli(p) + given.get(preemptor.queue, 0) + need > most:
        return False
    tenant = p.get("tenant")
    mine = [(q, row) for q, row in queues.items() if tenant and row.get("tenant") == tenant]
    tops = [_gpus_milli(row.get("max_gpus")) for _, row in mine]
    if len(mine) < 2 or any(m is None for m in tops):
        return True
    used = sum(_used_milli(row) + given.get(q, 0) for q, row in mine)
    return used + need <= sum(m for m in tops if m is not None)


def _gpus_milli(gpus: Any) -> int | None:
    return None if gpus is None else round(1000 * float(gpus))


def reclaimable(preemptor: GpuRequest, victim: GpuRequest, victim_milli: int,
                queues: Mapping[str, Mapping[str, Any]]) -> bool:
    """Quota preemption: the preemptor's queue stays within its guarantee with the
    request, its tenant's queues within theirs together (``within_guarantee``), and the
    victim's queue stays at or above its own without the victim (so the victim's queue
    cannot take it back: no ping-pong). Work of no queue ("") or of a queue not in the
    config is guaranteed nothing, as a workload in KAI-Scheduler's default queue
    (deserved 0): else what an unknown stack took while a guaranteed queue was idle was
    never given back, the unconfigured outranking the operator's guarantee."""
    if not preemptor.queue or preemptor.queue == victim.queue:
        return False
    v = queues.get(victim.queue)
    if v is not None and (v.get("used_unknown")
                          or _used_milli(v) - victim_milli < _guaranteed_milli(v)):
        return False
    return within_guarantee(preemptor, queues, [(victim.queue, victim_milli)])


def over_guarantee(queue: Mapping[str, Any], gone: int = 0) -> tuple[float, float]:
    """How far a queue (a ``QueueBook.summary`` row) is above its guarantee, less ``gone``
    (milli its victims of the cycle free): (used / guaranteed, used - guaranteed GPUs),
    greater further above. Relative first, as KAI-Scheduler's saturation ratio (allocated /
    fair share): 1 GPU over a guarantee of 1 is further than 2 over a guarantee of 8, so a
    small queue's share is not the first taken. No guarantee is infinitely far with any use."""
    used = round(1000 * (queue.get("used_gpus") or 0)) - gone
    guaranteed = round(1000 * float(queue.get("guaranteed_gpus") or 0))
    ratio = used / guaranteed if guaranteed else (math.inf if used > 0 else 0.0)
    return ratio, (used - guaranteed) / 1000


def guarded_queue(preemptor: GpuRequest, victim: GpuRequest,
                  queues: Mapping[str, Mapping[str, Any]]) -> str:
    """The victim's queue when its guarantee holds against the preemptor's priority too:
    a queue with a guarantee, not the preemptor's (a preemptor of no queue included), as
    KAI-Scheduler preempts by priority within a queue only; "" when priority alone
    decides (one queue, the victim of none, a queue without a guarantee)."""
    if not victim.queue or victim.queue == preemptor.queue:
        return ""
    v = queues.get(victim.queue)
    return victim.queue if v is not None and float(v.get("guaranteed_gpus") or 0) > 0 else ""


def group_reclaimable(preemptor: GpuRequest, taken: Sequence[tuple[str, int]],
                      queues: Mapping[str, Mapping[str, Any]],
                      gone: Mapping[str, int], given: Mapping[str, int],
                      by_priority: Sequence[tuple[str, int]] = (), replicas: int = 1) -> bool:
    """``reclaimable`` for a set of victims taken by quota (``taken``: (queue, milli) per
    victim): each victim queue stays at or above its guarantee without all of its victims
    together, and the preemptor's queue within its own (its tenant's queues within theirs
    together, ``within_guarantee``), counting what earlier preemptions of the cycle took
    (``gone``: milli per queue) and placed (``given``). ``by_priority``: the set's
    victims taken by priority from a guarded queue (``guarded_queue``), counted with
    ``taken`` against their queues' guarantees; the preemptor's own guarantee does not
    bound those. ``replicas``: the preemptor's placed at once (``within_guarantee``)."""
    if taken and not within_guarantee(preemptor, queues, taken, given, gone, replicas):
        return False
    per: dict[str, int] = {}
    for q, milli in (*taken, *by_priority):
        per[q] = per.get(q, 0) + milli
    for q, milli in per.items():
        if _unknown(queues, q):
            return False
        v = queues.get(q)  # none (no queue, or not in the plan): guaranteed nothing
        if v is not None and _used_milli(v) - gone.get(q, 0) - milli < _guaranteed_milli(v):
            return False
    return True
