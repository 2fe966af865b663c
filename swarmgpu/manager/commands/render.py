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
from collections.abc import Callable, Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any, ParamSpec, TypeVar

from swarmgpu.core.configvalues import service_name_problem
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.peertext import escaped, quoted
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
    version_error,
)
from swarmgpu.manager.commands.cudavisible import visible_notes
from swarmgpu.manager.commands.devshm import (
    compose_mounts,
    granted_gpus,
    shm_warnings,
    tmpfs_key_at_shm,
)
from swarmgpu.manager.commands.dotenv import dotenv_notes
from swarmgpu.manager.commands.envfile import EnvFiles, check_env_files, device_var_error, write_env
from swarmgpu.manager.commands.interpolation import as_written, interpolate, pinned
from swarmgpu.manager.commands.model_servers import server_notes
from swarmgpu.manager.commands.stackmerge import MergeError, StackFile, merge_stacks
from swarmgpu.manager.commands.stackpaths import absolute_paths
from swarmgpu.manager.commands.swarmspec import (
    StackError,
    constraints_of,
    env_list,
    mapping_of,
    max_replicas_of,
    mode_of,
    platforms_of,
    preferences_of,
    read_labels,
    replicas_of,
    reservations_of,
    stack_services,
)
from swarmgpu.manager.placement import (
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
from swarmgpu.manager.services.sharing import env_lines, want_labels
from swarmgpu.manager.services.startfirst import stack_order_error
from swarmgpu.manager.services.tenants import Tenants, case_twin_refused
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.unkeyed import NONE_UNKEYED, Unkeyed

# StackError and stack_services are swarmspec's, used here and given by this module too
# (the command and the callers of render_stack catch the one error it raises).
__all__ = ["CheckedStack", "StackError", "check_stack", "load_stack", "render_stack",
           "stack_services"]

T = TypeVar("T")
_P = ParamSpec("_P")


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
                    f"{where}: non-string key in {at or 'the top level'}: {quoted(k)} "
                    "(docker's YAML reader reads true/false, numbers and null as such); quote "
                    "it if it is meant as text")
        return {k: _unshared(x, where, f"{at}.{k}" if at else k) for k, x in v.items()}
    if isinstance(v, list):
        return [_unshared(x, where, f"{at}[{i}]") for i, x in enumerate(v)]
    return v


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


