"""Checks of the GPUs NVML reads, the driver's device nodes: numbers, device cgroup,
/dev/char links, order and NUMA placement."""

from __future__ import annotations

import re

from swarmgpu.agent.doctor.infoparts import info_part, unread_check
from swarmgpu.agent.doctor.infoparts import shown as info_shown
from swarmgpu.agent.doctor.resources import norm_bus_id
from swarmgpu.agent.doctor.view import Check, NodeView, Status, quote

# The --source kinds that read a file (their errors start with the spec), not a driver.
FILE_SOURCES = ("file:", "gfd:", "topo:")


def check_gpu_facts(view: NodeView) -> Check:
    """Could NVML (or the --source) read every GPU? The checks compare the node's files
    with what it read; a GPU it cannot read is one no container can use."""
    cid = "gpu.facts"
    if view.facts_error is not None and view.facts_hung and not view.facts_error.startswith(
            "nvml:"):
        return Check(
            cid, Status.FAIL, f"cannot read the GPU facts: {view.facts_error}",
            "Without the GPU facts the checks cannot compare daemon.json with the GPUs.",
            "Point --source at a regular file that can be read (a FIFO, or a file on a hung "
            "network file system, never answers).")
    if view.facts_error is not None and view.facts_hung:
        return Check(
            cid, Status.FAIL, f"cannot read the GPU facts: {view.facts_error}",
            "A driver that does not answer (a GPU fallen off the bus, a hung driver) hangs "
            "every NVML caller: the agent serves no GPU facts, nvidia-smi and GPU containers "
            "hang too; the doctor left the read and ran its other checks.",
            "`dmesg | grep -i xid` names the fault (Xid 79: fallen off the bus); drain the "
            "node (`docker node update --availability drain <node>`) and reboot it (a reset, "
            "`nvidia-smi -r`, needs a driver that answers); a GPU that keeps falling off "
            "needs its slot, power or itself replaced.")
    if view.facts_error is not None and view.facts_error.startswith(FILE_SOURCES):
        # The --source named a file: the driver fix would send the reader to install one.
        return Check(
            cid, Status.FAIL, f"cannot read the GPU facts: {view.facts_error}",
            "Without the GPU facts the checks cannot compare daemon.json with the GPUs.",
            "Point --source at a file that exists and can be read: file:PATH a facts file, "
            "gfd:PATH a GFD features file, topo:PATH an `nvidia-smi topo -m` capture "
            "(docs/facts-schema.md); or leave --source out on the GPU node itself (nvml).")
    if view.facts_error is not None:
        return Check(
            cid, Status.FAIL, f"cannot read the GPU facts: {view.facts_error}",
            "Without NVML's view of the GPUs the agent serves none (placement sends no GPU "
            "service here) and the checks cannot compare daemon.json with the GPUs.",
            "Make `nvidia-smi` work on this node first: the driver installed and loaded for "
            "the running kernel (`dmesg | grep -i nvrm`); in a container run the doctor with "
            "the nvidia runtime; or describe the GPUs with --source gfd:FILE or topo:FILE.")
    facts = view.facts
    if facts is None:
        return Check(cid, Status.SKIP, "no GPU facts (run on the node with NVML, or pass "
                                       "--source)")
    lost = sorted((g for g in facts.gpus if not g.healthy), key=lambda g: g.index)
    if lost:
        return Check(
            cid, Status.FAIL,
            "; ".join(f"GPU{g.index}: {g.error or 'unhealthy'}" for g in lost[:4])
            + (f"; and {len(lost) - 4} more" if len(lost) > 4 else ""),
            "A GPU NVML cannot read (fallen off the bus, 'Unknown Error', a hung call) fails "
            "every container given it; swarmgpu marks it unhealthy and places nothing on it.",
            "`dmesg | grep -i xid` names the fault (Xid 79: fallen off the bus); "
            "`nvidia-smi -r -i <index>` resets a GPU nothing uses, else drain the node "
            "(`docker node update --availability drain <node>`) and reboot; a GPU that "
            "keeps falling off needs its slot, power or itself replaced.", tuple(facts.errors))
    if not facts.gpus:  # an answer (no error), but not a GPU node's
        return Check(
            cid, Status.WARN, f"no GPU listed by {facts.source or 'the facts'}",
            "The agent serves what the doctor read: this node would be labelled "
            "gpu.count=0 and placement sends it no GPU service.",
            "`nvidia-smi -L` lists the GPUs the driver sees: if none, check the driver "
            "(`dmesg | grep -i nvrm`); in a container run the doctor with the nvidia runtime "
            "and every GPU visible; a --source file must list the node's GPUs.",
            tuple(facts.errors))
    return Check(cid, Status.OK, f"{len(facts.gpus)} GPU(s) read from {facts.source or 'facts'}",
                 details=tuple(facts.errors))


