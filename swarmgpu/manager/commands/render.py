"""`swarmgpu render`: a stack file with GPU placement resolved, for
``swarmgpu render stack.yml | docker stack deploy -c - NAME``.

Each annotated service gets, in the file itself, everything a task needs at the moment
it is created: its device lists (service labels), the env template that reads them, and
the gate constraint. The daemon then only opens the gates, so nothing races: a task
can never start before its devices are known, and a re-deploy of the rendered file
keeps every piece (what already runs stays where it runs: its holding is reused).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from swarmgpu.core.model import NodeFacts
from swarmgpu.core.peertext import escaped
from swarmgpu.core.tenants import STACK_LABEL
from swarmgpu.core.yamlfile import Lines, parse_yaml_lines
from swarmgpu.manager.commands.compose_gpu import read_gpu_reservations, remove_gpu_generic
from swarmgpu.manager.commands.composefile import (
    check_service_keys,
    check_top_level,
    check_version,
    dump_stack,
    interpolation_errors,
    owned_key_errors,
    owned_label_notes,
    part_schema_errors,
    schema_errors,
)
from swarmgpu.manager.commands.envfile import EnvFiles, check_env_files, device_var_error, write_env
from swarmgpu.manager.commands.interpolation import as_written, interpolate, pinned
from swarmgpu.manager.commands.model_servers import server_notes
from swarmgpu.manager.commands.stackmerge import MergeError, StackFile, merge_stacks
from swarmgpu.manager.commands.stackpaths import absolute_paths
from swarmgpu.manager.placement import (
    DEVICES,
    PlacementPlan,
    Planner,
    ServicePlan,
    devices_key,
    env_template,
    gate_constraint,
    is_gate_of,
    is_hold,
)
from swarmgpu.manager.placement.envs import device_mount_spec, mount_target, own_device_line
from swarmgpu.manager.services.requests import (
    GpuRequest,
    RequestError,
    container_request_errors,
    parse_all,
    request_errors,
)
from swarmgpu.manager.services.sharing import env_lines, is_share_key, want_labels
from swarmgpu.manager.services.tenants import Tenants
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

T = TypeVar("T")


class StackError(ValueError):
    """The stack cannot be rendered; ``errors``: every problem, each naming its service
    and key."""

    def __init__(self, errors: str | Sequence[str]) -> None:
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("\n".join(self.errors))


def load_stack(text: str, where: str = "stack") -> dict[str, Any]:
    """The stack file parsed (bounded: core.yamlfile), every alias made a copy of its
    own, so that what render writes into one service never lands in another."""
    return _load_stack(text, where)[0]


def _load_stack(text: str, where: str, *, part: bool = False) -> tuple[dict[str, Any], Lines]:
    """``load_stack``, with the line of each key. ``part``: one of several files, which
    needs no ``services:`` (docker/cli's loader asks no section of each file; the merged
    stack needs them, the schema checks each file's sections)."""
    data, lines = parse_yaml_lines(text, where, StackError, docker=True)
    data = _unshared(data, where, "")
    if part and not isinstance(data, dict):
        raise StackError(f"{where}: a stack file is a mapping of top-level sections "
                         "(services:, networks:, ...); docker stack deploy refuses this one "
                         '("top-level object must be a mapping")')
    if not part and (not isinstance(data, dict) or not isinstance(data.get("services"), dict)):
        raise StackError(f"{where}: a stack file needs a top-level 'services:' mapping")
    return data, lines


def _unshared(v: Any, where: str, at: str) -> Any:
    """``v`` with every mapping and list copied, shared ones once per place they appear
    (the size is bounded by the loader's expanded-node limit). A key that is not a
    string is refused, as docker/cli's loader refuses it ("non-string key in ..."):
    ``true:`` is a boolean, ``1:`` a number, and render would write them back as
    other keys (or fail on them in the schema check)."""
    if isinstance(v, dict):
        for k in v:
            if not isinstance(k, str):
                raise StackError(
                    f"{where}: non-string key in {at or 'the top level'}: {k!r} (docker's YAML "
                    "reader reads true/false, numbers and null as such); quote it if it is "
                    "meant as text")
        return {k: _unshared(x, where, f"{at}.{k}" if at else k) for k, x in v.items()}
    if isinstance(v, list):
        return [_unshared(x, where, f"{at}[{i}]") for i, x in enumerate(v)]
    return v


def _labels(deploy: Mapping[str, Any], where: str) -> dict[str, str]:
    raw = deploy.get("labels") or {}
    if isinstance(raw, list):  # compose allows ["k=v", ...]
        out: dict[str, str] = {}
        for item in raw:
            k, _, v = str(item).partition("=")
            if k in out:
                # docker keeps the last; a mapping's key given twice is refused
                # (yamlfile), and so is this: a reader sees the first one
                raise StackError(f"{where}.deploy.labels: {k!r} given twice "
                                 f"({out[k]!r}, then {v!r}); keep one")
            out[k] = v
        return out
    if not isinstance(raw, dict):
        raise StackError(f"{where}.deploy.labels: expected a mapping or a list of k=v")
    return {str(k): "" if v is None else str(v) for k, v in raw.items()}


def _put_labels(deploy: dict[str, Any], add: Mapping[str, str]) -> None:
    """Render's own labels into the service's, in the form the file gives them, the
    others as written: docker gives Swarm a number as Go prints it (1.0 is "1"), and
    interpolates a list item's key ("a$$b=1" is a$b), not a mapping's."""
    raw = deploy.get("labels")
    if isinstance(raw, list):
        keep = [x for x in raw if str(x).partition("=")[0] not in add]
        deploy["labels"] = [*keep, *(f"{k}={v}" for k, v in add.items())]
    else:
        deploy["labels"] = {**(raw or {}), **add}


def _env_list(svc: Mapping[str, Any], where: str) -> list[str]:
    env = svc.get("environment") or []
    if isinstance(env, dict):
        return [f"{k}={'' if v is None else v}" for k, v in env.items()]
    if not isinstance(env, list):
        raise StackError(f"{where}.environment: expected a mapping or a list of K=V")
    return [str(e) for e in env]


def _mapping(parent: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    v = parent.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise StackError(f"{where}.{key}: expected a mapping, got {type(v).__name__}")
    return v


def _replicas(deploy: Mapping[str, Any], where: str) -> int:
    v = deploy.get("replicas", 1)
    text = str(v) if isinstance(v, int | str) and not isinstance(v, bool) else ""
    # ASCII digits only ('¹' passes isdigit(), not int()), and a sane length.
    if not text.isascii() or not text.isdigit() or len(text) > 6:
        raise StackError(f"{where}.deploy.replicas: {v!r} is not a whole number >= 0")
    return int(v)


def _constraints(placement: Mapping[str, Any], where: str) -> list[str]:
    v = placement.get("constraints") or []
    if not isinstance(v, list) or not all(isinstance(c, str) for c in v):
        raise StackError(f"{where}.deploy.placement.constraints: expected a list of strings "
                         "like node.role==worker")
    return list(v)


# --- what Swarm's scheduler checks, as `docker stack deploy` converts it -------------

_CPUS_RE = re.compile(r"^\s*(\d{1,6}(?:\.\d{0,9})?|\.\d{1,9})\s*$")
# docker's units.RAMInBytes: binary multipliers, an optional b / ib after the letter.
_MEM_RE = re.compile(r"^\s*(\d{1,15}(?:\.\d{1,9})?)\s*([kmgtp]?)(?:i?b)?\s*$", re.IGNORECASE)
_MEM_UNIT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


# Swarm's least reservation above none (swarmkit controlapi validateResources): a
# service asking less is refused at deploy, "invalid cpu value ...: Must be at least".
MIN_NANO_CPUS = 1_000_000
MIN_MEMORY_BYTES = 4 << 20


def parse_cpus(v: object, where: str) -> int:
    """Compose ``cpus`` ("1.5", 0.5, 2) as Swarm's NanoCPUs; 0 is none, as docker/cli's
    opts.ParseCPUs reads "0" and Swarm takes a 0 reservation (compose: no limit)."""
    text = str(v) if isinstance(v, int | float | str) and not isinstance(v, bool) else ""
    m = _CPUS_RE.match(text)
    if m is None:
        raise StackError(f"{where}: {v!r} is not a number of CPUs (like \"1.5\" or 2)")
    nano = round(float(m.group(1)) * 1e9)
    if 0 < nano < MIN_NANO_CPUS:
        raise StackError(f"{where}: {v!r}: Swarm refuses a reservation below 0.001 CPUs "
                         "(at least 0.001 CPUs, or 0 for none)")
    return nano


def parse_memory(v: object, where: str) -> int:
    """Compose ``memory`` (bytes, or "512M", "1g", "1.5GiB") as Swarm's MemoryBytes; 0
    is none, as docker reads and Swarm takes it."""
    text = str(v) if isinstance(v, int | str) and not isinstance(v, bool) else ""
    m = _MEM_RE.match(text)
    if m is None:
        raise StackError(f"{where}: {v!r} is not an amount of memory (bytes, or a number "
                         "with b, k, m, g, t or p: \"512M\", \"1g\")")
    got = int(float(m.group(1)) * _MEM_UNIT[m.group(2).lower()])
    if 0 < got < MIN_MEMORY_BYTES:
        raise StackError(f"{where}: {v!r}: Swarm refuses a reservation below 4 MiB (at "
                         "least 4 MiB, or 0 for none)")
    return got


def _generic(v: object, where: str) -> list[dict[str, Any]]:
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


def _reservations(deploy: Mapping[str, Any], where: str) -> dict[str, Any]:
    res = _mapping(_mapping(deploy, "resources", f"{where}.deploy"), "reservations",
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
        out["GenericResources"] = _generic(res["generic_resources"], f"{at}.generic_resources")
    return out


def _preferences(placement: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    v = placement.get("preferences") or []
    at = f"{where}.deploy.placement.preferences"
    if not isinstance(v, list):
        raise StackError(f"{at}: expected a list of {{spread: node.labels.NAME}}")
    out = []
    for item in v:
        spread = item.get("spread") if isinstance(item, dict) else None
        if not isinstance(spread, str) or not spread:
            raise StackError(f"{at}: {item!r} is not {{spread: node.labels.NAME}}")
        out.append({"Spread": {"SpreadDescriptor": spread}})
    return out


def _max_replicas(placement: Mapping[str, Any], where: str) -> int | None:
    v = placement.get("max_replicas_per_node")
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 1_000_000:
        raise StackError(f"{where}.deploy.placement.max_replicas_per_node: {v!r} is not a "
                         "whole number >= 0")
    return v or None  # 0 is Swarm's "no limit"


def _platforms(svc: Mapping[str, Any], where: str) -> list[dict[str, str]]:
    """The service's ``platform`` (os/arch[/variant]). Platforms `docker stack deploy`
    reads from the image's manifest are not in the file: render cannot know them."""
    v = svc.get("platform")
    if v is None:
        return []
    parts = str(v).split("/") if isinstance(v, str) else []
    if not 2 <= len(parts) <= 3 or not all(parts[:2]):
        raise StackError(f"{where}.platform: {v!r} is not os/arch (like linux/amd64)")
    return [{"OS": parts[0], "Architecture": parts[1]}]


_MODES = ("replicated", "global", "replicated-job", "global-job")


def _mode(deploy: Mapping[str, Any], where: str) -> str:
    mode = str(deploy.get("mode", "replicated"))
    if mode not in _MODES:
        raise StackError(f"{where}.deploy.mode: {mode!r} is not one of {', '.join(_MODES)}")
    return mode


def _swarm_spec(full: str, svc: Mapping[str, Any], deploy: Mapping[str, Any],
                placement: Mapping[str, Any], labels: Mapping[str, str], env: Sequence[str],
                mode: str, replicas: int | None, where: str) -> dict[str, Any]:
    """The service spec `docker stack deploy` makes of the file, in the Engine API's
    shape (what the daemon reads back from Swarm), as far as placement reads it."""
    pl: dict[str, Any] = {"Constraints": _constraints(placement, where)}
    if prefs := _preferences(placement, where):
        pl["Preferences"] = prefs
    if (mrpn := _max_replicas(placement, where)) is not None:
        pl["MaxReplicas"] = mrpn
    if plats := _platforms(svc, where):
        pl["Platforms"] = plats
    tt: dict[str, Any] = {"ContainerSpec": {"Env": list(env)}, "Placement": pl}
    if res := _reservations(deploy, where):
        tt["Resources"] = {"Reservations": res}
    api_mode: dict[str, Any] = (
        {"Replicated": {"Replicas": replicas}} if mode == "replicated"
        # a stack's replicated job: its replicas are both counts (docker stack deploy)
        else {"ReplicatedJob": {"MaxConcurrent": replicas, "TotalCompletions": replicas}}
        if mode == "replicated-job"
        else {"".join(w.capitalize() for w in mode.split("-")): {}})
    return {"Name": full, "Labels": dict(labels), "Mode": api_mode, "TaskTemplate": tt}


@dataclass
class CheckedStack:
    """A stack file read and checked whole, before anything is asked of Docker."""

    stack: dict[str, Any]  # as Swarm will take it: Compose GPU reservations made requests
    notes: list[str] = field(default_factory=list)  # what render changed, and why
    errors: list[str] = field(default_factory=list)  # every problem, service and key named
    requests: list[str] = field(default_factory=list)  # services with a GPU request
    # The file as written, and as docker substitutes it (None: not substituted,
    # --skip-interpolation): what render writes back where it changed nothing.
    written: dict[str, Any] = field(default_factory=dict)
    substituted: dict[str, Any] | None = None
    # service -> the env render adds (a Compose reservation's capabilities), written by
    # render_stack, which reads the env files: docker reads environment over them
    env: dict[str, dict[str, str]] = field(default_factory=dict)


def check_stack(text: str, *, where: str = "stack", prefix: str = "swarmgpu.",
                zone_label: str = "topology.zone", generic_kind: str = "",
                node_gpus: int | None = None,
                classes: Mapping[str, int] | None = None,
                tenants: Tenants | None = None, stack_name: str | None = None,
                environ: Mapping[str, str] | None = None,
                more: Sequence[tuple[str, str]] = (),
                env_base: str | None = None) -> CheckedStack:
    """Parse the whole file and check every service: its shape, everything Swarm's
    scheduler reads, its GPU request, the keys Swarm refuses or ignores (composefile),
    then the whole file against docker/cli's compose schema. Offline and pure (``render
    --check``); every error is collected, none stops the others. ``node_gpus``: what a
    Compose ``count: all`` becomes (the most GPUs one node has); None: checked only.
    ``classes``: the config's priority classes (None: the defaults). ``tenants``: the
    config's (``manager.services.tenants``), with the name the stack is deployed as: a request
    above its tenant's limits is an error here (the daemon would cap it).
    ``stack_name``: also what a placement gate in the file must name (its own).
    ``environ``: the environment `docker stack deploy` will substitute variables from
    (``interpolation``; render's own, as both run in one shell): everything is checked as
    substituted. None: nothing is substituted, and a ``$`` in a value render places by is
    an error (``render --skip-interpolation``). ``more``: further files (name, text),
    merged over the first as `docker stack deploy -c A -c B` merges them (stackmerge),
    each substituted on its own first. ``env_base``: the folder a relative ``env_file``
    is read against (the first file's: ``stackpaths``), each read as docker reads it
    (``envfile``); None: not read."""
    try:
        if more:
            raw, stack, errors, warnings = _read_files([(where, text), *more], environ)
            where = " + ".join([where, *(name for name, _ in more)])
        else:
            raw, stack, errors, warnings = _read(text, where, environ)
    except StackError as exc:
        return CheckedStack({}, errors=exc.errors)
    # check_stack changes `stack` in place: what docker substitutes is kept aside
    substituted = None if environ is None else copy.deepcopy(stack)
    out = CheckedStack(stack, written=raw, substituted=substituted)
    out.errors, out.notes = check_version(stack, where)
    out.errors[:0] = errors
    out.notes[:0] = warnings
    out.errors += check_top_level(stack)
    files = None if env_base is None else EnvFiles(env_base, environ, StackError)
    for svc_name, svc in stack["services"].items():
        _check_service(out, str(svc_name), svc, prefix, zone_label, generic_kind, node_gpus,
                       classes, stack_name, environ is not None, files)
        if tenants is not None and stack_name is not None:
            _check_tenant(out, str(svc_name), svc, prefix, zone_label, classes, tenants,
                          stack_name)
    if files is not None:
        out.errors += check_env_files(out.stack["services"], out.requests, files)
    if not out.errors:  # the schema's complaints about a broken service add nothing
        out.errors += schema_errors(stack)
    return out


def _read(text: str, where: str, environ: Mapping[str, str] | None, *, part: bool = False
          ) -> tuple[dict[str, Any], dict[str, Any], list[str], list[str]]:
    """One file: (as written, as docker substitutes it, errors, warnings); ``part``: as
    in ``_load_stack``."""
    raw, lines = _load_stack(text, where, part=part)
    if environ is None:
        return raw, raw, [], []
    stack, errors, warnings = interpolate(raw, environ, lines)
    return raw, stack, errors, warnings


def _read_files(files: Sequence[tuple[str, str]], environ: Mapping[str, str] | None
                ) -> tuple[dict[str, Any], dict[str, Any], list[str], list[str]]:
    """Several files, each read, substituted and checked against the schema (as docker
    checks each: what the merge drops or masks is refused too), then merged (``_read``'s
    four); the errors and warnings of each name its file."""
    read, errors, warnings = [], [], []
    for name, text in files:
        raw, stack, errs, warns = _read(text, name, environ, part=True)
        errs = errs or part_schema_errors(stack)
        read.append(StackFile(name, raw, None if environ is None else stack))
        errors += [f"{name}: {e}" for e in errs]
        warnings += [f"{name}: {w}" for w in warns]
    if errors:  # a file docker refuses: merging it would only say more of the same
        raise StackError(errors)
    try:
        merged = merge_stacks(read, environ)
    except MergeError as exc:
        raise StackError(exc.errors) from None
    stack = merged.written if environ is None else merged.substituted
    if not isinstance(stack.get("services"), dict):  # as one file with none: nothing to place
        names = " + ".join(name for name, _ in files)
        raise StackError(f"{names}: none of the files has a top-level 'services:' mapping; "
                         "a stack file needs one")
    return merged.written, stack, [], warnings


def _check_tenant(out: CheckedStack, svc_name: str, svc: Any, prefix: str, zone_label: str,
                  classes: Mapping[str, int] | None, tenants: Tenants, stack_name: str) -> None:
    """The request of a service that checked clean, against its tenant's limits: what the
    daemon would cap or refuse is an error at this gate."""
    deploy = svc.get("deploy") if isinstance(svc, dict) else None
    if not isinstance(deploy, dict) or not isinstance(deploy.get("labels"), dict | list):
        return
    # a shape error is said once, by _check_service; raised here it left check_stack
    labels: dict[str, str] = _try([], {}, _labels, deploy, f"services.{svc_name}")
    req = parse_all(labels, prefix=prefix, zone_label=zone_label, classes=classes)
    if not isinstance(req, GpuRequest):
        return  # none, or an error said above
    full = f"{stack_name}_{svc_name}"
    got = tenants.apply(req, full, stack_name)
    w = f"services.{svc_name}.deploy.labels"
    if isinstance(got, RequestError):
        out.errors.append(f"{w}: {got}")
    elif isinstance(got, GpuRequest):
        out.errors += [f"{w}: {why} (stack {stack_name}; ask for no more, or change "
                       f"tenants.{got.tenant} in the config)" for why in got.limits]


def _try(errs: list[str], default: T, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, its StackError collected into ``errs`` (``default`` then)."""
    try:
        return fn(*args)
    except StackError as exc:
        errs.extend(exc.errors)
        return default


def _check_service(out: CheckedStack, svc_name: str, svc: Any, prefix: str,
                   zone_label: str, generic_kind: str, node_gpus: int | None,
                   classes: Mapping[str, int] | None = None, stack: str | None = None,
                   interpolated: bool = False, files: EnvFiles | None = None) -> None:
    """One service of ``check_stack``: its errors and notes into ``out``; its Compose
    GPU reservation made a request, in place. ``files``: its env files' reader."""
    w = f"services.{svc_name}"
    if not isinstance(svc, dict):
        out.errors.append(f"{w}: expected a mapping")
        return
    errs, notes = check_service_keys(svc, w)
    container: dict[str, str] = _try([], {}, _labels, svc, w)  # its own labels: a container's
    errs += [f"{w}.labels: {e}" for e in container_request_errors(container, prefix)]
    if not interpolated:  # a $ left for docker where render places by it
        errs += interpolation_errors(svc, w, prefix)
    out.notes += notes
    none: dict[str, Any] = {}
    deploy = _try(errs, None, _mapping, svc, "deploy", w)
    if deploy is None:
        out.errors.extend(errs)
        return
    labels = _try(errs, None, _labels, deploy, w)
    resources = _try(errs, none, _mapping, deploy, "resources", f"{w}.deploy")
    res = _try(errs, none, _mapping, resources, "reservations", f"{w}.deploy.resources")
    gpu = read_gpu_reservations(res, labels or {}, w, prefix=prefix, kind=generic_kind,
                                node_gpus=node_gpus, **({"gpus": svc["gpus"]}
                                                        if "gpus" in svc else {}))
    errs += gpu.errors
    out.notes += gpu.notes
    if gpu.drop_devices:  # Swarm refuses the key, whatever its value
        del res["devices"]
    if gpu.drop_generic:  # Swarm's pick of them would be read instead of the grant
        remove_gpu_generic(res, generic_kind)
    if (gpu.drop_devices or gpu.drop_generic) and not res:
        del resources["reservations"]
    if (gpu.drop_devices or gpu.drop_generic) and not resources:
        del deploy["resources"]
    if gpu.drop_gpus:
        del svc["gpus"]
    if labels is not None and gpu.labels:
        labels.update(gpu.labels)
        _put_labels(deploy, gpu.labels)
        svc["deploy"] = deploy  # a service with only `gpus` had no deploy yet
    if gpu.env:
        out.env[svc_name] = gpu.env
    _try(errs, None, _env_list, svc, w)
    mode = _try(errs, "replicated", _mode, deploy, w)
    if mode in ("replicated", "replicated-job"):
        _try(errs, 1, _replicas, deploy, w)
    placement = _try(errs, none, _mapping, deploy, "placement", f"{w}.deploy")
    for check in (_constraints, _preferences, _max_replicas):
        _try(errs, None, check, placement, w)
    cons: list[str] = _try([], [], _constraints, placement, w)
    errs += owned_key_errors(labels or {}, cons, w, prefix,
                             f"{stack}_{svc_name}" if stack is not None else None)
    out.notes += owned_label_notes(cons, w, prefix)
    _try(errs, None, _platforms, svc, w)
    _try(errs, None, _reservations, deploy, w)
    if labels is not None:
        bad = request_errors(labels, prefix=prefix, zone_label=zone_label, classes=classes)
        errs += [f"{w}.deploy.labels: {e}" for e in bad]
        req = None if bad else parse_all(labels, prefix=prefix, zone_label=zone_label,
                                         classes=classes)
        if req is not None:
            out.requests.append(svc_name)
            if (own := own_device_line(_try([], [], _env_list, svc, w), prefix)) is not None:
                errs.append(device_var_error(f"{w}.environment", own))
            env = files.read(svc_name, svc) if files is not None else None
            out.notes += [] if gpu.unresolved else server_notes(svc, w, req, prefix, env)
    out.errors.extend(errs)


def _with_device_mount(spec: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """``spec`` with placement's device mount (``placement.grants: mounts``)."""
    new = dict(spec)
    tt = new["TaskTemplate"] = dict(spec.get("TaskTemplate") or {})
    cs = tt["ContainerSpec"] = dict(tt.get("ContainerSpec") or {})
    cs["Mounts"] = [*(cs.get("Mounts") or []), device_mount_spec(prefix)]
    return new


def _add_device_mount(svc: dict[str, Any], prefix: str) -> None:
    """placement.grants: mounts -- the /dev/null mount the toolkit reads the device list
    from, as the daemon adds it (long syntax: a short one splits the template at ':');
    a volume of the service's own at that target is left as it is."""
    target = mount_target(prefix)
    vols = svc.get("volumes", [])
    if not isinstance(vols, list):
        return  # not Compose's shape: `docker stack deploy` says so
    if not any((v.get("target") if isinstance(v, dict) else str(v).split(":")[-1]) == target
               for v in vols):
        vols = [*vols, {"type": "bind", "source": "/dev/null", "target": target,
                        "read_only": True}]
    svc["volumes"] = list(vols)


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
        deploy = _mapping(svc, "deploy", where)
        full = f"{name}_{svc_name}"
        cur = by_name.get(full)
        labels = _labels(deploy, where)
        labels[STACK_LABEL] = name  # what `docker stack deploy` sets (tenants match it)
        if cur is not None:  # keep the device labels of what already runs
            labels.update({k: v for k, v in cur.labels.items()
                           if DEVICES in k or is_share_key(k, prefix)})
        placement = _mapping(deploy, "placement", f"{where}.deploy")
        mode = _mode(deploy, where)
        count = _replicas(deploy, where) if mode in ("replicated", "replicated-job") else None
        replicas = count if mode == "replicated" else None
        env = _env_list(svc, where)
        spec = _swarm_spec(full, svc, deploy, placement, labels, env, mode, count, where)
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


def render_stack(
    text: str, name: str, nodes: Sequence[SwarmNode], services: Sequence[SwarmService],
    tasks: Sequence[SwarmTask], facts: Mapping[str, NodeFacts], *, prefix: str = "swarmgpu.",
    zone_label: str = "topology.zone", planner: Planner | None = None,
    moving: AbstractSet[str] = frozenset(), environ: Mapping[str, str] | None = None,
    more: Sequence[tuple[str, str]] = (), base: str | None = None,
) -> tuple[str, PlacementPlan]:
    """``planner``: the daemon's (its config's generic-resource kind, its stored
    workload model), so render chooses what the daemon would; a fresh default one
    otherwise. ``moving``: the services with a move in flight (``Planner.plan``).
    ``environ``, ``more``: as in ``check_stack``; ``base``: ``stackpaths.absolute_paths``'s."""
    if planner is None:
        planner = Planner(prefix=prefix, zone_label=zone_label, adopt_ungated=False)
    most = max((len(f.gpus) for f in facts.values()), default=0)
    checked = check_stack(text, prefix=prefix, zone_label=zone_label,
                          generic_kind=planner.generic_kind, node_gpus=most,
                          classes=planner.classes, tenants=planner.tenants, stack_name=name,
                          environ=environ, more=more, env_base=base or ".")
    if checked.errors:
        raise StackError(checked.errors)
    stack = checked.stack
    files = EnvFiles(base, environ, StackError)
    files.add_env(stack["services"], checked.env)
    mine = stack_services(stack, name, services, prefix)
    mine_names = {s.name for s in mine}
    others = [s for s in services if s.name not in mine_names]
    # Gate and env are written into the file, so plan as if they were already there.
    mounts = planner.grants == "mounts"  # the device mount is written into the file too
    gated = [replace(s, constraints=(*(c for c in s.constraints if not is_hold(c, prefix)
                                       and not is_gate_of(c, prefix, s.name)),
                                     gate_constraint(prefix, s.name)),
                     env=(*s.env, env_template(prefix), *env_lines(prefix)),
                     spec=_with_device_mount(s.spec, prefix) if mounts else s.spec)
             for s in mine]
    planner.adopt_ungated = False  # the file carries the gate and env: nothing to adopt
    plan = planner.plan(nodes, [*others, *gated], tasks, facts, moving=moving)
    out = copy.deepcopy(stack)
    by_name = {sp.name: sp for sp in plan.services}
    for svc_name, svc in out["services"].items():
        full = f"{name}_{svc_name}"
        where = f"services.{svc_name}"
        deploy = _mapping(svc, "deploy", where)
        req = parse_all(_labels(deploy, where), prefix=prefix, zone_label=zone_label,
                        classes=planner.classes)
        if req is None:
            continue
        sp = by_name.get(full)
        svc["deploy"] = deploy
        labels = _labels(deploy, where)
        given = dict(labels)
        if sp is not None:
            for p in sp.placements:
                labels[devices_key(prefix, p.node_id, p.slot)] = ",".join(p.uuids)
            labels.update(want_labels(prefix, ((p.node_id, p.uuids, p.milli)
                                               for p in sp.placements if p.slot is None),
                                      facts, labels))
        _write_placement(deploy, labels, where, full, sp, prefix)
        _put_labels(deploy, {k: v for k, v in labels.items() if given.get(k) != v})
        write_env(svc, prefix, fraction=not isinstance(req, RequestError) and req.is_fraction,
                  skip=files.request_names(str(svc_name), svc))
        if mounts:
            _add_device_mount(svc, prefix)
    if bad := schema_errors(out):  # what render added must fit the schema too
        raise StackError(bad)
    # `-c -` reads a relative path against the folder docker runs in: written absolute
    checked.notes += absolute_paths(out, base, StackError, escape=checked.substituted is None)
    if checked.substituted is not None:  # docker substitutes again as it reads the output
        out = as_written(out, checked.written, checked.substituted,
                         lambda path: pinned(path, prefix))
    header = "# rendered by swarmgpu: GPU placement resolved; deploy with\n" \
             f"#   docker stack deploy -c - {escaped(name)}\n"
    header += "".join(f"# {escaped(' '.join(n.split()))}\n" for n in checked.notes)
    return header + dump_stack(out), plan


def _write_placement(deploy: dict[str, Any], labels: dict[str, str], where: str, full: str,
                     sp: ServicePlan | None, prefix: str) -> None:
    """The service's gate constraint (the hold replaced) and its replicas per node."""
    placement = _mapping(deploy, "placement", f"{where}.deploy")
    deploy["placement"] = placement
    # The hold of a file deployed as written is the daemon's to replace; rendered,
    # the file carries the gate itself.
    cons = [c for c in _constraints(placement, where) if not is_hold(c, prefix)]
    if not any(is_gate_of(c, prefix, full) for c in cons):  # as the file spells it
        cons.append(gate_constraint(prefix, full))
    placement["constraints"] = cons
    if sp is not None and sp.packed is not None:
        # Replicas packed on one node (swarmgpu.manager.placement): as many tasks on it as
        # there are slot lists, with swarmgpu's record that the value is its own.
        if sp.set_max_replicas is not None:
            placement["max_replicas_per_node"] = sp.set_max_replicas
        labels.update(sp.state_labels)
    elif _replicas(deploy, where) > 1:
        placement["max_replicas_per_node"] = 1
