"""Does the agent's ``--proc-root`` show the host's processes (swarmgpu.agent.procroot)?"""

from __future__ import annotations

from swarmgpu.agent.doctor.view import Check, NodeView, Status
from swarmgpu.agent.procroot import FIX, ProcRootKind


def check_proc_root(view: NodeView) -> Check:
    """A container's own /proc hides every other container's GPU process from the
    agent: nothing is attributed, and the over-share check judges nothing."""
    cid = "agent.proc-root"
    pv = view.proc_root
    if pv is None:
        return Check(cid, Status.SKIP, "no --proc-root to check")
    if pv.kind is ProcRootKind.HOST:
        return Check(cid, Status.OK, pv.found)
    if pv.kind is ProcRootKind.UNKNOWN:
        return Check(cid, Status.SKIP, f"cannot tell: {pv.found}")
    return Check(cid, Status.WARN, pv.found,
                 "NVML names GPU processes by host PID, and the agent finds each one's "
                 "container under --proc-root: through this path it finds none, so no "
                 "GPU process is attributed to a service and shared GPUs are not watched "
                 "(placement.overshare)",
                 f"{FIX}; run this check where the agent runs, with its --proc-root "
                 "(docker exec AGENT swarmgpu doctor --proc-root /host/proc)")
