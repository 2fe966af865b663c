"""Fake of nvidia-ml-py's ``pynvml`` over a ``FakeMachine`` (no driver needed).

Same exception classes (``NVMLError`` and one ``NVMLError_<Name>`` per error code,
made the way pynvml makes them), same constant names and values, same return shapes
(``str`` from decorated string getters, ``bytes`` in ctypes ``c_char`` fields).
"""

from __future__ import annotations

import queue
import string
import sys
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_TEMPERATURE_GPU = 0
NVML_AFFINITY_SCOPE_NODE = 0
NVML_AFFINITY_SCOPE_SOCKET = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_CPU = NVML_TOPOLOGY_NODE
NVML_TOPOLOGY_SYSTEM = 50
NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1
NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_GPU_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_GPU_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_GPU_INSTANCE_PROFILE_4_SLICE = 0x3
NVML_GPU_INSTANCE_PROFILE_7_SLICE = 0x4
NVML_GPU_INSTANCE_PROFILE_8_SLICE = 0x5
NVML_GPU_INSTANCE_PROFILE_6_SLICE = 0x6
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7
NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 = 0x8
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 0x9
NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_NVLINK_ERROR_DL_REPLAY = 0
NVML_NVLINK_ERROR_DL_RECOVERY = 1
NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
NVML_NVLINK_ERROR_DL_CRC_DATA = 3
nvmlEventTypeSingleBitEccError = 0x1
nvmlEventTypeDoubleBitEccError = 0x2
nvmlEventTypeXidCriticalError = 0x8
nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonApplicationsClocksSetting = 0x2
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksThrottleReasonHwSlowdown = 0x8
nvmlClocksEventReasonSyncBoost = 0x10
nvmlClocksEventReasonSwThermalSlowdown = 0x20
nvmlClocksThrottleReasonHwThermalSlowdown = 0x40
nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x80
nvmlClocksEventReasonDisplayClockSetting = 0x100
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
nvmlMemory_v2 = 0x02000028
NVML_FI_DEV_MEMORY_TEMP = 82
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_GRID_LICENSE_FEATURE_CODE_VGPU = 1
NVML_GPM_METRICS_GET_VERSION = 1
NVML_GPM_SUPPORT_VERSION = 1
NVML_GPM_METRIC_GRAPHICS_UTIL = 1
NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
NVML_GPM_METRIC_DRAM_BW_UTIL = 10
NVML_GPM_METRIC_MAX = 477


class NVMLError(Exception):
    _valClassMapping: dict[int, type[NVMLError]] = {}
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        name = _CODE_NAMES.get(self.value)
        return name if name else f"NVML Error with code {self.value}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


_CODE_NAMES = {
    1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported",
    4: "Insufficient Permissions", 5: "Already Initialized", 6: "Not Found",
    9: "Driver Not Loaded", 12: "NVML Shared Library Not Found", 13: "Function Not Found",
    7: "Insufficient Size", 10: "Timeout",
    15: "GPU is lost", 16: "GPU requires restart", 999: "Unknown Error",
}


def _make_error_classes() -> None:
    # As pynvml's _extractNVMLErrorsAsClasses: NVML_ERROR_GPU_IS_LOST -> NVMLError_GpuIsLost.
    this = sys.modules[__name__]
    for err_name in [x for x in dir(this) if x.startswith("NVML_ERROR_")]:
        cls_name = "NVMLError_" + string.capwords(
            err_name.replace("NVML_ERROR_", ""), "_"
        ).replace("_", "")
        val = getattr(this, err_name)

        def gen_new(v: int) -> Any:
            def new(typ: type, *args: Any) -> NVMLError:
                return NVMLError.__new__(typ, v)

            return new

        cls = type(cls_name, (NVMLError,), {"__new__": gen_new(val)})
        cls.__module__ = __name__
        setattr(this, cls_name, cls)
        NVMLError._valClassMapping[val] = cls


_make_error_classes()


class NVMLLibraryMismatchError(Exception):
    """pynvml's: an unversioned wrapper (nvmlDeviceGetComputeRunningProcesses, which
    calls ``_v3``) on a driver without that version (before R510). Not an NVMLError."""


@dataclass
class Fault:
    """An injected failure: ``fn`` raises ``error`` (an NVML code, or an exception as
    pynvml raises it) for GPU ``gpu`` (None: any) and, given, when its second argument
    (a link, a sensor) is ``arg``."""

    fn: str
    error: int | BaseException
    gpu: int | None = None
    arg: Any = None


