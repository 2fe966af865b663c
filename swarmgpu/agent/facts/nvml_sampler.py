"""The sampler behind ``/metrics`` on an NVML node: dcgm-exporter's default counters as
far as NVML gives them (the field table, with the NVML call behind each: docs/metrics.md).

One sample per GPU, and one per MIG device of a MIG-enabled GPU. A GPU's sample carries
what NVML measures for the whole board (clocks, temperatures, power and energy, PCIe
throughput and replays, NVLink traffic, utilisation, encoder and decoder use, memory);
a MIG device's carries only what NVML measures per instance: its memory, and the
profiling ratios that GPM (GPU Performance Monitoring, Hopper and later) gives per GPU
instance. NVML has no per-instance ``GPU_UTIL`` (nvmlDeviceGetUtilizationRates answers
NOT_SUPPORTED on a MIG device), and none is made up.

Some figures are rates over the time between two scrapes, as DCGM computes them: GPM
ratios (two GPM samples), and the NVLink throughput (DCGM's NVLINK_BANDWIDTH_TOTAL: the
rx + tx data counters' growth, in MB/s). The first scrape has none of them (unknown,
left out); each later one has the figure since the one before. A scrape less than
``MIN_RATE_INTERVAL_S`` after the last interval's end repeats that interval's figures and
keeps its baseline: on a real H200 (driver 580.159.04) GPM over a few milliseconds gave
0 % busy on a GPU at 99 % and NaN for DRAM (tests/fixtures/captures/SOURCES.md).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from loguru import logger

from swarmgpu.agent.facts.nvml_session import (
    GpuLost,
    Nvml,
    ensure_init,
    module,
    text,
)
from swarmgpu.core.model import MAX_GPUS, MAX_MIG_PER_GPU
from swarmgpu.core.samples import GpuProcess, GpuSample

_MIB = 1024 * 1024
_NOT_AVAILABLE = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE for unsigned long long
_NOT_AVAILABLE_UINT = 0xFFFFFFFF  # and for unsigned int (utilisation, power, temperature)
_NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId of a process on a GPU without MIG
_MEMORY_V2 = 0x02000028  # nvmlMemory_v2: total, reserved, free, used
_FI_MEMORY_TEMP = 82  # NVML_FI_DEV_MEMORY_TEMP
_FI_NVLINK_DATA_TX = 138  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, KiB since reset
_FI_NVLINK_DATA_RX = 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
_ALL_LINKS = 0xFFFFFFFF  # a field value's scopeId for every link (as DCGM asks)
_VGPU_FEATURE = 1  # NVML_GRID_LICENSE_FEATURE_CODE_VGPU
# GpuSample attribute -> NVML_GPM_METRIC_* id; NVML gives percent, dcgm ratios 0-1.
GPM_METRICS: dict[str, int] = {
    "gr_engine_active": 1,  # NVML_GPM_METRIC_GRAPHICS_UTIL
    "tensor_active": 5,  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    "dram_active": 10,  # NVML_GPM_METRIC_DRAM_BW_UTIL
}
# Shortest interval a rate is computed over; two Prometheus servers scraping the same
# agent a moment apart (an HA pair) would otherwise get a figure of a few milliseconds.
MIN_RATE_INTERVAL_S = 1.0


def _clock() -> float:
    """Seconds, monotonic; a function so the tests can step it."""
    return time.monotonic()


@dataclass
class _Baseline:
    """A rate's last reading (a GPM sample or an NVLink counter), when it was read, and
    the figures of the interval it closed (repeated for a scrape too soon after it)."""

    at: float
    reading: Any
    figures: dict[str, float] = field(default_factory=dict)


@dataclass
class _Rates:
    """What one NVML module's rates are computed from: the last GPM sample per (GPU, GI)
    and the last NVLink data counter per GPU."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    gpm: dict[tuple[int, int | None], _Baseline] = field(default_factory=dict)
    nvlink: dict[int, _Baseline] = field(default_factory=dict)


_rates: dict[int, _Rates] = {}
_rates_lock = threading.Lock()


def _rates_of(mod: Any) -> _Rates:
    with _rates_lock:
        r = _rates.get(id(mod))
        if r is None:
            r = _rates[id(mod)] = _Rates()
        return r


