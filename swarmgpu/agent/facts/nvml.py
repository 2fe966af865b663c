"""``nvml`` — live facts from the NVIDIA driver, through the one NVML adapter.

The adapter is four modules, one job each: the session (``nvml_session``: the only
import of pynvml, init once, guarded calls), this facts source (GPUs, MIG, links,
health signals), the XID watcher (``nvml_xid``) and the sampler behind ``/metrics``
(``nvml_sampler``). Reading never raises: a node without a driver reads as zero GPUs
with the reason in ``errors``; a lost GPU (``GpuLost``) marks just that GPU unhealthy.

Health signals (``core.health.HealthSignals``: ECC, retired pages, row remapping, clock
throttle reasons, NVLink error counters) are read with the GPU's other facts; XID events
come from the watcher, whose hung wait never blocks a read.
"""

from __future__ import annotations

import concurrent.futures
import socket
import weakref
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmgpu.agent.facts.naming import mig_profile_name
from swarmgpu.agent.facts.nvml_sampler import read_utilisation
from swarmgpu.agent.facts.nvml_session import (
    INVALID_ARGUMENT,
    MISSING,
    NOT_SUPPORTED,
    UNKNOWN,
    GpuLost,
    Nvml,
    ensure_init,
    error_text,
    load_pynvml,
    module,
    shutdown,
    text,
)
from swarmgpu.agent.facts.nvml_vet import vet_gpus
from swarmgpu.agent.facts.nvml_xid import XidWatcher, xid_watcher
from swarmgpu.core.health import HealthSignals
from swarmgpu.core.model import (
    MAX_GPU_MEMORY_MIB,
    MAX_GPUS,
    MAX_MIG_PER_GPU,
    MAX_STR_LEN,
    Gpu,
    MigDevice,
    NodeFacts,
    is_device_uuid,
)
from swarmgpu.core.peertext import peer_text

_MIB = 1024 * 1024
# nvidia-smi topo -m prints these for nvmlDeviceGetTopologyCommonAncestor's levels
# (nvml.h: INTERNAL=0, SINGLE=10, MULTIPLE=20, HOSTBRIDGE=30, NODE=40, SYSTEM=50).
# INTERNAL means two GPUs on one board (K80, GTX 690) behind the board's own PCIe
# switch; nvidia-smi has no symbol of its own for it, so it counts as PIX here.
TOPOLOGY_LINKS: dict[int, str] = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_NVLINK_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH
_CPUSET_WORDS = 16  # 16 x 64 bits: room for 1024 CPUs
_NODESET_WORDS = 4  # 4 x 64 bits: room for 256 NUMA nodes


