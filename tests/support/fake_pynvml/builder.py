"""Build a ``FakeMachine`` from real ``nvidia-smi`` captures in tests/fixtures.

Sources, per part of the machine:
* GPU identity, memory, MIG mode and MIG devices, driver/CUDA version, utilisation:
  ``nvidia-smi -q`` (``parse_q``); MIG profile names and UUIDs: ``nvidia-smi -L``;
  the driver's GI profile table: ``nvidia-smi mig -lgip``.
* Links, CPU affinity and NUMA node: ``nvidia-smi topo -m`` (parsed by the code
  under test's ``parse_topo``, itself checked against the files cell by cell).

Where a capture lacks something the builder must invent, it says so here:
* GPUs beyond those in the ``-q`` capture copy its first GPU's model and memory and
  get bus ids ``000000FF:<index>:00.0`` and UUIDs ``GPU-fa4e0000-...`` (fake).
* NVLinks: a matrix where every pair is the same ``NV<k>`` (more than 2 GPUs) is an
  NVSwitch system: each GPU gets k links to switches on bus domain 000000FE.
  Otherwise ``NV<k>`` between two GPUs becomes k direct links.
* The PCIe common ancestor of an NVLink pair (hidden by ``topo -m``) is NODE on the
  same NUMA node, else SYS.
* Compute capability from "Product Architecture" (Ampere 8.0, Hopper 9.0,
  Ada Lovelace 8.9, Volta 7.0), as those data-centre parts have.
* Health counters (ECC, retired pages, remapped rows, clocks event reasons): from the
  ``-q`` capture's ``ECC Errors``, ``Retired Pages``, ``Remapped Rows`` and ``Clocks Event
  Reasons`` sections; ``N/A`` there answers NOT_SUPPORTED. NVML's totals are the sums of
  nvidia-smi's SRAM and DRAM rows. GPUs without a ``-q`` capture have none (NOT_SUPPORTED).
  No capture has an XID event or NVLink error counters: tests inject those (plausible
  values, tests/fixtures/SOURCES.md says which).
* Running processes (``processes_file``, the ``Processes`` sections of a ``-q``
  capture): PID and used memory as captured, put on the GPU with the same index of
  the machine being built (the only capture with processes is of another machine).
* dcgm-exporter's other default counters, from the same ``-q`` capture: ``Clocks`` SM
  and Memory, ``Memory Current Temp``, PCIe ``Replays Since Reset`` and ``Tx``/``Rx
  Throughput``, ``Utilization`` Encoder and Decoder, ``FB Memory Usage`` Reserved (and
  each MIG device's ``Shared FB Memory Usage`` Used and Reserved). ``N/A`` answers
  NOT_SUPPORTED. Not in any ``-q`` capture: the energy counter, NVLink data counters and
  GPM metrics; GPM is supported on Hopper GPUs (as NVML has it: Hopper and later), with
  no metric values until a test sets them (tests/fixtures/SOURCES.md says which). The
  energy counter comes from the machine's NVML record where the layout has one
  (``nvml_record``: the project's own H200, scripts/nvml-record.py).
* NUMA: sysfs ``numa_node`` and NVML's memory affinity both say the ``topo -m`` "NUMA
  Affinity", except with ``sysfs_numa=False`` (a VM: sysfs -1, as the H200 capture).
* The RTX 4090 layouts have only ``topo -m``: their model and memory are given, the
  memory ``RTX4090_MIB``, cited from a public ``nvidia-smi`` output (not stored here).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.fake_pynvml.pynvml import (
    NVML_NVLINK_DEVICE_TYPE_GPU,
    NVML_NVLINK_DEVICE_TYPE_SWITCH,
    FakeGpu,
    FakeMachine,
    FakeMig,
    FakeNvml,
    FakeProcess,
    FakeProfile,
)
from support.paths import FIXTURES as FIXTURES_DIR
from swarmgpu.agent.facts.topo import TopoMatrix, parse_topo

FIXTURES = FIXTURES_DIR
CAPTURES = FIXTURES / "captures"
TOPOLOGY = FIXTURES / "topology"

_ARCH_CC = {"Ampere": (8, 0), "Hopper": (9, 0), "Ada Lovelace": (8, 9), "Volta": (7, 0)}
_LINK_LEVEL = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}


# --- nvidia-smi -q ---------------------------------------------------------------------
@dataclass
class Node:
    key: str
    value: str
    children: list[Node] = field(default_factory=list)

    def get(self, *path: str) -> str | None:
        node: Node | None = self
        for p in path:
            node = next((c for c in node.children if c.key == p), None) if node else None
        return node.value if node else None

    def all(self, key: str) -> list[Node]:
        return [c for c in self.children if c.key == key]


def parse_tree(text: str) -> Node:
    root = Node("", "")
    stack: list[tuple[int, Node]] = [(-1, root)]
    for line in text.splitlines():
        if not line.strip() or line.startswith("="):
            continue
        indent = len(line) - len(line.lstrip())
        key, _, value = line.strip().partition(":")
        if line.strip().startswith("GPU 0000"):  # "GPU 00000000:68:00.0" heads a block
            key, value = "GPU", line.strip()[4:]
        node = Node(key.strip(), value.strip())
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


def _num(v: str | None) -> float | None:
    m = re.match(r"^\s*([\d.]+)", v or "")
    return float(m.group(1)) if m else None


@dataclass
class QGpu:
    bus_id: str
    name: str
    uuid: str
    arch: str | None
    fb_total: int
    fb_used: int
    mig_current: str | None
    migs: list[dict[str, int]]  # index, gi, ci, memory
    util_gpu: int | None
    util_memory: int | None
    temp_c: int | None
    power_w: float | None
    ecc: dict[tuple[int, int], int] | None = None
    retired_pages: tuple[int, int, bool] | None = None
    remapped_rows: tuple[int, int, bool, bool] | None = None
    clocks_event_reasons: int | None = None
    counters: dict[str, int | None] = field(default_factory=dict)  # FakeGpu attr -> value


@dataclass
class QCapture:
    driver: str
    cuda: str
    gpus: list[QGpu]


def parse_q(path: Path) -> QCapture:
    root = parse_tree(path.read_text())
    gpus = []
    for g in root.all("GPU"):
        migs = [
            {
                "index": int(m.get("Index") or 0),
                "gi": int(m.get("GPU Instance ID") or 0),
                "ci": int(m.get("Compute Instance ID") or 0),
                "memory": int(
                    _num(m.get("Shared FB Memory Usage", "Total"))
                    or _num(m.get("FB Memory Usage", "Total"))
                    or 0
                ),
                "used": int(_num(m.get("Shared FB Memory Usage", "Used")) or 0),
                "reserved": int(_num(m.get("Shared FB Memory Usage", "Reserved")) or 0),
            }
            for m in g.all("MIG Device")
        ]
        # Drivers from R530 print "Average" and "Instantaneous Power Draw" for the one
        # "Power Draw"; nvmlDeviceGetPowerUsage is the 1 s average on Ampere (but GA100)
        # and later, instantaneous on GA100 (A100, A30) and older (NVML reference).
        name = g.get("Product Name") or ""
        older = g.get("Product Architecture") in ("Volta", "Turing", "Pascal") or any(
            m in name for m in ("A100", "A30"))
        readings = ("GPU Power Readings", "Power Readings")
        power = next((v for sec in readings for key in (
            "Power Draw", "Instantaneous Power Draw" if older else "Average Power Draw",
            "Average Power Draw" if older else "Instantaneous Power Draw")
            if (v := _num(g.get(sec, key))) is not None), None)
        # "Gpu" before R580, "GPU" from it (the H200 capture)
        util = _num(g.get("Utilization", "Gpu"))
        if util is None:
            util = _num(g.get("Utilization", "GPU"))
        mutil = _num(g.get("Utilization", "Memory"))
        temp = _num(g.get("Temperature", "GPU Current Temp"))
        gpus.append(
            QGpu(
                bus_id=g.value,
                name=g.get("Product Name") or "",
                uuid=g.get("GPU UUID") or "",
                arch=g.get("Product Architecture"),
                fb_total=int(_num(g.get("FB Memory Usage", "Total")) or 0),
                fb_used=int(_num(g.get("FB Memory Usage", "Used")) or 0),
                mig_current=g.get("MIG Mode", "Current"),
                migs=migs,
                util_gpu=int(util) if util is not None else None,
                util_memory=int(mutil) if mutil is not None else None,
                temp_c=int(temp) if temp is not None else None,
                power_w=power,
                ecc=_ecc(g),
                retired_pages=_retired(g),
                remapped_rows=_remapped(g),
                clocks_event_reasons=_reasons(g),
                counters=_counters(g),
            )
        )
    return QCapture(root.get("Driver Version") or "", root.get("CUDA Version") or "", gpus)


# FakeGpu attribute -> where nvidia-smi -q prints it (the first path that is there).
_COUNTERS: dict[str, tuple[tuple[str, ...], ...]] = {
    "sm_clock_mhz": (("Clocks", "SM"),),
    "mem_clock_mhz": (("Clocks", "Memory"),),
    "memory_temp_c": (("Temperature", "Memory Current Temp"),),
    "pcie_replays": (("PCI", "Replays Since Reset"),),
    "pcie_tx_kb_s": (("PCI", "Tx Throughput"),),
    "pcie_rx_kb_s": (("PCI", "Rx Throughput"),),
    "enc_util": (("Utilization", "Encoder"),),
    "dec_util": (("Utilization", "Decoder"),),
    "memory_reserved_mib": (("FB Memory Usage", "Reserved"),),
}


def _counters(g: Node) -> dict[str, int | None]:
    """The -q values of dcgm-exporter's other default counters (``N/A``: None)."""
    out: dict[str, int | None] = {}
    for attr, paths in _COUNTERS.items():
        v = next((_num(g.get(*p)) for p in paths if g.get(*p) is not None), None)
        out[attr] = int(v) if v is not None else None
    return out


