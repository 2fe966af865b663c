"""The openb GPU trace, bundled so ``swarmgpu simulate --trace NAME`` works after install.

Alibaba cluster-trace-gpu-v2023 (CC BY 4.0; attribution in ``openb/ATTRIBUTION.md``).
"""

from __future__ import annotations

from pathlib import Path

OPENB = Path(__file__).resolve().parent / "openb"
NODES = OPENB / "openb_node_list_gpu_node.csv"
# The pod lists, by the name the FGD paper gives each workload.
NAMES = ("default", "gpushare40", "multigpu20", "gpuspec10", "cpu050")


def bundled(name: str) -> tuple[Path, Path]:
    """(node list, pod list) of the bundled trace ``name``; ValueError names the choices."""
    if name not in NAMES:
        raise ValueError(f"unknown trace {name!r}; bundled traces: {', '.join(NAMES)}")
    return NODES, OPENB / f"openb_pod_list_{name}.csv"