# --- the machine the fake answers for -------------------------------------------------
@dataclass
class FakeMig:
    uuid: str
    gi_id: int
    ci_id: int
    profile_id: int
    gi_slices: int
    ci_slices: int
    memory_mib: int
    memory_used_mib: int = 0
    memory_reserved_mib: int = 0


@dataclass
class FakeProcess:
    pid: int
    used_mib: int | None  # None: NVML_VALUE_NOT_AVAILABLE
    gi_id: int | None = None


_HANGING = threading.Lock()  # (FakeGpu.hanging, counted from several threads)


@dataclass
class FakeGpu:
    uuid: str
    name: str
    bus_id: str  # "00000000:68:00.0"
    memory_total_mib: int
    memory_used_mib: int = 0
    compute: tuple[int, int] | None = None
    mig_mode: tuple[int, int] | None = None  # (current, pending); None: not MIG capable
    migs: list[FakeMig] = field(default_factory=list)
    max_migs: int = 7
    gpu_numa_id: int | None = None  # nvmlDeviceGetNumaNodeId; None -> NOT_SUPPORTED
    # The NUMA node of nvmlDeviceGetMemoryAffinity (scope node), what `topo -m` prints
    # as "NUMA Affinity"; None -> NOT_SUPPORTED.
    memory_affinity: int | None = None
    cpu_affinity: str | None = None  # "0-35,72-107"
    nvlinks: list[tuple[str, int]] | None = None  # (remote bus id, remote type) per link
    util_gpu: int | None = None
    util_memory: int | None = None
    temp_c: int | None = None
    power_mw: int | None = None
    lost: bool = False
    hang_s: float = 0.0  # every call on this GPU blocks this long (a GPU off the bus)
    # Or until this is set (hang_s the most, a hang guard): a test then tells a read
    # that returned while the call still hung (``hanging``) from one that waited on it.
    hang_until: threading.Event | None = None
    hanging: int = 0  # calls on this GPU blocked now
    processes: list[FakeProcess] = field(default_factory=list)
    # Health counters; None answers NVML_ERROR_NOT_SUPPORTED, as on GPUs without them.
    # ecc: (error type, counter type) -> count, as nvmlDeviceGetTotalEccErrors.
    ecc: dict[tuple[int, int], int] | None = None
    retired_pages: tuple[int, int, bool] | None = None  # (SBE pages, DBE pages, pending)
    remapped_rows: tuple[int, int, bool, bool] | None = None  # corr, unc, pending, failed
    clocks_event_reasons: int | None = None
    nvlink_errors: dict[int, int] = field(default_factory=dict)  # counter -> count per link
    # The rest of dcgm-exporter's default counters; None answers NOT_SUPPORTED.
    memory_reserved_mib: int = 0  # FB the driver reserves (nvmlMemory_v2.reserved)
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    memory_temp_c: int | None = None  # NVML_FI_DEV_MEMORY_TEMP (HBM GPUs)
    pcie_replays: int | None = None
    pcie_tx_kb_s: int | None = None  # nvmlDeviceGetPcieThroughput, KB/s
    pcie_rx_kb_s: int | None = None
    enc_util: int | None = None
    dec_util: int | None = None
    energy_mj: int | None = None  # nvmlDeviceGetTotalEnergyConsumption
    # The encoder/decoder sampling period (µs) their utilisation comes with; no `-q` prints
    # it, so a machine's own NVML record gives it, else the fake's long-standing 167,000.
    codec_period_us: int = 167000
    nvlink_data_kib: tuple[int, int] | None = None  # (tx, rx) KiB since reset, all links
    # GPM (Hopper and later): None not supported; else GI id (None: the whole GPU) ->
    # NVML_GPM_METRIC_* id -> percent over any interval.
    gpm: dict[int | None, dict[int, float]] | None = None


@dataclass
class FakeProfile:
    enum: int  # NVML_GPU_INSTANCE_PROFILE_*
    id: int
    name: str  # "MIG 1g.10gb", as the driver names it
    slices: int
    memory_mib: int


@dataclass
class FakeMachine:
    driver: str
    cuda: int  # 12050
    nvml_version: str
    gpus: list[FakeGpu]
    ancestors: dict[tuple[int, int], int] = field(default_factory=dict)
    profiles: list[FakeProfile] = field(default_factory=list)
    init_error: int | None = None
    events_supported: bool = True
    event_wait_hangs: bool = False  # nvmlEventSetWait never returns (a wedged driver)