def _int_or_none(v: str | None) -> int | None:
    return int(v) if v is not None and v.strip().isdigit() else None


def _ecc(g: Node) -> dict[tuple[int, int], int] | None:
    """(error type, counter type) -> count from ``ECC Errors``; corrected = SRAM + DRAM
    correctable, uncorrected = SRAM parity + SEC-DED + DRAM uncorrectable."""
    out: dict[tuple[int, int], int] = {}
    for counter, section in ((0, "Volatile"), (1, "Aggregate")):
        corr = [g.get("ECC Errors", section, k) for k in ("SRAM Correctable", "DRAM Correctable")]
        unc = [g.get("ECC Errors", section, k) for k in (
            "SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED", "DRAM Uncorrectable")]
        if any(_int_or_none(v) is None for v in corr + unc):
            return None
        out[(0, counter)] = sum(int(v or 0) for v in corr)
        out[(1, counter)] = sum(int(v or 0) for v in unc)
    return out


def _retired(g: Node) -> tuple[int, int, bool] | None:
    sbe = _int_or_none(g.get("Retired Pages", "Single Bit ECC"))
    dbe = _int_or_none(g.get("Retired Pages", "Double Bit ECC"))
    pending = g.get("Retired Pages", "Pending Page Blacklist")
    if sbe is None or dbe is None or pending not in ("Yes", "No"):
        return None
    return (sbe, dbe, pending == "Yes")


