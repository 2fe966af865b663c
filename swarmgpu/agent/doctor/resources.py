"""Swarm generic resources as daemon.json and ``docker info`` list them, and the names
derived from them (bus ids, the task's environment variable)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from swarmgpu.agent.doctor.infoparts import generic_entries, unread_check
from swarmgpu.agent.doctor.view import Check, NodeView
from swarmgpu.core.peertext import peer_text


def norm_bus_id(bus_id: str) -> str:
    """``00000000:3B:00.0`` and ``0000:3b:00.0`` are the same device: ``0000:3b:00.0``."""
    s = bus_id.strip().lower()
    domain, sep, rest = s.partition(":")
    if sep and rest.count(":") == 1 and all(c in "0123456789abcdef" for c in domain):
        return f"{int(domain, 16):04x}:{rest}"
    return s


def env_name(kind: str) -> str:
    """The variable Swarm sets in a task for a generic resource (swarmkit EnvFormat)."""
    return f"DOCKER_RESOURCE_{kind.upper()}"


@dataclass(frozen=True)
class GenericResource:
    kind: str
    value: str

    @property
    def discrete(self) -> bool:
        return self.value.isdigit()


def parse_generic_resources(entries: Any, where: str) -> tuple[list[GenericResource], list[str]]:
    """``["NVIDIA-GPU=GPU-..."]`` -> resources, plus errors naming bad entries."""
    if entries is None:
        return [], []
    if not isinstance(entries, list):
        return [], [f"{where}: expected a list of \"KIND=VALUE\" strings"]
    out: list[GenericResource] = []
    errors: list[str] = []
    for n, e in enumerate(entries):
        kind, sep, value = str(e).partition("=")
        if not isinstance(e, str) or not sep or not kind.strip() or not value.strip():
            errors.append(f"{where}[{n}]: {peer_text(repr(e), 80)} is not KIND=VALUE "
                          "(e.g. NVIDIA-GPU=GPU-<uuid>)")
            continue
        out.append(GenericResource(kind.strip(), value.strip()))
    return out, errors


def from_docker_info(info: Mapping[str, Any]) -> list[GenericResource] | None:
    """The running dockerd's generic resources; None: not given, or not read (an entry
    not read is left out: ``resources.generic`` fails, naming it, ``infoparts``)."""
    pairs, _ = generic_entries(info)
    return None if pairs is None else [GenericResource(k, v) for k, v in pairs]


def gpu_kind(r: GenericResource) -> bool:
    return (r.value.startswith(("GPU-", "MIG-")) or "GPU" in r.kind.upper()
            or r.kind.lower() == "nvidia.com/gpu")


def live_unread(cid: str, view: NodeView) -> Check | None:
    """Check ``cid`` failed naming dockerd's GenericResources (or an entry) not read, when
    the check reads them: daemon.json lists none (``--node-generic-resource`` flags set
    them), so read as none they passed as "no GPU advertised"; None otherwise."""
    data = view.daemon_json.data or {}
    res, _ = parse_generic_resources(data.get("node-generic-resources"), "")
    return None if res else unread_check(cid, view.docker_info, ("GenericResources",))


def gpu_kinds(view: NodeView) -> list[str]:
    data = view.daemon_json.data or {}
    res, _ = parse_generic_resources(data.get("node-generic-resources"), "node-generic-resources")
    if not res and view.docker_info is not None:
        res = from_docker_info(view.docker_info) or []
    return sorted({r.kind for r in res if gpu_kind(r)})