class _Handle:
    def __init__(self, gpu: int, mig: int | None = None) -> None:
        self.gpu, self.mig = gpu, mig


class FakeGpmSample:
    """What nvmlGpmSampleAlloc hands out: filled by a SampleGet with (GPU, GI)."""

    def __init__(self) -> None:
        self.of: tuple[int, int | None] | None = None
        self.freed = False


class c_nvmlGpmMetricsGet_t:  # pynvml's ctypes structure, by its name
    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: FakeGpmSample | None = None
        self.sample2: FakeGpmSample | None = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0)
                        for _ in range(NVML_GPM_METRIC_MAX)]


def _faulty(fn: Any, faults: list[Fault]) -> Any:
    def call(*args: Any) -> Any:
        for f in faults:
            h = args[0] if args else None
            if f.gpu is not None and getattr(h, "gpu", None) != f.gpu:
                continue
            if f.arg is not None and (len(args) < 2 or args[1] != f.arg):
                continue
            raise NVMLError(f.error) if isinstance(f.error, int) else f.error
        return fn(*args)

    return call


class FakeNvml:
    """A pynvml-like object: module constants and errors plus the calls over a machine."""

    def __init__(self, machine: FakeMachine, *, missing: frozenset[str] = frozenset()) -> None:
        self.machine = machine
        self.missing = missing
        self.initialised = 0
        self.calls: list[str] = []
        self._events: queue.Queue[SimpleNamespace] = queue.Queue()
        self._registered: set[int] = set()
        self.faults: list[Fault] = []

    # -- test controls (not pynvml names)
    def inject(self, fn: str, error: int | BaseException, *, gpu: int | None = None,
               arg: Any = None) -> None:
        """From now on ``fn`` fails with ``error`` (see ``Fault``), as a real driver does for
        one GPU, one field or one link while the rest answer."""
        self.faults.append(Fault(fn, error, gpu, arg))
    def inject_xid(self, gpu: int, xid: int) -> None:
        """The driver reports XID ``xid`` on GPU ``gpu`` (as an nvmlEventTypeXidCriticalError)."""
        self._events.put(SimpleNamespace(device=_Handle(gpu), eventType=0x8, eventData=xid,
                                         gpuInstanceId=0xFFFFFFFF,
                                         computeInstanceId=0xFFFFFFFF))

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)  # as an older nvidia-ml-py lacking the function
        if name.startswith("nvml"):
            object.__getattribute__(self, "calls").append(name)
            faults = [f for f in object.__getattribute__(self, "faults") if f.fn == name]
            if faults:
                return _faulty(object.__getattribute__(self, name), faults)
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:
        # Constants and exception classes come from this module, as on pynvml.
        try:
            return getattr(sys.modules[__name__], name)
        except AttributeError:
            raise AttributeError(name) from None

    # -- helpers
    def _need_init(self) -> None:
        if not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _gpu(self, h: _Handle) -> FakeGpu:
        self._need_init()
        g = self.machine.gpus[h.gpu]
        if g.hang_until is not None:
            with _HANGING:
                g.hanging += 1
            g.hang_until.wait(g.hang_s)
            with _HANGING:
                g.hanging -= 1
        elif g.hang_s:
            time.sleep(g.hang_s)
        if g.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return g

    def _mig(self, h: _Handle) -> FakeMig:
        g = self._gpu(h)
        if h.mig is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return g.migs[h.mig]

    # -- system
    def nvmlInit(self) -> None:
        if self.machine.init_error is not None:
            raise NVMLError(self.machine.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._need_init()
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._need_init()
        return self.machine.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._need_init()
        return self.machine.cuda

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._need_init()
        return self.machine.nvml_version

    def nvmlDeviceGetCount(self) -> int:
        self._need_init()
        return len(self.machine.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._need_init()
        if not 0 <= index < len(self.machine.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    # -- device facts
    def nvmlDeviceGetUUID(self, h: _Handle) -> str:
        return self._mig(h).uuid if h.mig is not None else self._gpu(h).uuid

    def nvmlDeviceGetName(self, h: _Handle) -> str:
        return self._gpu(h).name

    def nvmlDeviceGetMemoryInfo(self, h: _Handle, version: Any = None) -> SimpleNamespace:
        """v1 (no version): used counts what the driver reserves; nvmlMemory_v2: reserved
        apart, used and free as nvidia-smi -q prints them."""
        if h.mig is not None:
            m = self._mig(h)
            total, used, reserved = m.memory_mib, m.memory_used_mib, m.memory_reserved_mib
        else:
            g = self._gpu(h)
            total, used, reserved = (g.memory_total_mib, g.memory_used_mib,
                                     g.memory_reserved_mib)
        free = total - used - reserved
        if version == nvmlMemory_v2:
            return SimpleNamespace(version=version, total=total << 20, reserved=reserved << 20,
                                   used=used << 20, free=free << 20)
        if version is not None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return SimpleNamespace(total=total << 20, used=(used + reserved) << 20, free=free << 20)

    def nvmlDeviceGetPciInfo(self, h: _Handle) -> SimpleNamespace:
        g = self._gpu(h)
        return SimpleNamespace(busId=g.bus_id.encode(), busIdLegacy=g.bus_id[4:].encode())

    def nvmlDeviceGetCudaComputeCapability(self, h: _Handle) -> tuple[int, int]:
        g = self._gpu(h)
        if g.compute is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return g.compute

    def nvmlDeviceGetNumaNodeId(self, h: _Handle) -> int:
        g = self._gpu(h)
        if g.gpu_numa_id is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return g.gpu_numa_id

    def nvmlDeviceGetMemoryAffinity(self, h: _Handle, node_set_size: int, scope: int) -> list[int]:
        g = self._gpu(h)
        if g.memory_affinity is None or scope != NVML_AFFINITY_SCOPE_NODE:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        words = [0] * node_set_size
        if g.memory_affinity // 64 < node_set_size:
            words[g.memory_affinity // 64] |= 1 << (g.memory_affinity % 64)
        return words

    def nvmlDeviceGetCpuAffinity(self, h: _Handle, cpu_set_size: int) -> list[int]:
        g = self._gpu(h)
        words = [0] * cpu_set_size
        for part in (g.cpu_affinity or "").split(","):
            if not part:
                continue
            lo, _, hi = part.partition("-")
            for cpu in range(int(lo), int(hi or lo) + 1):
                if cpu // 64 < cpu_set_size:
                    words[cpu // 64] |= 1 << (cpu % 64)
        return words

    # -- MIG
    def nvmlDeviceGetMigMode(self, h: _Handle) -> list[int]:
        g = self._gpu(h)
        if g.mig_mode is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return list(g.mig_mode)

    def nvmlDeviceGetMaxMigDeviceCount(self, h: _Handle) -> int:
        g = self._gpu(h)
        return g.max_migs if g.mig_mode is not None else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: _Handle, index: int) -> _Handle:
        g = self._gpu(h)
        if index >= len(g.migs):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return _Handle(h.gpu, index)

    def nvmlDeviceGetGpuInstanceId(self, h: _Handle) -> int:
        return self._mig(h).gi_id

    def nvmlDeviceGetComputeInstanceId(self, h: _Handle) -> int:
        return self._mig(h).ci_id

    def nvmlDeviceGetAttributes(self, h: _Handle) -> SimpleNamespace:
        m = self._mig(h)
        return SimpleNamespace(
            gpuInstanceSliceCount=m.gi_slices,
            computeInstanceSliceCount=m.ci_slices,
            memorySizeMB=m.memory_mib,
        )

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, h: _Handle, profile: int, version: int = 2
    ) -> SimpleNamespace:
        self._gpu(h)
        for p in self.machine.profiles:
            if p.enum == profile:
                return SimpleNamespace(
                    id=p.id, sliceCount=p.slices, memorySizeMB=p.memory_mib, name=p.name.encode()
                )
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetGpuInstanceById(self, h: _Handle, gi_id: int) -> tuple[int, int]:
        g = self._gpu(h)
        if not any(m.gi_id == gi_id for m in g.migs):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return (h.gpu, gi_id)

    def nvmlGpuInstanceGetInfo(self, gi: tuple[int, int]) -> SimpleNamespace:
        g = self._gpu(_Handle(gi[0]))
        m = next(m for m in g.migs if m.gi_id == gi[1])
        return SimpleNamespace(id=m.gi_id, profileId=m.profile_id)

    # -- topology
    def nvmlDeviceGetTopologyCommonAncestor(self, a: _Handle, b: _Handle) -> int:
        self._gpu(a)
        self._gpu(b)
        key = (min(a.gpu, b.gpu), max(a.gpu, b.gpu))
        if key not in self.machine.ancestors:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return self.machine.ancestors[key]

    def _link(self, h: _Handle, link: int) -> tuple[str, int]:
        g = self._gpu(h)
        if g.nvlinks is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if link >= len(g.nvlinks):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return g.nvlinks[link]

    def nvmlDeviceGetNvLinkState(self, h: _Handle, link: int) -> int:
        self._link(h, link)
        return NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: _Handle, link: int) -> SimpleNamespace:
        bus, _ = self._link(h, link)
        return SimpleNamespace(busId=bus.encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: _Handle, link: int) -> int:
        return self._link(h, link)[1]

    # -- live values
    def nvmlDeviceGetUtilizationRates(self, h: _Handle) -> SimpleNamespace:
        g = self._gpu(h)
        if g.util_gpu is None or g.util_memory is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=g.util_gpu, memory=g.util_memory)

    def nvmlDeviceGetTemperature(self, h: _Handle, sensor: int) -> int:
        g = self._gpu(h)
        if g.temp_c is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return g.temp_c

    def nvmlDeviceGetComputeRunningProcesses(self, h: _Handle) -> list[SimpleNamespace]:
        return self._processes(h)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: _Handle) -> list[SimpleNamespace]:
        # the same list: the v2 struct lacks only fields swarmgpu does not read
        return self._processes(h)

    def _processes(self, h: _Handle) -> list[SimpleNamespace]:
        g = self._gpu(h)
        return [SimpleNamespace(
            pid=p.pid,
            usedGpuMemory=(1 << 64) - 1 if p.used_mib is None else p.used_mib * 1024 * 1024,
            gpuInstanceId=0xFFFFFFFF if p.gi_id is None else p.gi_id,
            computeInstanceId=0xFFFFFFFF if p.gi_id is None else 0) for p in g.processes]

    def nvmlDeviceGetIndex(self, h: _Handle) -> int:
        self._need_init()
        return h.gpu

    # -- health counters
    def nvmlDeviceGetTotalEccErrors(self, h: _Handle, error_type: int, counter_type: int) -> int:
        g = self._gpu(h)
        if g.ecc is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return g.ecc.get((error_type, counter_type), 0)

    def nvmlDeviceGetRetiredPages(self, h: _Handle, cause: int) -> list[int]:
        g = self._gpu(h)
        if g.retired_pages is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return [0x1000 * n for n in range(g.retired_pages[cause])]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: _Handle) -> int:
        g = self._gpu(h)
        if g.retired_pages is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return NVML_FEATURE_ENABLED if g.retired_pages[2] else NVML_FEATURE_DISABLED

    def nvmlDeviceGetRemappedRows(self, h: _Handle) -> tuple[int, int, int, int]:
        g = self._gpu(h)
        if g.remapped_rows is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        c, u, pending, failed = g.remapped_rows
        return (c, u, int(pending), int(failed))

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: _Handle) -> int:
        g = self._gpu(h)
        if g.clocks_event_reasons is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return g.clocks_event_reasons

    def nvmlDeviceGetNvLinkErrorCounter(self, h: _Handle, link: int, counter: int) -> int:
        self._link(h, link)
        return self._gpu(h).nvlink_errors.get(counter, 0)

    # -- events
    def nvmlEventSetCreate(self) -> str:
        self._need_init()
        return "event-set"

    def nvmlDeviceGetSupportedEventTypes(self, h: _Handle) -> int:
        self._gpu(h)
        if not self.machine.events_supported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return 0x1 | 0x2 | 0x8

    def nvmlDeviceRegisterEvents(self, h: _Handle, types: int, event_set: str) -> None:
        self._gpu(h)
        if not self.machine.events_supported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        self._registered.add(h.gpu)

    def nvmlEventSetWait(self, event_set: str, timeout_ms: int) -> SimpleNamespace:
        self._need_init()
        if self.machine.event_wait_hangs:
            threading.Event().wait()  # never returns, as a wedged driver call
        try:
            while True:
                ev = self._events.get(timeout=timeout_ms / 1000)
                if ev.device.gpu in self._registered:
                    return ev
        except queue.Empty:
            raise NVMLError(NVML_ERROR_TIMEOUT) from None

    def nvmlEventSetFree(self, event_set: str) -> None:
        return None

    def nvmlDeviceGetPowerUsage(self, h: _Handle) -> int:
        g = self._gpu(h)
        if g.power_mw is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return g.power_mw

    # -- the rest of dcgm-exporter's default counters
    def _value(self, h: _Handle, attr: str) -> Any:
        if h.mig is not None:  # a MIG device measures none of these itself
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        v = getattr(self._gpu(h), attr)
        if v is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return v

    def nvmlDeviceGetClockInfo(self, h: _Handle, clock: int) -> int:
        attr = {NVML_CLOCK_SM: "sm_clock_mhz", NVML_CLOCK_MEM: "mem_clock_mhz"}.get(clock)
        if attr is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return int(self._value(h, attr))

    def nvmlDeviceGetTotalEnergyConsumption(self, h: _Handle) -> int:
        return int(self._value(h, "energy_mj"))

    def nvmlDeviceGetPcieReplayCounter(self, h: _Handle) -> int:
        return int(self._value(h, "pcie_replays"))

    def nvmlDeviceGetPcieThroughput(self, h: _Handle, counter: int) -> int:
        return int(self._value(h, "pcie_tx_kb_s" if counter == NVML_PCIE_UTIL_TX_BYTES
                               else "pcie_rx_kb_s"))

    def nvmlDeviceGetEncoderUtilization(self, h: _Handle) -> list[int]:
        return [int(self._value(h, "enc_util")), self._gpu(h).codec_period_us]

    def nvmlDeviceGetDecoderUtilization(self, h: _Handle) -> list[int]:
        return [int(self._value(h, "dec_util")), self._gpu(h).codec_period_us]

    def nvmlDeviceGetGridLicensableFeatures(self, h: _Handle) -> SimpleNamespace:
        self._gpu(h)  # bare metal, as every capture: no vGPU licence to hold
        return SimpleNamespace(isGridLicenseSupported=0, licensableFeaturesCount=0,
                               gridLicensableFeatures=[])

    def nvmlDeviceGetFieldValues(self, h: _Handle, field_ids: list[Any]) -> list[Any]:
        out = []
        for fid in field_ids:
            fid, scope = fid if isinstance(fid, tuple) else (fid, 0)
            fv = SimpleNamespace(fieldId=fid, scopeId=scope, timestamp=0, latencyUsec=0,
                                 valueType=NVML_VALUE_TYPE_UNSIGNED_INT,
                                 nvmlReturn=NVML_SUCCESS, value=SimpleNamespace())
            try:
                if fid == NVML_FI_DEV_MEMORY_TEMP:
                    fv.value.uiVal = int(self._value(h, "memory_temp_c"))
                elif fid in (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                             NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX):
                    tx, rx = self._value(h, "nvlink_data_kib")
                    fv.valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                    fv.value.ullVal = tx if fid == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX else rx
                else:
                    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
            except NVMLError as e:
                fv.nvmlReturn = e.value
            out.append(fv)
        return out

    # -- GPM
    def nvmlGpmQueryDeviceSupport(self, h: _Handle) -> SimpleNamespace:
        g = self._gpu(h)
        return SimpleNamespace(version=NVML_GPM_SUPPORT_VERSION,
                               isSupportedDevice=int(g.gpm is not None))

    def nvmlGpmSampleAlloc(self) -> FakeGpmSample:
        self._need_init()
        return FakeGpmSample()

    def nvmlGpmSampleFree(self, sample: FakeGpmSample) -> None:
        sample.freed = True

    def _gpm_of(self, h: _Handle, gi: int | None) -> None:
        g = self._gpu(h)
        if g.gpm is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if gi is not None and not any(m.gi_id == gi for m in g.migs):
            raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlGpmSampleGet(self, h: _Handle, sample: FakeGpmSample) -> FakeGpmSample:
        self._gpm_of(h, None)
        sample.of = (h.gpu, None)
        return sample

    def nvmlGpmMigSampleGet(self, h: _Handle, gi: int, sample: FakeGpmSample) -> FakeGpmSample:
        self._gpm_of(h, gi)
        sample.of = (h.gpu, gi)
        return sample

    def nvmlGpmMetricsGet(self, req: c_nvmlGpmMetricsGet_t) -> c_nvmlGpmMetricsGet_t:
        a, b = req.sample1, req.sample2
        if a is None or b is None or a.freed or b.freed or a.of is None or a.of != b.of:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gpu, gi = a.of
        table = (self.machine.gpus[gpu].gpm or {}).get(gi, {})
        for m in req.metrics[:req.numMetrics]:
            if m.metricId in table:
                m.value, m.nvmlReturn = float(table[m.metricId]), NVML_SUCCESS
            else:
                m.value, m.nvmlReturn = 0.0, NVML_ERROR_NOT_SUPPORTED
        return req
