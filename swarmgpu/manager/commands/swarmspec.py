"""A stack's services as `docker stack deploy` hands them to Swarm: each service's keys
read in the shapes Compose allows (labels, environment, replicas, mode, placement,
reservations, platform, host-mode ports), and the Engine API service spec made of them,
as far as Swarm's scheduler reads it (``stack_services``), so the planner refuses every node
Swarm would refuse. A key in a shape docker refuses is a ``StackError`` naming it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from swarmgpu.core.goscalar import go_text
from swarmgpu.core.peertext import quoted
from swarmgpu.core.tenants import STACK_LABEL
from swarmgpu.manager.commands.nanocpus import NotRational, TooLarge, TooPrecise, nano_cpus
from swarmgpu.manager.placement import DEVICES
from swarmgpu.manager.services.sharing import is_share_key
from swarmgpu.swarm.client import SwarmService


class StackError(ValueError):
    """The stack cannot be rendered; ``errors``: every problem, each naming its service
    and key."""

    def __init__(self, errors: str | Sequence[str]) -> None:
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("\n".join(self.errors))


# --- a service's keys, in the shapes Compose allows ---------------------------------


def read_labels(deploy: Mapping[str, Any], where: str) -> dict[str, str]:
    """``labels`` of a service or its ``deploy`` (a mapping or a list of k=v)."""
    raw = deploy.get("labels") or {}
    if isinstance(raw, list):  # compose allows ["k=v", ...]
        out: dict[str, str] = {}
        for item in raw:
            k, _, v = str(item).partition("=")
            if k in out:
                # docker keeps the last; a mapping's key given twice is refused
                # (yamlfile), and so is this: a reader sees the first one
                raise StackError(f"{where}.deploy.labels: {quoted(k)} given twice "
                                 f"({quoted(out[k])}, then {quoted(v)}); keep one")
            out[k] = v
        return out
    if not isinstance(raw, dict):
        raise StackError(f"{where}.deploy.labels: expected a mapping or a list of k=v")
    # a number as docker gives it Swarm (Go's text: 1.0 is "1"), which the daemon reads
    return {str(k): "" if v is None else str(go_text(v)) for k, v in raw.items()}


def env_list(svc: Mapping[str, Any], where: str) -> list[str]:
    """``environment`` (a mapping or a list) as Swarm's K=V lines: a name with no value
    bare, as docker/cli's convertEnvironment writes it; a number as Go's text."""
    env = svc.get("environment") or []
    if isinstance(env, dict):
        return [str(k) if v is None else f"{k}={go_text(v)}" for k, v in env.items()]
    if not isinstance(env, list):
        raise StackError(f"{where}.environment: expected a mapping or a list of K=V")
    return [str(e) for e in env]


def mapping_of(parent: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    """The section ``key`` of ``parent``, itself (written into in place); {} if absent."""
    v = parent.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise StackError(f"{where}.{key}: expected a mapping, got {type(v).__name__}")
    return v


def _whole(v: Any) -> Any:
    """A float that is a whole number as the integer docker reads it (its schema takes
    2.0 for an integer, its decoder makes it 2); any other value as it is."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


def replicas_of(deploy: Mapping[str, Any], where: str) -> int:
    """``deploy.replicas``, 1 when not given."""
    raw = deploy.get("replicas", 1)
    v = _whole(raw)
    text = str(v) if isinstance(v, int | str) and not isinstance(v, bool) else ""
    # ASCII digits only ('¹' passes isdigit(), not int()), and a sane length.
    if not text.isascii() or not text.isdigit() or len(text) > 6:
        raise StackError(f"{where}.deploy.replicas: {quoted(raw)} is not a whole number >= 0")
    return int(v)


def constraints_of(placement: Mapping[str, Any], where: str) -> list[str]:
    """``deploy.placement.constraints``, a copy."""
    v = placement.get("constraints") or []
    if not isinstance(v, list) or not all(isinstance(c, str) for c in v):
        raise StackError(f"{where}.deploy.placement.constraints: expected a list of strings "
                         "like node.role==worker")
    return list(v)


