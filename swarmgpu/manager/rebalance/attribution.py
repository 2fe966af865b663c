"""Who uses which GPU: the placement ledger tied to metrics, and each service's state.

dcgm-exporter samples name GPUs, never Swarm services; the ledger
(``swarmgpu.assign.<svc>`` node labels) says which services hold which GPU UUID and
what share, so a GPU's utilisation is split between its holders by share.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from swarmgpu.manager.placement import Holding, ServicePlan, State


@dataclass(frozen=True)
class Share:
    service: str
    node_id: str
    uuid: str
    milli: int
    holding: Holding


def holders_by_gpu(ledger: Mapping[str, Mapping[str, Holding]]) -> dict[str, list[Share]]:
    """GPU (or MIG) UUID -> the holdings on it, largest share first."""
    out: dict[str, list[Share]] = {}
    for svc, per_node in ledger.items():
        for nid, h in per_node.items():
            for u, m in zip(h.uuids, h.milli, strict=True):
                out.setdefault(u, []).append(Share(svc, nid, u, m, h))
    for v in out.values():
        v.sort(key=lambda s: (-s.milli, s.service))
    return out


def add_holder(by_gpu: dict[str, list[Share]], h: Holding) -> None:
    """Count in ``holders_by_gpu``'s answer a holding just added to its ledger (a node
    its service held nothing on): as reading the ledger again would, its GPUs' lists
    sorted again (stable: after the equal ones, as its place in the ledger is)."""
    for u, m in zip(h.uuids, h.milli, strict=True):
        on = by_gpu.setdefault(u, [])
        on.append(Share(h.service, h.node_id, u, m, h))
        on.sort(key=lambda s: (-s.milli, s.service))


def estimated_util(share: Share, gpu_util: float | None, holders: Sequence[Share]) -> float | None:
    """A holder's part of its GPU's utilisation, split by share (unknown stays None)."""
    if gpu_util is None:
        return None
    total = sum(s.milli for s in holders) or 1
    return gpu_util * share.milli / total


def service_states(plans: Iterable[ServicePlan], moving: AbstractSet[str],
                   proposed_idle: Iterable[str] = ()) -> dict[str, str]:
    """Pending -> Bound -> Allocated -> Active, then Rebalancing (a move in flight by the
    daemon's records: ``record.moving``; never over Failed, which says its planning
    raised: the fault to see) or IdleCleanup (a consolidation move proposed for it)."""
    idle = set(proposed_idle)
    out: dict[str, str] = {}
    for sp in plans:
        st = sp.state
        if sp.name in moving and st != State.FAILED:  # a failed plan is what to see
            st = "Rebalancing"
        elif sp.name in idle and st == "Active":
            st = "IdleCleanup"
        out[sp.name] = st
    return out