def _remapped(g: Node) -> tuple[int, int, bool, bool] | None:
    corr = _int_or_none(g.get("Remapped Rows", "Correctable Error"))
    unc = _int_or_none(g.get("Remapped Rows", "Uncorrectable Error"))
    pending = g.get("Remapped Rows", "Pending")
    failed = g.get("Remapped Rows", "Remapping Failure Occurred")
    if corr is None or unc is None or pending is None or failed is None:
        return None
    return (corr, unc, pending == "Yes", failed == "Yes")


_REASON_BITS = {
    "Idle": 0x1, "Applications Clocks Setting": 0x2, "SW Power Cap": 0x4,
    "HW Slowdown": 0x8, "Sync Boost": 0x10, "SW Thermal Slowdown": 0x20,
    "HW Thermal Slowdown": 0x40, "HW Power Brake Slowdown": 0x80,
    "Display Clock Setting": 0x100,
}


def _reasons(g: Node) -> int | None:
    """The nvmlClocksEventReasons bitmask from ``Clocks Event Reasons`` (older drivers:
    ``Clocks Throttle Reasons``); HW Thermal/Power Brake are nested under HW Slowdown."""
    sec = next((c for c in g.children
                if c.key in ("Clocks Event Reasons", "Clocks Throttle Reasons")), None)
    if sec is None:
        return None
    bits = 0
    stack = list(sec.children)
    while stack:
        c = stack.pop()
        stack.extend(c.children)
        if c.value == "Active":
            bits |= _REASON_BITS.get(c.key, 0)
    return bits