def read_utilisation(nvml_module: Any = None) -> list[GpuSample]:
    """The samples of every readable GPU and MIG device; ``[]`` when NVML is unavailable."""
    mod, err = module(nvml_module)
    if mod is None or err is not None or ensure_init(mod):
        return []
    nv = Nvml(mod)
    rates = _rates_of(mod)
    count = nv.call("nvmlDeviceGetCount") or 0
    if not 0 <= int(count) <= MAX_GPUS:
        return []  # no GPU count (facts say so): nothing is sampled
    samples: list[GpuSample] = []
    with rates.lock:  # one scrape at a time updates the previous readings
        for i in range(int(count)):
            try:
                samples.extend(_samples(nv, i, rates))
            except GpuLost:
                continue  # a lost GPU has nothing to sample; facts report it unhealthy
            except Exception as exc:  # pynvml past NVMLError (a UUID not UTF-8): that
                # GPU unsampled, not the scrape; facts say why
                logger.debug("GPU {} not sampled: {!r}", i, exc)
    return samples


def _samples(nv: Nvml, index: int, rates: _Rates) -> list[GpuSample]:
    h = nv.call("nvmlDeviceGetHandleByIndex", index)
    uuid = nv.call("nvmlDeviceGetUUID", h) if h is not None else None
    if uuid is None:
        return []
    util = nv.call("nvmlDeviceGetUtilizationRates", h)
    used, free, reserved = _memory(nv, h)
    power_mw = nv.call("nvmlDeviceGetPowerUsage", h)
    gpm = _gpm_supported(nv, h)
    whole = GpuSample(
        uuid=text(uuid),
        index=index,
        util_pct=_pct(getattr(util, "gpu", None)) if util is not None else None,
        fb_used_mib=used,
        fb_free_mib=free,
        mem_copy_util_pct=_pct(getattr(util, "memory", None)) if util is not None else None,
        temp_c=_uint(nv.call("nvmlDeviceGetTemperature", h,
                             nv.const("NVML_TEMPERATURE_GPU", 0))),
        power_w=round(float(power_mw) / 1000.0, 3) if _uint(power_mw) is not None else None,
        processes=_processes(nv, h),
        sm_clock_mhz=_uint(nv.call("nvmlDeviceGetClockInfo", h, nv.const("NVML_CLOCK_SM", 1))),
        mem_clock_mhz=_uint(nv.call("nvmlDeviceGetClockInfo", h,
                                   nv.const("NVML_CLOCK_MEM", 2))),
        memory_temp_c=_field(nv, h, _FI_MEMORY_TEMP),
        energy_mj=_num(nv.call("nvmlDeviceGetTotalEnergyConsumption", h)),
        pcie_replays=_num(nv.call("nvmlDeviceGetPcieReplayCounter", h)),
        enc_util_pct=_first(nv.call("nvmlDeviceGetEncoderUtilization", h)),
        dec_util_pct=_first(nv.call("nvmlDeviceGetDecoderUtilization", h)),
        fb_reserved_mib=reserved,
        nvlink_mb_s=_nvlink_rate(nv, h, index, rates),
        vgpu_licensed=_vgpu_licensed(nv, h),
        pcie_tx_bytes_s=_pcie(nv, h, "NVML_PCIE_UTIL_TX_BYTES", 0),
        pcie_rx_bytes_s=_pcie(nv, h, "NVML_PCIE_UTIL_RX_BYTES", 1),
    )
    if gpm:
        whole = _with(whole, _gpm(nv, h, None, index, rates))
    out = [whole]
    mig = nv.call("nvmlDeviceGetMigMode", h)
    if mig is not None and int(mig[0]) == nv.const("NVML_DEVICE_MIG_ENABLE", 1):
        out += _mig_samples(nv, h, index, gpm, rates)
    return out


def _mig_samples(nv: Nvml, parent: Any, index: int, gpm: bool,
                 rates: _Rates) -> list[GpuSample]:
    """One sample per MIG device: its memory, and GPM's ratios for its GPU instance."""
    out = []
    most = int(nv.call("nvmlDeviceGetMaxMigDeviceCount", parent) or 0)
    for k in range(min(most, MAX_MIG_PER_GPU)):  # past it: no count (facts say so)
        mh = nv.call("nvmlDeviceGetMigDeviceHandleByIndex", parent, k)
        uuid = nv.call("nvmlDeviceGetUUID", mh) if mh is not None else None
        if uuid is None:
            continue  # an empty slot answers NVML_ERROR_NOT_FOUND
        gi = nv.call("nvmlDeviceGetGpuInstanceId", mh)
        used, free, reserved = _memory(nv, mh)
        one = GpuSample(
            uuid=text(uuid), index=index, util_pct=None, fb_used_mib=used, fb_free_mib=free,
            mem_copy_util_pct=None, temp_c=None, power_w=None, fb_reserved_mib=reserved)
        if gpm and isinstance(gi, int):
            one = _with(one, _gpm(nv, parent, int(gi), index, rates))
        out.append(one)
    return out


