"""Value types every part of swarmgpu speaks: GPU facts of a node.

The JSON form (``NodeFacts.to_dict`` / ``NodeFacts.from_dict``) is what the agent
serves at ``/facts`` and what a ``file:`` source holds, so it is versioned
(``FACTS_SCHEMA``) and parsed with errors that name the offending field.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from swarmgpu.core.health import HealthSignals, signals_from_dict
from swarmgpu.core.miglayout import mig_layout_fault
from swarmgpu.core.peertext import peer_text

FACTS_SCHEMA = "swarmgpu.facts/v1"

# go-gpuallocator's pair scores (NVIDIA/go-gpuallocator, used by the k8s device plugin).
LINK_SCORES: dict[str, int] = {
    "SYS": 10,
    "NODE": 20,
    "PHB": 30,
    "PXB": 40,
    "PIX": 50,
    "SOC": 10,  # older drivers print SOC for what is now SYS
}
NVLINK_SCORE_PER_LINK = 100
_LINK_RE = re.compile(r"(?:X|SYS|NODE|PHB|PXB|PIX|SOC|NV([0-9]{1,3}))", re.ASCII)
# A UUID is written as it is into labels: the ledger (``GPU-a,GPU-b@500``), the service's
# device list, and so NVIDIA_VISIBLE_DEVICES. A newline, ``,``, ``@``, ``;``, ``=``, a
# space or a keyword such as ``all`` would change what they say (two GPUs, half a GPU,
# every GPU), so only NVIDIA's forms pass: GPU-..., MIG-... (and MIG-GPU-<uuid>/gi/ci).
_UUID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]*", re.ASCII)
_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone one: a pair decodes to one code point


# What one agent may claim, at most: anything bigger is a broken or hostile agent, refused
# before it becomes labels (each GPU and MIG profile turns into node labels and ledger
# room). The biggest real nodes have 16 GPUs; a GPU has at most 7 MIG devices.
MAX_GPUS = 64
MAX_MIG_PER_GPU = 16
MAX_STR_LEN = 256  # any string field (hostname, product, UUID, versions...)
MAX_INT = 2**53  # any integer field is below it (a float holds it exactly)
# A GPU's memory believed, at most: 16 TiB, far past any GPU made (the largest hold
# under 300 GB), so only a garbled answer is above it (2^44 MiB read as a fact is a GPU
# that fits any request).
MAX_GPU_MEMORY_MIB = 1 << 24
MAX_ERRORS = 50  # agent-reported problems kept (each cut to MAX_STR_LEN)


class FactsError(ValueError):
    """Facts that cannot be used, with the field that is wrong and how to fix it."""


def link_score(link: str) -> int:
    """Score of one link as ``nvidia-smi topo -m`` prints it (``NV12``, ``PIX``...)."""
    if is_nvlink(link):
        return NVLINK_SCORE_PER_LINK * int(link[2:])
    return LINK_SCORES.get(link, 0)


def is_nvlink(link: str) -> bool:
    n = link[2:]
    return link.startswith("NV") and 0 < len(n) <= 3 and n.isascii() and n.isdigit()


def valid_link(link: str) -> bool:
    return bool(_LINK_RE.fullmatch(link))


@dataclass(frozen=True)
class MigDevice:
    """One MIG device (a GPU instance with its compute instance) on a parent GPU."""

    profile: str  # e.g. "1g.10gb", as nvidia-smi names it
    uuid: str  # "MIG-..." (or the legacy "MIG-GPU-<uuid>/gi/ci" form)
    memory_mib: int
    gi_id: int | None = None
    ci_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "uuid": self.uuid,
            "memory_mib": self.memory_mib,
            "gi_id": self.gi_id,
            "ci_id": self.ci_id,
        }


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    product: str
    memory_mib: int
    pci_bus_id: str = ""
    compute_major: int | None = None
    compute_minor: int | None = None
    mig_capable: bool = False
    mig_enabled: bool = False
    mig_devices: tuple[MigDevice, ...] = ()
    numa_node: int | None = None
    cpu_affinity: str | None = None
    healthy: bool = True
    error: str | None = None  # why this GPU is unhealthy / partly unknown
    health: HealthSignals | None = None  # XID, ECC, remapping... (core.health); None: unread

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "uuid": self.uuid,
            "product": self.product,
            "memory_mib": self.memory_mib,
            "pci_bus_id": self.pci_bus_id,
            "compute_major": self.compute_major,
            "compute_minor": self.compute_minor,
            "mig_capable": self.mig_capable,
            "mig_enabled": self.mig_enabled,
            "mig_devices": [m.to_dict() for m in self.mig_devices],
            "numa_node": self.numa_node,
            "cpu_affinity": self.cpu_affinity,
            "healthy": self.healthy,
            "error": self.error,
        }
        if self.health is not None:  # absent, not null, when unread: older readers
            out["health"] = self.health.to_dict()
        return out


# The agent's /facts header: seconds since it read the facts it serves, on its own
# monotonic clock (no skew with the reader's). An agent whose source hangs serves its last
# read, that old (``agent.server``); the daemon dates the facts by it (``FactsResult``).
FACTS_AGE_HEADER = "X-Swarmgpu-Facts-Age"


@dataclass(frozen=True)
class NodeFacts:
    """Everything swarmgpu knows about one node's GPUs, at one moment.

    ``links`` is the GPU-to-GPU part of ``nvidia-smi topo -m``: ``links[i][j]`` is the
    link between the i-th and j-th GPU of ``gpus`` (``"X"`` on the diagonal). Empty
    when the topology is unknown.
    """

    hostname: str
    gpus: tuple[Gpu, ...] = ()
    links: tuple[tuple[str, ...], ...] = ()
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # "12.2"
    nvml_version: str | None = None
    source: str = ""
    errors: tuple[str, ...] = ()  # problems met while reading; facts still usable
    collected_at: float = field(default_factory=time.time)

    # --- derived views -------------------------------------------------
    def link(self, i: int, j: int) -> str:
        """Link between GPU positions i and j; ``""`` when unknown."""
        if i == j:
            return "X"
        if not self.links:
            return ""
        return self.links[i][j]

    def pair_score(self, i: int, j: int) -> int:
        return link_score(self.link(i, j))

    @property
    def gpus_unread(self) -> bool:
        """The source could not list the GPUs: none listed, and errors say why (NVML
        cannot initialise, its GPU count failed). Zero GPUs without an error is an
        answer; this says nothing of the GPUs the node has."""
        return not self.gpus and bool(self.errors)

    def with_errors(self, *errors: str) -> NodeFacts:
        return replace(self, errors=self.errors + tuple(errors))

    # --- JSON ----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": FACTS_SCHEMA,
            "node": {
                "hostname": self.hostname,
                "driver_version": self.driver_version,
                "cuda_driver_version": self.cuda_driver_version,
                "nvml_version": self.nvml_version,
                "source": self.source,
                "collected_at": self.collected_at,
            },
            "gpus": [g.to_dict() for g in self.gpus],
            "links": [list(row) for row in self.links],
            "errors": list(self.errors),
        }

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "facts") -> NodeFacts:
        """Parse the JSON form; raise FactsError naming the bad field."""
        if not isinstance(data, Mapping):
            raise FactsError(f"{where}: expected a JSON/YAML object, got {type(data).__name__}")
        schema = data.get("schema", FACTS_SCHEMA)
        if schema != FACTS_SCHEMA:
            raise FactsError(
                f"{where}: schema {_quote(schema)} is not supported; expected {FACTS_SCHEMA!r}"
            )
        unknown = set(data) - {"schema", "node", "gpus", "links", "errors"}
        if unknown:
            raise FactsError(
                f"{where}: unknown top-level key(s) {_keys(unknown)}; "
                "allowed: schema, node, gpus, links, errors"
            )
        node = data.get("node", {})
        if not isinstance(node, Mapping):
            raise FactsError(f"{where}.node: expected an object")
        node_keys = {
            "hostname", "driver_version", "cuda_driver_version", "nvml_version",
            "source", "collected_at",
        }
        unknown = set(node) - node_keys
        if unknown:
            raise FactsError(
                f"{where}.node: unknown key(s) {_keys(unknown)}; allowed: {sorted(node_keys)}"
            )
        hostname = _opt_str(node, "hostname", f"{where}.node") or ""
        gpus_raw = data.get("gpus", [])
        if not isinstance(gpus_raw, Sequence) or isinstance(gpus_raw, str | bytes):
            raise FactsError(f"{where}.gpus: expected a list of GPU objects")
        if len(gpus_raw) > MAX_GPUS:
            raise FactsError(f"{where}.gpus: {len(gpus_raw)} GPUs; at most {MAX_GPUS} per node "
                             "are accepted (a broken or hostile agent?)")
        gpus = tuple(_gpu_from(g, f"{where}.gpus[{n}]") for n, g in enumerate(gpus_raw))
        seen: set[str] = set()
        for g in gpus:
            if g.uuid in seen:
                raise FactsError(f"{where}.gpus: UUID {_quote(g.uuid)} appears twice; "
                                 "UUIDs must be unique")
            seen.add(g.uuid)
        for n, g in enumerate(gpus):  # within a GPU, mig_layout_fault has looked
            for k, m in enumerate(g.mig_devices):
                if m.uuid in seen:
                    raise FactsError(f"{where}.gpus[{n}].mig_devices[{k}].uuid: "
                                     f"{_quote(m.uuid)} is also another GPU's or MIG "
                                     "device's; UUIDs must be unique")
            seen.update(m.uuid for m in g.mig_devices)
        # An index names one GPU (MIG choices, notes, nvidia-smi): two GPUs with one
        # index make every such name ambiguous.
        first: dict[int, int] = {}
        for n, g in enumerate(gpus):
            if g.index in first:
                raise FactsError(f"{where}.gpus: GPU index {g.index} appears twice "
                                 f"(gpus[{first[g.index]}] and gpus[{n}]); each GPU has its "
                                 "own index, as nvidia-smi numbers them: fix the facts")
            first[g.index] = n
        links = _links_from(data.get("links", []), len(gpus), f"{where}.links")
        errors_raw = data.get("errors", [])
        if not isinstance(errors_raw, list) or not all(isinstance(e, str) for e in errors_raw):
            raise FactsError(f"{where}.errors: expected a list of strings")
        if len(errors_raw) > MAX_ERRORS:
            left = len(errors_raw) - MAX_ERRORS
            errors_raw = [*errors_raw[:MAX_ERRORS], f"{left} further error(s) left out"]
        # The agent's own notes: shown in logs and on the map, so cut and cleaned.
        errors_raw = [peer_text(e, MAX_STR_LEN) for e in errors_raw]
        collected = node.get("collected_at")
        if collected is not None and (
            isinstance(collected, bool) or not isinstance(collected, int | float)
            or not 0 <= collected < 1e11  # also refuses NaN
        ):
            raise FactsError(f"{where}.node.collected_at: expected a number (unix seconds)")
        return cls(
            hostname=hostname,
            gpus=gpus,
            links=links,
            driver_version=_opt_str(node, "driver_version", f"{where}.node"),
            cuda_driver_version=_opt_str(node, "cuda_driver_version", f"{where}.node"),
            nvml_version=_opt_str(node, "nvml_version", f"{where}.node"),
            source=_opt_str(node, "source", f"{where}.node") or "",
            errors=tuple(errors_raw),
            collected_at=float(collected) if collected is not None else time.time(),
        )


_GPU_KEYS = {
    "index", "uuid", "product", "memory_mib", "pci_bus_id", "compute_major",
    "compute_minor", "mig_capable", "mig_enabled", "mig_devices", "numa_node",
    "cpu_affinity", "healthy", "error", "health",
}


def _quote(v: Any) -> str:
    """A peer's value inside an error: quoted, short, no control characters."""
    return repr(peer_text(v, 64)) if isinstance(v, str) else f"of type {type(v).__name__}"


