"""A node as the engine describes it: ``SwarmNode``, decoded from the engine's JSON
(``node_from_api``), the name people read for it, and the generic-resource kinds that
name GPUs. ``swarm.client`` reads nodes through it (and keeps ``SwarmNode`` importable
from there, where most readers take it with the other snapshot types).
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from swarmgpu.core.peertext import quoted
from swarmgpu.swarm.answerjson import Repeated
from swarmgpu.swarm.specread import UnreadSpec, spec_count, spec_object

# Generic-resource kinds that name GPUs (the one Docker's docs use first).
GPU_RESOURCE_KINDS = ("NVIDIA-GPU", "GPU", "gpu", "nvidia.com/gpu")
# What to do about a node's part that cannot be read (``SwarmNode.unread``).
NODE_FIX = ("check any proxy in front of the engine, or docker node inspect the node and "
            "update it with docker node update")


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
    # Description.Engine.EngineVersion ("" where not text): a manager's is compared with
    # the engine the daemon writes through (swarm.engineskew)
    engine_version: str = ""
    # A part of the engine's answer that cannot be read, named with the fix ("" when
    # all can): no new placement onto the node, none of its labels written, its
    # holdings kept (``node_from_api``).
    unread: str = ""


def unread_source(nodes: Mapping[str, SwarmNode], node_id: str) -> str:
    """Why node ``node_id`` (of ``nodes``, by ID) cannot be read (``SwarmNode.unread``;
    "" where it can, or is not listed): a holding on it is kept where it is, never moved
    or restarted off it (what Swarm makes of the node is not known)."""
    n = nodes.get(node_id)
    return n.unread if n is not None else ""


def swarm_moves(node: SwarmNode | None) -> str:
    """Why Swarm moves the tasks off ``node`` itself ("" where it does not): the node is
    drained, or Swarm reports it down. Its orchestrator restarts a replicated task off
    such a node, and placement re-places the holding its new task waits on (its node
    cannot run it): a health move of it as well moved it twice."""
    if node is None:
        return ""
    if node.availability == "drain":
        return f"{node.hostname} is drained (availability drain)"
    return f"Swarm reports {node.hostname} down" if node.state == "down" else ""


def node_names(nodes: Iterable[SwarmNode]) -> dict[str, str]:
    """Node ID -> the name people read: its hostname, ``host (ID)`` where two nodes
    share one (one re-joined under a new ID, or two machines named alike), so a map
    keyed by it keeps both."""
    nodes = list(nodes)
    shared = {h for h, c in Counter(n.hostname for n in nodes).items() if c > 1}
    return {n.id: f"{n.hostname} ({n.id})" if n.hostname in shared else n.hostname
            for n in nodes}


def _unspecified(addr: str) -> bool:
    """Whether ``addr`` is 0.0.0.0 or :: (any spelling): no node's address."""
    try:
        return ipaddress.ip_address(addr).is_unspecified
    except ValueError:
        return False


def node_from_api(raw: Any) -> SwarmNode:
    """The engine's node, each part read as Docker sends it. A part that is not (a
    proxy's string where an object goes, a count of "x") leaves the node ``unread``,
    naming the part, and that part read as nothing, never the whole list failed for it;
    a node without an ID is refused (``UnreadSpec``: nothing could be said of it)."""
    if not isinstance(raw, Mapping):
        raise UnreadSpec(f"a node listed as {type(raw).__name__} {quoted(raw)} (Docker "
                         f"sends objects; {NODE_FIX})")
    nid = raw.get("ID")
    if not isinstance(nid, str) or not nid:
        raise UnreadSpec(f"a node listed with ID {quoted(nid)} (Docker sends one with every "
                         f"node; {NODE_FIX})")
    r = _Reader()
    r.unread = raw.why if isinstance(raw, Repeated) else ""  # (a key twice: answerjson)
    spec = r.part(raw, "Spec", "", required=True)
    desc = r.part(raw, "Description", "")
    status = r.part(raw, "Status", "")
    mstatus = r.part(raw, "ManagerStatus", "")
    res = r.part(desc, "Resources", "Description.")
    engine = r.part(desc, "Engine", "Description.")
    platform = r.part(desc, "Platform", "Description.")
    addr = r.text(status, "Addr", "Status.")
    manager_addr = r.text(mstatus, "Addr", "ManagerStatus.")
    if (not addr or _unspecified(addr)) and manager_addr:
        # A manager can report 0.0.0.0 (:: on an IPv6 listener: 'http://[::]:9401' is
        # this host to connect()); its raft address has the real IP (HOST:PORT, an
        # IPv6 one in brackets, which Status.Addr never has).
        addr = manager_addr.rsplit(":", 1)[0]
        if addr.startswith("[") and addr.endswith("]"):
            addr = addr[1:-1]
    named, discrete = r.generic(res)
    hostname = r.text(desc, "Hostname", "Description.")
    node = SwarmNode(
        id=nid,
        hostname=hostname,
        addr=addr,
        role=r.text(spec, "Role", "Spec."),
        state=r.text(status, "State", "Status."),
        availability=r.text(spec, "Availability", "Spec."),
        labels=r.labels(spec, "Spec."),
        engine_labels=r.labels(engine, "Description.Engine."),
        version=r.count(r.part(raw, "Version", ""), "Index", "Version."),
        generic_resources={k: tuple(sorted(v)) for k, v in named.items()},
        discrete_resources=discrete,
        leader=mstatus.get("Leader") is True,
        cpu_milli=_milli(r.count(res, "NanoCPUs", "Description.Resources.")),
        memory_mib=_mib(r.count(res, "MemoryBytes", "Description.Resources.")),
        os=r.text(platform, "OS", "Description.Platform."),
        arch=r.text(platform, "Architecture", "Description.Platform."),
        plugins=_plugins(engine),
        engine_version=_engine_version(engine),
    )
    if not r.unread:
        return node
    return replace(node, unread=f"node {hostname or nid}: {r.unread}; swarmgpu places "
                   "nothing on it and writes none of its labels until it reads")


