"""GPU access only through a grant: which services see GPUs that placement never gave them.

A *grant* is what placement writes for a service it manages (one with a valid
``swarmgpu.*`` request): the device template in ``NVIDIA_VISIBLE_DEVICES``
(``placement.envs.env_template``), which expands on each node to the GPUs the ledger gives
that service there and to ``void`` elsewhere (with ``placement.grants: mounts``, the
``/dev/null`` mount whose target names the same list, beside it). Anything else that
makes the NVIDIA runtime hand a container GPUs is *ungranted GPU access*.

What the runtime reads, from NVIDIA/nvidia-container-toolkit (``internal/config/image/
cuda_image.go``, ``envvars.go``, ``devices.go``), on the container's final env (the
service's lines override the image's; of two lines for one variable the last wins; a
line without ``=`` unsets the image's value only, never one the service's own lines set):

- ``NVIDIA_VISIBLE_DEVICES``: split at commas, blanks dropped. Nothing left, or ``void``
  anywhere in it: no GPU. Else the first ``all`` or ``none`` decides (``none``: the driver's
  files but no GPU); else the ids listed. Empty (``=``) is ``void``; *unset* is ``void``
  too, except in a legacy CUDA image (``CUDA_VERSION`` set, ``NVIDIA_REQUIRE_CUDA`` empty),
  which gets every GPU.
- the variables ``swarm-resource`` names (``DOCKER_RESOURCE_<KIND>``, as ``swarmgpu
  node-config`` sets): when any is set, it is read *instead of* NVIDIA_VISIBLE_DEVICES.
  Swarm appends that line itself, after the service's env, naming the GPUs it picked
  for a generic-resource reservation (swarmkit ``genericresource.EnvFormat``).
- with ``accept-nvidia-visible-devices-as-volume-mounts`` (off by default), a mount whose
  source is ``/dev/null`` and whose target lies under ``/var/run/nvidia-container-devices``:
  the rest of the target names the devices, and mounts win over every variable.
- with ``accept-nvidia-visible-devices-envvar-when-unprivileged = false``, the variables of
  a container without CAP_SYS_ADMIN in its bounding set are ignored.
- ``CUDA_VISIBLE_DEVICES`` is CUDA's own filter inside a container: it hands out no device
  node, and is not read here.

Pure: a snapshot's services, tasks and the GPU nodes in, findings out; the image env the
manager's engine has (``ImageEnv``) is read by the caller (``cycle.grants``). Where a fact
cannot be known from the manager it says so: an image the manager's engine does not have
is ``unknown`` and treated as CUDA images behave (their env says
``NVIDIA_VISIBLE_DEVICES=all``); a template someone else wrote is ``unknown`` (its value
exists only on the node). Which engine runs the NVIDIA runtime as its default is not
visible from a manager: on the GPU nodes it is assumed (docs/deploy.md requires it,
``swarmgpu doctor`` checks it there).
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from swarmgpu.core.commalist import comma_list
from swarmgpu.manager.placement.envs import (
    DEVICE_MOUNT_ROOT,
    DEVICE_VAR,
    VOID_LINE,
    device_env,
    device_mount,
)
from swarmgpu.manager.placement.generic import generic_reservations
from swarmgpu.manager.placement.keys import DEVICES, MEANT_STATES
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.specread import UnreadSpec, spec_list, spec_object
from swarmgpu.swarm.swarmnode import gpu_kinds

MOUNT_ROOT = DEVICE_MOUNT_ROOT  # the toolkit's DeviceListAsVolumeMountsRoot
RESOURCE_PREFIX = "DOCKER_RESOURCE_"  # what swarm-resource names (Swarm's generic resources)
KIND = "ungranted-gpu-access"  # the audit finding; "ungranted GPU access" in plan/status/map
UNGRANTED_MODES = ("report", "void")
GRANT_MODES = ("env", "mounts")
_SYS_ADMIN = ("CAP_SYS_ADMIN", "SYS_ADMIN", "ALL", "CAP_ALL")
_LONG = 80  # a value quoted in a reason is cut to this many characters


@dataclass(frozen=True)
class ImageEnv:
    """An image's ``Config.Env`` as the manager's engine has it. ``env`` None: unknown
    (``note`` says why: not on that engine, or the engine could not be asked).
    ``read`` False: the engine's answer is not had (not asked yet, or an error), which
    says nothing of the image: reported as unknown, never voided on (``void_spec``)."""

    ref: str
    env: tuple[str, ...] | None
    note: str = ""
    read: bool = True


@dataclass(frozen=True)
class Access:
    """One way a service's containers see GPUs without a grant."""

    via: str  # env | image | resource-env | mount | reservation | unread
    what: str  # the reason, as plan/status/audit show it
    known: bool = True  # False: rests on what the manager cannot see (treated as access)
    voidable: bool = True  # NVIDIA_VISIBLE_DEVICES=void (or the variable's void) stops it
    var: str = ""  # the variable it rests on (resource-env: which DOCKER_RESOURCE_*)

    def to_dict(self) -> dict[str, Any]:
        return {"via": self.via, "what": self.what, "known": self.known,
                "voidable": self.voidable}


