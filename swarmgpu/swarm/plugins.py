"""Swarm's PluginFilter: a task runs only on a node whose engine has the plugins its
volume mounts, networks and log driver need (swarmkit manager/scheduler/filter.go).

swarmkit's rules, as written there:

* a mount of type ``volume`` whose ``VolumeOptions.DriverConfig.Name`` is set and not
  ``local`` needs a ``Volume`` plugin of that name;
* each network the task is attached to whose driver (``DriverState.Name``, as the
  allocator set it: the task's ``NetworksAttachments``, not the service spec) is set
  needs a ``Network`` plugin of that name;
* a log driver whose name is set and not ``none`` needs a ``Log`` plugin of that name,
  but only on a node that lists some ``Log`` plugin (an older engine listed none);
* a node's plugin ``NAME:latest`` counts as ``NAME``.

What counts as built-in is the engine's to say: it lists its built-in drivers in
``Description.Engine.Plugins`` beside the installed ones (``Volume local``, ``Network
overlay``, ``bridge``, ``host``, ``macvlan``..., ``Log json-file``...), so only
``local`` volumes and ``none`` logging are exempt by name. A node whose description
has no engine or no plugin list (``SwarmNode.plugins`` None) is never refused here: its
plugins are unknown, and Swarm decides (``unknown``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from swarmgpu.swarm.client import MEANT_STATES, SwarmNode, SwarmTask

Plugin = tuple[str, str]  # (type: Volume, Network or Log; name)
VOLUME, NETWORK, LOG = "Volume", "Network", "Log"


def needed(spec: Mapping[str, Any], network_drivers: Iterable[str] = ()) -> tuple[Plugin, ...]:
    """The plugins a task of ``spec`` (a service spec) needs on its node, in a fixed
    order; ``network_drivers``: the drivers of the networks its tasks are attached to
    (``network_drivers_of``). Anything malformed needs nothing (Swarm refuses such a
    spec itself)."""
    tt = spec.get("TaskTemplate")
    tt = tt if isinstance(tt, Mapping) else {}
    out: list[Plugin] = []
    cs = tt.get("ContainerSpec")
    mounts = cs.get("Mounts") if isinstance(cs, Mapping) else None
    for m in mounts if isinstance(mounts, list) else ():
        if not isinstance(m, Mapping) or m.get("Type") != "volume":
            continue
        opts = m.get("VolumeOptions")
        dc = opts.get("DriverConfig") if isinstance(opts, Mapping) else None
        name = dc.get("Name") if isinstance(dc, Mapping) else None
        if isinstance(name, str) and name and name != "local":
            out.append((VOLUME, name))
    out += [(NETWORK, d) for d in network_drivers if d]
    log = tt.get("LogDriver")
    name = log.get("Name") if isinstance(log, Mapping) else None
    if isinstance(name, str) and name and name != "none":
        out.append((LOG, name))
    return tuple(dict.fromkeys(out))


def network_drivers_of(tasks: Sequence[SwarmTask]) -> dict[str, tuple[str, ...]]:
    """Service id -> the network drivers its tasks meant to run are attached with (the
    task's networks are what Swarm's filter reads; a task not yet allocated has none)."""
    out: dict[str, dict[str, None]] = {}
    for t in tasks:
        if t.network_drivers and t.desired_state in MEANT_STATES:
            out.setdefault(t.service_id, {}).update(dict.fromkeys(t.network_drivers))
    return {sid: tuple(sorted(d)) for sid, d in out.items()}


def _has(plugins: Sequence[Plugin], kind: str, name: str) -> tuple[bool, bool]:
    """(some plugin of ``kind`` listed, ``name`` among them): swarmkit's
    pluginExistsOnNode, ``NAME:latest`` matching ``NAME``."""
    found = False
    for k, n in plugins:
        if k != kind:
            continue
        found = True
        if n in (name, name + ":latest"):
            return True, True
    return found, False


def missing(node: SwarmNode, need: Sequence[Plugin]) -> tuple[Plugin, ...]:
    """The plugins of ``need`` the node lacks as Swarm judges it (empty: none, or the
    node's plugins are unknown: ``unknown``)."""
    if not need or not node.plugins:
        return ()
    lacks: list[Plugin] = []
    for kind, name in need:
        found, has = _has(node.plugins, kind, name)
        if not has and (found or kind != LOG):  # a Log plugin only where any is listed
            lacks.append((kind, name))
    return tuple(lacks)


def unknown(node: SwarmNode, need: Sequence[Plugin]) -> bool:
    """The node's description lists no plugins, so whether it has ``need`` is Swarm's to
    find out (a node without engine data: swarmkit lets it pass)."""
    return bool(need) and not node.plugins


def said(lacks: Sequence[Plugin]) -> str:
    """``lacks`` in a plan's words: ``the Volume plugin rexray, the Log plugin x``."""
    return ", ".join(f"the {kind} plugin {name}" for kind, name in lacks)