def _keys(keys: set[Any]) -> str:
    """Unknown keys named in an error: a few, each short (a peer may send thousands)."""
    shown = sorted(peer_text(k, 24) for k in list(keys)[:200])[:3]
    more = f" and {len(keys) - len(shown)} more" if len(keys) > len(shown) else ""
    return f"{shown}{more}"


def _note(text: str | None) -> str | None:
    return None if text is None else peer_text(text, MAX_STR_LEN)


def _opt_str(d: Mapping[str, Any], key: str, where: str, *, note: bool = False) -> str | None:
    """A string field (a number read as its text); ``note``: the agent's own free text,
    which ``_note`` cuts and cleans, so a long one (an agent from before its GPU errors
    were cut) or a lone surrogate in it is mended there, not refused with the node."""
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, str | int | float):
        raise FactsError(f"{where}.{key}: expected a string, got {type(v).__name__}")
    if isinstance(v, int) and abs(v) >= 10**18:
        raise FactsError(f"{where}.{key}: a number that long is not a {key}")
    text = str(v)
    if len(text) > MAX_STR_LEN and not note:
        raise FactsError(f"{where}.{key}: {len(text)} characters; at most {MAX_STR_LEN}")
    if not note and _SURROGATE.search(text):
        # JSON's \ud800 reads as one; no UTF-8 holds it: every page or label naming it
        # (/metrics, node labels) would fail downstream.
        raise FactsError(f"{where}.{key}: {_quote(text)} holds a lone UTF-16 surrogate "
                         "(JSON's \\ud800 to \\udfff unpaired), which no UTF-8 text can; "
                         "fix the agent's facts source")
    return text