@dataclass(frozen=True)
class Ungranted:
    """A service whose tasks on GPU nodes see GPUs placement did not grant it."""

    service: str
    service_id: str
    nodes: tuple[str, ...]  # hostnames of the GPU nodes its tasks are on
    access: tuple[Access, ...]
    exempt: bool = False  # placement.ungranted_exempt: listed, never voided

    @property
    def reason(self) -> str:
        return "; ".join(a.what for a in self.access)

    @property
    def known(self) -> bool:
        return all(a.known for a in self.access)

    @property
    def voidable(self) -> bool:
        return any(a.voidable for a in self.access)

    @property
    def fix(self) -> str:
        if self.exempt:
            return "none needed: exempt by placement.ungranted_exempt"
        parts = []
        if any(a.via in ("env", "image") for a in self.access):
            parts.append(f"set {VOID_LINE} in its environment (or remove its own "
                         f"{DEVICE_VAR}) and ask for GPUs with swarmgpu.gpus, so that "
                         "swarmgpu grants them")
        if any(not a.known and a.via == "image" for a in self.access):
            parts.append("or load the image on the manager so swarmgpu can read its env")
        if any(a.via == "resource-env" for a in self.access):
            parts.append(f"remove its own {RESOURCE_PREFIX}* lines and override its image's "
                         f"with {RESOURCE_PREFIX}<KIND>=void (Swarm sets them for the generic "
                         "resources it reserves)")
        if any(a.via == "reservation" for a in self.access):
            parts.append("remove its Swarm generic-resource reservation of GPUs and ask with "
                         "swarmgpu.gpus instead (an env write cannot stop it: Swarm appends "
                         "its own line last)")
        if any(a.via == "unread" for a in self.access):
            parts.append("make its spec readable as the reason says (until then whether "
                         "it sees GPUs is unknown)")
        if any(a.via == "mount" for a in self.access):
            parts.append(f"remove its /dev/null mount under {MOUNT_ROOT} (an env write "
                         "cannot stop it: mounts win)")
        if self.voidable:
            parts.append("placement.ungranted: void writes the void line for you")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"service": self.service, "service_id": self.service_id,
                "nodes": list(self.nodes), "reason": self.reason, "fix": self.fix,
                "known": self.known, "voidable": self.voidable, "exempt": self.exempt,
                "access": [a.to_dict() for a in self.access]}


# --- the GPU nodes ---------------------------------------------------------------------

def gpu_nodes(nodes: Sequence[SwarmNode], facts: Mapping[str, Any], prefix: str,
              generic_kind: str = "") -> dict[str, str]:
    """node id -> hostname of every node known to have GPUs: its agent's facts list
    some, label sync's labels say so (an agent that stopped answering), or its engine
    advertises GPU generic resources. A GPU node with none of the three (no agent ever,
    no node-generic-resources) is not known to be one, and its services are not checked."""
    kinds = set(gpu_kinds(generic_kind))
    out: dict[str, str] = {}
    for n in nodes:
        res = facts.get(n.id)
        f = getattr(res, "facts", None)
        count = n.labels.get(f"{prefix}gpu.count", "")
        if ((f is not None and f.gpus)
                or n.labels.get(f"{prefix}gpu.present") == "true"
                or (count.isascii() and count.isdigit() and int(count) > 0)
                or kinds & set(n.generic_resources) or kinds & set(n.discrete_resources)):
            out[n.id] = n.hostname
    return out