# Device nodes the driver owns: /dev name -> (/proc/devices names, expected minor).
def _expected_device(name: str) -> tuple[tuple[str, ...], int | None] | None:
    frontend = ("nvidia-frontend", "nvidia")
    fixed = {"nvidiactl": (frontend, 255), "nvidia-modeset": (frontend, 254),
             "nvidia-uvm": (("nvidia-uvm",), 0), "nvidia-uvm-tools": (("nvidia-uvm",), 1),
             "nvidia-nvswitchctl": (("nvidia-nvswitch",), None)}
    if name in fixed:
        names, minor = fixed[name]
        return names, minor
    if m := re.fullmatch(r"nvidia(\d+)", name):
        return frontend, int(m.group(1))
    if m := re.fullmatch(r"nvidia-caps/nvidia-cap(\d+)", name):
        return ("nvidia-caps",), int(m.group(1))
    if re.fullmatch(r"nvidia-nvswitch\d+", name):
        return ("nvidia-nvswitch",), None
    return None


def _required_nodes(view: NodeView) -> list[str]:
    if view.facts is not None and view.facts.gpus:
        gpus = [f"nvidia{g.index}" for g in view.facts.gpus]
    else:
        gpus = sorted(n for n in view.dev_nodes if re.fullmatch(r"nvidia\d+", n))[:1] or ["nvidia0"]
    return ["nvidiactl", "nvidia-uvm", *gpus]


def check_device_nodes(view: NodeView) -> Check:
    cid = "devices.nodes"
    why = ("The toolkit bind-mounts /dev/nvidia* into the container and allows their "
           "major:minor in its device cgroup; a node whose numbers are not the driver's (left "
           "over from an older driver, made by hand or by an image) opens the wrong device or "
           "is denied, and CUDA fails with 'no CUDA-capable device' or an NVML 'Unknown Error'.")
    if view.proc_devices is None:
        return Check(cid, Status.SKIP, f"{view.root.rstrip('/')}/proc/devices is absent")
    majors = view.proc_devices
    if not any(n in majors for n in ("nvidia-frontend", "nvidia")):
        return Check(cid, Status.FAIL, "no nvidia driver in /proc/devices",
                     "The NVIDIA kernel module is not loaded: no container can get a GPU.",
                     "Install/load the driver (`modprobe nvidia`; check `dmesg` and Secure "
                     "Boot module signing).")
    problems: list[str] = []
    fixes: list[str] = []
    if "nvidia-uvm" not in majors:
        problems.append("nvidia-uvm is not loaded")
        fixes.append("`modprobe nvidia-uvm && nvidia-modprobe -u -c=0` (and add nvidia-uvm to "
                     "/etc/modules-load.d so it loads at boot)")
    for name in _required_nodes(view):
        if name == "nvidia-uvm" and "nvidia-uvm" not in majors:
            continue
        if name not in view.dev_nodes:
            problems.append(f"/dev/{name} is missing")
            fixes.append("`nvidia-modprobe -c=0 -u` (or `nvidia-smi` once, as root) creates "
                         "the missing nodes")
    for name, num in sorted(view.dev_nodes.items()):
        expected = _expected_device(name)
        if expected is None:
            continue
        names, minor = expected
        major = next((majors[n] for n in names if n in majors), None)
        if num is None:
            problems.append(f"/dev/{name} is not a character device")
        elif major is None:
            problems.append(f"/dev/{name} is {num[0]}:{num[1]} but /proc/devices has no "
                            f"{names[0]} driver")
        elif num[0] != major or (minor is not None and num[1] != minor):
            want = f"{major}:{minor if minor is not None else '*'}"
            problems.append(f"/dev/{name} is {num[0]}:{num[1]}, the driver's is {want}")
        else:
            continue
        fixes.append(f"`rm /dev/{name}` and recreate it: `nvidia-modprobe -u -c=0` (or "
                     f"`mknod -m 666 /dev/{name} c {major if major is not None else 'MAJOR'} "
                     f"{minor if minor is not None else 'MINOR'}`)")
    if problems:
        return Check(cid, Status.FAIL, "; ".join(problems), why,
                     "; ".join(dict.fromkeys(fixes)) + ".")
    shown = ", ".join(f"{n}={v[0]}:{v[1]}" for n, v in sorted(view.dev_nodes.items())
                      if v is not None and n in _required_nodes(view))
    return Check(cid, Status.OK, f"device numbers match /proc/devices ({shown})")