def _int(d: Mapping[str, Any], key: str, where: str, *, required: bool, minimum: int = 0) -> Any:
    v = d.get(key)
    if v is None:
        if required:
            raise FactsError(f"{where}.{key}: missing; it is required")
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise FactsError(f"{where}.{key}: expected an integer, got {str(v)[:32]!r}")
    if abs(v) >= MAX_INT:  # first: str() of a 5,000-digit int raises
        raise FactsError(f"{where}.{key}: a number that big is not a {key}")
    if v < minimum:
        raise FactsError(f"{where}.{key}: {v} is below the minimum {minimum}")
    return v


def _bool(d: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    v = d.get(key, default)
    if not isinstance(v, bool):
        raise FactsError(f"{where}.{key}: expected true or false, got {str(v)[:32]!r}")
    return v


def _gpu_from(g: Any, where: str) -> Gpu:
    if not isinstance(g, Mapping):
        raise FactsError(f"{where}: expected an object")
    unknown = set(g) - _GPU_KEYS
    if unknown:
        raise FactsError(f"{where}: unknown key(s) {_keys(unknown)}; allowed: {sorted(_GPU_KEYS)}")
    uuid = _opt_str(g, "uuid", where)
    if not uuid:
        raise FactsError(f"{where}.uuid: missing; every GPU needs its UUID (GPU-...)")
    _check_uuid(uuid, "GPU-", f"{where}.uuid")
    product = _opt_str(g, "product", where)
    if not product:
        raise FactsError(f"{where}.product: missing; e.g. 'NVIDIA A100-SXM4-40GB'")
    migs_raw = g.get("mig_devices", [])
    if not isinstance(migs_raw, list):
        raise FactsError(f"{where}.mig_devices: expected a list")
    if len(migs_raw) > MAX_MIG_PER_GPU:
        raise FactsError(f"{where}.mig_devices: {len(migs_raw)} MIG devices; at most "
                         f"{MAX_MIG_PER_GPU} per GPU are accepted")
    migs = []
    for n, m in enumerate(migs_raw):
        mw = f"{where}.mig_devices[{n}]"
        if not isinstance(m, Mapping):
            raise FactsError(f"{mw}: expected an object")
        prof = _opt_str(m, "profile", mw)
        muuid = _opt_str(m, "uuid", mw)
        if not prof or not muuid:
            raise FactsError(f"{mw}: needs 'profile' (e.g. 1g.10gb) and 'uuid' (MIG-...)")
        _check_uuid(muuid, "MIG-", f"{mw}.uuid")
        migs.append(
            MigDevice(
                profile=prof,
                uuid=muuid,
                memory_mib=_int(m, "memory_mib", mw, required=True),
                gi_id=_int(m, "gi_id", mw, required=False),
                ci_id=_int(m, "ci_id", mw, required=False),
            )
        )
    mig_enabled = _bool(g, "mig_enabled", where, False)
    if migs and not mig_enabled:
        # A GPU not in MIG mode is handed out whole; its slices too would be two holders.
        raise FactsError(f"{where}.mig_devices: {len(migs)} MIG device(s) on a GPU whose "
                         "mig_enabled is false; MIG devices exist only in MIG mode: fix the "
                         "agent's facts source (mig_enabled true, or no mig_devices)")
    memory_mib = _int(g, "memory_mib", where, required=True, minimum=1)
    if memory_mib > MAX_GPU_MEMORY_MIB:  # (the agent's NVML reader says so itself)
        raise FactsError(f"{where}.memory_mib: {memory_mib} MiB, past the "
                         f"{MAX_GPU_MEMORY_MIB >> 20} TiB no GPU has (a garbled reading, "
                         "believed a GPU that fits any request): fix the agent's facts "
                         "source")
    fault = mig_layout_fault(migs, memory_mib)
    if fault:  # slices that cannot exist would be handed out
        raise FactsError(f"{where}.mig_devices: {fault}; the GPU cannot hold these MIG "
                         "devices: fix the agent's facts source")
    return Gpu(
        index=_int(g, "index", where, required=True),
        uuid=uuid,
        product=product,
        memory_mib=memory_mib,
        pci_bus_id=_opt_str(g, "pci_bus_id", where) or "",
        compute_major=_int(g, "compute_major", where, required=False),
        compute_minor=_int(g, "compute_minor", where, required=False),
        mig_capable=_bool(g, "mig_capable", where, False),
        mig_enabled=mig_enabled,
        mig_devices=tuple(migs),
        numa_node=_int(g, "numa_node", where, required=False),
        cpu_affinity=_opt_str(g, "cpu_affinity", where),
        healthy=_bool(g, "healthy", where, True),
        error=_note(_opt_str(g, "error", where, note=True)),
        health=_health_from(g.get("health"), f"{where}.health"),
    )


def is_device_uuid(uuid: str) -> bool:
    """A GPU or MIG device UUID in the form facts carry (``_UUID_RE``)."""
    return uuid.startswith(("GPU-", "MIG-")) and _UUID_RE.fullmatch(uuid) is not None


def _check_uuid(uuid: str, kind: str, where: str) -> None:
    if not (uuid.startswith(kind) and _UUID_RE.fullmatch(uuid)):
        raise FactsError(f"{where}: {_quote(uuid)} is not a {kind}... UUID (letters, digits "
                         "and - . _ : / only, as NVIDIA's GPU-<uuid> and MIG-<uuid>); fix "
                         "the agent's facts source")


def _health_from(raw: Any, where: str) -> HealthSignals | None:
    if raw is None:
        return None
    try:
        return signals_from_dict(raw, where)
    except ValueError as e:
        raise FactsError(str(e)) from e


def _links_from(raw: Any, n: int, where: str) -> tuple[tuple[str, ...], ...]:
    if raw in (None, []):
        return ()
    if not isinstance(raw, list) or len(raw) != n:
        raise FactsError(f"{where}: expected an {n}x{n} matrix (one row per GPU)")
    rows: list[tuple[str, ...]] = []
    for i, row in enumerate(raw):
        if not isinstance(row, list) or len(row) != n:
            raise FactsError(f"{where}[{i}]: expected {n} entries")
        for j, v in enumerate(row):
            if not isinstance(v, str) or not valid_link(v):
                raise FactsError(
                    f"{where}[{i}][{j}]: {str(v)[:16]!r} is not a link; use X, NV<n>, PIX, "
                    "PXB, PHB, NODE or SYS"
                )
        rows.append(tuple(row))
    for i in range(n):
        if rows[i][i] != "X":
            raise FactsError(f"{where}[{i}][{i}]: the diagonal must be 'X'")
        for j in range(n):
            if i != j and rows[i][j] == "X":  # a pair read as no link at all, silently
                raise FactsError(f"{where}[{i}][{j}]: 'X' is a GPU with itself, only on the "
                                 "diagonal; give the link between the two GPUs")
            if rows[i][j] != rows[j][i]:
                raise FactsError(f"{where}: not symmetric at [{i}][{j}]")
    return tuple(rows)


def gpu_family(major: int | None, minor: int | None) -> str | None:
    """GPU family from compute capability, as GPU feature discovery names it."""
    if major is None:
        return None
    mnr = minor or 0
    if major < 3:
        return "undefined"
    if major == 3:
        return "kepler"
    if major == 5:
        return "maxwell"
    if major == 6:
        return "pascal"
    if major == 7:
        return "turing" if mnr >= 5 else "volta"
    if major == 8:
        return "ada-lovelace" if mnr >= 9 else "ampere"
    if major == 9:
        return "hopper"
    if major in (10, 12):
        return "blackwell"
    return "undefined"
