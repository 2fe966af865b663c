"""``nvml`` — live facts from the NVIDIA driver. The only module that imports pynvml.

pynvml is imported lazily, so the package imports on machines without it, and any
object with pynvml's names can be injected (``nvml_module=``; the tests use a fake
built from real captures). Every NVML call goes through ``_Nvml.call``, which turns
a missing function or an ``NVMLError`` into ``None`` ("unknown"); only a lost GPU
(``NVML_ERROR_GPU_IS_LOST``/``RESET_REQUIRED``) escapes it, and it marks just that
GPU unhealthy. Reading never raises: a node without a driver reads as zero GPUs
with the reason in ``errors``.

Health signals (``core.health.HealthSignals``: ECC, retired pages, row remapping, clock
throttle reasons, NVLink error counters) are read with the GPU's other facts. XID events
come from ``_XidWatcher``: one thread per NVML module that registers for critical XID
events and waits on them; ``/facts`` only copies what it has seen, so a wait that hangs in
the driver never blocks a read (the facts then say the watch is stalled).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import socket
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from swarmgpu.agent.facts.naming import mig_profile_name
from swarmgpu.core.health import MAX_XID_EVENTS, HealthSignals, XidEvent
from swarmgpu.core.model import Gpu, MigDevice, NodeFacts
from swarmgpu.core.samples import GpuProcess, GpuSample

_MIB = 1024 * 1024
# nvidia-smi topo -m prints these for nvmlDeviceGetTopologyCommonAncestor's levels
# (nvml.h: INTERNAL=0, SINGLE=10, MULTIPLE=20, HOSTBRIDGE=30, NODE=40, SYSTEM=50).
# INTERNAL means two GPUs on one board (K80, GTX 690) behind the board's own PCIe
# switch; nvidia-smi has no symbol of its own for it, so it counts as PIX here.
TOPOLOGY_LINKS: dict[int, str] = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_LOST_CODES = {15, 16}  # NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED
_NVLINK_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH
_CPUSET_WORDS = 16  # 16 x 64 bits: room for 1024 CPUs


class GpuLost(Exception):
    """An NVML call said the GPU is gone; the GPU is reported unhealthy."""


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _error_text(e: BaseException) -> str:
    try:
        msg = str(e)
    except Exception:  # a broken NVMLError.__str__ must not hide the real error
        msg = ""
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def load_pynvml() -> Any:
    """The real pynvml module (nvidia-ml-py), imported only when NVML is used."""
    import pynvml

    return pynvml


class _Nvml:
    """Guarded access to a pynvml-like module."""

    def __init__(self, mod: Any) -> None:
        self.mod = mod
        self.error_cls: type[BaseException] = getattr(mod, "NVMLError", Exception)

    def const(self, name: str, default: int) -> int:
        v = getattr(self.mod, name, default)
        return v if isinstance(v, int) else default

    def call(self, name: str, *args: Any) -> Any:
        """``mod.name(*args)``, or None when the function is missing or NVML says no."""
        fn = getattr(self.mod, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.error_cls as e:
            if getattr(e, "value", None) in _LOST_CODES:
                raise GpuLost(f"{name}: {_error_text(e)}") from e
            return None


# --- init once per module object, shut down at exit -------------------------------
_init_lock = threading.Lock()
_initialised: dict[int, Any] = {}


def _ensure_init(mod: Any) -> str | None:
    """Initialise NVML once per module; the error text when it cannot be."""
    with _init_lock:
        if id(mod) in _initialised:
            return None
        try:
            mod.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, OSError...
            if getattr(e, "value", None) == getattr(mod, "NVML_ERROR_LIBRARY_NOT_FOUND", 12):
                # No libnvidia-ml.so.1 means no driver installed (or, in a container,
                # not run with the nvidia runtime): say that, not "is it loaded?".
                return (
                    f"nvml: cannot initialise NVML ({_error_text(e)}): libnvidia-ml.so.1, "
                    "which the NVIDIA driver installs, is not found; install the driver "
                    "(in a container: run it with the nvidia runtime)"
                )
            return (
                f"nvml: cannot initialise NVML ({_error_text(e)}); is the NVIDIA driver "
                "loaded and, in a container, is it run with the nvidia runtime?"
            )
        _initialised[id(mod)] = mod
        return None


def shutdown(nvml_module: Any = None) -> None:
    """Shut NVML down (all modules when none is given); called at exit."""
    with _init_lock:
        mods = [nvml_module] if nvml_module is not None else list(_initialised.values())
        for mod in mods:
            if _initialised.pop(id(mod), None) is not None:
                with contextlib.suppress(Exception):  # best effort at exit
                    mod.nvmlShutdown()


atexit.register(shutdown)


def _module(nvml_module: Any) -> tuple[Any, str | None]:
    if nvml_module is not None:
        return nvml_module, None
    try:
        return load_pynvml(), None
    except ImportError as e:
        return None, f"nvml: pynvml is not installed ({e}); pip install nvidia-ml-py"


# --- small pure helpers -----------------------------------------------------------
def cuda_version_text(v: int) -> str:
    """NVML's 12020 -> ``"12.2"``."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def cpu_list(words: Any) -> str | None:
    """A CPU bitmask (64-bit words, lowest CPUs first) as ``"0-35,72-107"``."""
    cpus = [w * 64 + b for w, word in enumerate(words) for b in range(64) if int(word) >> b & 1]
    if not cpus:
        return None
    ranges: list[str] = []
    first = prev = cpus[0]
    for c in [*cpus[1:], -2]:
        if c != prev + 1:
            ranges.append(str(first) if first == prev else f"{first}-{prev}")
            first = c
        prev = c
    return ",".join(ranges)