def _with(sample: GpuSample, ratios: dict[str, float]) -> GpuSample:
    return replace(sample, gr_engine_active=ratios.get("gr_engine_active"),
                   tensor_active=ratios.get("tensor_active"),
                   dram_active=ratios.get("dram_active"))


def _num(v: Any) -> float | None:
    """A reading as a float; None for what NVML marks unknown (negative, NOT_AVAILABLE)
    and for NaN or infinity (GPM's DRAM ratio over a too short interval was NaN)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    if not math.isfinite(v) or v < 0 or v == _NOT_AVAILABLE:
        return None
    return float(v)


def _uint(v: Any) -> float | None:
    """An unsigned int reading (power, temperature, clock); 0xFFFFFFFF is unknown. (Not
    for 64-bit counters: the energy counter passes that value in a few hours.)"""
    n = _num(v)
    return None if n == _NOT_AVAILABLE_UINT else n


def _pct(v: Any) -> float | None:
    """A utilisation; past 100 % it is no reading (the daemon's scrape refuses it)."""
    n = _num(v)
    return n if n is None or n <= 100 else None


def _first(pair: Any) -> float | None:
    """(value, sampling period) as the encoder/decoder calls return it: the value."""
    return _pct(pair[0]) if isinstance(pair, list | tuple) and pair else None


def _memory(nv: Nvml, h: Any) -> tuple[int | None, int | None, int | None]:
    """(used, free, reserved) MiB: nvmlMemory_v2 where the driver has it (510 and later;
    used then leaves out what the driver reserves, as DCGM reports FB_USED), else v1."""
    mem = nv.call("nvmlDeviceGetMemoryInfo", h, nv.const("nvmlMemory_v2", _MEMORY_V2))
    if mem is not None and hasattr(mem, "reserved"):
        return (int(mem.used) // _MIB, int(mem.free) // _MIB, int(mem.reserved) // _MIB)
    mem = nv.call("nvmlDeviceGetMemoryInfo", h)
    if mem is None:
        return None, None, None
    return int(mem.used) // _MIB, int(mem.free) // _MIB, None


def _field(nv: Nvml, h: Any, field_id: int, scope: int | None = None) -> float | None:
    """One nvmlDeviceGetFieldValues value (unsigned/signed integer or double)."""
    got = nv.call("nvmlDeviceGetFieldValues", h,
                  [field_id if scope is None else (field_id, scope)])
    if not got:
        return None
    fv = got[0]
    if int(getattr(fv, "nvmlReturn", 1)) != 0:
        return None
    kind = int(getattr(fv, "valueType", -1))  # nvmlValueType_t: 0 double, 1 uint, 2 ulong,
    value = getattr(fv, "value", None)  # 3 ulonglong, 4 slonglong, 5 sint
    attr = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}.get(kind)
    return _num(getattr(value, attr, None)) if attr else None


def _nvlink_rate(nv: Nvml, h: Any, index: int, rates: _Rates) -> float | None:
    """NVLink data rx + tx over every link since the last scrape, in MB/s (KiB counters,
    as DCGM's NVLINK_BANDWIDTH_TOTAL computes it); None without NVLink or a previous
    reading."""
    rx = _field(nv, h, _FI_NVLINK_DATA_RX, _ALL_LINKS)
    tx = _field(nv, h, _FI_NVLINK_DATA_TX, _ALL_LINKS)
    if rx is None or tx is None:
        return None
    now, total = _clock(), rx + tx
    prev = rates.nvlink.get(index)
    if prev is not None and 0 <= now - prev.at < MIN_RATE_INTERVAL_S and total >= prev.reading:
        return prev.figures.get("mb_s")  # too soon: the last interval's figure
    rates.nvlink[index] = _Baseline(now, total)
    if prev is None or now <= prev.at or total < prev.reading:
        return None  # the first reading, or a counter reset
    rate: float = round((total - prev.reading) / (now - prev.at) / 1000.0, 3)
    rates.nvlink[index].figures["mb_s"] = rate
    return rate


def _pcie(nv: Nvml, h: Any, const: str, default: int) -> float | None:
    """nvmlDeviceGetPcieThroughput (KB/s over 20 ms) in bytes per second."""
    kb = _num(nv.call("nvmlDeviceGetPcieThroughput", h, nv.const(const, default)))
    return None if kb is None else kb * 1024


def _vgpu_licensed(nv: Nvml, h: Any) -> float | None:
    """1 when the vGPU licence is held, 0 when not or when the GPU is not a licensable
    vGPU (what DCGM reports on bare metal)."""
    lic = nv.call("nvmlDeviceGetGridLicensableFeatures", h)
    if lic is None:
        return None
    if not int(getattr(lic, "isGridLicenseSupported", 0)):
        return 0.0
    features = getattr(lic, "gridLicensableFeatures", ())
    n = int(getattr(lic, "licensableFeaturesCount", 0))
    return 1.0 if any(int(getattr(f, "featureCode", 0)) == _VGPU_FEATURE
                      and int(getattr(f, "featureState", 0)) > 0
                      for f in list(features)[:n]) else 0.0


def _gpm_supported(nv: Nvml, h: Any) -> bool:
    got = nv.call("nvmlGpmQueryDeviceSupport", h)
    return bool(got is not None and int(getattr(got, "isSupportedDevice", 0)))


def _gpm(nv: Nvml, h: Any, gi: int | None, index: int, rates: _Rates) -> dict[str, float]:
    """GPM's ratios for the GPU (``gi`` None) or one of its GPU instances, over the time
    since the previous scrape's GPM sample; {} on the first scrape or any failure."""
    key, now = (index, gi), _clock()
    prev = rates.gpm.get(key)
    if prev is not None and 0 <= now - prev.at < MIN_RATE_INTERVAL_S:
        return dict(prev.figures)  # too soon: keep the baseline, repeat the last interval
    sample = nv.call("nvmlGpmSampleAlloc")
    if sample is None:
        return {}
    got = (nv.call("nvmlGpmSampleGet", h, sample) if gi is None
           else nv.call("nvmlGpmMigSampleGet", h, gi, sample))
    if got is None:
        nv.call("nvmlGpmSampleFree", sample)
        return {}
    rates.gpm[key] = _Baseline(now, sample)
    if prev is None:
        return {}
    try:
        figures = _gpm_metrics(nv, prev.reading, sample)
    finally:
        nv.call("nvmlGpmSampleFree", prev.reading)
    rates.gpm[key].figures = figures
    return dict(figures)


def _gpm_metrics(nv: Nvml, first: Any, second: Any) -> dict[str, float]:
    make = getattr(nv.mod, "c_nvmlGpmMetricsGet_t", None)
    if make is None:
        return {}
    req = make()
    req.version = nv.const("NVML_GPM_METRICS_GET_VERSION", 1)
    req.numMetrics = len(GPM_METRICS)
    req.sample1, req.sample2 = first, second
    for i, metric in enumerate(GPM_METRICS.values()):
        req.metrics[i].metricId = metric
    if nv.call("nvmlGpmMetricsGet", req) is None:
        return {}
    out = {}
    for i, attr in enumerate(GPM_METRICS):
        m = req.metrics[i]
        v = _num(getattr(m, "value", None))
        if int(getattr(m, "nvmlReturn", 1)) == 0 and v is not None:
            out[attr] = round(min(v, 100.0) / 100.0, 6)
    return out


def _processes(nv: Nvml, h: Any) -> tuple[GpuProcess, ...]:
    """Compute processes and the memory each uses (unknown: none listed). The unversioned
    call is ``_v3`` in nvidia-ml-py, which drivers before R510 lack: ``_v2`` there."""
    procs = nv.call("nvmlDeviceGetComputeRunningProcesses", h)
    if procs is None:
        procs = nv.call("nvmlDeviceGetComputeRunningProcesses_v2", h)
    out: list[GpuProcess] = []
    for p in procs or ():
        pid = getattr(p, "pid", None)
        if not isinstance(pid, int) or pid <= 0:
            continue
        used = getattr(p, "usedGpuMemory", None)
        gi = getattr(p, "gpuInstanceId", None)
        out.append(GpuProcess(
            pid=pid,
            used_mib=int(used) // _MIB if isinstance(used, int) and used != _NOT_AVAILABLE
            else None,
            gpu_instance_id=gi if isinstance(gi, int) and gi != _NO_INSTANCE else None))
    return tuple(out)
