"""``gfd:PATH`` — facts from GPU feature discovery labels.

Accepts the three forms GFD's labels are seen in: the ``key=value`` features file GFD
writes to ``/etc/kubernetes/node-feature-discovery/features.d/gfd``, a JSON object of
node labels (``kubectl get node -o json | jq .metadata.labels``), and the labels
block of ``kubectl get nodes -o yaml``. Only ``nvidia.com/*`` keys are read.

GFD has no UUIDs, bus ids or topology: GPUs get synthetic ``GPU-5ca1ab1e-...`` UUIDs
and ``links`` stays empty. MIG profile names are normalised to nvidia-smi's naming,
recomputed from the profile's memory label (GFD 0.x named the 20096 MiB profile
``3g.21gb``; nvidia-smi calls it ``3g.20gb``).

``<resource>.count`` is the GPUs (or MIG devices) in every GFD release, time-sliced or
not: ``.replicas`` says how many shares of each the device plugin makes. GFD built from
its main branch between its resource labeler (NVIDIA/gpu-feature-discovery 1b5b104) and
v0.6.0 (aa6bdec, "Don't multiply count by replicas") wrote count x replicas. Where the
labels tell them apart (a ``.sharing-strategy`` label, which only GFD in the device
plugin writes, v0.15.0 on; a count no multiple of the replicas) nothing is said;
otherwise the count is taken as the releases mean it, and the node and the fix are
said once (``replica_note``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loguru import logger

from swarmgpu.agent.facts import SourceError
from swarmgpu.agent.facts.naming import (
    instance_ids,
    max_instances,
    mig_profile_name,
    parse_profile,
    synthetic_uuid,
)
from swarmgpu.core.boundedfile import NotRegularFile, TooLarge, read_bounded_text
from swarmgpu.core.jsonkeys import RepeatedKey, unique_keys
from swarmgpu.core.miglayout import mig_layout_fault
from swarmgpu.core.model import (
    MAX_GPU_MEMORY_MIB,
    MAX_GPUS,
    MAX_MIG_PER_GPU,
    MAX_STR_LEN,
    Gpu,
    MigDevice,
    NodeFacts,
)
from swarmgpu.core.peertext import peer_text
from swarmgpu.core.saidonce import SaidOnce
from swarmgpu.core.yamlfile import MAX_TEXT, parse_yaml

PREFIX = "nvidia.com/"
# ASCII digits (re.ASCII): \d took 'mig-1g.\u0665gb' as a profile no request names
_MIG_KEY_RE = re.compile(r"^mig-((?:\d+c\.)?\d+g\.\d+gb(?:\+me)?)\.(count|memory)$",
                         re.ASCII)
_SINGLE_PRODUCT_RE = re.compile(r"^(.*)-MIG-((?:\d+c\.)?\d+g\.\d+gb(?:\+me)?)$", re.ASCII)
_GB_IN_NAME_RE = re.compile(r"(\d+)GB", re.IGNORECASE)
# A count: ASCII digits only ('²' and fullwidth digits pass isdigit()), short enough
# for int().
_COUNT_RE = re.compile(r"[0-9]{1,9}", re.ASCII)


def parse_labels(text: str, *, where: str = "gfd", hostname: str | None = None) -> dict[str, str]:
    """``nvidia.com/*`` labels (prefix removed) from any of the accepted forms; of the
    node named ``hostname`` where the text lists several nodes with such labels."""
    # A BOM (a file saved by a Windows editor) would be read as part of the first key.
    stripped = text.removeprefix("\ufeff").strip()
    data: Any = None
    if stripped.startswith("{"):
        try:  # a key given twice is refused, as core.yamlfile refuses it in YAML
            data = json.loads(stripped, object_pairs_hook=unique_keys)
        except RepeatedKey as e:
            raise SourceError(f"{where}: {e.key} given twice in one object; keep one") from None
        except json.JSONDecodeError as e:
            raise SourceError(f"{where}: invalid JSON at line {e.lineno}: {e.msg}") from e
        except RecursionError:
            raise SourceError(f"{where}: JSON nested too deeply to read") from None
    elif _looks_like_key_value(stripped):
        return _key_values(stripped, where)
    else:
        data = _lenient_mapping(stripped, where)
    labels = _node_labels(data, where, hostname)
    if labels is None:
        labels = _find_labels(data)
    if labels is None:
        raise SourceError(
            f"{where}: no nvidia.com/* labels found; expected GFD's features file "
            "(key=value lines), a JSON object of node labels, or 'kubectl get nodes -o yaml'"
        )
    return labels


def _looks_like_key_value(text: str) -> bool:
    first = next((ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")), "")
    return "=" in first and ":" not in first.split("=", 1)[0]


def _key_values(text: str, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    seen: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise SourceError(f"{where}:{n}: expected key=value, got {line.strip()!r}")
        key = key.strip()
        if key in seen:  # not the last one silently: which one does GFD mean?
            raise SourceError(f"{where}: {key} given twice (lines {seen[key]} and {n}); "
                              "keep one")
        seen[key] = n
        if key.startswith(PREFIX):
            out[key[len(PREFIX):]] = value.strip()
    return out


def _lenient_mapping(text: str, where: str) -> Any:
    """JSON/YAML as pasted in docs: a shell prompt, ``...`` elisions, a code fence."""
    lines = [
        ln for ln in text.splitlines()
        if ln.strip() not in ("...", "```") and not ln.lstrip().startswith("$ ")
    ]
    body = "\n".join(lines).strip().rstrip(",")
    if body.startswith('"'):
        body = "{" + body  # a JSON excerpt whose opening brace was elided
    if body.startswith("{") and not body.endswith("}"):
        body += "}"
    return parse_yaml(body, where, SourceError, fmt="JSON/YAML")


def _nodes(data: Any, out: list[tuple[str, Mapping[Any, Any]]], depth: int = 0) -> None:
    """Every Kubernetes object in ``data`` with ``metadata.labels``: (name, labels)."""
    if depth > 8 or len(out) > 100_000:
        return
    if isinstance(data, Mapping):
        meta = data.get("metadata")
        if isinstance(meta, Mapping) and isinstance(meta.get("labels"), Mapping):
            out.append((str(meta.get("name") or ""), meta["labels"]))
            return
        data = list(data.values())
    if isinstance(data, list):
        for child in data:
            _nodes(child, out, depth + 1)


def _node_labels(data: Any, where: str, hostname: str | None) -> dict[str, str] | None:
    """The nvidia.com/* labels of the node objects in ``data`` (``kubectl get nodes``):
    of the one with such labels, or of the one named ``hostname`` (its name or its
    ``kubernetes.io/hostname``) among several; None when no node object has them.
    (Not the first one's: every node's agent read that node's GPUs; not its annotations,
    which kubectl lists before its labels and may hold nvidia.com keys of their own.)"""
    found: list[tuple[str, Mapping[Any, Any]]] = []
    _nodes(data, found)
    gpu = [(name, labels) for name, labels in found
           if any(str(k).startswith(PREFIX) for k in labels)]
    if len(gpu) > 1:
        names = [peer_text(name, 64) or "(no name)" for name, _ in gpu]
        gpu = [(name, labels) for name, labels in gpu
               if hostname in (name, labels.get("kubernetes.io/hostname"))]
        if len(gpu) != 1:
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more"
                                            if len(names) > 5 else "")
            raise SourceError(
                f"{where}: labels of {len(names)} GPU nodes ({shown}), none named "
                f"{hostname!r} (or named so twice): give --hostname as this node's "
                "Kubernetes name, or a dump of this node only (kubectl get node NAME -o json)")
    if not gpu:
        return None
    return {str(k)[len(PREFIX):]: "" if v is None else str(v)
            for k, v in gpu[0][1].items() if str(k).startswith(PREFIX)}


def _find_labels(data: Any) -> dict[str, str] | None:
    """The first mapping (depth-first) holding nvidia.com/* keys."""
    if isinstance(data, Mapping):
        hits = {
            str(k)[len(PREFIX):]: "" if v is None else str(v)
            for k, v in data.items()
            if str(k).startswith(PREFIX)
        }
        if hits:
            return hits
        children: Any = list(data.values())
    elif isinstance(data, list):
        children = data
    else:
        return None
    for child in children:
        found = _find_labels(child)
        if found is not None:
            return found
    return None


def _int_label(labels: Mapping[str, str], key: str, where: str) -> int | None:
    v = labels.get(key)
    if v is None or v == "":
        return None
    if not _COUNT_RE.fullmatch(v):
        raise SourceError(f"{where}: label {PREFIX}{key}={v!r} is not a whole number")
    return int(v)


def replica_note(labels: Mapping[str, str], where: str) -> tuple[str, str] | None:
    """(the facts' error, the log's warning) when a count may be GPUs x replicas (module
    docstring), else None. The error fits NodeFacts' 256 characters; the warning has the
    rest."""
    for res in ("gpu", *sorted({f"mig-{m.group(1)}" for k in labels
                                if (m := _MIG_KEY_RE.match(k)) and m.group(2) == "count"})):
        count, reps = labels.get(f"{res}.count", ""), labels.get(f"{res}.replicas", "")
        if not (_COUNT_RE.fullmatch(count) and _COUNT_RE.fullmatch(reps)):
            continue
        n, r = int(count), int(reps)
        if r <= 1 or n == 0 or n % r or f"{res}.sharing-strategy" in labels:
            continue  # told: not shared, or counted as every release counts
        short = (f"{res}.count={n} with {res}.replicas={r}, no {res}.sharing-strategy: "
                 f"taken as {n}; a GFD built before v0.6.0 counted x replicas "
                 f"({n // r}): upgrade GFD")
        long = (f"{where}: {PREFIX}{res}.count={n} beside {PREFIX}{res}.replicas={r} and "
                f"no {PREFIX}{res}.sharing-strategy label: taken as {n} (GFD v0.6.0 and "
                f"later count the GPUs), but a GFD built before v0.6.0 counted GPUs x "
                f"replicas, and then this node has {n // r} GPUs. If it has {n // r}, "
                "upgrade GFD (the k8s-device-plugin v0.15.0 and later run it, and label "
                "the sharing strategy); if it has "
                f"{n}, add {PREFIX}{res}.sharing-strategy=time-slicing to its labels")
        return short, long
    return None


def _unshared_product(labels: Mapping[str, str]) -> str:
    """``gpu.product`` less the ``-SHARED`` GFD appends when the device plugin shares each
    GPU (time-slicing or MPS: ``gpu.replicas`` above 1, resource not renamed); the rest is
    the GPU's model, and a single strategy's ``…-MIG-<profile>``."""
    product = labels.get("gpu.product", "")
    replicas = labels.get("gpu.replicas", "")
    if product.endswith("-SHARED") and _COUNT_RE.fullmatch(replicas) and int(replicas) > 1:
        return product.removesuffix("-SHARED")
    return product


def _driver_version(labels: Mapping[str, str]) -> str | None:
    if labels.get("cuda.driver-version.full"):
        return labels["cuda.driver-version.full"]
    parts = [labels.get(f"cuda.driver.{k}", "") for k in ("major", "minor", "rev")]
    return ".".join(p for p in parts if p) or None


def _cuda_version(labels: Mapping[str, str]) -> str | None:
    if labels.get("cuda.runtime-version.full"):
        return labels["cuda.runtime-version.full"]
    major, minor = labels.get("cuda.runtime.major"), labels.get("cuda.runtime.minor")
    return f"{major}.{minor}" if major and minor else None


def _refuse_unicode_mig(labels: Mapping[str, str], where: str) -> None:
    """GFD writes its labels in ASCII: a MIG label in other digits ('mig-1g.\u0665gb',
    an Arabic-Indic 5) is no label of GFD's, refused (it was a MIG device of a profile
    no request names)."""
    for key in labels:
        if key.startswith("mig-") and not key.isascii():
            raise SourceError(f"{where}: label {PREFIX}{ascii(key)[1:-1][:80]}: characters "
                              "not ASCII; GFD names MIG profiles in ASCII (mig-1g.5gb.count)")


def normalise_profile(gfd_name: str, memory_mib: int | None) -> str:
    """nvidia-smi's name for a GFD profile: recomputed from its memory when known."""
    if memory_mib is None:
        return gfd_name
    g, _ = parse_profile(gfd_name)
    ci = re.match(r"^(\d+)c\.", gfd_name, re.ASCII)
    name = mig_profile_name(g, memory_mib, int(ci.group(1)) if ci else None)
    return name + ("+me" if gfd_name.endswith("+me") else "")


def facts_from_labels(
    labels: Mapping[str, str],
    *,
    hostname: str,
    origin: str,
    product: str | None = None,
    memory_mib: int | None = None,
    spec: str = "",
) -> NodeFacts:
    """NodeFacts from GFD labels; ``product``/``memory_mib`` override GFD's values."""
    where = spec or "gfd"
    _refuse_unicode_mig(labels, where)
    errors: list[str] = []
    note = replica_note(labels, where)
    if note is not None:
        errors.append(f"{where[:64]}: {note[0]}")
    count = _int_label(labels, "gpu.count", where)
    if count is None:
        raise SourceError(f"{where}: label {PREFIX}gpu.count missing; is GFD running there?")
    # Bounded before anything is built of it (a count of millions took seconds and memory
    # per read): the limits NodeFacts.from_dict holds every agent's facts to.
    if count > MAX_GPUS * MAX_MIG_PER_GPU:
        raise SourceError(f"{where}: label {PREFIX}gpu.count={count}; at most {MAX_GPUS} "
                          f"GPUs per node (or {MAX_MIG_PER_GPU} MIG devices per GPU)")
    major = _int_label(labels, "gpu.compute.major", where)
    minor = _int_label(labels, "gpu.compute.minor", where)
    strategy = labels.get("mig.strategy", "none")
    gfd_product = _unshared_product(labels)
    if gfd_product.endswith("-MIG-INVALID"):  # GFD's single strategy, its count then 0
        raise SourceError(
            f"{where}: label {PREFIX}gpu.product={gfd_product!r}: GFD found this node's "
            "MIG layout invalid for mig.strategy=single (MIG devices of more than one "
            "profile, a MIG GPU with none, or MIG and whole GPUs together) and counts no "
            "GPUs; give every GPU one MIG profile, or run GFD with mig.strategy=mixed")
    gfd_memory = _int_label(labels, "gpu.memory", where)

    # (profile, memory) of every MIG device on the node, in GFD's order.
    migs: list[tuple[str, int]] = []
    single = _SINGLE_PRODUCT_RE.match(gfd_product) if strategy == "single" else None
    if single and count == 0:  # no MIG device to size the GPUs by (IndexError before)
        raise SourceError(
            f"{where}: label {PREFIX}gpu.count=0 beside {PREFIX}gpu.product={gfd_product!r} "
            "(mig.strategy=single): no MIG devices, and GFD does not say how many GPUs "
            "hold none; create the GPUs' MIG devices, or run GFD with mig.strategy=mixed")
    if single:
        # single: gpu.* describe the MIG devices; the parents are not counted.
        mem = gfd_memory or parse_profile(single.group(2))[1] * 1024
        migs = [(normalise_profile(single.group(2), gfd_memory), mem)] * count
        parent_product = product or single.group(1)
        parent_memory = memory_mib or _memory_from_name(parent_product)
        if memory_mib is None:
            errors.append(
                f"{where}: GPU memory not in GFD's single-strategy labels; estimated "
                f"{parent_memory} MiB from the product name; pass --memory-mib for the real value"
            )
        per_gpu = max_instances(migs[0][0], parent_memory)
        if (ci := re.match(r"^(\d+)c\.(\d+)g", migs[0][0], re.ASCII)) is not None:
            # compute instances: as many per GPU instance as its slices hold
            per_gpu *= max(1, int(ci.group(2)) // max(1, int(ci.group(1))))
        parents = max(1, math.ceil(count / per_gpu))
        if parents > MAX_GPUS:
            raise SourceError(f"{where}: {count} MIG devices of {migs[0][0]} need {parents} "
                              f"GPUs; at most {MAX_GPUS} GPUs per node")
        errors.append(
            f"{where}: {count} MIG devices of {migs[0][0]} put on {parents} GPU(s) "
            f"({per_gpu} per GPU); GFD does not say which GPU holds which"
        )
    else:
        parents = count
        if parents > MAX_GPUS:
            raise SourceError(f"{where}: label {PREFIX}gpu.count={count}; at most "
                              f"{MAX_GPUS} GPUs per node")
        parent_product = product or gfd_product
        parent_memory = memory_mib or gfd_memory or 0
        for key in sorted(labels):
            m = _MIG_KEY_RE.match(key)
            if not m or m.group(2) != "count":
                continue
            n = _int_label(labels, key, where) or 0
            if len(migs) + n > max(parents, 1) * MAX_MIG_PER_GPU:  # all profiles together
                raise SourceError(f"{where}: label {PREFIX}{key}={n}: more MIG devices than "
                                  f"{parents} GPU(s) hold (at most {MAX_MIG_PER_GPU} MIG "
                                  "devices per GPU)")
            mig_mem = _int_label(labels, f"mig-{m.group(1)}.memory", where)
            name = normalise_profile(m.group(1), mig_mem)
            migs += [(name, mig_mem or parse_profile(name)[1] * 1024)] * n
        # Largest first, as MIG placement fills a GPU.
        migs.sort(key=lambda pm: -parse_profile(pm[0])[0])
        if migs and parents > 1:
            errors.append(
                f"{where}: MIG devices assigned to GPUs in order; GFD does not say which GPU "
                "holds which"
            )
    if not parent_product:
        raise SourceError(f"{where}: label {PREFIX}gpu.product missing; pass --product NAME")
    # What NodeFacts.from_dict holds every agent's facts to: said here, naming the label,
    # rather than served and the node's whole facts refused by the daemon.
    driver, cuda = _driver_version(labels), _cuda_version(labels)
    for value, name in ((parent_product, "--product" if product else "gpu.product"),
                        (driver, "cuda.driver-version.full" if labels.get(
                            "cuda.driver-version.full") else "cuda.driver.*"),
                        (cuda, "cuda.runtime-version.full" if labels.get(
                            "cuda.runtime-version.full") else "cuda.runtime.*")):
        if value is not None and len(value) > MAX_STR_LEN:
            label = name if name.startswith("-") else f"label {PREFIX}{name}"
            raise SourceError(f"{where}: {label}={value[:40]!r}...: {len(value)} characters; "
                              f"at most {MAX_STR_LEN}")
    if parent_memory <= 0:
        raise SourceError(f"{where}: label {PREFIX}gpu.memory missing; pass --memory-mib N")
    if parent_memory > MAX_GPU_MEMORY_MIB:  # what the daemon refuses the node's facts for
        given = ("--memory-mib" if memory_mib else
                 f"estimated from label {PREFIX}gpu.product={parent_product[:40]!r}" if single
                 else f"label {PREFIX}gpu.memory={gfd_memory}")
        raise SourceError(f"{where}: {given}: {parent_memory} MiB, past the "
                          f"{MAX_GPU_MEMORY_MIB >> 20} TiB no GPU has (a garbled reading, "
                          "believed a GPU that fits any request): fix the labels, or pass "
                          "--memory-mib with the GPU's real memory")

    per_parent = _assign(migs, parents)
    gpus = []
    for i in range(parents):
        devs = tuple(
            MigDevice(
                profile=prof,
                uuid=synthetic_uuid("MIG", hostname, origin, i, k, prof),
                memory_mib=mem,
                gi_id=gi,  # synthetic, like the UUID: GFD does not say; see topo
                ci_id=ci,
            )
            for k, (prof, mem, gi, ci) in enumerate(per_parent[i])
        )
        # The layout NodeFacts.from_dict refuses from any agent: said here, naming the
        # file, rather than served and refused by the daemon.
        fault = mig_layout_fault(devs, parent_memory)
        if fault is not None:
            raise SourceError(
                f"{where}: GPU {i} ({parent_product}, {parent_memory} MiB): {fault}; the "
                "labels list more MIG devices than the GPU holds: pass --memory-mib with "
                "the GPU's real memory, or fix the labels"
            )
        gpus.append(
            Gpu(
                index=i,
                uuid=synthetic_uuid("GPU", hostname, origin, i),
                product=parent_product,
                memory_mib=parent_memory,
                compute_major=major,
                compute_minor=minor,
                mig_capable=labels.get("mig.capable") == "true" or bool(devs),
                mig_enabled=bool(devs),
                mig_devices=devs,
            )
        )
    return NodeFacts(
        hostname=hostname,
        gpus=tuple(gpus),
        driver_version=driver,
        cuda_driver_version=cuda,
        source=spec,
        errors=tuple(errors),
    )


def _memory_from_name(product: str) -> int:
    m = _GB_IN_NAME_RE.search(product)
    return int(m.group(1)) * 1024 if m else 1


def _assign(migs: list[tuple[str, int]],
            parents: int) -> list[list[tuple[str, int, int, int | None]]]:
    """Fill GPUs in order, up to 7 compute slices each (what one GPU can hold), a GPU
    instance at a time: compute instances of one (``1c.3g.20gb`` x3, ``instance_ids``)
    go together. Per GPU: (profile, memory, GI id on it, CI id) of each device."""
    instances: dict[int, list[tuple[str, int, int | None]]] = {}
    for (prof, mem), (gi, ci) in zip(migs, instance_ids([p for p, _ in migs]), strict=True):
        instances.setdefault(gi, []).append((prof, mem, ci))
    out: list[list[tuple[str, int, int, int | None]]] = [[] for _ in range(parents)]
    used, held = [0] * parents, [0] * parents
    for devs in instances.values():
        g = parse_profile(devs[0][0])[0]
        i = next((k for k in range(parents) if used[k] + g <= 7), parents - 1)
        out[i] += [(prof, mem, held[i], ci) for prof, mem, ci in devs]
        used[i], held[i] = used[i] + g, held[i] + 1
    return out


class GfdSource:
    """``gfd:PATH``: a GFD features file or a dump of a node's labels."""

    def __init__(
        self,
        path: str | Path,
        *,
        hostname: str,
        product: str | None = None,
        memory_mib: int | None = None,
    ) -> None:
        self.path = Path(path)
        self.spec = f"gfd:{path}"
        self.hostname = hostname
        self.product = product
        self.memory_mib = memory_mib
        self._said: SaidOnce[str] = SaidOnce()  # the replica warning, once while it lasts

    def read(self) -> NodeFacts:
        try:
            # core.yamlfile's 8 MiB: a features file is a few KiB, but the kubectl form
            # may list a whole cluster's nodes (the first with GPU labels is read).
            text = read_bounded_text(self.path, MAX_TEXT, errors="replace")
        except NotRegularFile as e:
            raise SourceError(f"{self.spec}: {self.path} is {e.why}; give the path of "
                              "GFD's features file or a dump of the node's labels") from None
        except TooLarge as e:
            raise SourceError(f"{self.spec}: {e.why}") from None
        except OSError as e:
            raise SourceError(f"{self.spec}: cannot read {self.path}: {e.strerror}") from e
        labels = parse_labels(text, where=self.spec, hostname=self.hostname)
        note = replica_note(labels, self.spec)
        self._said.begin()
        if note is not None and self._said.fresh(note[1]):
            logger.warning("node {}: {}", self.hostname, note[1])
        self._said.end()
        return facts_from_labels(
            labels,
            hostname=self.hostname,
            origin=self.path.name,
            product=self.product,
            memory_mib=self.memory_mib,
            spec=self.spec,
        )
