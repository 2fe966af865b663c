"""The GPU machines the test swarm's workers stand in for: real `topo -m` captures.

One definition, used by the swarm fixture (to advertise the same GPU UUIDs as Swarm
generic resources that the agents report) and by the tests that start agents.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from paths import REPO, TOPOLOGY

from swarmgpu.facts.topo import TopoSource
from swarmgpu.model import NodeFacts


@dataclass(frozen=True)
class FakeGpuNode:
    hostname: str
    capture: str
    product: str
    memory_mib: int
    mig: str | None = None

    def source(self) -> TopoSource:
        return TopoSource(TOPOLOGY / self.capture, hostname=self.hostname,
                          product=self.product, memory_mib=self.memory_mib,
                          mig_layout=self.mig)

    def facts(self) -> NodeFacts:
        return self.source().read()

    def uuids(self) -> list[str]:
        return [g.uuid for g in self.facts().gpus]

    def agent_argv(self, addr: str, port: int = 9401, *extra: str) -> list[str]:
        argv = [sys.executable, "-m", "swarmgpu.cli", "agent",
                "--source", f"topo:{TOPOLOGY / self.capture}", "--product", self.product,
                "--memory-mib", str(self.memory_mib), "--hostname", self.hostname,
                "--listen", f"{addr}:{port}", "--refresh-s", "1"]
        if self.mig:
            argv += ["--mig", self.mig]
        return argv + list(extra)


DGX_A100 = FakeGpuNode("gpu-node-1", "topo_dgx_a100_nv12.txt", "NVIDIA A100-SXM4-40GB", 40960)
RTX4090 = FakeGpuNode("gpu-node-2", "topo_pcie_8x_rtx4090_pix_sys.txt",
                      "NVIDIA GeForce RTX 4090", 24564)
GPU_NODES = {n.hostname: n for n in (DGX_A100, RTX4090)}


def swarmgpu_env(**extra: str) -> dict[str, str]:
    """Environment for swarmgpu processes started by tests (works without install)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the real `swarmgpu` CLI as a user would."""
    return subprocess.run([sys.executable, "-m", "swarmgpu.cli", *args], capture_output=True,
                          text=True, env=env or swarmgpu_env(), timeout=timeout, check=False)


def kwargs_for_logs(path: Any) -> dict[str, Any]:
    fh = open(path, "ab")  # noqa: SIM115 - handed to Popen, closed at interpreter exit
    return {"stdout": fh, "stderr": subprocess.STDOUT}