# --- what Swarm's scheduler checks, as `docker stack deploy` converts it -------------

# docker's units.RAMInBytes: binary multipliers, an optional b / ib after the letter;
# ASCII digits (Go's strconv: \d took '\u0664G' as 4 GiB, which docker refuses) and one
# space at most, between number and unit (' 4G', '4\tG' are docker's errors too).
_MEM_RE = re.compile(r"([0-9]{1,15}(?:\.[0-9]{1,9})?) ?([kmgtp]?)(?:i?b)?",
                     re.IGNORECASE | re.ASCII)
_MEM_UNIT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


# Swarm's least reservation above none (swarmkit controlapi validateResources): a
# service asking less is refused at deploy, "invalid cpu value ...: Must be at least".
MIN_NANO_CPUS = 1_000_000
MIN_MEMORY_BYTES = 4 << 20


def parse_cpus(v: object, where: str) -> int:
    """Compose ``cpus`` ("1.5", "1/2", 2) as Swarm's NanoCPUs, read as docker/cli's
    opts.ParseCPUs reads it (``nanocpus``); 0 is none, as Swarm takes a 0 reservation
    (compose: no limit), and so is "", which docker leaves unset."""
    text = str(v) if isinstance(v, int | float | str) and not isinstance(v, bool) else None
    shown = quoted(v)  # hostile: cut
    try:
        if text is None:
            raise NotRational("not text")
        nano = nano_cpus(text) if text else 0
    except NotRational:
        raise StackError(f"{where}: {shown} is not a number of CPUs: docker fails to parse it "
                         "as a rational number; write one like \"1.5\", \"0.5\" or "
                         "\"1/2\", with no spaces") from None
    except TooPrecise:
        raise StackError(f"{where}: {shown} is not a whole number of billionths of a CPU "
                         "(docker: \"value is too precise\"); round it to 9 decimals") from None
    except TooLarge as e:
        raise StackError(f"{where}: {shown}: {e}; write a number of CPUs a node "
                         "has") from None
    if nano < 0 or 0 < nano < MIN_NANO_CPUS:
        raise StackError(f"{where}: {shown}: Swarm refuses a reservation below 0.001 CPUs "
                         "(at least 0.001 CPUs, or 0 for none)")
    return nano


def parse_memory(v: object, where: str) -> int:
    """Compose ``memory`` (bytes, or "512M", "1g", "1.5GiB") as Swarm's MemoryBytes; 0
    is none, as docker reads and Swarm takes it."""
    got = memory_bytes(v)
    if got is None:
        raise StackError(f"{where}: {quoted(v)} is not an amount of memory (bytes, or a number "
                         "with b, k, m, g, t or p: \"512M\", \"1g\")")
    if 0 < got < MIN_MEMORY_BYTES:
        raise StackError(f"{where}: {quoted(v)}: Swarm refuses a reservation below 4 MiB (at "
                         "least 4 MiB, or 0 for none)")
    return got


def memory_bytes(v: object) -> int | None:
    """An amount of memory in docker's units (bytes, or "512M", "1g", "1.5GiB"), with no
    floor (a tmpfs may be smaller than a reservation); None: not one."""
    text = str(v) if isinstance(v, int | str) and not isinstance(v, bool) else ""
    m = _MEM_RE.fullmatch(text)
    return None if m is None else int(float(m.group(1)) * _MEM_UNIT[m.group(2).lower()])


def generic_resources(v: object, where: str) -> list[dict[str, Any]]:
    """Compose ``generic_resources`` as Swarm's GenericResources (discrete ones; a named
    one is listed by value, which placement does not count)."""
    if not isinstance(v, list):
        raise StackError(f"{where}: expected a list of discrete_resource_spec entries")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(v):
        spec = item.get("discrete_resource_spec") if isinstance(item, dict) else None
        kind = spec.get("kind") if isinstance(spec, dict) else None
        value = spec.get("value") if isinstance(spec, dict) else None
        if not isinstance(kind, str) or not kind or not isinstance(value, int) \
                or isinstance(value, bool) or not 0 < value < 1_000_000:
            raise StackError(f"{where}[{i}]: expected discrete_resource_spec: "
                             "{kind: NAME, value: COUNT} with a whole COUNT > 0")
        out.append({"DiscreteResourceSpec": {"Kind": kind, "Value": value}})
    return out