@dataclass
class CheckedStack:
    """A stack file read and checked whole, before anything is asked of Docker."""

    stack: dict[str, Any]  # as Swarm will take it: Compose GPU reservations made requests
    notes: list[str] = field(default_factory=list)  # what render changed, and why
    errors: list[str] = field(default_factory=list)  # every problem, service and key named
    requests: list[str] = field(default_factory=list)  # services with a request
    no_gpu: list[str] = field(default_factory=list)  # of them, those of gpus: "0"
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
                env_base: str | None = None,
                queues: Collection[str] = ()) -> CheckedStack:
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
    (``envfile``); None: not read. ``queues``: the config's queue names: without
    tenants, a ``swarmgpu.queue`` naming one but for case is an error here, as the daemon
    refuses it (with tenants, ``Tenants.apply`` refuses it by the same rule)."""
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
        if stack_name is not None and (bad := service_name_problem(
                f"services.{svc_name}", f"{stack_name}_{svc_name}", "Swarm refuses to create "
                "it: rename the service, or deploy with a shorter stack name")):
            out.errors.append(bad)  # (docker/cli's schema takes a.b, and any length)
        if (tenants is not None and stack_name is not None) or (tenants is None and queues):
            _check_tenant(out, str(svc_name), svc, prefix, zone_label, classes, tenants,
                          stack_name or "", queues)
    if files is not None:
        out.errors += check_env_files(out.stack["services"], out.requests, files)
    if environ is not None and env_base is not None:  # compose's .env, unread by docker
        out.notes += dotenv_notes(raw, env_base, environ)
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
        if bad := version_error(raw):  # docker checks each file's, the merge keeps the first's
            errs = [bad, *errs]
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
                  classes: Mapping[str, int] | None, tenants: Tenants | None, stack_name: str,
                  queues: Collection[str]) -> None:
    """The request of a service that checked clean, against its tenant's limits (without
    tenants: its queue against the config's ``queues``, ``case_twin_refused``): what the
    daemon would cap or refuse is an error at this gate."""
    deploy = svc.get("deploy") if isinstance(svc, dict) else None
    if not isinstance(deploy, dict) or not isinstance(deploy.get("labels"), dict | list):
        return
    # a shape error is said once, by _check_service; raised here it left check_stack
    labels: dict[str, str] = _try([], {}, read_labels, deploy, f"services.{svc_name}")
    req = parse_all(labels, prefix=prefix, zone_label=zone_label, classes=classes)
    if not isinstance(req, GpuRequest):
        return  # none, or an error said above
    got = (tenants.apply(req, f"{stack_name}_{svc_name}", stack_name) if tenants is not None
           else case_twin_refused(req.queue, queues, prefix) or req)
    w = f"services.{svc_name}.deploy.labels"
    if isinstance(got, RequestError):
        out.errors.append(f"{w}: {got}")
    elif isinstance(got, GpuRequest):
        out.errors += [f"{w}: {why} (stack {stack_name}; ask for no more, or change "
                       f"tenants.{got.tenant} in the config)" for why in got.limits]


def _try(errs: list[str], default: T, fn: Callable[_P, T], *args: _P.args,
         **kwargs: _P.kwargs) -> T:
    """``fn(*args)``, its StackError collected into ``errs`` (``default`` then)."""
    try:
        return fn(*args, **kwargs)
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
    container: dict[str, str] = _try([], {}, read_labels, svc, w)  # its own labels: a container's
    errs += [f"{w}.labels: {e}" for e in container_request_errors(container, prefix)]
    if not interpolated:  # a $ left for docker where render places by it
        errs += interpolation_errors(svc, w, prefix)
    out.notes += notes
    none: dict[str, Any] = {}
    deploy = _try(errs, None, mapping_of, svc, "deploy", w)
    if deploy is None:
        out.errors.extend(errs)
        return
    labels = _try(errs, None, read_labels, deploy, w)
    resources = _try(errs, none, mapping_of, deploy, "resources", f"{w}.deploy")
    res = _try(errs, none, mapping_of, resources, "reservations", f"{w}.deploy.resources")
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
    _try(errs, None, env_list, svc, w)
    mode = _try(errs, "replicated", mode_of, deploy, w)
    if mode in ("replicated", "replicated-job"):
        _try(errs, 1, replicas_of, deploy, w)
    placement = _try(errs, none, mapping_of, deploy, "placement", f"{w}.deploy")
    for check in (constraints_of, preferences_of, max_replicas_of):
        _try(errs, None, check, placement, w)
    cons: list[str] = _try([], [], constraints_of, placement, w)
    errs += owned_key_errors(labels or {}, cons, w, prefix,
                             f"{stack}_{svc_name}" if stack is not None else None)
    out.notes += owned_label_notes(cons, w, prefix)
    _try(errs, None, platforms_of, svc, w)
    _try(errs, None, reservations_of, deploy, w)
    if labels is not None:
        bad = request_errors(labels, prefix=prefix, zone_label=zone_label, classes=classes)
        errs += [f"{w}.deploy.labels: {e}" for e in bad]
        req = None if bad else parse_all(labels, prefix=prefix, zone_label=zone_label,
                                         classes=classes)
        if req is not None:
            out.requests.append(svc_name)
            if isinstance(req, GpuRequest) and req.cpu_only:
                out.no_gpu.append(svc_name)
            elif (late := stack_order_error(deploy, w)) is not None:  # never placed
                errs.append(late)
            if (own := own_device_line(_try([], [], env_list, svc, w), prefix)) is not None:
                errs.append(device_var_error(f"{w}.environment", own))
            env = files.read(svc_name, svc) if files is not None else None
            if not gpu.unresolved and isinstance(req, GpuRequest):  # all: no count yet
                out.notes += [*visible_notes(svc, w, req, env or {}, prefix, interpolated),
                              *server_notes(svc, w, req, prefix, env),
                              *(f"{w}: WARNING: {n}" for n in shm_warnings(
                                  svc, compose_mounts(svc.get("volumes")), env,
                                  granted_gpus(req), tmpfs_key_at_shm(svc.get("tmpfs")),
                                  interpolated))]
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


def render_stack(
    text: str, name: str, nodes: Sequence[SwarmNode], services: Sequence[SwarmService],
    tasks: Sequence[SwarmTask], facts: Mapping[str, NodeFacts], *, prefix: str = "swarmgpu.",
    zone_label: str = "topology.zone", planner: Planner | None = None,
    moving: AbstractSet[str] = frozenset(), environ: Mapping[str, str] | None = None,
    more: Sequence[tuple[str, str]] = (), base: str | None = None,
    stopping: Sequence[SwarmTask] = (), rejected: Sequence[SwarmTask] = (),
    unkeyed: Unkeyed = NONE_UNKEYED, agents: AbstractSet[str] | None = None,
) -> tuple[str, PlacementPlan]:
    """``planner``: the daemon's (its config's generic-resource kind, its stored workload
    model), so render chooses what the daemon would; a fresh default one otherwise.
    ``moving`` (moves in flight), ``stopping`` (tasks Swarm is stopping that still use their
    node), ``rejected`` (those its constraint enforcer rejected), ``unkeyed`` (what the lists
    left out: ``swarm.unkeyed``), ``agents`` (the agents' nodes as the daemon reads them,
    ``Snapshot.agent_nodes``: the live services', not the rendered stack's; None: walked by
    the planner): as ``Planner.plan`` reads them. ``environ``, ``more``: as in
    ``check_stack``; ``base``: ``stackpaths.absolute_paths``'s."""
    if planner is None:
        planner = Planner(prefix=prefix, zone_label=zone_label, adopt_ungated=False)
    most = max((len(f.gpus) for f in facts.values()), default=0)
    checked = check_stack(text, prefix=prefix, zone_label=zone_label, queues=planner.queues.quotas,
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
    plan = planner.plan(nodes, [*others, *gated], tasks, facts, moving=moving,
                        stopping=stopping, rejected=rejected, unkeyed=unkeyed, agents=agents)
    out = copy.deepcopy(stack)
    by_name = {sp.name: sp for sp in plan.services}
    for svc_name, svc in out["services"].items():
        full = f"{name}_{svc_name}"
        where = f"services.{svc_name}"
        deploy = mapping_of(svc, "deploy", where)
        req = parse_all(read_labels(deploy, where), prefix=prefix, zone_label=zone_label,
                        classes=planner.classes)
        if req is None:
            continue
        sp = by_name.get(full)
        svc["deploy"] = deploy
        labels = read_labels(deploy, where)
        given = dict(labels)
        if sp is not None:
            for p in sp.placements:
                labels[devices_key(prefix, p.node_id, p.slot)] = ",".join(p.uuids)
            labels.update(want_labels(prefix, ((p.node_id, p.uuids, p.milli)
                                               for p in sp.placements if p.slot is None),
                                      facts, labels))
        checked.notes += _write_placement(deploy, labels, where, full, sp, prefix)
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
                         lambda path, value: pinned(path, prefix, value))
    header = "# rendered by swarmgpu: GPU placement resolved; deploy with\n" \
             f"#   docker stack deploy -c - {escaped(name)}\n"
    header += "".join(f"# {escaped(' '.join(n.split()))}\n" for n in checked.notes)
    return header + dump_stack(out), plan


