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
    """One reading of one GPU, or of one MIG device (``uuid`` a MIG UUID); ``None``
    means the driver could not say, never 0. The fields after ``processes`` are the rest
    of dcgm-exporter's default counters (agent.metrics.DCGM_FIELDS names each one's
    dcgm field; docs/metrics.md which NVML call reads it)."""

    uuid: str
    index: int
    util_pct: float | None
    fb_used_mib: int | None
    fb_free_mib: int | None
    mem_copy_util_pct: float | None
    temp_c: float | None
    power_w: float | None
    processes: tuple[GpuProcess, ...] = ()
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    memory_temp_c: float | None = None
    energy_mj: float | None = None  # since the driver loaded
    pcie_replays: float | None = None  # since reset
    enc_util_pct: float | None = None
    dec_util_pct: float | None = None
    fb_reserved_mib: float | None = None
    nvlink_mb_s: float | None = None  # NVLink data rx + tx, MB/s over the last interval
    vgpu_licensed: float | None = None  # 1 licensed vGPU, 0 not (or not a vGPU)
    gr_engine_active: float | None = None  # ratio 0-1 (GPM; per MIG device too)
    tensor_active: float | None = None  # ratio 0-1 (GPM)
    dram_active: float | None = None  # ratio 0-1 (GPM)
    pcie_tx_bytes_s: float | None = None
    pcie_rx_bytes_s: float | None = None
