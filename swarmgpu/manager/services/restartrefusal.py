"""Why a service refuses the over-share restart (``overshare.Restarter``), said with what
lets it: its owner's ``rebalance: never``, replicas packed on one node, or a job."""

from __future__ import annotations

from collections.abc import Mapping

from swarmgpu.manager.placement import Holding
from swarmgpu.manager.rebalance.context import OPT_OUT
from swarmgpu.manager.services.jobshare import JOB_MODES, not_restarted
from swarmgpu.manager.services.requests import GpuRequest, Rebalance
from swarmgpu.swarm.client import SwarmService


def refused(s: SwarmService, req: GpuRequest | None, held: Mapping[str, Holding],
            prefix: str) -> str | None:
    """Why ``s`` refuses over-share restarts, and what lets them, or None: its owner's
    ``rebalance: never``, or replicas packed on one node (a restart closes the one gate
    they all run behind, so it would stop every one), or a job (``jobshare``)."""
    if s.mode in JOB_MODES:
        return not_restarted(s.mode, prefix)
    if s.labels.get(prefix + OPT_OUT, "").lower() == "never" or (
            req is not None and req.rebalance is Rebalance.NEVER):
        return (f"opted out ({prefix}{OPT_OUT}=never); remove that label to let swarmgpu "
                "restart it")
    if any(h.packed for h in held.values()):
        return ("replicas packed on one node (a restart would stop them all); set "
                f"{prefix}pack=never (one replica per node) to let swarmgpu restart it")
    return None