def check_cgroup(view: NodeView) -> Check:
    cid = "cgroup.devices"
    if view.cgroup_v2:
        return Check(cid, Status.OK, "cgroup v2: runc enforces device access with eBPF; "
                                     "there is no devices controller to enable")
    if view.cgroup_v1_devices is None:
        return Check(cid, Status.SKIP, "neither sys/fs/cgroup/cgroup.controllers nor "
                                       "proc/cgroups under the root: cgroup version unknown")
    if view.cgroup_v1_devices:
        return Check(cid, Status.OK, "cgroup v1 with the devices controller enabled")
    return Check(
        cid, Status.FAIL, "cgroup v1 and the devices controller is absent or disabled in "
                          "/proc/cgroups",
        "nvidia-container-cli writes the GPU's major:minor into the container's devices cgroup; "
        "without the controller GPU containers fail to start ('cgroup subsystem devices not "
        "found').",
        "Remove cgroup_disable=devices from the kernel command line, or boot with cgroup v2 "
        "(systemd.unified_cgroup_hierarchy=1).")


def check_dev_char_links(view: NodeView) -> Check:
    cid = "cgroup.dev-char-links"
    unread = unread_check(cid, view.docker_info, ("CgroupDriver",))
    if unread is not None:  # (read as none, the driver would be assumed)
        return unread
    driver = info_part(view.docker_info, "CgroupDriver")
    if driver is None:
        # Docker picks the systemd driver on cgroup v2 hosts booted with systemd.
        driver = "systemd (assumed: cgroup v2)" if view.cgroup_v2 else None
    if driver is None or not str(driver).startswith("systemd"):
        return Check(cid, Status.SKIP if driver is None else Status.OK,
                     f"cgroup driver {info_shown(driver or 'unknown (no docker info)')}: "
                     "the /dev/char trap needs the systemd cgroup driver")
    if view.dev_char is None and not view.dev_nodes:
        return Check(cid, Status.SKIP, "no /dev/nvidia* nodes to check")
    have = view.dev_char or frozenset()
    wanted = {n: v for n, v in view.dev_nodes.items()
              if v is not None and n in _required_nodes(view)}
    missing = sorted(f"/dev/char/{v[0]}:{v[1]} (-> {n})" for n, v in wanted.items()
                     if f"{v[0]}:{v[1]}" not in have)
    if missing:
        return Check(
            cid, Status.WARN, f"cgroup driver {info_shown(driver)}; missing {quote(missing)}",
            "With the systemd cgroup driver, every `systemctl daemon-reload` makes systemd "
            "re-apply each container's device rules by /dev/char/MAJOR:MINOR path; GPUs whose "
            "link is missing are dropped, and running containers start failing with 'Failed to "
            "initialize NVML: Unknown Error' (NVIDIA/nvidia-container-toolkit#48).",
            "`nvidia-ctk system create-dev-char-symlinks --create-all` (and its udev rule so "
            "they survive reboots), or run dockerd with exec-opts native.cgroupdriver=cgroupfs.")
    return Check(cid, Status.OK, f"cgroup driver {info_shown(driver)}; /dev/char links exist "
                                 "for the GPU device nodes")


