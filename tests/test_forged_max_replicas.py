"""``<p>state.max-replicas`` is a label on the service, which its owner writes: it cannot
be checked (an honest record equals the owner's MaxReplicas as a forged one does). What
forging it buys is pinned here: the daemon reads the owner's MaxReplicas as its own, so
preemption frees GPUs on the node for the replicas over it (``packed_need``), exactly as
for the owner who removes the cap, and for no other service."""

from __future__ import annotations

from dataclasses import replace

from support.placement import svc

from swarmgpu.manager.placement import MAX_STATE
from swarmgpu.manager.placement.ledger import packed_holding
from swarmgpu.manager.placement.preemptview import packed_need
from swarmgpu.swarm.client import SwarmService

P = "swarmgpu."


def _packed(max_replicas: int | None, labels: dict[str, str]) -> SwarmService:
    """4 replicas asked, 2 packed on n-dgx (the ledger), MaxReplicas ``max_replicas``."""
    return replace(svc("tenant", {f"{P}gpus": "1", **labels}, replicas=4),
                   max_replicas_per_node=max_replicas)


HOLDINGS = {"n-dgx": {"tenant": packed_holding("tenant", "n-dgx", {
    1: (("GPU-a",), (1000,)), 2: (("GPU-b",), (1000,))})},
    "n-4090": {"other": packed_holding("other", "n-4090", {1: (("GPU-c",), (1000,))})}}


def test_a_forged_max_replicas_record_frees_no_more_than_removing_the_cap() -> None:
    owners = packed_need(HOLDINGS, _packed(2, {}), P)
    forged = packed_need(HOLDINGS, _packed(2, {P + MAX_STATE: "2"}), P)
    uncapped = packed_need(HOLDINGS, _packed(None, {}), P)
    assert owners is None  # the owner's cap: Swarm runs no more there, none freed
    assert forged == uncapped == ("n-dgx", 2)  # its own node, its own replicas only
