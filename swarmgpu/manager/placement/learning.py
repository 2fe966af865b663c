"""The workload mix learned from the services seen (``learn``): each service's shape
counted once per request, one service's fault its own (``ServiceRead.failed``)."""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence

from swarmgpu.allocator.fragmentation import TaskShape
from swarmgpu.allocator.workload import WorkloadModel
from swarmgpu.manager.placement.jobs import learned_count
from swarmgpu.manager.placement.memo import PlannerMemo
from swarmgpu.manager.placement.specs import demand_of
from swarmgpu.manager.services.requests import GpuRequest, RequestError
from swarmgpu.swarm.client import SwarmService


def learn(memo: PlannerMemo, model: WorkloadModel,
          parsed: Sequence[tuple[SwarmService, GpuRequest | RequestError]],
          cpu_only: Sequence[SwarmService], failed: MutableMapping[str, Exception], *,
          forget: bool = True) -> bool:
    """Count each service's shape once; True when the model changed. Services without a
    GPU request count too, by the CPU they reserve: they compete for the CPU that GPU
    tasks need, and the policy's CPU reserve weighs them (``cpu_reserve_per_gpu_milli``).
    ``forget``: ``parsed`` and ``cpu_only`` are every live service (a full cycle), so
    the marks of the others are dropped. A service whose count raises is left out and
    named in ``failed`` (service id -> the fault): planned as failed, the rest counted."""
    shapes, learned = memo.shapes, memo.learned
    if memo.learned_of is not model:
        learned.clear()
        memo.learned_of = model
    changed = False
    for s in [s for s in cpu_only if s.id not in learned]:
        if s.id in shapes and model.knows(s.id):
            learned.add(s.id)
            continue
        try:
            shape = TaskShape(memo.requests[s.id].reservation[0], 0, 0)
            count = max(1, s.replicas or 0) if s.mode == "replicated" else 1
            changed |= model.observe(s.id, str(shape), shape, count)
        except Exception as exc:  # its fault is its own: the others are counted
            failed.setdefault(s.id, exc)
            continue
        shapes[s.id] = shape
    for s, r in [p for p in parsed if p[0].id not in learned]:
        if s.id in shapes and model.knows(s.id):
            learned.add(s.id)
            continue  # counted (per request: a changed request has a new version)
        if isinstance(r, RequestError) or s.id in failed:
            continue
        try:
            if not learned_count(s) or r.mig_profile:
                continue  # MIG slices are their own pool; they do not fragment shares
            cpu, _mem = memo.requests[s.id].reservation
            shape = demand_of(r, cpu).shape()
            changed |= model.observe(s.id, str(shape), shape, learned_count(s))
        except Exception as exc:  # (as above)
            failed.setdefault(s.id, exc)
            continue
        shapes[s.id] = shape
    if forget and model.known_count() > len(parsed) + len(cpu_only):
        model.forget_keys([*(s.id for s, _ in parsed), *(s.id for s in cpu_only)])
        learned.clear()
    return changed
