"""Facts of the DGX and the /metrics page for given GPU processes.

First written in tests/test_overshare.py."""

from __future__ import annotations

from support.gpu_nodes import DGX_A100
from support.placement import DGX
from swarmgpu.agent.metrics import render_metrics
from swarmgpu.core.metrics_in import GpuMetrics, parse_metrics
from swarmgpu.core.samples import GpuProcess, GpuSample

F = DGX_A100.facts()
G1, G2 = F.gpus[1], F.gpus[2]


def metrics_for(procs: dict[str, tuple[GpuProcess, ...]]) -> dict[str, dict[str, GpuMetrics]]:
    """The agent's /metrics page for these processes, read back as the daemon reads it."""
    samples = [GpuSample(g.uuid, g.index, 1.0, 1, 1, 1.0, 1.0, 1.0, procs.get(g.uuid, ()))
               for g in F.gpus]
    return {DGX.id: dict(parse_metrics(render_metrics(F, samples).decode()).samples_by_uuid)}
