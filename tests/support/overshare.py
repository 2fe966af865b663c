"""Facts of the DGX and the /metrics page for given GPU processes, and the checked uses
alone of ``overshare.attribute`` (``service_use``: only tests read them without the rest).

First written in tests/test_overshare.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from support.gpu_nodes import DGX_A100
from support.placement import DGX
from swarmgpu.agent.metrics import render_metrics
from swarmgpu.core.metrics_in import GpuMetrics, parse_metrics
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.samples import GpuProcess, GpuSample
from swarmgpu.manager.placement import Holding
from swarmgpu.manager.services.overshare import Owner, ServiceUse, attribute
from swarmgpu.swarm.client import SwarmNode

F = DGX_A100.facts()
G1, G2 = F.gpus[1], F.gpus[2]


def metrics_for(procs: dict[str, tuple[GpuProcess, ...]]) -> dict[str, dict[str, GpuMetrics]]:
    """The agent's /metrics page for these processes, read back as the daemon reads it."""
    samples = [GpuSample(g.uuid, g.index, 1.0, 1, 1, 1.0, 1.0, 1.0, procs.get(g.uuid, ()))
               for g in F.gpus]
    return {DGX.id: dict(parse_metrics(render_metrics(F, samples).decode()).samples_by_uuid)}


def service_use(nodes: Sequence[SwarmNode], ledger: Mapping[str, Mapping[str, Holding]],
                facts: Mapping[str, NodeFacts],
                metrics: Mapping[str, Mapping[str, GpuMetrics]],
                containers: Mapping[str, Owner] | None = None) -> list[ServiceUse]:
    """``attribute``'s checked uses only (the product reads the unattributed too)."""
    return attribute(nodes, ledger, facts, metrics, containers).uses
