"""Live per-GPU utilisation samples, as the agent serves them on ``/metrics``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuProcess:
    """A compute process on a GPU (NVML nvmlDeviceGetComputeRunningProcesses); the PID is
    the host's. ``used_mib`` None: the driver cannot say (e.g. without permission)."""

    pid: int
    used_mib: int | None
    gpu_instance_id: int | None = None  # the MIG GPU instance, when the GPU runs MIG
    # who runs it (swarmgpu.agent.procattr): the container id, its Swarm task and service
    container: str = ""
    task: str = ""
    service: str = ""


@dataclass(frozen=True)
class GpuSample:
    """One reading of one GPU; ``None`` means the driver could not say, never 0."""

    uuid: str
    index: int
    util_pct: float | None
    fb_used_mib: int | None
    fb_free_mib: int | None
    mem_copy_util_pct: float | None
    temp_c: float | None
    power_w: float | None
    processes: tuple[GpuProcess, ...] = ()