# --- small pure helpers -----------------------------------------------------------
def cuda_version_text(v: int) -> str:
    """NVML's 12020 -> ``"12.2"``."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def set_bits(words: Any) -> list[int]:
    """The numbers set in an NVML bitmask of 64-bit words, lowest first."""
    return [w * 64 + b for w, word in enumerate(words) for b in range(64) if int(word) >> b & 1]


def cpu_list(words: Any) -> str | None:
    """A CPU bitmask (64-bit words, lowest CPUs first) as ``"0-35,72-107"``."""
    cpus = set_bits(words)
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
        mod, err = module(self.nvml_module)
        if mod is None or err is not None:
            return NodeFacts(hostname=self.hostname, source=self.spec, errors=(err or "",))
        init_err = ensure_init(mod)
        if init_err:
            return NodeFacts(hostname=self.hostname, source=self.spec, errors=(init_err,))
        watcher = xid_watcher(mod) if self.xid_events else None
        return read_facts(Nvml(mod), hostname=self.hostname, sysfs_root=self.sysfs_root,
                          gpu_deadline_s=self.gpu_deadline_s, xids=watcher)


# Reads of GPUs whose NVML calls hung, by index: a stuck call cannot be cancelled, so
# the GPU is not asked again until that read returns (no pile-up of stuck threads).
_HUNG: dict[tuple[int, int], concurrent.futures.Future[_GpuRead]] = {}
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="nvml-gpu")


# Each GPU's identity (UUID, model, memory, PCI bus) from its last good read, per NVML
# library, by (GPU count, index): an index names the same GPU while the count holds.
# A GPU that hangs or is lost later keeps it: under a placeholder UUID the daemon saw
# the GPU of a holding gone and re-placed the service at once (a restart), past the
# health states' wait and the health policy's budget.
_Identity = tuple[str, str | None, int | None, str]
_KNOWN: weakref.WeakKeyDictionary[Any, dict[tuple[int, int], _Identity]] = (
    weakref.WeakKeyDictionary())


def _identities(mod: Any) -> dict[tuple[int, int], _Identity]:
    try:
        return _KNOWN.setdefault(mod, {})
    except TypeError:  # a library object that takes no weak reference: nothing kept
        return {}


def _keep_identities(mod: Any, count: int, reads: list[_GpuRead]) -> None:
    """Record what was read of each GPU; give a GPU read without a UUID its last one, and
    one read with its UUID but not its model, memory or bus those of its last read."""
    known = _identities(mod)
    for r in reads:
        key = (count, r.index)
        got = known.get(key)
        if r.uuid is not None:
            if got is not None and got[0] == r.uuid and None in (r.product, r.memory_mib):
                # The same GPU, a field of it failing this once (UNKNOWN, TIMEOUT): served
                # as 1 MiB, it was a healthy GPU with no memory, forgotten for later reads.
                r.product = r.product or got[1]
                r.memory_mib = r.memory_mib or got[2]
                r.errors.append("model or memory from its last good read")
            r.pci_bus_id = r.pci_bus_id or (got[3] if got and got[0] == r.uuid else "")
            known[key] = (r.uuid, r.product, r.memory_mib, r.pci_bus_id)
        elif got is not None:
            r.uuid, product, memory, bus = got
            r.product = r.product or product
            r.memory_mib = r.memory_mib or memory
            r.pci_bus_id = r.pci_bus_id or bus
            # unhealthy all the same: what NVML says of it now is not known
            r.lost = r.lost or "its UUID could not be read"
            r.errors.append("identity (UUID, model, memory, bus) from its last good read")


def _read_gpus(nv: Nvml, count: int, sysfs_root: Path, deadline_s: float) -> list[_GpuRead]:
    """Every GPU read in parallel, each within its deadline; a hung GPU is unhealthy
    (with its identity from its last good read, ``_keep_identities``)."""
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
    _keep_identities(nv.mod, count, reads)
    return reads


def read_facts(nv: Nvml, *, hostname: str, sysfs_root: Path, spec: str = "nvml",
               gpu_deadline_s: float = 5.0, xids: XidWatcher | None = None) -> NodeFacts:
    """One consistent read of every GPU on an initialised NVML."""
    errors: list[str] = []
    driver = nv.call("nvmlSystemGetDriverVersion")
    cuda = nv.call("nvmlSystemGetCudaDriverVersion")
    nvml_version = nv.call("nvmlSystemGetNVMLVersion")
    count = nv.call("nvmlDeviceGetCount")
    if count is None:
        return NodeFacts(
            hostname=hostname,
            driver_version=text(driver) if driver is not None else None,
            source=spec,
            errors=("nvml: nvmlDeviceGetCount failed; no GPUs can be listed",),
        )
    if not 0 <= int(count) <= MAX_GPUS:
        # a broken driver or library (4294967295: -1 read unsigned): not thousands of lost
        # GPUs, each a thread's read, which the daemon would refuse whole
        return NodeFacts(
            hostname=hostname,
            driver_version=text(driver) if driver is not None else None,
            source=spec,
            errors=(f"nvml: nvmlDeviceGetCount answered {int(count)}, not a GPU count "
                    f"(at most {MAX_GPUS} per node); no GPUs listed: check the driver and "
                    "its library (swarmgpu doctor)",),
        )
    reads = _read_gpus(nv, int(count), sysfs_root, gpu_deadline_s)
    if xids is not None:
        errors += xids.attach(reads)
    links, link_errors = _links(nv, reads)
    errors += link_errors
    gpus = vet_gpus(tuple(r.to_gpu() for r in reads))
    errors += [f"nvml: GPU {g.index}: {g.error}" for g in gpus if not g.healthy]
    return NodeFacts(
        hostname=hostname,
        gpus=gpus,
        links=links,
        driver_version=text(driver) if driver is not None else None,
        cuda_driver_version=cuda_version_text(int(cuda)) if isinstance(cuda, int) else None,
        nvml_version=text(nvml_version) if nvml_version is not None else None,
        source=spec,
        errors=tuple(errors),
    )


def _read_gpu(nv: Nvml, index: int, sysfs_root: Path) -> _GpuRead:
    r = _GpuRead(index=index)
    try:
        r.handle = nv.call("nvmlDeviceGetHandleByIndex", index)
        if r.handle is None:
            r.lost = "nvmlDeviceGetHandleByIndex failed"
            return r
        _fill_gpu(nv, r, sysfs_root)
    except GpuLost as e:
        r.lost = str(e)
    except Exception as e:  # pynvml raising past NVMLError (a UUID not UTF-8:
        # UnicodeDecodeError) fails this GPU, not the read of every GPU
        r.lost = f"reading it raised {error_text(e)}"
    return r


def _fill_gpu(nv: Nvml, r: _GpuRead, sysfs_root: Path) -> None:
    h = r.handle
    uuid = nv.call("nvmlDeviceGetUUID", h)
    r.uuid = _identity(text(uuid), "UUID", r) if uuid is not None else None
    name = nv.call("nvmlDeviceGetName", h)
    r.product = _identity(text(name), "model name", r) if name is not None else None
    mem = nv.call("nvmlDeviceGetMemoryInfo", h)
    r.memory_mib = _memory_mib(mem, r) if mem is not None else None
    pci = nv.call("nvmlDeviceGetPciInfo", h)
    if pci is not None:
        try:
            r.pci_bus_id = normalise_bus_id(text(pci.busId))
        except ValueError:  # a domain not hex: this value unknown, not the whole GPU
            r.errors.append(f"NVML answered its PCI bus id "
                            f"{peer_text(text(pci.busId), 64)!r}; not used")
    cc = nv.call("nvmlDeviceGetCudaComputeCapability", h)
    if cc is not None:
        r.compute = (int(cc[0]), int(cc[1]))
    mig, code = nv.attempt("nvmlDeviceGetMigMode", h)
    if mig is not None:
        r.mig_capable = True
        r.mig_enabled = int(mig[0]) == nv.const("NVML_DEVICE_MIG_ENABLE", 1)
    elif code not in (NOT_SUPPORTED, MISSING):
        # Read as "not MIG capable", a GPU in MIG mode was given out whole over its
        # slices' holders. Counted in MIG mode: its slices listed if it has them, else
        # given out neither whole nor by slices until the mode reads again.
        r.mig_capable = r.mig_enabled = True
        r.errors.append(f"MIG mode could not be read (NVML error {code}); taken as on")
    if r.mig_enabled:
        r.mig_devices = _mig_devices(nv, h, r.errors)
    # sysfs first: it is the CPU-side node that `topo -m` calls "NUMA Affinity". Where
    # sysfs has none (-1: a VM, as the H200 of tests/fixtures/captures), NVML's memory
    # affinity, which `topo -m` prints there. nvmlDeviceGetNumaNodeId is the GPU's own
    # memory node ("GPU NUMA ID"), set only where GPU memory is a NUMA node (Grace
    # Hopper); it is the last fallback.
    r.numa_node = sysfs_numa_node(r.pci_bus_id, sysfs_root) if r.pci_bus_id else None
    if r.numa_node is None:
        r.numa_node = _memory_affinity_node(nv, h)
    if r.numa_node is None:
        numa = nv.call("nvmlDeviceGetNumaNodeId", h)
        r.numa_node = int(numa) if isinstance(numa, int) and numa >= 0 else None
    words = nv.call("nvmlDeviceGetCpuAffinity", h, _CPUSET_WORDS)
    r.cpu_affinity = cpu_list(words) if words is not None else None
    r.health = _health(nv, h)


def _identity(value: str, what: str, r: _GpuRead) -> str | None:
    """A UUID or model name as the facts can carry it, else None with the GPU lost:
    served as NVML answered it, the daemon refuses the node's facts whole (every GPU
    unread), and a UUID such as ``GPU-a,GPU-b`` would read as two GPUs in the ledger."""
    bad = (f"{len(value)} characters (at most {MAX_STR_LEN})" if len(value) > MAX_STR_LEN
           else "not in NVIDIA's form (GPU-<uuid>)" if what == "UUID"
           and not (value.startswith("GPU-") and is_device_uuid(value))
           else "a lone UTF-16 surrogate in it" if any("\ud800" <= c <= "\udfff" for c in value)
           else None)
    if bad is None:
        return value
    r.lost = r.lost or f"NVML answered its {what} {peer_text(value, 64)!r}: {bad}"
    return None


def _memory_mib(mem: Any, r: _GpuRead) -> int | None:
    """The GPU's memory in MiB; None, said, for a total under 1 MiB (a GPU half off the
    bus answers 0): served as a healthy GPU of 1 MiB, and its last good read forgotten;
    or past ``MAX_GPU_MEMORY_MIB`` (a garbled answer): served, a GPU fitting anything."""
    total = int(mem.total)
    if total < _MIB:
        r.errors.append(f"NVML answered its memory total {total} bytes; taken as unknown")
        return None
    if total // _MIB > MAX_GPU_MEMORY_MIB:
        r.errors.append(f"NVML answered its memory total {total} bytes, past the "
                        f"{MAX_GPU_MEMORY_MIB >> 20} TiB no GPU has; taken as unknown")
        return None
    return total // _MIB


def _memory_affinity_node(nv: Nvml, h: Any) -> int | None:
    """The NUMA node NVML names as the GPU's memory affinity (scope node); None when it
    names none or several."""
    words = nv.call("nvmlDeviceGetMemoryAffinity", h, _NODESET_WORDS,
                    nv.const("NVML_AFFINITY_SCOPE_NODE", 0))
    if words is None:
        return None
    nodes = set_bits(words)
    return nodes[0] if len(nodes) == 1 else None


def _count(v: Any) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _health(nv: Nvml, h: Any) -> HealthSignals:
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


def _nvlink_errors(nv: Nvml, h: Any) -> dict[int, int | None]:
    """Per NVML_NVLINK_ERROR_DL_* counter (0 replay, 1 recovery, 2 CRC flit), the sum over
    the GPU's links; None when it has no NVLink."""
    sums: dict[int, int | None] = {0: None, 1: None, 2: None}
    for link, _ in _link_states(nv, h)[0]:
        for counter in sums:
            v = _count(nv.call("nvmlDeviceGetNvLinkErrorCounter", h, link, counter))
            if v is not None:
                sums[counter] = (sums[counter] or 0) + v
    return sums