def parse_processes(path: Path) -> list[list[FakeProcess]]:
    """Per GPU (in -q order), its compute processes from the ``Processes`` sections."""
    text = path.read_text()
    text = text[text.index("==============NVSMI LOG"):]  # the -q part of the capture
    out: list[list[FakeProcess]] = []
    for g in parse_tree(text).all("GPU"):
        procs: list[FakeProcess] = []
        sec = g.get("Processes")
        node = next((c for c in g.children if c.key == "Processes"), None)
        if node is not None and sec != "None":
            gi: int | None = None
            for c in node.children:
                if c.key == "GPU instance ID":
                    gi = int(c.value) if c.value.isdigit() else None
                elif c.key == "Process ID":
                    used = next((x.value for x in c.children if x.key == "Used GPU Memory"), "")
                    mib = _num(used)
                    procs.append(FakeProcess(int(c.value), int(mib) if mib is not None else None,
                                             gi))
        out.append(procs)
    return out


# --- nvidia-smi -L and mig -lgip --------------------------------------------------------
_L_GPU = re.compile(r"^GPU (\d+): (.+) \(UUID: (GPU-[^)]+)\)")
_L_MIG = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)")


def parse_l(path: Path) -> dict[int, list[tuple[str, str]]]:
    """GPU index -> [(profile, MIG uuid)] from ``nvidia-smi -L``."""
    out: dict[int, list[tuple[str, str]]] = {}
    gpu = -1
    for line in path.read_text().splitlines():
        if m := _L_GPU.match(line):
            gpu = int(m.group(1))
            out[gpu] = []
        elif m := _L_MIG.match(line):
            out[gpu].append((m.group(1), m.group(3)))
    return out


_LGIP = re.compile(r"^\|\s+\d+\s+MIG (\S+)\s+(\d+)\s+\d+/\d+\s+([\d.]+)")


def parse_lgip(path: Path) -> list[FakeProfile]:
    """The driver's GI profile table; enum index as pynvml's NVML_GPU_INSTANCE_PROFILE_*."""
    rows = [m.groups() for ln in path.read_text().splitlines() if (m := _LGIP.match(ln))]
    one_g = sorted((float(gib), name) for name, _, gib in rows if name.startswith("1g."))
    profiles = []
    for name, pid, gib in rows:
        g = int(name.split("g.")[0])
        if name.endswith("+me"):
            enum = 7  # 1_SLICE_REV1
        elif g == 1 and float(gib) > one_g[0][0]:
            enum = 9  # 1_SLICE_REV2: the double-memory 1g profile
        else:
            enum = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[g]
        profiles.append(FakeProfile(enum, int(pid), f"MIG {name}", g, round(float(gib) * 1024)))
    return profiles


# --- assembling a machine ---------------------------------------------------------------
@dataclass
class Built:
    nvml: FakeNvml
    machine: FakeMachine
    topo: TopoMatrix
    sysfs: Path