def on_gpu_nodes(services: Sequence[SwarmService], tasks: Sequence[SwarmTask],
                 gpu: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """service id -> the GPU nodes (hostnames) its tasks meant to run are on."""
    out: dict[str, set[str]] = {}
    ids = {s.id for s in services}
    for t in tasks:
        if t.service_id in ids and t.node_id in gpu and (
                t.desired_state in MEANT_STATES or t.state == "running"):
            out.setdefault(t.service_id, set()).add(gpu[t.node_id])
    return {k: tuple(sorted(v)) for k, v in out.items()}


# --- what the toolkit reads ------------------------------------------------------------

def devices_of(values: Sequence[str]) -> str:
    """What the toolkit makes of the set variables' values (``devicesFromEnvvars`` and
    ``NewVisibleDevices``): ``"none"`` (no GPU), ``"all"`` or ``"some"``."""
    devices = [d.strip() for v in values for d in v.split(",") if d.strip()]
    if not devices or "void" in devices:
        return "none"
    for d in devices:
        if d in ("all", "none"):
            return d
    return "some"


def _key(line: str) -> str:
    return line.split("=", 1)[0]


def _cut(text: str) -> str:
    return text if len(text) <= _LONG else text[:_LONG] + "..."


def _last(env: Sequence[str], key: str) -> str | None:
    """The line that decides ``key`` (the last one naming it), or None."""
    found = None
    for line in env:
        if _key(line) == key:
            found = line
    return found


def final_env(service_env: Sequence[str], image_env: Sequence[str] | None
              ) -> dict[str, str]:
    """The container's env as the engine builds it (moby's ``ReplaceOrAppendEnvValues``):
    the image's, overridden by the service's lines (the last of a variable wins). A line
    without ``=`` unsets a variable the *image* sets; one the service's own lines set
    (appended, not in the image) stays, and the toolkit reads it."""
    out: dict[str, str] = {}
    for line in image_env or ():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k] = v
    from_image = set(out)
    for line in service_env:
        k, sep, v = line.partition("=")
        if sep:
            out[k] = v
        elif k in from_image:
            out.pop(k, None)
    return out