def _mig_devices(nv: Nvml, parent: Any, errors: list[str]) -> list[MigDevice]:
    out: list[MigDevice] = []
    most = nv.call("nvmlDeviceGetMaxMigDeviceCount", parent)
    if most is None:  # in MIG mode the GPU is not handed out whole: none of it then
        errors.append("MIG mode is on but its MIG devices could not be listed "
                      "(nvmlDeviceGetMaxMigDeviceCount failed); none is handed out")
        return out
    if not 0 <= int(most) <= MAX_MIG_PER_GPU:  # not looped over index by index
        errors.append(f"MIG mode is on but nvmlDeviceGetMaxMigDeviceCount answered "
                      f"{int(most)} (a GPU holds at most {MAX_MIG_PER_GPU}); none is "
                      "handed out")
        return out
    names = _gi_profile_names(nv, parent)
    for k in range(int(most)):
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
        if not (text(uuid).startswith("MIG-") and is_device_uuid(text(uuid))
                and len(text(uuid)) <= MAX_STR_LEN):  # as a GPU's (_identity)
            errors.append(f"MIG device {k}: NVML answered its UUID "
                          f"{peer_text(text(uuid), 64)!r}, not in NVIDIA's form "
                          "(MIG-<uuid>); left out")
            continue
        out.append(
            MigDevice(
                profile=profile,
                uuid=text(uuid),
                memory_mib=memory_mib,
                gi_id=int(gi) if gi is not None else None,
                ci_id=int(ci) if ci is not None else None,
            )
        )
    return out


