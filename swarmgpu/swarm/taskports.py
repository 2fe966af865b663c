"""The host-mode ports a task binds on its node, as Swarm reports them
(``Status.PortStatus.Ports[]``: ``PublishMode``, ``PublishedPort``, ``Protocol``).

A task's service names the ports it publishes; a removed service's task that Swarm is
still stopping has no service left to read them from, yet binds them until it stops
(swarmkit's HostPortFilter counts them: ``placement.hostports``). Read strictly: an entry
that is not an object, not host mode, or whose port or protocol is not one Swarm makes,
is ignored, never raised on. A service's published ports (``Endpoint.Ports``) are read
here too, and the drivers of the networks a task is attached to (``swarm.plugins``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_PROTOCOLS = frozenset(("tcp", "udp", "sctp"))


def task_host_ports(status: object) -> tuple[str, ...]:
    """Of a task's ``Status``, the host-mode ports it binds ("8000/tcp"), each once."""
    ps = status.get("PortStatus") if isinstance(status, Mapping) else None
    ports = ps.get("Ports") if isinstance(ps, Mapping) else None
    if not isinstance(ports, list):
        return ()
    return tuple(dict.fromkeys(p for p in map(_one, ports) if p))


def _one(p: Any) -> str:
    if not isinstance(p, Mapping) or p.get("PublishMode") != "host":
        return ""
    port, proto = p.get("PublishedPort"), p.get("Protocol") or "tcp"  # as the spec's
    if (type(port) is not int or not 0 < port < 65536 or not isinstance(proto, str)
            or proto not in _PROTOCOLS):
        return ""
    return f"{port}/{proto}"


def endpoint_ports(raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    """A service's ``Endpoint.Ports`` (what Swarm published, each an object)."""
    endpoint = raw.get("Endpoint")
    ports = endpoint.get("Ports") if isinstance(endpoint, Mapping) else None
    return tuple(p for p in ports if isinstance(p, Mapping)) if isinstance(ports, list) else ()


def task_network_drivers(raw: Mapping[str, Any]) -> tuple[str, ...]:
    """A task's NetworksAttachments' Network.DriverState.Name, each once."""
    out: dict[str, None] = {}
    attached = raw.get("NetworksAttachments")
    for a in attached if isinstance(attached, list) else ():
        net = a.get("Network") if isinstance(a, Mapping) else None
        state = net.get("DriverState") if isinstance(net, Mapping) else None
        name = state.get("Name") if isinstance(state, Mapping) else None
        if isinstance(name, str) and name:
            out[name] = None
    return tuple(out)
