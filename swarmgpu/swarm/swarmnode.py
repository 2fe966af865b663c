"""A node as the engine describes it: ``SwarmNode``, decoded from the engine's JSON
(``node_from_api``), the name people read for it, and the generic-resource kinds that
name GPUs. ``swarm.client`` reads nodes through it (and keeps ``SwarmNode`` importable
from there, where most readers take it with the other snapshot types).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Generic-resource kinds that name GPUs (the one Docker's docs use first).
GPU_RESOURCE_KINDS = ("NVIDIA-GPU", "GPU", "gpu", "nvidia.com/gpu")


def gpu_kinds(configured: str = "") -> tuple[str, ...]:
    """``GPU_RESOURCE_KINDS``, and ``configured`` (``placement.generic_resource_kind``)."""
    return (*GPU_RESOURCE_KINDS, configured) if configured else GPU_RESOURCE_KINDS


@dataclass(frozen=True)
class SwarmNode:
    id: str
    hostname: str
    addr: str  # address of the node as Swarm sees it (Status.Addr)
    role: str  # "manager" | "worker"
    state: str  # "ready" | "down" | ...
    availability: str  # "active" | "pause" | "drain"
    labels: Mapping[str, str]
    engine_labels: Mapping[str, str]
    version: int
    generic_resources: Mapping[str, tuple[str, ...]]  # kind -> named values
    discrete_resources: Mapping[str, int]  # kind -> count
    leader: bool = False
    # Description.Resources and .Platform: what Swarm's scheduler checks reservations
    # and platform constraints against (None: unknown, never a reason to refuse).
    cpu_milli: int | None = None
    memory_mib: int | None = None
    os: str = ""
    arch: str = ""
    # Description.Engine.Plugins as (Type, Name): the engine's drivers, built-in and
    # installed, that Swarm's PluginFilter reads (swarm.plugins); None: not described.
    plugins: tuple[tuple[str, str], ...] | None = None


def node_names(nodes: Iterable[SwarmNode]) -> dict[str, str]:
    """Node ID -> the name people read: its hostname, ``host (ID)`` where two nodes
    share one (one re-joined under a new ID, or two machines named alike), so a map
    keyed by it keeps both."""
    nodes = list(nodes)
    shared = {h for h, c in Counter(n.hostname for n in nodes).items() if c > 1}
    return {n.id: f"{n.hostname} ({n.id})" if n.hostname in shared else n.hostname
            for n in nodes}


def node_from_api(raw: Mapping[str, Any]) -> SwarmNode:
    spec = raw.get("Spec", {})
    desc = raw.get("Description", {})
    status = raw.get("Status", {})
    mstatus = raw.get("ManagerStatus") or {}
    addr = status.get("Addr") or ""
    if addr in ("", "0.0.0.0") and mstatus.get("Addr"):  # noqa: S104 - comparison only
        # A manager can report 0.0.0.0; its raft address has the real IP.
        addr = str(mstatus["Addr"]).rsplit(":", 1)[0]
    named: dict[str, list[str]] = {}
    discrete: dict[str, int] = {}
    for gr in desc.get("Resources", {}).get("GenericResources") or []:
        if "NamedResourceSpec" in gr:
            s = gr["NamedResourceSpec"]
            named.setdefault(s["Kind"], []).append(s["Value"])
        elif "DiscreteResourceSpec" in gr:
            s = gr["DiscreteResourceSpec"]
            discrete[s["Kind"]] = int(s["Value"])
    return SwarmNode(
        id=raw["ID"],
        hostname=desc.get("Hostname", ""),
        addr=addr,
        role=spec.get("Role", ""),
        state=status.get("State", ""),
        availability=spec.get("Availability", ""),
        labels=dict(spec.get("Labels") or {}),
        engine_labels=dict(desc.get("Engine", {}).get("Labels") or {}),
        version=int(raw.get("Version", {}).get("Index", 0)),
        generic_resources={k: tuple(sorted(v)) for k, v in named.items()},
        discrete_resources=discrete,
        leader=bool(mstatus.get("Leader", False)),
        cpu_milli=_nano_to_milli(desc.get("Resources", {}).get("NanoCPUs")),
        memory_mib=_bytes_to_mib(desc.get("Resources", {}).get("MemoryBytes")),
        os=str((desc.get("Platform") or {}).get("OS") or ""),
        arch=str((desc.get("Platform") or {}).get("Architecture") or ""),
        plugins=_plugins(desc.get("Engine")),
    )


def _plugins(engine: Any) -> tuple[tuple[str, str], ...] | None:
    """Description.Engine.Plugins as (Type, Name) pairs; None where the description has
    no engine or no plugin list (entries that are not {Type, Name} strings are left out)."""
    listed = engine.get("Plugins") if isinstance(engine, Mapping) else None
    if not isinstance(listed, list):
        return None
    return tuple((p["Type"], p["Name"]) for p in listed if isinstance(p, Mapping)
                 and isinstance(p.get("Type"), str) and isinstance(p.get("Name"), str))



def _nano_to_milli(v: Any) -> int | None:
    try:
        return int(v) // 1_000_000 if v else None
    except (TypeError, ValueError):
        return None


def _bytes_to_mib(v: Any) -> int | None:
    try:
        return int(v) // (1024 * 1024) if v else None
    except (TypeError, ValueError):
        return None