def build(
    topo_file: Path,
    sysfs_dir: Path,
    *,
    q_file: Path | None = None,
    l_file: Path | None = None,
    lgip_file: Path | None = None,
    product: str | None = None,
    memory_mib: int | None = None,
    missing: frozenset[str] = frozenset(),
    processes_file: Path | None = None,
    sysfs_numa: bool = True,
    nvml_record: Path | None = None,
) -> Built:
    """A fake machine: topology from ``topo_file``, GPUs from ``q_file`` (or the given
    product/memory), MIG from ``l_file``+``lgip_file``; sysfs numa_node files written
    under ``sysfs_dir``."""
    topo = parse_topo(topo_file.read_text(), where=str(topo_file))
    q = parse_q(q_file) if q_file else None
    listing = parse_l(l_file) if l_file else {}
    profiles = parse_lgip(lgip_file) if lgip_file else []
    by_name = {p.name[4:]: p for p in profiles}
    n = topo.gpu_count
    gpus: list[FakeGpu] = []
    for i in range(n):
        qg = q.gpus[i] if q and i < len(q.gpus) else None
        base = qg or (q.gpus[0] if q else None)
        bus = qg.bus_id if qg else f"000000FF:{i:02X}:00.0"
        uuid = qg.uuid if qg else f"GPU-fa4e0000-0000-0000-0000-{i:012x}"
        migs = []
        if qg and qg.migs:
            for (prof, muuid), qm in zip(listing.get(i, []), qg.migs, strict=True):
                p = by_name[prof]
                migs.append(
                    FakeMig(muuid, qm["gi"], qm["ci"], p.id, p.slices, p.slices, qm["memory"],
                            qm["used"], qm["reserved"])
                )
        mig_mode = None
        if base and base.mig_current in ("Enabled", "Disabled"):
            mig_mode = (1, 1) if base.mig_current == "Enabled" and qg else (0, 0)
        # FakeGpu's fields of the capture's other counters, by name (of several types)
        counters: dict[str, Any] = {k: v for k, v in (qg.counters if qg else {}).items()
                                    if v is not None or k != "memory_reserved_mib"}
        gpus.append(
            FakeGpu(
                uuid=uuid,
                name=base.name if base else (product or ""),
                bus_id=bus,
                memory_total_mib=base.fb_total if base else (memory_mib or 0),
                memory_used_mib=qg.fb_used if qg else 0,
                compute=_ARCH_CC.get(base.arch or "") if base else None,
                mig_mode=mig_mode,
                migs=migs,
                cpu_affinity=topo.cpu_affinity[i],
                memory_affinity=topo.numa_node[i],
                util_gpu=qg.util_gpu if qg else None,
                util_memory=qg.util_memory if qg else None,
                temp_c=qg.temp_c if qg else None,
                power_mw=round(qg.power_w * 1000) if qg and qg.power_w is not None else None,
                ecc=qg.ecc if qg else None,
                retired_pages=qg.retired_pages if qg else None,
                remapped_rows=qg.remapped_rows if qg else None,
                clocks_event_reasons=qg.clocks_event_reasons if qg else None,
                gpm={} if base and base.arch == "Hopper" else None,
                **counters,
            )
        )
    if nvml_record is not None:
        _from_record(gpus, nvml_record)
    _wire_links(gpus, topo)
    if processes_file is not None:
        for g, procs in zip(gpus, parse_processes(processes_file), strict=False):
            g.processes = procs
    ancestors = {}
    for i in range(n):
        for j in range(i + 1, n):
            link = topo.links[i][j]
            if link in _LINK_LEVEL:
                ancestors[(i, j)] = _LINK_LEVEL[link]
            else:
                same = topo.numa_node[i] is not None and topo.numa_node[i] == topo.numa_node[j]
                ancestors[(i, j)] = 40 if same else 50
    for g, numa in zip(gpus, topo.numa_node, strict=True):
        dom, _, rest = g.bus_id.partition(":")
        d = sysfs_dir / "bus" / "pci" / "devices" / f"{int(dom, 16):04x}:{rest.lower()}"
        d.mkdir(parents=True, exist_ok=True)
        # A VM's sysfs may know no node (-1) where NVML and `topo -m` name one.
        (d / "numa_node").write_text(f"{numa if numa is not None and sysfs_numa else -1}\n")
    cuda = _cuda_int(q.cuda) if q else 12020
    driver = q.driver if q else "535.129.03"
    machine = FakeMachine(
        driver=driver,
        cuda=cuda,
        nvml_version=f"{cuda // 1000}.{driver}",
        gpus=gpus,
        ancestors=ancestors,
        profiles=profiles,
    )
    return Built(FakeNvml(machine, missing=missing), machine, topo, sysfs_dir)