def _container(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """``TaskTemplate.ContainerSpec``; ``UnreadSpec`` naming the part that is not an
    object (read as none, a string there hid the service's env and mounts)."""
    tt = spec_object(spec.get("TaskTemplate"), "TaskTemplate")
    return spec_object(tt.get("ContainerSpec"), "TaskTemplate.ContainerSpec")


def _listed(spec: Mapping[str, Any], key: str) -> list[Any]:
    """A list of the spec's ``ContainerSpec`` (``specread.spec_list``)."""
    return spec_list(_container(spec).get(key), f"TaskTemplate.ContainerSpec.{key}")


def _mounts(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [m for m in _listed(spec, "Mounts") if isinstance(m, Mapping)]


def _privileged(spec: Mapping[str, Any]) -> bool:
    """CAP_SYS_ADMIN added: the toolkit counts the container as privileged (its bounding
    set), and reads its variables even with envvar-when-unprivileged off."""
    return any(str(c).upper() in _SYS_ADMIN
               for c in _listed(spec, "CapabilityAdd"))


def image_of(spec: Mapping[str, Any]) -> str:
    """The service's image; "" where its spec cannot be read (``service_access`` then
    names the field)."""
    try:
        return str(_container(spec).get("Image") or "")
    except UnreadSpec:
        return ""


def _env(spec: Mapping[str, Any]) -> list[str]:
    return [str(x) for x in _listed(spec, "Env")]


# --- one service ---------------------------------------------------------------------

def service_access(spec: Mapping[str, Any], image: ImageEnv | None, *, prefix: str,
                   managed: bool, grants: str = "env", generic_kind: str = "") -> list[Access]:
    """How a service's containers (on a GPU node, NVIDIA runtime by default) see GPUs
    without a grant; empty: they see none, or only what placement granted. ``managed``:
    placement manages the service's device labels (a valid request); ``grants``: the
    mode of ``placement.grants`` (``mounts``: the nodes' toolkits ignore the variables of
    unprivileged containers, as ``swarmgpu doctor --grants mounts`` checks);
    ``generic_kind``: ``placement.generic_resource_kind``, a GPU kind beside the usual."""
    env = _env(spec)
    # (read for the template's grant: iterated unguarded, a number or a list of them
    # raised out of the whole step)
    labels = spec_object(spec.get("Labels"), "Labels")
    out: list[Access] = []
    env_read = grants != "mounts" or _privileged(spec)
    if env_read:
        out += _nvidia_env(env, labels, image, prefix, managed)
        out += _resource_env(env, image.env if image else None)
        # Swarm's pick of a managed service is read instead of its grant too; under
        # grants as mounts placement's mount is read before any variable.
        if not managed or grants != "mounts":
            out += _reservation(spec, generic_kind, managed)
    out += _device_mounts(spec, prefix, managed)
    return out


def _nvidia_env(env: Sequence[str], labels: Mapping[str, str], image: ImageEnv | None,
                prefix: str, managed: bool) -> list[Access]:
    last = _last(env, DEVICE_VAR)
    if last is not None and device_env(prefix, [last]) is not None:
        # swarmgpu's template: void unless a devices label names GPUs for the node. Those
        # labels are placement's for a service it manages (it removes any it did not
        # write); on any other service they are the stack's, i.e. nobody's grant.
        if managed or not any(k.startswith(prefix + DEVICES) for k in labels):
            return []
        return [Access("env", f"swarmgpu's device template in {DEVICE_VAR} with "
                              f"{prefix}{DEVICES}* labels placement did not write (the "
                              "service has no valid GPU request)")]
    if last is not None and "=" in last:
        value = last.split("=", 1)[1]
        if "{{" in value:
            return [Access("env", f"{DEVICE_VAR} is a template swarmgpu did not write "
                                  f"({_cut(value)}): its value is known only on the node",
                           known=False)]
        kind = devices_of([value])
        if kind == "none":
            return []
        shadow = (" after swarmgpu's template, which it overrides"
                  if any(device_env(prefix, [x]) for x in env) else "")
        return [Access("env", f"{_cut(last)} in its own env{shadow}")]
    # Unset by the service: the image's env decides.
    unset = last is not None  # a line without '=' unsets the image's value too
    ref = image.ref if image else ""
    own_value = final_env(env, ()).get(DEVICE_VAR)  # an own line the bare one cannot unset
    if (image is None or image.env is None) and own_value is not None \
            and devices_of([own_value]) != "none":
        return [Access("env", f"{DEVICE_VAR}={_cut(own_value)} in its own env, followed by a "
                              "line without '=', which unsets only an image's value: "
                              f"unknown whether image {ref or '?'} sets it", known=False)]
    if image is None or image.env is None:
        note = image.note if image and image.note else "it is not on the manager's engine"
        own = final_env(env, ())
        if unset:  # only the legacy rule is left, which NVIDIA_REQUIRE_CUDA turns off
            if own.get("NVIDIA_REQUIRE_CUDA"):
                return []
            return [Access("image", f"unknown: {DEVICE_VAR} is unset and image {ref or '?'} "
                                    f"({note}) cannot be read: a legacy CUDA image (CUDA_VERSION "
                                    "without NVIDIA_REQUIRE_CUDA) gets every GPU", known=False)]
        return [Access("image", f"unknown: image {ref or '?'} ({note}), so its env cannot "
                                f"be read; treated as CUDA images behave ({DEVICE_VAR}=all)",
                       known=False)]
    final = final_env(env, image.env)
    if DEVICE_VAR in final:
        value = final[DEVICE_VAR]
        if devices_of([value]) == "none":
            return []
        if own_value is not None and value == own_value \
                and DEVICE_VAR not in final_env((), image.env):
            return [Access("env", f"{DEVICE_VAR}={_cut(value)} in its own env (a later line "
                                  "without '=' unsets only an image's value)")]
        return [Access("image", f"its image {ref} sets {DEVICE_VAR}={_cut(value)}")]
    if _legacy(final):
        return [Access("image", f"{DEVICE_VAR} is unset and its image {ref} is a legacy CUDA "
                                f"image (CUDA_VERSION={_cut(final.get('CUDA_VERSION', ''))}, "
                                "no NVIDIA_REQUIRE_CUDA): the toolkit gives it every GPU")]
    return []


def _legacy(final: Mapping[str, str]) -> bool:
    """The toolkit's ``IsLegacy``: CUDA_VERSION set and NVIDIA_REQUIRE_CUDA empty."""
    return bool(final.get("CUDA_VERSION")) and not final.get("NVIDIA_REQUIRE_CUDA")


def _resource_env(env: Sequence[str], image_env: Sequence[str] | None) -> list[Access]:
    """The DOCKER_RESOURCE_* lines of the service and of its image as the manager's
    engine has it, as the container ends up with them: one set by the image is read
    whatever the service's NVIDIA_VISIBLE_DEVICES says. An image not known: its lines are
    not guessed (docs/security.md), and a line without '=' is taken to unset nothing."""
    out = []
    final = final_env(env, image_env)
    mine = dict.fromkeys(_key(x) for x in env if x.startswith(RESOURCE_PREFIX) and "=" in x)
    theirs = dict.fromkeys(_key(x) for x in image_env or () if x.startswith(RESOURCE_PREFIX))
    for key in {**mine, **theirs}:
        if key not in final:
            continue
        value = final[key]
        last = f"{key}={value}" if key in mine else f"its image sets {key}={value}"
        if "{{" not in value and devices_of([value]) == "none":
            continue
        where = "" if key not in mine else " in its own env"
        out.append(Access("resource-env", f"{_cut(last)}{where}: the toolkit reads "
                                          f"it instead of {DEVICE_VAR} where swarm-resource "
                                          "names it (as `swarmgpu node-config` sets)",
                          known="{{" not in value, var=key))
    return out


def _reservation(spec: Mapping[str, Any], generic_kind: str, managed: bool = False,
                 ) -> list[Access]:
    """A reservation of a GPU kind of Swarm generic resources: Swarm picks named GPUs of
    the node for each task and appends ``DOCKER_RESOURCE_<KIND>=<them>`` after the
    service's env (so no env line of its own can override it: the toolkit keeps the
    last). On any service it is GPUs nobody granted; on one placement manages, Swarm's
    pick replaces its grant, so two services can share a GPU the ledger gives one."""
    kinds = gpu_kinds(generic_kind)
    out = []
    for kind, count in generic_reservations(spec):  # UnreadSpec: that service's failure
        if kind not in kinds:
            continue
        whose = f"{DEVICE_VAR} (placement's grant)" if managed else DEVICE_VAR
        out.append(Access("reservation", f"reserves {count} {_cut(kind)} "
                                         "as Swarm generic resources: Swarm names the GPUs it "
                                         f"picks in {RESOURCE_PREFIX}{_cut(kind.upper())}, "
                                         f"which the toolkit reads instead of {whose} "
                                         "where swarm-resource names it (as `swarmgpu "
                                         "node-config` sets)", voidable=False))
    return out


def _device_mounts(spec: Mapping[str, Any], prefix: str, managed: bool) -> list[Access]:
    labelled = any(k.startswith(prefix + DEVICES)
                   for k in spec_object(spec.get("Labels"), "Labels"))
    out = []
    for m in _mounts(spec):
        source, target = str(m.get("Source") or ""), str(m.get("Target") or "")
        if device_mount(prefix, m):
            # placement's own mount (placement.grants: mounts), as its env template:
            # the grant on a service it manages, nothing without devices labels
            if not managed and labelled:
                out.append(Access("mount", f"swarmgpu's device mount with {prefix}{DEVICES}* "
                                           "labels placement did not write (the service "
                                           "has no valid GPU request)", voidable=False))
            continue
        templated = "{{" in source or "{{" in target
        if str(m.get("Type") or "bind") != "bind":
            continue  # a volume's or tmpfs's source is never /dev/null on the host
        if not templated and (posixpath.normpath(source) != "/dev/null"
                              or not posixpath.normpath(target).startswith(MOUNT_ROOT)):
            continue
        device = posixpath.normpath(target)[len(MOUNT_ROOT):].strip("/")
        what = (f"a bind mount {_cut(source)} -> {_cut(target)} written with templates: it "
                f"may name devices under {MOUNT_ROOT}" if templated else
                f"a /dev/null mount at {_cut(target)}: the toolkit gives it "
                f"{_cut(device) or 'nothing'} where it accepts device lists as volume mounts "
                "(accept-nvidia-visible-devices-as-volume-mounts)")
        if not templated and not device:
            continue
        out.append(Access("mount", what, known=not templated, voidable=False))
    return out


# --- every service ---------------------------------------------------------------------

def exempt_of(name: str, patterns: Collection[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def parse_exempt(text: str) -> list[str]:
    """``placement.ungranted_exempt``: a comma list of service-name globs."""
    return comma_list(text)


def find_ungranted(services: Sequence[SwarmService], tasks: Sequence[SwarmTask],
                   gpu: Mapping[str, str], *, prefix: str, managed: Collection[str],
                   images: Mapping[str, ImageEnv], exempt: Collection[str] = (),
                   grants: str = "env", generic_kind: str = "") -> list[Ungranted]:
    """Every service with a task on a GPU node (``gpu_nodes``) that sees GPUs without a
    grant, by name. ``managed``: the names of the services placement manages (a valid
    request); ``images``: what the manager's engine says of the images (by reference;
    missing: unknown)."""
    where = on_gpu_nodes(services, tasks, gpu)
    out = []
    for s in services:
        nodes = where.get(s.id)
        if not nodes:
            continue
        ref = image_of(s.spec)
        image = images.get(ref) or ImageEnv(ref, None, "not read", read=False)
        try:
            if s.unread:  # (a part the engine's answer had unread: swarm.client)
                raise UnreadSpec(s.unread)
            access = service_access(s.spec, image, prefix=prefix, managed=s.name in managed,
                                    grants=grants, generic_kind=generic_kind)
        except UnreadSpec as exc:
            # Its access unknown, so listed (as an image not read is), never written
            # to; the other services go on.
            access = [Access("unread", f"its spec cannot be read: {exc}", known=False,
                             voidable=False)]
        if access:
            out.append(Ungranted(s.name, s.id, nodes, tuple(access),
                                 exempt=exempt_of(s.name, exempt)))
    return sorted(out, key=lambda u: u.service)


def images_to_read(services: Sequence[SwarmService], tasks: Sequence[SwarmTask],
                   gpu: Mapping[str, str], prefix: str) -> list[str]:
    """The image references whose env can change an answer: of every service on a GPU
    node (NVIDIA_VISIBLE_DEVICES where the service's env leaves it to the image; an
    image's DOCKER_RESOURCE_* line whatever that env says)."""
    where = on_gpu_nodes(services, tasks, gpu)
    return sorted({image_of(s.spec) for s in services if s.id in where and image_of(s.spec)})


# --- placement.ungranted: void -----------------------------------------------------------

def void_env(env: Sequence[str], access: Sequence[Access], *, prefix: str,
             managed: bool) -> list[str] | None:
    """The service's env with its GPU access voided, changing only the lines of the
    variables the toolkit reads; None when nothing changes (idempotent).

    NVIDIA_VISIBLE_DEVICES: a service placement manages that carries swarmgpu's template
    keeps it, and loses the lines that override it; any other gets one ``void`` line in
    the place of its first (appended where it has none, so the image's value no longer
    applies). Each ``DOCKER_RESOURCE_*`` line that grants becomes ``void``."""
    vias = {a.via for a in access if a.voidable}
    new = list(env)
    if vias & {"env", "image"}:
        mine = [x for x in new if device_env(prefix, [x]) is not None]
        if managed and mine:
            new = [x for x in new if _key(x) != DEVICE_VAR or x in mine]
        else:
            first = next((i for i, x in enumerate(new) if _key(x) == DEVICE_VAR), None)
            if first is None:
                new.append(VOID_LINE)
            else:
                new = [VOID_LINE if i == first else x for i, x in enumerate(new)
                       if i == first or _key(x) != DEVICE_VAR]
    if "resource-env" in vias:
        granting = {a.var for a in access if a.via == "resource-env"}
        new = [f"{_key(x)}=void" if _key(x) in granting and "=" in x else x for x in new]
        # a line the image sets: overridden by one of the service's own
        new += [f"{k}=void" for k in sorted(granting)
                if not any(_key(x) == k and "=" in x for x in new)]
    return None if new == list(env) else new


def void_spec(spec: Mapping[str, Any], image: ImageEnv | None, *, prefix: str,
              managed: bool, grants: str = "env") -> Mapping[str, Any] | None:
    """The whole spec with only ``ContainerSpec.Env`` changed by ``void_env``, judged on
    ``spec`` itself (the one read at write time); None: nothing to void, or its access
    rests only on an image env not read (``ImageEnv.read``): the void waits for the read,
    as a later one may find nothing to void (a restarted daemon read its first images a
    few at a time, and voided, restarting them, the services of the others)."""
    access = service_access(spec, image, prefix=prefix, managed=managed, grants=grants)
    if image is not None and not image.read and all(
            a.via == "image" and not a.known for a in access if a.voidable):
        return None
    new_env = void_env(_env(spec), access, prefix=prefix, managed=managed)
    if new_env is None:
        return None
    new = dict(spec)
    tt = new["TaskTemplate"] = dict(spec.get("TaskTemplate") or {})
    cs = tt["ContainerSpec"] = dict(tt.get("ContainerSpec") or {})
    cs["Env"] = new_env
    return new