def _write_placement(deploy: dict[str, Any], labels: dict[str, str], where: str, full: str,
                     sp: ServicePlan | None, prefix: str) -> list[str]:
    """The service's gate constraint (the hold replaced) and its replicas per node; a
    note where a value of the file's is changed."""
    placement = mapping_of(deploy, "placement", f"{where}.deploy")
    deploy["placement"] = placement
    # The hold of a file deployed as written is the daemon's to replace; rendered,
    # the file carries the gate itself.
    cons = [c for c in constraints_of(placement, where) if not is_hold(c, prefix)]
    if not any(is_gate_of(c, prefix, full) for c in cons):  # as the file spells it
        cons.append(gate_constraint(prefix, full))
    placement["constraints"] = cons
    if sp is not None and sp.packed is not None:
        # Replicas packed on one node (swarmgpu.manager.placement): as many tasks on it as
        # there are slot lists, with swarmgpu's record that the value is its own.
        if sp.set_max_replicas is not None:
            placement["max_replicas_per_node"] = sp.set_max_replicas
        labels.update(sp.state_labels)
    elif replicas_of(deploy, where) > 1:
        old = placement.get("max_replicas_per_node")
        placement["max_replicas_per_node"] = 1
        if old is not None and old != 1:  # spread: the daemon would set it back to 1 too
            return [f"{where}.deploy.placement.max_replicas_per_node: {quoted(old)} became 1: "
                    "swarmgpu spreads these replicas one per node, one device list each, "
                    "and sets it back to 1 if raised (docs/requests.md, \"Several replicas "
                    f"on one node\"); {prefix}pack: \"always\" holds them on one node"]
    return []