def _from_record(gpus: list[FakeGpu], path: Path) -> None:
    """What no ``-q`` prints but the same machine's NVML record holds (scripts/nvml-record.py):
    the energy counter, as first read, and the encoder's sampling period."""
    for c in json.loads(path.read_text())["calls"]:
        first = c["args"][0] if c["args"] else None
        label = first.get("handle", "") if isinstance(first, dict) else ""
        if "result" not in c or not label.startswith("gpu") or "/" in label:
            continue  # a system call, a refused one, or a MIG device's
        g = gpus[int(label[3:])]
        if c["fn"] == "nvmlDeviceGetTotalEnergyConsumption" and g.energy_mj is None:
            g.energy_mj = int(c["result"])
        elif c["fn"] == "nvmlDeviceGetEncoderUtilization":
            g.codec_period_us = int(c["result"][1])


def _cuda_int(v: str) -> int:
    major, _, minor = v.partition(".")
    return int(major) * 1000 + int(minor or 0) * 10


def _wire_links(gpus: list[FakeGpu], topo: TopoMatrix) -> None:
    n = topo.gpu_count
    pairs = {topo.links[i][j] for i in range(n) for j in range(n) if i != j}
    if n > 2 and len(pairs) == 1 and next(iter(pairs)).startswith("NV"):
        k = int(next(iter(pairs))[2:])
        for g in gpus:
            g.nvlinks = [
                (f"000000FE:{s:02X}:00.0", NVML_NVLINK_DEVICE_TYPE_SWITCH) for s in range(k)
            ]
        return
    for i, g in enumerate(gpus):
        links: list[tuple[str, int]] = []
        for j in range(n):
            v = topo.links[i][j]
            if i != j and v.startswith("NV"):
                links += [(gpus[j].bus_id, NVML_NVLINK_DEVICE_TYPE_GPU)] * int(v[2:])
        g.nvlinks = links or None


# What nvidia-smi reports for an RTX 4090 (``FB Memory Usage`` Total, MiB): no capture
# of tests/fixtures has one; cited, not stored (tests/fixtures/SOURCES.md, "Cited, not
# stored"): thamada/nvidia-smi package/RTX4090_smi.py at 6f38a71568acd6fffb59b0181339a8dbb8e84434,
# 8x RTX 4090, driver 550.127.05: "Total : 24564 MiB", "2MiB /  24564MiB".
RTX4090_MIB = 24564