def reservations_of(deploy: Mapping[str, Any], where: str) -> dict[str, Any]:
    res = mapping_of(mapping_of(deploy, "resources", f"{where}.deploy"), "reservations",
                   f"{where}.deploy.resources")
    at = f"{where}.deploy.resources.reservations"
    out: dict[str, Any] = {}
    # 0 is Swarm's "none": docker sends it, the engine answers it left out
    if res.get("cpus") is not None and (nano := parse_cpus(res["cpus"], f"{at}.cpus")):
        out["NanoCPUs"] = nano
    if res.get("memory") is not None and (
        got := parse_memory(res["memory"], f"{at}.memory")
    ):
        out["MemoryBytes"] = got
    if res.get("generic_resources") is not None:
        out["GenericResources"] = generic_resources(res["generic_resources"],
                                                    f"{at}.generic_resources")
    return out


def preferences_of(placement: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    v = placement.get("preferences") or []
    at = f"{where}.deploy.placement.preferences"
    if not isinstance(v, list):
        raise StackError(f"{at}: expected a list of {{spread: node.labels.NAME}}")
    out = []
    for item in v:
        spread = item.get("spread") if isinstance(item, dict) else None
        if not isinstance(spread, str) or not spread:
            raise StackError(f"{at}: {quoted(item)} is not {{spread: node.labels.NAME}}")
        out.append({"Spread": {"SpreadDescriptor": spread}})
    return out


def max_replicas_of(placement: Mapping[str, Any], where: str) -> int | None:
    raw = placement.get("max_replicas_per_node")
    if (v := _whole(raw)) is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 1_000_000:
        raise StackError(f"{where}.deploy.placement.max_replicas_per_node: {quoted(raw)} is not a "
                         "whole number >= 0")
    return v or None  # 0 is Swarm's "no limit"


def platforms_of(svc: Mapping[str, Any], where: str) -> list[dict[str, str]]:
    """The service's ``platform`` (os/arch[/variant]). Platforms `docker stack deploy`
    reads from the image's manifest are not in the file: render cannot know them."""
    v = svc.get("platform")
    if v is None:
        return []
    parts = str(v).split("/") if isinstance(v, str) else []
    if not 2 <= len(parts) <= 3 or not all(parts[:2]):
        raise StackError(f"{where}.platform: {quoted(v)} is not os/arch (like linux/amd64)")
    return [{"OS": parts[0], "Architecture": parts[1]}]


_MODES = ("replicated", "global", "replicated-job", "global-job")


def mode_of(deploy: Mapping[str, Any], where: str) -> str:
    mode = str(deploy.get("mode", "replicated"))
    if mode not in _MODES:
        raise StackError(f"{where}.deploy.mode: {quoted(mode)} is not one of {', '.join(_MODES)}")
    return mode


def host_ports_of(svc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``ports`` published in host mode, as the Engine API's EndpointSpec holds them:
    Swarm runs one task per node with each (its HostPortFilter). Only the long syntax
    with ``mode: host`` publishes in host mode (the short one is ingress: docker/cli
    ``convertPortSpecs``); one without a published port (the engine picks one) binds
    none Swarm checks. The schema checked the types (and ``interpolation`` made the
    ports numbers): an entry in another shape is left to it, not read. The engine reads
    the mode and protocol by their upper-cased names, an unknown protocol as tcp, and
    answers them lower-cased (daemon/cluster/convert ``ServiceSpecToGRPC``): read so."""
    ports = svc.get("ports")
    out: list[dict[str, Any]] = []
    for p in ports if isinstance(ports, list) else ():
        mode = p.get("mode") if isinstance(p, Mapping) else None
        if not isinstance(mode, str) or mode.upper() != "HOST":
            continue
        port, proto = _whole(p.get("published")), p.get("protocol")
        proto = proto.lower() if isinstance(proto, str) else ""
        proto = proto if proto in ("tcp", "udp", "sctp") else "tcp"
        if type(port) is int and 0 < port < 65536:
            out.append({"Protocol": proto, "TargetPort": _whole(p.get("target")),
                        "PublishedPort": port, "PublishMode": "host"})
    return out


def swarm_spec(full: str, svc: Mapping[str, Any], deploy: Mapping[str, Any],
                placement: Mapping[str, Any], labels: Mapping[str, str], env: Sequence[str],
                mode: str, replicas: int | None, where: str) -> dict[str, Any]:
    """The service spec `docker stack deploy` makes of the file, in the Engine API's
    shape (what the daemon reads back from Swarm), as far as placement reads it."""
    pl: dict[str, Any] = {"Constraints": constraints_of(placement, where)}
    if prefs := preferences_of(placement, where):
        pl["Preferences"] = prefs
    if (mrpn := max_replicas_of(placement, where)) is not None:
        pl["MaxReplicas"] = mrpn
    if plats := platforms_of(svc, where):
        pl["Platforms"] = plats
    tt: dict[str, Any] = {"ContainerSpec": {"Env": list(env)}, "Placement": pl}
    if res := reservations_of(deploy, where):
        tt["Resources"] = {"Reservations": res}
    api_mode: dict[str, Any] = (
        {"Replicated": {"Replicas": replicas}} if mode == "replicated"
        # a stack's replicated job: its replicas are both counts (docker stack deploy)
        else {"ReplicatedJob": {"MaxConcurrent": replicas, "TotalCompletions": replicas}}
        if mode == "replicated-job"
        else {"".join(w.capitalize() for w in mode.split("-")): {}})
    spec = {"Name": full, "Labels": dict(labels), "Mode": api_mode, "TaskTemplate": tt}
    if ports := host_ports_of(svc):  # (hostports: a node whose task binds one is refused)
        spec["EndpointSpec"] = {"Ports": ports}
    return spec


def stack_services(stack: Mapping[str, Any], name: str,
                   existing: Sequence[SwarmService], prefix: str = "swarmgpu."
                   ) -> list[SwarmService]:
    """The stack's services as Swarm will hold them once deployed (existing ids reused):
    everything Swarm's scheduler checks -- reservations (CPU, memory, generic
    resources), constraints, preferences, max replicas per node, platform, mode -- so
    the planner refuses every node Swarm would refuse."""
    by_name = {s.name: s for s in existing}
    out = []
    for svc_name, svc in stack["services"].items():
        where = f"services.{svc_name}"
        if not isinstance(svc, dict):
            raise StackError(f"{where}: expected a mapping")
        deploy = mapping_of(svc, "deploy", where)
        full = f"{name}_{svc_name}"
        cur = by_name.get(full)
        labels = read_labels(deploy, where)
        labels[STACK_LABEL] = name  # what `docker stack deploy` sets (tenants match it)
        if cur is not None:  # keep the device labels of what already runs
            labels.update({k: v for k, v in cur.labels.items()
                           if DEVICES in k or is_share_key(k, prefix)})
        placement = mapping_of(deploy, "placement", f"{where}.deploy")
        mode = mode_of(deploy, where)
        count = replicas_of(deploy, where) if mode in ("replicated", "replicated-job") else None
        replicas = count if mode == "replicated" else None
        env = env_list(svc, where)
        spec = swarm_spec(full, svc, deploy, placement, labels, env, mode, count, where)
        out.append(SwarmService(
            id=cur.id if cur else f"render:{full}", name=full, labels=labels,
            constraints=tuple(spec["TaskTemplate"]["Placement"]["Constraints"]),
            env=tuple(env), mode=mode, replicas=replicas,
            max_replicas_per_node=spec["TaskTemplate"]["Placement"].get("MaxReplicas"),
            version=cur.version + 1 if cur else 0, spec=spec,
            force_update=cur.force_update if cur else 0,
            max_concurrent=count if mode == "replicated-job" else None,
            total_completions=count if mode == "replicated-job" else None,
        ))
    return out