def normalise_bus_id(bus_id: str) -> str:
    """``00000000:68:00.0`` / ``0000:68:00.0`` -> ``00000000:68:00.0`` (upper case)."""
    domain, _, rest = bus_id.strip().partition(":")
    if not rest:
        return bus_id.strip().upper()
    return f"{int(domain, 16):08X}:{rest.upper()}"


def sysfs_numa_node(bus_id: str, sysfs_root: Path) -> int | None:
    """NUMA node of a PCI device from ``/sys/bus/pci/devices/<busid>/numa_node``."""
    domain, _, rest = normalise_bus_id(bus_id).partition(":")
    if not rest:
        return None
    path = sysfs_root / "bus" / "pci" / "devices" / f"{int(domain, 16):04x}:{rest.lower()}"
    try:
        v = int((path / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return v if v >= 0 else None


# --- the source ---------------------------------------------------------------------
@dataclass
class _GpuRead:
    """What was read of one GPU so far (kept when the GPU is lost half-way)."""

    index: int
    handle: Any = None
    uuid: str | None = None
    product: str | None = None
    memory_mib: int | None = None
    pci_bus_id: str = ""
    compute: tuple[int | None, int | None] = (None, None)
    mig_capable: bool = False
    mig_enabled: bool = False
    mig_devices: list[MigDevice] = field(default_factory=list)
    numa_node: int | None = None
    cpu_affinity: str | None = None
    errors: list[str] = field(default_factory=list)
    lost: str | None = None
    health: HealthSignals | None = None

    def to_gpu(self) -> Gpu:
        problems = list(self.errors)
        if self.lost:
            problems.insert(0, self.lost)
        if self.uuid is None:
            problems.append("UUID unknown")
        if self.memory_mib is None:
            problems.append("memory unknown (reported as 1 MiB)")
        return Gpu(
            index=self.index,
            # An unreadable GPU still needs a unique id; this one is plainly not real.
            uuid=self.uuid or f"GPU-unknown-index-{self.index}",
            product=self.product or "unknown",
            memory_mib=self.memory_mib or 1,
            pci_bus_id=self.pci_bus_id,
            compute_major=self.compute[0],
            compute_minor=self.compute[1],
            mig_capable=self.mig_capable,
            mig_enabled=self.mig_enabled,
            mig_devices=tuple(self.mig_devices),
            numa_node=self.numa_node,
            cpu_affinity=self.cpu_affinity,
            healthy=self.lost is None and self.uuid is not None,
            error="; ".join(problems) or None,
            health=self.health,
        )


class NvmlSource:
    """``nvml``: the driver of this machine (or an injected pynvml-like module)."""

    spec = "nvml"

    def __init__(
        self,
        *,
        hostname: str | None = None,
        nvml_module: Any = None,
        sysfs_root: str | Path = "/sys",
        gpu_deadline_s: float = 5.0,
        xid_events: bool = True,
    ) -> None:
        self.hostname = hostname or socket.gethostname()
        self.nvml_module = nvml_module
        self.sysfs_root = Path(sysfs_root)
        self.gpu_deadline_s = gpu_deadline_s
        self.xid_events = xid_events

    def read(self) -> NodeFacts:
        mod, err = _module(self.nvml_module)
        if mod is None or err is not None:
            return NodeFacts(hostname=self.hostname, source=self.spec, errors=(err or "",))
        init_err = _ensure_init(mod)
        if init_err:
            return NodeFacts(hostname=self.hostname, source=self.spec, errors=(init_err,))
        watcher = xid_watcher(mod) if self.xid_events else None
        return read_facts(_Nvml(mod), hostname=self.hostname, sysfs_root=self.sysfs_root,
                          gpu_deadline_s=self.gpu_deadline_s, xids=watcher)


# Reads of GPUs whose NVML calls hung, by index: a stuck call cannot be cancelled, so
# the GPU is not asked again until that read returns (no pile-up of stuck threads).
_HUNG: dict[tuple[int, int], concurrent.futures.Future[_GpuRead]] = {}
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="nvml-gpu")


def _read_gpus(nv: _Nvml, count: int, sysfs_root: Path, deadline_s: float) -> list[_GpuRead]:
    """Every GPU read in parallel, each within its deadline; a hung GPU is unhealthy."""
    futures: dict[int, concurrent.futures.Future[_GpuRead]] = {}
    lib = id(nv.mod)
    for i in range(count):
        stuck = _HUNG.get((lib, i))
        if stuck is not None and not stuck.done():
            continue
        _HUNG.pop((lib, i), None)
        futures[i] = _POOL.submit(_read_gpu, nv, i, sysfs_root)
    concurrent.futures.wait(futures.values(), timeout=deadline_s)
    reads = []
    for i in range(count):
        f = futures.get(i)
        if f is not None and f.done():
            reads.append(f.result())
            continue
        if f is not None:
            _HUNG[(lib, i)] = f
        reads.append(_GpuRead(index=i, lost=(
            f"NVML calls for this GPU did not return within {deadline_s:g}s (hung: fallen "
            "off the bus? check dmesg for Xid errors); not asked again until they return")))
    return reads


def read_facts(nv: _Nvml, *, hostname: str, sysfs_root: Path, spec: str = "nvml",
               gpu_deadline_s: float = 5.0, xids: _XidWatcher | None = None) -> NodeFacts:
    """One consistent read of every GPU on an initialised NVML."""
    errors: list[str] = []
    driver = nv.call("nvmlSystemGetDriverVersion")
    cuda = nv.call("nvmlSystemGetCudaDriverVersion")
    nvml_version = nv.call("nvmlSystemGetNVMLVersion")
    count = nv.call("nvmlDeviceGetCount")
    if count is None:
        return NodeFacts(
            hostname=hostname,
            driver_version=_text(driver) if driver is not None else None,
            source=spec,
            errors=("nvml: nvmlDeviceGetCount failed; no GPUs can be listed",),
        )
    reads = _read_gpus(nv, int(count), sysfs_root, gpu_deadline_s)
    if xids is not None:
        errors += xids.attach(reads)
    links, link_errors = _links(nv, reads)
    errors += link_errors
    gpus = tuple(r.to_gpu() for r in reads)
    errors += [f"nvml: GPU {g.index}: {g.error}" for g in gpus if not g.healthy]
    return NodeFacts(
        hostname=hostname,
        gpus=gpus,
        links=links,
        driver_version=_text(driver) if driver is not None else None,
        cuda_driver_version=cuda_version_text(int(cuda)) if isinstance(cuda, int) else None,
        nvml_version=_text(nvml_version) if nvml_version is not None else None,
        source=spec,
        errors=tuple(errors),
    )


def _read_gpu(nv: _Nvml, index: int, sysfs_root: Path) -> _GpuRead:
    r = _GpuRead(index=index)
    try:
        r.handle = nv.call("nvmlDeviceGetHandleByIndex", index)
        if r.handle is None:
            r.lost = "nvmlDeviceGetHandleByIndex failed"
            return r
        _fill_gpu(nv, r, sysfs_root)
    except GpuLost as e:
        r.lost = str(e)
    return r


def _fill_gpu(nv: _Nvml, r: _GpuRead, sysfs_root: Path) -> None:
    h = r.handle
    uuid = nv.call("nvmlDeviceGetUUID", h)
    r.uuid = _text(uuid) if uuid is not None else None
    name = nv.call("nvmlDeviceGetName", h)
    r.product = _text(name) if name is not None else None
    mem = nv.call("nvmlDeviceGetMemoryInfo", h)
    r.memory_mib = int(mem.total) // _MIB if mem is not None else None
    pci = nv.call("nvmlDeviceGetPciInfo", h)
    if pci is not None:
        r.pci_bus_id = normalise_bus_id(_text(pci.busId))
    cc = nv.call("nvmlDeviceGetCudaComputeCapability", h)
    if cc is not None:
        r.compute = (int(cc[0]), int(cc[1]))
    mig = nv.call("nvmlDeviceGetMigMode", h)
    if mig is not None:
        r.mig_capable = True
        r.mig_enabled = int(mig[0]) == nv.const("NVML_DEVICE_MIG_ENABLE", 1)
    if r.mig_enabled:
        r.mig_devices = _mig_devices(nv, h, r.errors)
    # sysfs first: it is the CPU-side node that `topo -m` calls "NUMA Affinity".
    # nvmlDeviceGetNumaNodeId is the GPU's own memory node ("GPU NUMA ID"), set only
    # where GPU memory is a NUMA node (Grace Hopper); it is the fallback.
    r.numa_node = sysfs_numa_node(r.pci_bus_id, sysfs_root) if r.pci_bus_id else None
    if r.numa_node is None:
        numa = nv.call("nvmlDeviceGetNumaNodeId", h)
        r.numa_node = int(numa) if isinstance(numa, int) and numa >= 0 else None
    words = nv.call("nvmlDeviceGetCpuAffinity", h, _CPUSET_WORDS)
    r.cpu_affinity = cpu_list(words) if words is not None else None
    r.health = _health(nv, h)


def _count(v: Any) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _health(nv: _Nvml, h: Any) -> HealthSignals:
    """ECC, retired pages, row remapping, throttle reasons, NVLink errors; what the GPU
    does not support (NOT_SUPPORTED: ECC off, no remapping before Ampere) stays None."""
    ecc: dict[tuple[int, int], int | None] = {}
    for et in (0, 1):  # NVML_MEMORY_ERROR_TYPE_CORRECTED, _UNCORRECTED
        for ct in (0, 1):  # NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC
            ecc[(et, ct)] = _count(nv.call("nvmlDeviceGetTotalEccErrors", h, et, ct))
    sbe_pages = nv.call("nvmlDeviceGetRetiredPages", h, 0)  # MULTIPLE_SINGLE_BIT_ECC_ERRORS
    dbe_pages = nv.call("nvmlDeviceGetRetiredPages", h, 1)  # DOUBLE_BIT_ECC_ERROR
    pages_pending = nv.call("nvmlDeviceGetRetiredPagesPendingStatus", h)
    remap = nv.call("nvmlDeviceGetRemappedRows", h)
    reasons = nv.call("nvmlDeviceGetCurrentClocksEventReasons", h)
    if reasons is None:  # drivers before 535 name it "throttle"
        reasons = nv.call("nvmlDeviceGetCurrentClocksThrottleReasons", h)
    nvl = _nvlink_errors(nv, h)
    return HealthSignals(
        ecc_sbe_volatile=ecc[(0, 0)], ecc_dbe_volatile=ecc[(1, 0)],
        ecc_sbe_aggregate=ecc[(0, 1)], ecc_dbe_aggregate=ecc[(1, 1)],
        retired_pages_sbe=len(sbe_pages) if sbe_pages is not None else None,
        retired_pages_dbe=len(dbe_pages) if dbe_pages is not None else None,
        retired_pages_pending=(int(pages_pending) == nv.const("NVML_FEATURE_ENABLED", 1)
                               if pages_pending is not None else None),
        row_remap_correctable=_count(remap[0]) if remap is not None else None,
        row_remap_uncorrectable=_count(remap[1]) if remap is not None else None,
        row_remap_pending=bool(remap[2]) if remap is not None else None,
        row_remap_failed=bool(remap[3]) if remap is not None else None,
        throttle_reasons=_count(reasons),
        nvlink_crc_errors=nvl[2], nvlink_replay_errors=nvl[0], nvlink_recovery_errors=nvl[1],
    )


def _nvlink_errors(nv: _Nvml, h: Any) -> dict[int, int | None]:
    """Per NVML_NVLINK_ERROR_DL_* counter (0 replay, 1 recovery, 2 CRC flit), the sum over
    the GPU's links; None when it has no NVLink."""
    sums: dict[int, int | None] = {0: None, 1: None, 2: None}
    for link in range(nv.const("NVML_NVLINK_MAX_LINKS", 18)):
        if nv.call("nvmlDeviceGetNvLinkState", h, link) is None:
            break
        for counter in sums:
            v = _count(nv.call("nvmlDeviceGetNvLinkErrorCounter", h, link, counter))
            if v is not None:
                sums[counter] = (sums[counter] or 0) + v
    return sums


# --- XID events ---------------------------------------------------------------------
_XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
_WAIT_MS = 1000
_STALLED_S = 30.0  # a wait loop silent this long is reported stalled


class _XidWatcher:
    """One thread: register every GPU for critical XID events, then wait on them forever.

    Reads never wait on it: ``attach`` copies the events seen so far under a lock. The
    thread's own NVML calls may hang (a GPU off the bus); the facts then say so."""

    def __init__(self, mod: Any) -> None:
        self.nv = _Nvml(mod)
        self.lock = threading.Lock()
        self.events: dict[int, deque[XidEvent]] = {}
        self.problem: str | None = None
        self.beat = time.monotonic()
        self.started = False

    def start(self) -> None:
        threading.Thread(target=self._run, name="nvml-xid", daemon=True).start()
        self.started = True

    def _run(self) -> None:
        nv = self.nv
        try:
            event_set = nv.call("nvmlEventSetCreate")
            if event_set is None:
                self._set_problem("XID events unavailable (nvmlEventSetCreate failed)")
                return
            count = int(nv.call("nvmlDeviceGetCount") or 0)
            refused = []
            for i in range(count):
                h = nv.call("nvmlDeviceGetHandleByIndex", i)
                if h is None or not self._registered(h, event_set):
                    refused.append(i)
            if refused:
                self._set_problem(f"XID events not available for GPU(s) {refused} "
                                  "(NOT_SUPPORTED: a VM or an old driver?)")
            while _ensure_alive(nv.mod):
                self.beat = time.monotonic()
                ev = nv.call("nvmlEventSetWait", event_set, _WAIT_MS)
                if ev is None:
                    continue  # NVML_ERROR_TIMEOUT: nothing happened
                self._record(ev)
        except Exception as e:  # GpuLost and any driver surprise end the watch, reported
            self._set_problem(f"XID watch stopped: {_error_text(e)}")

    def _registered(self, h: Any, event_set: Any) -> bool:
        """Register one GPU; pynvml returns None either way, so success is no exception."""
        fn = getattr(self.nv.mod, "nvmlDeviceRegisterEvents", None)
        if fn is None:
            return False
        try:
            fn(h, _XID_CRITICAL, event_set)
        except self.nv.error_cls:
            return False
        return True

    def _record(self, ev: Any) -> None:
        if int(getattr(ev, "eventType", 0)) & _XID_CRITICAL == 0:
            return
        index = self.nv.call("nvmlDeviceGetIndex", ev.device)
        if not isinstance(index, int):
            return
        with self.lock:
            q = self.events.setdefault(index, deque(maxlen=MAX_XID_EVENTS))
            q.append(XidEvent(int(ev.eventData), time.time()))

    def _set_problem(self, text: str) -> None:
        with self.lock:
            self.problem = text

    def attach(self, reads: list[_GpuRead]) -> list[str]:
        """Put the events seen so far on each GPU's health; the watch's problems."""
        with self.lock:
            events = {i: tuple(q) for i, q in self.events.items()}
            problem = self.problem
        for r in reads:
            if r.index in events:
                r.health = replace(r.health or HealthSignals(), xid_events=events[r.index])
        notes = [f"nvml: {problem}"] if problem else []
        silent = time.monotonic() - self.beat
        if problem is None and self.started and silent > _STALLED_S + _WAIT_MS / 1000:
            notes.append(f"nvml: XID event wait has not returned for {silent:.0f}s "
                         "(hung in the driver); XID events may be missed")
        return notes


_watchers: dict[int, _XidWatcher] = {}


def _ensure_alive(mod: Any) -> bool:
    with _init_lock:
        return id(mod) in _initialised


def xid_watcher(mod: Any) -> _XidWatcher:
    """The module's watcher, started on first use."""
    with _init_lock:
        w = _watchers.get(id(mod))
        if w is None or w.nv.mod is not mod:
            w = _watchers[id(mod)] = _XidWatcher(mod)
            w.start()
        return w


def _mig_devices(nv: _Nvml, parent: Any, errors: list[str]) -> list[MigDevice]:
    out: list[MigDevice] = []
    most = nv.call("nvmlDeviceGetMaxMigDeviceCount", parent)
    names = _gi_profile_names(nv, parent)
    for k in range(int(most or 0)):
        mh = nv.call("nvmlDeviceGetMigDeviceHandleByIndex", parent, k)
        if mh is None:
            continue  # an empty slot answers NVML_ERROR_NOT_FOUND
        uuid = nv.call("nvmlDeviceGetUUID", mh)
        gi = nv.call("nvmlDeviceGetGpuInstanceId", mh)
        ci = nv.call("nvmlDeviceGetComputeInstanceId", mh)
        attrs = nv.call("nvmlDeviceGetAttributes", mh)
        mem = nv.call("nvmlDeviceGetMemoryInfo", mh)
        memory_mib = (
            int(mem.total) // _MIB
            if mem is not None
            else int(attrs.memorySizeMB) if attrs is not None else 0
        )
        profile = _mig_profile(nv, parent, gi, attrs, names)
        if uuid is None or profile is None:
            errors.append(f"MIG device {k}: UUID or profile unknown; left out")
            continue
        out.append(
            MigDevice(
                profile=profile,
                uuid=_text(uuid),
                memory_mib=memory_mib,
                gi_id=int(gi) if gi is not None else None,
                ci_id=int(ci) if ci is not None else None,
            )
        )
    return out


def _gi_profile_names(nv: _Nvml, parent: Any) -> dict[int, str]:
    """GI profile id -> nvidia-smi name (``1g.10gb``), from the driver's profile table."""
    names: dict[int, str] = {}
    for p in range(nv.const("NVML_GPU_INSTANCE_PROFILE_COUNT", 0)):
        info = nv.call("nvmlDeviceGetGpuInstanceProfileInfo", parent, p)
        name = getattr(info, "name", None) if info is not None else None
        if name:
            text = _text(name)
            names[int(info.id)] = text[4:] if text.startswith("MIG ") else text
    return names


def _mig_profile(
    nv: _Nvml, parent: Any, gi: Any, attrs: Any, names: dict[int, str]
) -> str | None:
    base: str | None = None
    if gi is not None and names:
        gih = nv.call("nvmlDeviceGetGpuInstanceById", parent, gi)
        info = nv.call("nvmlGpuInstanceGetInfo", gih) if gih is not None else None
        if info is not None:
            base = names.get(int(info.profileId))
    if attrs is None:
        return base
    gi_slices, ci_slices = int(attrs.gpuInstanceSliceCount), int(attrs.computeInstanceSliceCount)
    if base is None:
        return mig_profile_name(gi_slices, int(attrs.memorySizeMB), ci_slices)
    # nvidia-smi -L names a compute instance smaller than its GI "1c.2g.10gb".
    return f"{ci_slices}c.{base}" if 0 < ci_slices < gi_slices else base


def _links(nv: _Nvml, reads: list[_GpuRead]) -> tuple[tuple[tuple[str, ...], ...], list[str]]:
    """The ``topo -m`` GPU matrix: NV<n> where NVLinks join two GPUs, else the PCIe level."""
    n = len(reads)
    if n == 0:
        return (), []
    errors: list[str] = []
    ok = [r.lost is None and r.handle is not None for r in reads]
    bus_to_pos = {r.pci_bus_id: i for i, r in enumerate(reads) if r.pci_bus_id and ok[i]}
    direct: list[Counter[int]] = [Counter() for _ in range(n)]
    via_switch = [0] * n
    for i, r in enumerate(reads):
        if not ok[i]:
            continue
        try:
            direct[i], via_switch[i] = _nvlinks(nv, r.handle, bus_to_pos)
        except GpuLost as e:
            r.lost = str(e)
            ok[i] = False
    rows: list[list[str]] = [["X" if i == j else "" for j in range(n)] for i in range(n)]
    unknown = 0
    for i in range(n):
        for j in range(i + 1, n):
            link = None
            if ok[i] and ok[j]:
                nvl = max(direct[i][j], direct[j][i])
                if via_switch[i] and via_switch[j]:
                    nvl += min(via_switch[i], via_switch[j])
                if nvl:
                    link = f"NV{nvl}"
                else:
                    try:
                        level = nv.call(
                            "nvmlDeviceGetTopologyCommonAncestor", reads[i].handle, reads[j].handle
                        )
                    except GpuLost:
                        level = None
                    link = TOPOLOGY_LINKS.get(int(level)) if level is not None else None
            if link is None:
                unknown += 1
                link = "SYS"  # unknown counts as the worst link, so it is never preferred
            rows[i][j] = rows[j][i] = link
    if unknown:
        errors.append(f"nvml: {unknown} GPU pair link(s) unknown; reported as SYS")
    return tuple(tuple(row) for row in rows), errors


def _nvlinks(nv: _Nvml, handle: Any, bus_to_pos: dict[str, int]) -> tuple[Counter[int], int]:
    """Active NVLinks of one GPU: per peer GPU position, and how many go to NVSwitches.

    On NVSwitch systems (DGX/HGX) every link ends at a switch and any two GPUs can use
    all of them, which is why nvidia-smi prints NV12/NV18 for every pair there.
    """
    peers: Counter[int] = Counter()
    switch = 0
    for link in range(nv.const("NVML_NVLINK_MAX_LINKS", 18)):
        state = nv.call("nvmlDeviceGetNvLinkState", handle, link)
        if state is None:
            break  # no NVLink, or past this GPU's last link
        if int(state) != nv.const("NVML_FEATURE_ENABLED", 1):
            continue
        pci = nv.call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        bus = normalise_bus_id(_text(pci.busId)) if pci is not None else ""
        if bus in bus_to_pos:
            peers[bus_to_pos[bus]] += 1
            continue
        kind = nv.call("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        # Without the type call (old drivers) a non-GPU end is taken for a switch.
        if kind is None or int(kind) == nv.const("NVML_NVLINK_DEVICE_TYPE_SWITCH", _NVLINK_SWITCH):
            switch += 1
    return peers, switch


# --- live samples for /metrics ------------------------------------------------------
def read_utilisation(nvml_module: Any = None) -> list[GpuSample]:
    """One utilisation sample per readable GPU; ``[]`` when NVML is unavailable."""
    mod, err = _module(nvml_module)
    if mod is None or err is not None or _ensure_init(mod):
        return []
    nv = _Nvml(mod)
    count = nv.call("nvmlDeviceGetCount") or 0
    samples: list[GpuSample] = []
    for i in range(int(count)):
        try:
            s = _sample(nv, i)
        except GpuLost:
            continue  # a lost GPU has nothing to sample; facts report it unhealthy
        if s is not None:
            samples.append(s)
    return samples


def _sample(nv: _Nvml, index: int) -> GpuSample | None:
    h = nv.call("nvmlDeviceGetHandleByIndex", index)
    uuid = nv.call("nvmlDeviceGetUUID", h) if h is not None else None
    if uuid is None:
        return None
    util = nv.call("nvmlDeviceGetUtilizationRates", h)
    mem = nv.call("nvmlDeviceGetMemoryInfo", h)
    temp = nv.call("nvmlDeviceGetTemperature", h, nv.const("NVML_TEMPERATURE_GPU", 0))
    power_mw = nv.call("nvmlDeviceGetPowerUsage", h)
    return GpuSample(
        uuid=_text(uuid),
        index=index,
        util_pct=float(util.gpu) if util is not None else None,
        fb_used_mib=int(mem.used) // _MIB if mem is not None else None,
        fb_free_mib=int(mem.free) // _MIB if mem is not None else None,
        mem_copy_util_pct=float(util.memory) if util is not None else None,
        temp_c=float(temp) if temp is not None else None,
        power_w=round(float(power_mw) / 1000.0, 3) if power_mw is not None else None,
        processes=_processes(nv, h),
    )


_NOT_AVAILABLE = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE for unsigned long long
_NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId of a process on a GPU without MIG


def _processes(nv: _Nvml, h: Any) -> tuple[GpuProcess, ...]:
    """Compute processes and the memory each uses (unknown: none listed)."""
    procs = nv.call("nvmlDeviceGetComputeRunningProcesses", h)
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


__all__ = [
    "TOPOLOGY_LINKS",
    "GpuLost",
    "NvmlSource",
    "cpu_list",
    "cuda_version_text",
    "read_utilisation",
    "shutdown",
]