# --- the layouts the tests use -----------------------------------------------------------
def layouts() -> dict[str, dict[str, Any]]:
    return {
        "dgx_a100_nv12": {
            "topo_file": TOPOLOGY / "topo_dgx_a100_nv12.txt",
            "q_file": CAPTURES / "nvsmi_q_a100-sxm4_x4_thamada.txt",
        },
        "hgx_h100_nv18": {
            "topo_file": TOPOLOGY / "topo_hgx_h100_nv18_partial_nics.txt",
            "q_file": CAPTURES / "nvsmi_q_h100-sxm5-80gb_x8_thamada.txt",
        },
        # No -q capture of these machines: the model and memory are given (RTX4090_MIB,
        # cited above), not captured.
        "rtx4090_pix_sys": {
            "topo_file": TOPOLOGY / "topo_pcie_8x_rtx4090_pix_sys.txt",
            "product": "NVIDIA GeForce RTX 4090",
            "memory_mib": RTX4090_MIB,
        },
        "rtx4090_all_sys": {
            "topo_file": TOPOLOGY / "topo_pcie_8x_rtx4090_all_sys.txt",
            "product": "NVIDIA GeForce RTX 4090",
            "memory_mib": RTX4090_MIB,
        },
        "h100_mig": {
            "topo_file": CAPTURES / "nvsmi_topo_h100-80gb-hbm3_x1_vm_drv590_nvgpuexporter.txt",
            "q_file": CAPTURES
            / "nvsmi_q_h100-80gb-hbm3_mig-enabled_drv590_masked_nvgpuexporter.txt",
            "l_file": CAPTURES / "nvsmi_L_h100-80gb-hbm3_mig-mixed_drv590_masked_nvgpuexporter.txt",
            "lgip_file": FIXTURES / "mig" / "mig_h100_80gb_lgip_lgipp.txt",
        },
        # The project's own device check (tests/fixtures/SOURCES.md): one H200 in a VM,
        # whose sysfs has no NUMA node (-1) while NVML's memory affinity names node 0.
        "h200_vm": {
            "topo_file": CAPTURES / "nvsmi_topo_h200_x1_vm_drv580_swarmgpu-device.txt",
            "q_file": CAPTURES / "nvsmi_q_h200_x1_vm_drv580_swarmgpu-device.txt",
            "lgip_file": CAPTURES / "nvsmi_mig-lgip_h200_x1_vm_drv580_swarmgpu-device.txt",
            "sysfs_numa": False,
            "nvml_record": CAPTURES / "nvml_record_h200_x1_vm_drv580_swarmgpu-device.json",
        },
        # The same check on another H200 of that pool (stop 57): same driver, VM and
        # topology; its own UUID, `-q` and recording, made by the code as mended after
        # the first.
        "h200_vm_2": {
            "topo_file": CAPTURES / "nvsmi_topo_h200_x1_vm_drv580_swarmgpu-device.txt",
            "q_file": CAPTURES / "nvsmi_q_h200_x1_vm_drv580_swarmgpu-device-2.txt",
            "lgip_file": CAPTURES / "nvsmi_mig-lgip_h200_x1_vm_drv580_swarmgpu-device.txt",
            "sysfs_numa": False,
            "nvml_record": CAPTURES / "nvml_record_h200_x1_vm_drv580_swarmgpu-device-2.json",
        },
        "dgx1_v100_direct_nvlink": {
            "topo_file": CAPTURES / "nvsmi_topo_dgx1-v100_mlx5x4_msccl.txt",
            "product": "Tesla V100-SXM2-32GB",
            "memory_mib": 32768,
        },
    }


def build_layout(name: str, sysfs_dir: Path, **overrides: Any) -> Built:
    return build(sysfs_dir=sysfs_dir, **{**layouts()[name], **overrides})


# Values no nvidia-smi -q capture prints (tests/fixtures/SOURCES.md): the A100
# dcgm-exporter capture's energy counter and profiling ratios (whole GPU, and its 1g.5gb
# instance), as NVML's GPM percentages.
CAPTURED_ENERGY_MJ = 319159391
GPM_WHOLE = {1: 99.5630, 5: 92.9260, 10: 69.0789}
GPM_INSTANCE = {1: 99.5687, 5: 93.0433, 10: 80.0339}


def with_uncaptured_counters(built: Built) -> Built:
    """Set what no capture holds: the energy counter on every GPU, NVLink data counters
    (0 KiB) on GPUs with NVLinks, GPM values on GPM GPUs (each GPU instance too)."""
    for g in built.machine.gpus:
        g.energy_mj = CAPTURED_ENERGY_MJ
        if g.nvlinks:
            g.nvlink_data_kib = (0, 0)
        if g.gpm is not None:
            g.gpm = {None: dict(GPM_WHOLE), **{m.gi_id: dict(GPM_INSTANCE) for m in g.migs}}
    return built
