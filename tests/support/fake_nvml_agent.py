"""`swarmgpu agent --source nvml` over the fake pynvml, for the real-swarm tests.

The GPUs are a layout of tests/support/fake_pynvml built from real captures; the running
processes are read, on every NVML call, from a JSON file the test writes
(``{"<GPU uuid>": [{"pid": 1234, "used_mib": 30000}, ...]}``): the PIDs of real task
containers, so everything after NVML (the PID's cgroup, the engine's container labels,
the metrics, the daemon) is the real thing.

    python tests/support/fake_nvml_agent.py LAYOUT PROCESSES_JSON SYSFS_DIR AGENT-ARGS...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.fake_pynvml.builder import build_layout
from support.fake_pynvml.pynvml import FakeNvml, FakeProcess


def main() -> None:
    layout, procs_file, sysfs = sys.argv[1:4]
    built = build_layout(layout, Path(sysfs))
    nv = built.nvml

    def running(h: Any) -> Any:
        try:
            data = json.loads(Path(procs_file).read_text())
        except (OSError, ValueError):
            data = {}
        g = built.machine.gpus[h.gpu]
        g.processes = [FakeProcess(int(p["pid"]), p.get("used_mib"))
                       for p in data.get(g.uuid, [])]
        return FakeNvml.nvmlDeviceGetComputeRunningProcesses(nv, h)

    nv.nvmlDeviceGetComputeRunningProcesses = running  # type: ignore[method-assign]

    # A lying node: an entry's "forge" ({"container", "task", "service"}) replaces what
    # the agent found for that PID, as anything answering on the port could claim.
    from dataclasses import replace

    from swarmgpu.agent.procattr import Attributor

    honest = Attributor.process

    def forged(self: Attributor, p: Any, listed_at: float | None = None) -> Any:
        p = honest(self, p, listed_at)
        try:
            data = json.loads(Path(procs_file).read_text())
        except (OSError, ValueError):
            data = {}
        for entry in (e for es in data.values() for e in es):
            if int(entry["pid"]) == p.pid and entry.get("forge"):
                return replace(p, **entry["forge"])
        return p

    Attributor.process = forged  # type: ignore[method-assign]
    sys.modules["pynvml"] = nv  # type: ignore[assignment]  # what load_pynvml imports
    from swarmgpu.cli import main as cli

    cli(["agent", "--source", "nvml", *sys.argv[4:]])


if __name__ == "__main__":
    main()
