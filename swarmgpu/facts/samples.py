"""Live per-GPU utilisation samples, as the agent serves them on ``/metrics``."""

from __future__ import annotations

from dataclasses import dataclass


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
