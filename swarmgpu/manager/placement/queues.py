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
  queue below its own (``placement.preempt``; see ``reclaimable``).

Use is counted in thousandths of a GPU, per holding: the GPUs of the ledger entries kept
this cycle, plus what the cycle places. A queue not in the config has no limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.records import ServicePlan, Status
from swarmgpu.manager.services.requests import GpuRequest, RequestError
from swarmgpu.swarm.client import SwarmService

Quotas = Mapping[str, tuple[int, int | None]]  # name -> (guaranteed, max or None), milli


def replica_milli(r: GpuRequest) -> int:
    return r.gpu_milli if r.is_fraction or r.mig_profile else 1000 * r.gpus


def _gpus(milli: int | None) -> float | None:
    return None if milli is None else milli / 1000


@dataclass(frozen=True, slots=True)
class QueueLimit:
    """The queue step's answer for a service its queue's max holds back: at most
    ``replicas`` are placed (0: it holds nothing, and all of it waits), and why."""

    replicas: int
    reason: str

    @property
    def whole(self) -> bool:
        """All of the service waits (it holds nothing yet)."""
        return self.replicas == 0


@dataclass
class QueueBook:
    """One cycle's use per queue, as the planner goes through the services."""

    quotas: Quotas
    used: dict[str, int] = field(default_factory=dict)
    blocked: dict[str, list[str]] = field(default_factory=dict)  # queue -> services held

    def start(self, parsed: Any, kept: Mapping[str, Mapping[str, Holding]]) -> None:
        """Count the holdings kept this cycle."""
        self.used, self.blocked = {}, {}
        for s, r in parsed:
            if isinstance(r, GpuRequest) and r.queue:
                self.used[r.queue] = self.used.get(r.queue, 0) + sum(
                    sum(h.milli) for h in kept.get(s.name, {}).values())

    def limit(self, s: SwarmService, r: GpuRequest | RequestError,
              mine: Mapping[str, Holding]) -> QueueLimit | None:
        """How its queue's max holds ``s`` back (``mine``: its holdings kept this
        cycle); None when it does not."""
        return self._refuse(s, r, mine) if not mine else self._cap(s, r, mine)

    def _refuse(self, s: SwarmService, r: GpuRequest | RequestError,
                mine: Mapping[str, Holding]) -> QueueLimit | None:
        """All of ``s`` waits when placing it would take its queue above its max."""
        if not isinstance(r, GpuRequest) or not r.queue or mine or not s.replicas:
            return None
        quota = self.quotas.get(r.queue)
        if quota is None or quota[1] is None:
            return None
        need = replica_milli(r) * s.replicas
        used = self.used.get(r.queue, 0)
        if used + need <= quota[1]:
            return None
        self.blocked.setdefault(r.queue, []).append(s.name)
        return QueueLimit(0, f"queue {r.queue} at its quota: max {_gpus(quota[1]):g} GPUs, "
                             f"{_gpus(used):g} used, this service needs {_gpus(need):g}")

    def _cap(self, s: SwarmService, r: GpuRequest | RequestError,
             mine: Mapping[str, Holding]) -> QueueLimit | None:
        """The replicas it may hold when a replicated service that holds some asks for
        more than its queue's max leaves room for. Its kept replicas always count as
        allowed (the max never stops running work)."""
        if (not isinstance(r, GpuRequest) or not r.queue or not mine
                or s.mode != "replicated" or not s.replicas):
            return None
        quota = self.quotas.get(r.queue)
        if quota is None or quota[1] is None:
            return None
        held = sum(len(set(h.slots)) or 1 for h in mine.values())
        if held >= s.replicas:
            return None
        each = replica_milli(r)
        used = self.used.get(r.queue, 0)  # this service's kept holdings included
        room = max(0, quota[1] - used)
        more = room // each if each else s.replicas
        if held + more >= s.replicas:
            return None
        self.blocked.setdefault(r.queue, []).append(s.name)
        return QueueLimit(held + more, (
            f"queue {r.queue} at its quota: max {_gpus(quota[1]):g} GPUs, {_gpus(used):g} "
            f"used, {s.replicas - held - more} more replica(s) need "
            f"{_gpus((s.replicas - held - more) * each):g}"))

    def count(self, r: GpuRequest | RequestError, mine: Mapping[str, Holding],
              sp: ServicePlan) -> None:
        """Add what the cycle placed for the service beyond its kept holdings."""
        if isinstance(r, GpuRequest) and r.queue and sp.status != Status.INVALID:
            new = max(0, len(sp.placements) - len(mine))
            if new:
                self.used[r.queue] = self.used.get(r.queue, 0) + new * replica_milli(r)

    def summary(self) -> list[dict[str, Any]]:
        """Each queue's use against its quota (``status``, the map's document)."""
        out = []
        for name in sorted(self.quotas.keys() | self.used.keys()):
            g, m = self.quotas.get(name, (0, None))
            out.append({"queue": name, "used_gpus": _gpus(self.used.get(name, 0)),
                        "guaranteed_gpus": _gpus(g), "max_gpus": _gpus(m),
                        "configured": name in self.quotas,
                        "blocked": sorted(self.blocked.get(name, []))})
        return out


def reclaimable(preemptor: GpuRequest, victim: GpuRequest, victim_milli: int,
                queues: Mapping[str, Mapping[str, Any]]) -> bool:
    """Quota preemption: the preemptor's queue stays within its guarantee with the
    request, and the victim's queue stays at or above its own without the victim (so the
    victim's queue cannot take it back: no ping-pong)."""
    if not preemptor.queue or not victim.queue or preemptor.queue == victim.queue:
        return False
    p, v = queues.get(preemptor.queue), queues.get(victim.queue)
    if p is None or v is None or not p.get("configured") or not v.get("configured"):
        return False
    need = replica_milli(preemptor)
    p_used = round(1000 * (p["used_gpus"] or 0))
    v_used = round(1000 * (v["used_gpus"] or 0))
    p_guaranteed = round(1000 * float(p["guaranteed_gpus"]))
    v_guaranteed = round(1000 * float(v["guaranteed_gpus"]))
    return p_used + need <= p_guaranteed and v_used - victim_milli >= v_guaranteed


def group_reclaimable(preemptor: GpuRequest, taken: Sequence[tuple[str, int]],
                      queues: Mapping[str, Mapping[str, Any]],
                      gone: Mapping[str, int], given: Mapping[str, int]) -> bool:
    """``reclaimable`` for a set of victims taken by quota (``taken``: (queue, milli) per
    victim): each victim queue stays at or above its guarantee without all of its victims
    together, and the preemptor's queue within its own, counting what earlier preemptions
    of the cycle took (``gone``: milli per queue) and placed (``given``)."""
    if not taken:
        return True
    p = queues.get(preemptor.queue)
    if p is None:
        return False
    p_used = round(1000 * (p["used_gpus"] or 0)) + given.get(preemptor.queue, 0)
    if p_used + replica_milli(preemptor) > round(1000 * float(p["guaranteed_gpus"])):
        return False
    per: dict[str, int] = {}
    for q, milli in taken:
        per[q] = per.get(q, 0) + milli
    for q, milli in per.items():
        v = queues.get(q)
        if v is None:
            return False
        v_used = round(1000 * (v["used_gpus"] or 0)) - gone.get(q, 0)
        if v_used - milli < round(1000 * float(v["guaranteed_gpus"])):
            return False
    return True
