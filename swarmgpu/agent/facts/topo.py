"""``topo:PATH`` — facts from a saved ``nvidia-smi topo -m`` matrix.

The matrix gives GPU count, links, CPU affinity and NUMA node; product and memory
come from the operator (``--product``, ``--memory-mib``) and UUIDs are synthetic
(see ``naming.synthetic_uuid``). Meant for nodes where NVML cannot run (a VM image
build, a test swarm) and for replaying captures from real machines.

Accepted text: tab- or space-separated, with or without the ANSI underline codes a
terminal gets in the header, NIC rows and columns (ignored), the optional
``CPU Affinity`` / ``NUMA Affinity`` / ``GPU NUMA ID`` columns, ``N/A`` values and
the legend after a blank line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from swarmgpu.agent.facts import SourceError
from swarmgpu.agent.facts.naming import (
    instance_ids,
    max_instances,
    parse_profile,
    synthetic_uuid,
)
from swarmgpu.core.boundedfile import NotRegularFile, TooLarge, read_bounded_text
from swarmgpu.core.miglayout import mig_layout_fault
from swarmgpu.core.model import (
    MAX_MIG_PER_GPU,
    FactsError,
    Gpu,
    MigDevice,
    NodeFacts,
    valid_link,
)

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU_RE = re.compile(r"^GPU(\d+)$")
# Columns after the device columns, in the order nvidia-smi prints them.
_TRAILING = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
# ASCII digits only, as nvidia-smi prints them: \d and str.isdigit also take '²' or
# Arabic-Indic digits, which int() reads as another number or refuses with a ValueError.
_CPULIST_RE = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$", re.ASCII)
# A capture is a few KiB (64 GPUs and their NICs: under 100 KiB); the agent re-reads it
# at every refresh, so a wrong path (a log, a disk image) must not be read whole.
MAX_CAPTURE_BYTES = 1 << 20


@dataclass(frozen=True)
class TopoMatrix:
    """The GPU part of ``nvidia-smi topo -m``."""

    gpu_count: int
    links: tuple[tuple[str, ...], ...]  # links[i][j], "X" on the diagonal
    cpu_affinity: tuple[str | None, ...]  # "0-35,72-107" per GPU, None when N/A
    numa_node: tuple[int | None, ...]  # "NUMA Affinity" per GPU, None when N/A


def _split_header(line: str) -> list[str]:
    # Column names hold single spaces ("CPU Affinity"): split on tabs or 2+ spaces.
    return [c.strip() for c in re.split(r"\t|\s{2,}", line.strip()) if c.strip()]


def parse_topo(text: str, *, where: str = "topo") -> TopoMatrix:
    """Parse ``nvidia-smi topo -m`` text; FactsError with the line number on garbage."""
    lines = [_ANSI_RE.sub("", ln).rstrip("\r") for ln in text.splitlines()]
    start = next((n for n, ln in enumerate(lines) if ln.strip()), None)
    if start is None:
        raise FactsError(f"{where}: empty; expected the output of 'nvidia-smi topo -m'")
    header = _split_header(lines[start])
    gpu_cols = [c for c in header if _GPU_RE.match(c)]
    if not gpu_cols or header[0] != "GPU0":
        raise FactsError(
            f"{where}:{start + 1}: header must start with GPU0, GPU1, ...; got {header[:3]}; "
            "is this 'nvidia-smi topo -m' output?"
        )
    n = len(gpu_cols)
    if gpu_cols != [f"GPU{i}" for i in range(n)]:
        raise FactsError(f"{where}:{start + 1}: GPU columns out of order: {gpu_cols}")
    trailing = [c for c in header if c in _TRAILING]
    devices = len(header) - len(trailing)  # GPU and NIC columns
    unknown = [c for c in header[devices:] if c not in _TRAILING]
    if unknown:
        raise FactsError(f"{where}:{start + 1}: unexpected column(s) {unknown}")

    links: list[tuple[str, ...]] = []
    cpus: list[str | None] = []
    numa: list[int | None] = []
    for n_line in range(start + 1, len(lines)):
        raw = lines[n_line]
        if not raw.strip():
            break  # the legend follows a blank line
        tokens = raw.split()
        label = tokens[0]
        if not _GPU_RE.match(label):
            continue  # NIC rows (mlx5_0, NIC3, ...) carry no GPU facts
        lineno = n_line + 1
        if label != f"GPU{len(links)}":
            raise FactsError(f"{where}:{lineno}: expected row GPU{len(links)}, got {label}")
        values = tokens[1:]
        if len(values) < devices:
            raise FactsError(
                f"{where}:{lineno}: {label} has {len(values)} values, expected at least "
                f"{devices} (one per GPU/NIC column)"
            )
        row = tuple(values[:n])
        for j, v in enumerate(row):
            if not valid_link(v):
                raise FactsError(
                    f"{where}:{lineno}: {label}/GPU{j} link {v!r} is not one of "
                    "X, NV<n>, PIX, PXB, PHB, NODE, SYS"
                )
        links.append(row)
        extra = dict(zip(trailing, values[devices:], strict=False))
        cpus.append(_cpu_list(extra.get("CPU Affinity"), where, lineno))
        numa.append(_numa(extra.get("NUMA Affinity"), where, lineno))
    if len(links) != n:
        raise FactsError(f"{where}: header names {n} GPUs but {len(links)} GPU rows follow")
    norm = tuple(tuple("SYS" if v == "SOC" else v for v in row) for row in links)
    for i in range(n):
        if norm[i][i] != "X":
            raise FactsError(f"{where}: GPU{i}/GPU{i} must be 'X', got {norm[i][i]!r}")
        for j in range(n):
            if i != j and norm[i][j] == "X":
                raise FactsError(
                    f"{where}: GPU{i}/GPU{j} is 'X', which nvidia-smi prints "
                    "only on the diagonal (a GPU with itself): is a cell shifted?"
                )
            if norm[i][j] != norm[j][i]:
                raise FactsError(
                    f"{where}: matrix not symmetric: GPU{i}/GPU{j}={norm[i][j]} but "
                    f"GPU{j}/GPU{i}={norm[j][i]}"
                )
    return TopoMatrix(n, norm, tuple(cpus), tuple(numa))


def _cpu_list(v: str | None, where: str, lineno: int) -> str | None:
    if v is None or v == "N/A":
        return None
    if not _CPULIST_RE.match(v):
        raise FactsError(f"{where}:{lineno}: CPU Affinity {v!r} is not a CPU list like 0-35,72-107")
    return v


def _numa(v: str | None, where: str, lineno: int) -> int | None:
    if v is None or v == "N/A":
        return None
    if not (v.isascii() and v.isdigit() and len(v) <= 6):
        raise FactsError(f"{where}:{lineno}: NUMA Affinity {v!r} is not a node number")
    return int(v)


# --- MIG layout ----------------------------------------------------------------------
def parse_mig_layout(layout: str, gpu_count: int, memory_mib: int) -> dict[int, list[str]]:
    """``{gpu_index: [profile, ...]}`` from a ``--mig`` string (the ``facts``/``agent`` option).

    Forms (documented in docs/facts-schema.md):
    ``all-1g.10gb`` every GPU filled with as many of that profile as fit;
    ``all:3g.40gb,2g.20gb,1g.10gb*2`` the same list on every GPU;
    ``0:3g.40gb,1g.10gb*2;1:7g.80gb`` per GPU, ``;``-separated.
    """
    out: dict[int, list[str]] = {}
    what = f"--mig {layout!r}"
    for part in (p.strip() for p in layout.split(";")):
        if not part:
            continue
        if part.startswith("all-"):
            profile = part[4:]
            _check_profile(profile, what)
            count = max_instances(profile, memory_mib)
            for i in range(gpu_count):
                out[i] = [profile] * count
            continue
        sel, sep, profiles = part.partition(":")
        if not sep:
            raise SourceError(
                f"{what}: {part!r} needs '<gpu>:<profiles>' or 'all-<profile>', "
                "e.g. '0:3g.40gb,1g.10gb*2' or 'all-1g.10gb'"
            )
        names: list[str] = []
        for item in (x.strip() for x in profiles.split(",")):
            prof, star, times = item.partition("*")
            _check_profile(prof, what)
            if star and not (times.isascii() and times.isdigit()):
                raise SourceError(f"{what}: count in {item!r} must be a number, e.g. 1g.10gb*2")
            if star and int(times) > MAX_MIG_PER_GPU - len(names):  # before it is built
                raise SourceError(f"{what}: {item!r}: at most {MAX_MIG_PER_GPU} MIG devices "
                                  "per GPU")
            names += [prof] * (int(times) if star else 1)
        if sel.strip() == "all":
            targets = list(range(gpu_count))
        elif sel.strip().isdigit() and int(sel) < gpu_count:
            targets = [int(sel)]
        else:
            raise SourceError(f"{what}: GPU {sel!r} is not 'all' or an index below {gpu_count}")
        for i in targets:
            out[i] = list(names)
    return out


def _check_profile(profile: str, what: str) -> None:
    try:
        parse_profile(profile)
    except ValueError as e:
        raise SourceError(f"{what}: {e}") from e


def mig_devices_for(
    profiles: list[str], *, hostname: str, origin: str, gpu_index: int
) -> tuple[MigDevice, ...]:
    """Synthetic MIG devices (stable ``MIG-5ca1ab1e-...`` UUIDs) for a list of profiles.

    The GI id is synthetic too (the instance's position on its GPU): it is what tells
    slices apart in ``/metrics`` (``GPU_I_ID``) and ties their samples back to them.
    Compute instances of one GPU instance (``1c.3g.20gb`` x3) share its id and its
    memory, each with its own CI id (``naming.instance_ids``)."""
    devs = []
    for k, (prof, (gi, ci)) in enumerate(zip(profiles, instance_ids(profiles), strict=True)):
        _, gb = parse_profile(prof)
        devs.append(
            MigDevice(
                profile=prof,
                uuid=synthetic_uuid("MIG", hostname, origin, gpu_index, k, prof),
                memory_mib=gb * 1024,  # nominal: the name's GB, not the exact GI size
                gi_id=gi,
                ci_id=ci,
            )
        )
    return tuple(devs)


class TopoSource:
    """``topo:PATH``: a ``topo -m`` capture plus the product and memory given."""

    def __init__(
        self,
        path: str | Path,
        *,
        hostname: str,
        product: str,
        memory_mib: int,
        mig_layout: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.spec = f"topo:{path}"
        self.hostname = hostname
        self.product = product
        self.memory_mib = memory_mib
        self.mig_layout = mig_layout

    def read(self) -> NodeFacts:
        try:
            text = read_bounded_text(self.path, MAX_CAPTURE_BYTES, errors="replace")
        except NotRegularFile as e:
            raise SourceError(
                f"{self.spec}: {self.path} is {e.why}; give the path of a saved "
                "'nvidia-smi topo -m' output"
            ) from None
        except TooLarge as e:
            raise SourceError(f"{self.spec}: {self.path} is {e.why}") from None
        except OSError as e:
            raise SourceError(f"{self.spec}: cannot read {self.path}: {e.strerror}") from e
        try:
            topo = parse_topo(text, where=str(self.path))
        except FactsError as e:
            raise SourceError(f"{self.spec}: {e}") from e
        origin = self.path.name
        layout = (
            parse_mig_layout(self.mig_layout, topo.gpu_count, self.memory_mib)
            if self.mig_layout
            else {}
        )
        gpus = []
        for i in range(topo.gpu_count):
            migs = mig_devices_for(
                layout.get(i, []), hostname=self.hostname, origin=origin, gpu_index=i
            )
            # what NodeFacts.from_dict refuses from any agent: said here, naming --mig
            fault = mig_layout_fault(migs, self.memory_mib)
            if fault is not None:
                raise SourceError(f"{self.spec}: --mig {self.mig_layout!r}: GPU {i} "
                                  f"({self.memory_mib} MiB): {fault}; give a layout the "
                                  "GPU holds (nvidia-smi mig -lgip lists its profiles)")
            gpus.append(
                Gpu(
                    index=i,
                    uuid=synthetic_uuid("GPU", self.hostname, origin, i),
                    product=self.product,
                    memory_mib=self.memory_mib,
                    mig_capable=bool(migs),
                    mig_enabled=bool(migs),
                    mig_devices=migs,
                    numa_node=topo.numa_node[i],
                    cpu_affinity=topo.cpu_affinity[i],
                )
            )
        return NodeFacts(
            hostname=self.hostname, gpus=tuple(gpus), links=topo.links, source=self.spec
        )
