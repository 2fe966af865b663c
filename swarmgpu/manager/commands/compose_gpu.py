"""Compose's own GPU reservations, read as a swarmgpu request (for `swarmgpu render`).

Three spellings reach a stack file: Compose's device request
(``deploy.resources.reservations.devices: [{driver: nvidia, count: 1, capabilities:
[gpu]}]``, which `docker stack deploy` refuses: "Additional property devices is not
allowed"), the Compose specification's service-level ``gpus: all`` / ``gpus: N`` / ``gpus:
[device requests]`` (not in the v3 schema either), and Swarm's generic resources
(``generic_resources: [{discrete_resource_spec: {kind: NVIDIA-GPU, value: 1}}]``, which
Swarm accepts and counts). All become ``swarmgpu.gpus`` and are removed: kept, a GPU
generic reservation made Swarm append ``DOCKER_RESOURCE_<KIND>=<its own pick>`` to each
task, which the toolkit reads instead of placement's grant where swarm-resource names it.
Pure: one service's reservations and labels in, what to change and why out
(docs/requests.md, "Compose GPU reservations").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from swarmgpu.core.peertext import quoted
from swarmgpu.swarm.swarmnode import gpu_kinds

# What the NVIDIA runtime reads from a device request's capabilities: `gpu` selects the
# driver, the others become NVIDIA_DRIVER_CAPABILITIES (as `docker run --gpus` does).
DRIVER_CAPABILITIES = ("compute", "compat32", "graphics", "utility", "video", "display")


@dataclass
class ComposeGpu:
    """What to change in one service so Swarm takes it and swarmgpu places it."""

    labels: dict[str, str] = field(default_factory=dict)  # request labels to add
    env: dict[str, str] = field(default_factory=dict)  # env to add unless the user set it
    drop_devices: bool = False  # remove reservations.devices (Swarm refuses the key)
    drop_gpus: bool = False  # remove the service's `gpus` (not in the v3 schema)
    drop_generic: bool = False  # remove its GPU generic reservations (Swarm's pick wins)
    unresolved: bool = False  # count: all offline: the count is a stand-in, not the file's
    notes: list[str] = field(default_factory=list)  # what was done, for the file's comment
    errors: list[str] = field(default_factory=list)  # each names the service and key


def remove_gpu_generic(reservations: dict[str, Any], kind: str = "") -> None:
    """Takes the entries of a GPU kind out of ``generic_resources`` (the others are the
    stack's, kept as written), and the key when none is left. ``kind``: as
    ``read_gpu_reservations``'s."""
    kinds = gpu_kinds(kind)
    left = [g for g in reservations.get("generic_resources") or []
            if not (isinstance(g, dict) and isinstance(g.get("discrete_resource_spec"), dict)
                    and g["discrete_resource_spec"].get("kind") in kinds)]
    if left:
        reservations["generic_resources"] = left
    else:
        reservations.pop("generic_resources", None)


def _count(v: object) -> int | str | None:
    """A device request's count: a whole number >= 1, or 'all'; None when neither."""
    if isinstance(v, str) and v.strip().lower() == "all":
        return "all"
    text = str(v) if isinstance(v, int | str) and not isinstance(v, bool) else ""
    text = text.strip()
    if text.isascii() and text.isdigit() and len(text) <= 6 and int(text) >= 1:
        return int(text)
    return None


def _devices(entries: object, at: str, out: ComposeGpu) -> int | str | None:
    """The GPUs the device entries ask for (summed; 'all' wins), or None on an error."""
    if not isinstance(entries, list):
        out.errors.append(f"{at}: expected a list of device requests "
                          "({driver: nvidia, count: N, capabilities: [gpu]})")
        return None
    total: int | str = 0
    caps: list[str] = []
    for i, e in enumerate(entries):
        w = f"{at}[{i}]"
        if not isinstance(e, dict):
            out.errors.append(f"{w}: expected a mapping like {{driver: nvidia, count: 1, "
                              "capabilities: [gpu]}")
            return None
        driver = e.get("driver")
        cap = e.get("capabilities")
        cap_list = [str(c) for c in cap] if isinstance(cap, list) else []
        if cap is not None and not isinstance(cap, list):
            out.errors.append(f"{w}.capabilities: expected a list like [gpu]")
            return None
        if driver not in (None, "nvidia") or (driver is None and "gpu" not in cap_list):
            out.errors.append(
                f"{w}: driver {quoted(driver)}, capabilities {cap_list}: swarmgpu places NVIDIA "
                "GPUs only (driver: nvidia or capabilities: [gpu]), and Swarm has no other "
                "device reservations (`docker stack deploy` refuses the key); remove it")
            return None
        unknown = [c for c in cap_list if c != "gpu" and c not in DRIVER_CAPABILITIES]
        if unknown:
            out.errors.append(f"{w}.capabilities: {unknown} unknown; the NVIDIA runtime "
                              f"knows gpu, {', '.join(DRIVER_CAPABILITIES)}")
            return None
        caps += [c for c in cap_list if c != "gpu" and c not in caps]
        if e.get("device_ids") is not None:
            out.errors.append(
                f"{w}.device_ids: {quoted(e['device_ids'])} cannot be expressed: swarmgpu chooses "
                "each replica's GPUs itself (a named GPU may be held by another service, "
                "and an index means a different GPU on each node); use count, and "
                "swarmgpu.gpu-product / gpu-memory for the kind, a placement constraint "
                "for the node")
            return None
        raw = e.get("count", "all")  # Compose: no count and no device_ids means all
        n = _count(raw)
        if n is None:
            out.errors.append(f"{w}.count: {quoted(raw)} is not a whole number >= 1 or 'all'")
            return None
        total = "all" if "all" in (n, total) else int(total) + int(n)
        if e.get("options"):
            out.notes.append(f"{w}.options {quoted(e['options'])} dropped: Swarm passes no device "
                             "options; the container gets its GPUs from NVIDIA_VISIBLE_DEVICES")
    if caps:
        out.env["NVIDIA_DRIVER_CAPABILITIES"] = ",".join(caps)
    return total if total else None


def _generic(raw: object, kinds: tuple[str, ...]) -> tuple[str, int] | None:
    """The GPU generic reservation (kind, count), if any; shape errors are render's."""
    if not isinstance(raw, list):
        return None
    for item in raw:
        spec = item.get("discrete_resource_spec") if isinstance(item, dict) else None
        if isinstance(spec, dict) and spec.get("kind") in kinds:
            v = spec.get("value")
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return str(spec["kind"]), v
    return None


_ABSENT: Any = object()


def _gpus_entries(gpus: object) -> object:
    """The service-level ``gpus`` as device requests: ``all`` and ``N`` (as ``docker run
    --gpus`` reads them), or the Compose specification's list of device requests."""
    if isinstance(gpus, str | int) and not isinstance(gpus, bool):
        return [{"capabilities": ["gpu"], "count": gpus}]
    return gpus


def read_gpu_reservations(
    reservations: Mapping[str, Any], labels: Mapping[str, str], where: str, *,
    prefix: str = "swarmgpu.", kind: str = "", node_gpus: int | None = None,
    gpus: object = _ABSENT,
) -> ComposeGpu:
    """One service's GPU reservations as request labels.

    ``where``: the service (``services.NAME``). ``kind``: the configured generic
    resource kind (placement.generic_resource_kind), a GPU kind besides the usual ones.
    ``node_gpus``: the most GPUs one node of the swarm has, what ``count: all`` becomes;
    None offline (``render --check``), where it is only checked. ``gpus``: the
    service's own ``gpus`` key, when it has one.
    """
    out = ComposeGpu()
    at = f"{where}.deploy.resources.reservations"
    key = prefix + "gpus"
    asked: list[tuple[str, int | str]] = []
    generic = _generic(reservations.get("generic_resources"), gpu_kinds(kind))
    sources = []
    if "devices" in reservations:
        out.drop_devices = True
        sources.append((f"{at}.devices", reservations["devices"]))
    if gpus is not _ABSENT:
        out.drop_gpus = True
        if not isinstance(gpus, list) and _count(gpus) is None:
            out.errors.append(f"{where}.gpus: {quoted(gpus)} is not 'all', a whole number >= 1 "
                              "or a list of device requests")
            return out
        sources.append((f"{where}.gpus", _gpus_entries(gpus)))
    for w, entries in sources:
        n = _devices(entries, w, out)
        if n is None:
            return out
        if n == "all":
            others = [f"{key}"] if labels.get(key) is not None else []
            others += [f"generic_resources {generic[0]}"] if generic is not None else []
            others += [o for o, _ in sources if o != w]
            if others:
                out.errors.append(f"{w}: count all and another count ({', '.join(others)}); "
                                  "give one count")
                return out
            if node_gpus is None:
                out.notes.append(f"{w}: count all: checked only; rendering makes it "
                                 f"{key} = the most GPUs one node of the swarm has")
                n = 1  # any valid amount, to check the rest of the request
                out.unresolved = True
            elif node_gpus < 1:
                out.errors.append(f"{w}: count all: no node of the swarm reports "
                                  "GPUs, so 'all' names none; give a count")
                return out
            else:
                n = node_gpus
        asked.append((w, n))
    if generic is not None:
        out.drop_generic = True
        asked.append((f"{at}.generic_resources {generic[0]}", generic[1]))
    if not asked:
        return out
    if labels.get(key) is not None:
        asked.append((f"{where}.deploy.labels.{key}", labels[key].strip()))
    values = {str(v) for _, v in asked}
    if len(values) > 1:
        out.errors.append(f"{where}: the GPU counts differ ("
                          + ", ".join(f"{w} = {v}" for w, v in asked)
                          + "); give one count")
        return out
    count = str(asked[0][1])
    if labels.get(key) is None:
        out.labels[key] = count
    _notes(out, where, key, count, generic)
    return out


def _notes(out: ComposeGpu, where: str, key: str, count: str,
           generic: tuple[str, int] | None) -> None:
    """What became of each spelling of the count, said in ``out.notes``."""
    at = f"{where}.deploy.resources.reservations"
    if out.drop_devices:
        out.notes.append(f"{at}.devices became {key}: \"{count}\" and was removed "
                         "(`docker stack deploy` refuses devices under reservations)")
    if out.drop_gpus:
        out.notes.append(f"{where}.gpus became {key}: \"{count}\" and was removed "
                         "(`docker stack deploy` refuses the key: compose format 3.8 has "
                         "no gpus, and Swarm no device requests)")
    if generic is not None:
        env = f"DOCKER_RESOURCE_{generic[0].upper()}"
        out.notes.append(
            f"{at}.generic_resources {generic[0]}: {generic[1]} read as {key}: \"{count}\" "
            f"and removed: Swarm would append {env}=<its own pick> to each task, which the "
            "NVIDIA toolkit reads instead of swarmgpu's NVIDIA_VISIBLE_DEVICES where "
            "swarm-resource names it (as `swarmgpu node-config` sets)")