class _Reader:
    """One node's parts read through ``specread``; the first that cannot be read is
    kept in ``unread`` and read as nothing (what Docker sends when it has none)."""

    def __init__(self) -> None:
        self.unread = ""

    def _note(self, exc: UnreadSpec) -> None:
        self.unread = self.unread or str(exc)

    def part(self, of: Mapping[str, Any], key: str, where: str,
             required: bool = False) -> Mapping[str, Any]:
        """``of[key]`` as an object; ``required``: Docker always sends it, so absent or
        null is unread too (a node's Spec: read as empty, its labels would seem gone)."""
        try:
            return spec_object(of.get(key), where + key, NODE_FIX, required)
        except UnreadSpec as exc:
            self._note(exc)
            return {}

    def count(self, of: Mapping[str, Any], key: str, where: str) -> int:
        try:
            return spec_count(of.get(key), where + key, NODE_FIX)
        except UnreadSpec as exc:
            self._note(exc)
            return 0

    def text(self, of: Mapping[str, Any], key: str, where: str) -> str:
        value = of.get(key)
        if value is None or isinstance(value, str):
            return value or ""
        self._note(UnreadSpec(f"{where}{key} is {quoted(value)}, not a string (Docker "
                              f"sends one; {NODE_FIX})"))
        return ""

    def labels(self, of: Mapping[str, Any], where: str) -> dict[str, str]:
        got = self.part(of, "Labels", where)
        if all(isinstance(k, str) and isinstance(v, str) for k, v in got.items()):
            return dict(got)
        self._note(UnreadSpec(f"{where}Labels has a key or value that is no string "
                              f"(Docker sends strings; {NODE_FIX})"))
        return {k: v for k, v in got.items() if isinstance(k, str) and isinstance(v, str)}

    def generic(self, res: Mapping[str, Any]) -> tuple[dict[str, list[str]], dict[str, int]]:
        """Description.Resources.GenericResources: named kind -> values, discrete kind ->
        count; entries of another kind Docker may add later are left out."""
        named: dict[str, list[str]] = {}
        discrete: dict[str, int] = {}
        where = "Description.Resources.GenericResources"
        listed = res.get("GenericResources")
        if listed is not None and not isinstance(listed, list):
            self._note(UnreadSpec(f"{where} is {quoted(listed)}, not a list (Docker sends "
                                  f"one; {NODE_FIX})"))
            return named, discrete
        for i, gr in enumerate(listed or ()):
            at = f"{where}[{i}]"
            if not isinstance(gr, Mapping):
                self._note(UnreadSpec(f"{at} is {quoted(gr)}, not an object (Docker sends "
                                      f"one; {NODE_FIX})"))
                continue
            for key in ("NamedResourceSpec", "DiscreteResourceSpec"):
                if key not in gr:
                    continue
                body = self.part(gr, key, f"{at}.")
                kind = self.text(body, "Kind", f"{at}.{key}.")
                if key == "NamedResourceSpec":
                    value = self.text(body, "Value", f"{at}.{key}.")
                    ok = bool(kind and value)
                    if ok:
                        named.setdefault(kind, []).append(value)
                else:
                    # (no Value: 0, which Docker omits as empty)
                    count = self.count(body, "Value", f"{at}.{key}.")
                    ok = bool(kind)
                    if ok:
                        discrete[kind] = count
                if not ok:
                    self._note(UnreadSpec(f"{at}.{key} has no Kind or Value (Docker sends "
                                          f"both; {NODE_FIX})"))
                break  # one entry is one resource: Docker sends one of the two
        return named, discrete


def _plugins(engine: Any) -> tuple[tuple[str, str], ...] | None:
    """Description.Engine.Plugins as (Type, Name) pairs; None where the description has
    no engine or no plugin list (entries that are not {Type, Name} strings are left out)."""
    listed = engine.get("Plugins") if isinstance(engine, Mapping) else None
    if not isinstance(listed, list):
        return None
    return tuple((p["Type"], p["Name"]) for p in listed if isinstance(p, Mapping)
                 and isinstance(p.get("Type"), str) and isinstance(p.get("Name"), str))


def _engine_version(engine: Mapping[str, Any]) -> str:
    """Description.Engine.EngineVersion, "" where it is not text (never a reason to
    leave the node unread: only the engine skew guard reads it)."""
    version = engine.get("EngineVersion")
    return version if isinstance(version, str) else ""


def _milli(nano: int) -> int | None:
    return nano // 1_000_000 if nano else None


def _mib(size: int) -> int | None:
    return size // (1024 * 1024) if size else None