def _gi_profile_names(nv: Nvml, parent: Any) -> dict[int, str]:
    """GI profile id -> nvidia-smi name (``1g.10gb``), from the driver's profile table."""
    names: dict[int, str] = {}
    for p in range(nv.const("NVML_GPU_INSTANCE_PROFILE_COUNT", 0)):
        info = nv.call("nvmlDeviceGetGpuInstanceProfileInfo", parent, p)
        name = getattr(info, "name", None) if info is not None else None
        if name:
            label = text(name)
            names[int(info.id)] = label[4:] if label.startswith("MIG ") else label
    return names


def _mig_profile(
    nv: Nvml, parent: Any, gi: Any, attrs: Any, names: dict[int, str]
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


def _links(nv: Nvml, reads: list[_GpuRead]) -> tuple[tuple[tuple[str, ...], ...], list[str]]:
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
            direct[i], via_switch[i] = _nvlinks(nv, r.handle, bus_to_pos, r.errors)
        except GpuLost as e:
            r.lost = str(e)
            ok[i] = False
        except Exception as e:  # as in _read_gpu: this GPU's links unknown
            r.errors.append(f"its NVLinks could not be read ({error_text(e)})")
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


def _link_states(nv: Nvml, h: Any) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(link, state) of each of the GPU's NVLinks, and (link, error code) of those whose
    state failed. Only NOT_SUPPORTED (no NVLink) or INVALID_ARGUMENT ends the links: taken
    for "past the last link", an UNKNOWN on link 2 made an NV18 board's pairs NV2."""
    states: list[tuple[int, int]] = []
    failed: list[tuple[int, int]] = []
    for link in range(nv.const("NVML_NVLINK_MAX_LINKS", 18)):
        state, code = nv.attempt("nvmlDeviceGetNvLinkState", h, link)
        if state is not None:
            states.append((link, int(state)))
        elif code in (NOT_SUPPORTED, INVALID_ARGUMENT, MISSING):
            break  # no NVLink, or past this GPU's last link
        else:
            failed.append((link, code if code is not None else UNKNOWN))
    return states, failed


def _nvlinks(nv: Nvml, handle: Any, bus_to_pos: dict[str, int],
             errors: list[str]) -> tuple[Counter[int], int]:
    """Active NVLinks of one GPU: per peer GPU position, and how many go to NVSwitches.

    On NVSwitch systems (DGX/HGX) every link ends at a switch and any two GPUs can use
    all of them, which is why nvidia-smi prints NV12/NV18 for every pair there.
    """
    peers: Counter[int] = Counter()
    switch = 0
    states, failed = _link_states(nv, handle)
    errors += [f"NVLink {link} state could not be read (NVML error {code}); left out"
               for link, code in failed]
    for link, state in states:
        if state != nv.const("NVML_FEATURE_ENABLED", 1):
            continue
        pci = nv.call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        bus = normalise_bus_id(text(pci.busId)) if pci is not None else ""
        if bus in bus_to_pos:
            peers[bus_to_pos[bus]] += 1
            continue
        kind = nv.call("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        # Without the type call (old drivers) a non-GPU end is taken for a switch.
        if kind is None or int(kind) == nv.const("NVML_NVLINK_DEVICE_TYPE_SWITCH", _NVLINK_SWITCH):
            switch += 1
    return peers, switch


__all__ = [
    "TOPOLOGY_LINKS",
    "GpuLost",
    "NvmlSource",
    "cpu_list",
    "cuda_version_text",
    "load_pynvml",
    "read_utilisation",
    "shutdown",
]