def check_device_order(view: NodeView) -> Check:
    cid = "gpu.order"
    facts = view.facts
    if facts is None:
        return Check(cid, Status.SKIP, "no GPU facts")
    if len(facts.gpus) < 2:
        return Check(cid, Status.OK, f"{len(facts.gpus)} GPU: nothing to order")
    fix = ("Set CUDA_DEVICE_ORDER=PCI_BUS_ID in GPU services (`--env` / compose "
           "`environment:`) so CUDA numbers the visible GPUs as nvidia-smi does, and address "
           "GPUs by UUID, never by index.")
    by_index = sorted(facts.gpus, key=lambda g: g.index)
    products = sorted({g.product for g in facts.gpus})
    found: list[str] = []
    if all(g.pci_bus_id for g in by_index):
        buses = [norm_bus_id(g.pci_bus_id) for g in by_index]
        if buses != sorted(buses):
            found.append("NVML index order differs from PCI bus order: "
                         + ", ".join(f"GPU{g.index}={b}" for g, b in zip(by_index, buses,
                                                                          strict=True)))
    if len(products) > 1:
        found.append(f"mixed products ({', '.join(products)})")
    if found:
        return Check(
            cid, Status.WARN, "; ".join(found),
            "CUDA numbers devices fastest-first by default (CUDA_DEVICE_ORDER=FASTEST_FIRST), "
            "nvidia-smi and NVML by PCI bus: inside a container 'device 0' need not be the GPU "
            "a tool, a log or an index-based setting refers to.", fix)
    return Check(cid, Status.OK, "identical GPUs with NVML indices in PCI bus order; "
                                 "CUDA_DEVICE_ORDER=PCI_BUS_ID is still the safe default")


def check_numa(view: NodeView) -> Check:
    cid = "gpu.numa"
    facts = view.facts
    if facts is None:
        return Check(cid, Status.SKIP, "no GPU facts")
    rows = []
    unknown = []
    for g in sorted(facts.gpus, key=lambda g: g.index):
        sysfs = view.sysfs_numa.get(norm_bus_id(g.pci_bus_id)) if g.pci_bus_id else None
        numa = "?" if g.numa_node is None else str(g.numa_node)
        if g.numa_node is None and sysfs is not None:
            numa += f" (sysfs says {sysfs})"
        rows.append(f"GPU{g.index}  {g.pci_bus_id or '?':<16} numa {numa:<6} "
                    f"cpus {g.cpu_affinity or '?'}")
        if g.numa_node is None or not g.cpu_affinity:
            unknown.append(f"GPU{g.index}")
    if unknown:
        return Check(
            cid, Status.WARN, f"NUMA node or CPU affinity unknown for {', '.join(unknown)}",
            "Pinning a GPU task's CPUs and memory to its GPU's NUMA node avoids cross-socket "
            "traffic (up to ~3x slower host<->GPU copies); with it unknown, swarmgpu cannot "
            "label NUMA facts or prefer GPUs on one node.",
            "Check /sys/bus/pci/devices/<bus id>/numa_node (-1: the firmware does not report "
            "NUMA; enable it / ACPI SRAT in the BIOS) and `nvidia-smi topo -m` (CPU Affinity); "
            "update the driver if NVML cannot read them.", tuple(rows))
    return Check(cid, Status.OK, f"NUMA node and CPU affinity known for {len(rows)} GPU(s)",
                 details=tuple(rows))
