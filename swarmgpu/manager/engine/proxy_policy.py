"""What the docker-proxy lets the daemon's three writes change, and what it hides.

Each write is a whole spec posted back (read-modify-write at ``Version.Index``). The
proxy reads the current spec from the engine itself and lets the new one through
only when it differs in nothing but what the daemon writes (found by reading every
write in ``swarmgpu/manager``: cycle.placement, cycle.preemption, overshare, rebalance):

- node spec: labels under the prefix (label sync's facts, placement's gates and
  ledger), never one no node carries (``keys.never_on_a_node``: ``<prefix>hold`` and
  ``<prefix>state.*``, whose absence the hold and the renewal constraint read; removed,
  or left as the node has it, it passes). Role, availability, name and every other
  label stay as they are; the health drain moves services off a node, it never changes
  the node's availability.
- service spec: service labels under the prefix (a ``devices.*`` list the write sets:
  GPU-/MIG- UUIDs, not ``all`` or a CDI name, ``_check_device_labels``); gate constraints
  (``node.labels.<prefix>service.*``) and the hold of a stack deployed as written
  (``node.labels.<prefix>hold==true``, which placement replaces with the gate), the
  renewal constraint (``node.labels.<prefix>state.renew!=<n>``, met by every node); the env
  lines swarmgpu writes (the device templates, ``CUDA_DEVICE_ORDER``, the share
  templates, exact strings); ``ForceUpdate``; ``Placement.MaxReplicas``;
  ``Mode.Replicated.Replicas`` (moves: raised by one at most); discrete generic
  resource reservations; ``UpdateConfig.Parallelism``; the lines of the variables the
  NVIDIA toolkit reads (``NVIDIA_VISIBLE_DEVICES``, ``DOCKER_RESOURCE_*``) removed or
  set to ``void`` (``placement.ungranted: void``, ``manager.services.grants``); placement's own
  ``/dev/null`` device mount (``placement.grants: mounts``, exact). Image, other mounts,
  privileges, capabilities, networks, container labels, every other env line: equal.
  And only a service that is swarmgpu's (``is_swarmgpus``): on one without a label
  under the prefix, a gate or a swarmgpu env template, the daemon may only void its device
  variables (removed, or set to ``void``), nothing else.
  (Removing a device line can widen a service's GPUs, e.g. a ``void`` line over a CUDA
  image's ``all``; so can what the proxy lets through already, swarmgpu's template with
  device labels: the daemon's word on GPUs is what the proxy trusts.)
- swarm spec: labels under the prefix. CA, raft, dispatcher, orchestration and
  encryption settings: equal (token rotation is refused by query, ``dockerproxy``).

Equality is strict (JSON types too: ``true`` is not ``1``). Pure functions; the
proxy (``swarmgpu.swarm.dockerproxy``) does the reading, and ``swarmgpu docker-proxy``
hands it ``write_checks``: what the daemon writes is the manager's to say.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from typing import Any

from swarmgpu.core.labelkeys import docker_namespace
from swarmgpu.core.model import is_device_uuid
from swarmgpu.manager.placement.envs import (
    DEVICE_VAR,
    ORDER_ENV,
    device_mount_spec,
    env_template,
    env_template_per_node,
)
from swarmgpu.manager.placement.keys import (
    DEVICES,
    HOLD,
    STATE,
    gate_of,
    is_hold,
    is_renew,
    never_on_a_node,
)
from swarmgpu.manager.services.sharing import env_lines
from swarmgpu.swarm.dockerproxy import WriteChecks
from swarmgpu.swarm.jsonstrict import first_difference, same, sub_object


class PolicyError(ValueError):
    """A write body the proxy refuses: the message says what differs."""


def owned_env(prefix: str) -> frozenset[str]:
    """The env lines the daemon adds or replaces (exact strings)."""
    return frozenset({env_template(prefix), env_template_per_node(prefix), ORDER_ENV,
                      *env_lines(prefix)})


def is_device_line(e: Any) -> bool:
    """A line of a variable the NVIDIA toolkit reads for devices (``manager.services.grants``)."""
    if not isinstance(e, str):
        return False
    key = e.split("=", 1)[0]
    return key == DEVICE_VAR or key.startswith("DOCKER_RESOURCE_")


def is_gate_constraint(c: Any, prefix: str) -> bool:
    """A gate constraint of any service, as placement reads them (``keys.gate_of``): any
    other constraint on a gate label (``!= true``, ``== false``) is the owner's."""
    return isinstance(c, str) and gate_of(c, prefix) is not None


def _labels_out(spec: dict[str, Any], key: str, prefix: str) -> None:
    labels = spec.get(key)
    if isinstance(labels, dict):
        kept = {k: v for k, v in labels.items() if not k.startswith(prefix)}
        if kept:
            spec[key] = kept
        else:
            spec.pop(key)


def _drop_empty(d: dict[str, Any], key: str) -> None:
    if d.get(key) in ({}, [], None):
        d.pop(key, None)


def _mask_service(spec: dict[str, Any], prefix: str) -> dict[str, Any]:
    s = copy.deepcopy(spec)
    _labels_out(s, "Labels", prefix)
    rep = sub_object(s, "Mode", "Replicated")
    if rep is not None:
        rep.pop("Replicas", None)  # the Replicated key stays: the mode is not swarmgpu's
    update = sub_object(s, "UpdateConfig")
    if update is not None:
        update.pop("Parallelism", None)
        _drop_empty(s, "UpdateConfig")
    tt = sub_object(s, "TaskTemplate")
    if tt is None:
        return s
    tt.pop("ForceUpdate", None)
    placement = sub_object(tt, "Placement")
    if placement is not None:
        placement.pop("MaxReplicas", None)
        cons = placement.get("Constraints")
        if isinstance(cons, list):
            placement["Constraints"] = [c for c in cons if not is_gate_constraint(c, prefix)
                                        and not (isinstance(c, str) and (is_hold(c, prefix)
                                                                     or is_renew(c, prefix)))]
            _drop_empty(placement, "Constraints")
        _drop_empty(tt, "Placement")
    resources = sub_object(tt, "Resources")
    reservations = sub_object(resources, "Reservations")
    if resources is not None and reservations is not None:
        generic = reservations.get("GenericResources")
        if isinstance(generic, list):
            reservations["GenericResources"] = [
                g for g in generic
                if not (isinstance(g, dict) and list(g) == ["DiscreteResourceSpec"])]
            _drop_empty(reservations, "GenericResources")
        _drop_empty(resources, "Reservations")
    if resources is not None:
        _drop_empty(tt, "Resources")  # the engine answers {}; the daemon may add the path
    cs = sub_object(tt, "ContainerSpec")
    env = cs.get("Env") if cs is not None else None
    if cs is not None and isinstance(env, list):
        own = owned_env(prefix)
        cs["Env"] = [e for e in env
                     if not ((isinstance(e, str) and e in own) or is_device_line(e))]
        _drop_empty(cs, "Env")
    mounts = cs.get("Mounts") if cs is not None else None
    if cs is not None and isinstance(mounts, list):
        mine = device_mount_spec(prefix)
        # ``same``, not ``!=``: with Python's 1 == True, "ReadOnly": 1 was placement's mount.
        cs["Mounts"] = [m for m in mounts if not same(m, mine)]
        _drop_empty(cs, "Mounts")
    return s


def _mask_device_lines(spec: dict[str, Any], _prefix: str) -> dict[str, Any]:
    """A service that is not swarmgpu's: only its device variables' lines may change."""
    s = copy.deepcopy(spec)
    cs = sub_object(s, "TaskTemplate", "ContainerSpec")
    env = cs.get("Env") if cs is not None else None
    if cs is not None and isinstance(env, list):
        cs["Env"] = [e for e in env if not is_device_line(e)]
        _drop_empty(cs, "Env")
    return s


def _device_lines(spec: Any) -> list[str]:
    env = (sub_object(spec, "TaskTemplate", "ContainerSpec") or {}).get("Env")
    return [e for e in env if is_device_line(e)] if isinstance(env, list) else []


def _check_device_lines(current: Mapping[str, Any], new: Any, allowed: frozenset[str]
                        ) -> None:
    """Of the device variables' lines, a write leaves only those the service had,
    ``allowed`` ones (swarmgpu's templates) and ``void`` ones: it never names GPUs."""
    had = set(_device_lines(current))
    for e in _device_lines(new):
        if e not in had and e not in allowed and e.split("=", 1)[1:] != ["void"]:
            raise PolicyError(f"this service update changes TaskTemplate.ContainerSpec.Env "
                              f"to {e[:80]!r}: of the variables the NVIDIA toolkit reads, "
                              "the daemon writes only its own templates and void")


def _check_device_labels(current: Mapping[str, Any], new: Any, prefix: str) -> None:
    """A ``<prefix>devices.*`` list a write sets names GPU and MIG UUIDs as facts carry
    them, the only lists the daemon writes: the templates put it in the device variable
    and the device mount's path, where the toolkit's CDI mode injects a qualified name
    (``vendor.com/class=x``) as it is, any CDI device of the node with its mounts and
    hooks, and every mode reads ``all`` as every GPU. A list the service had stays."""
    had = current.get("Labels")
    had = had if isinstance(had, dict) else {}
    labels = new.get("Labels") if isinstance(new, dict) else None
    for key, value in (labels.items() if isinstance(labels, dict) else ()):
        if not key.startswith(prefix + DEVICES) or (key in had and same(had[key], value)):
            continue
        if not (value == "" or (isinstance(value, str) and
                                all(is_device_uuid(u) for u in value.split(",")))):
            raise PolicyError(f"this service update sets Labels.{key[:80]} to {value!r:.80}: "
                              "a device list the daemon writes is GPU-/MIG- UUIDs, comma "
                              "separated")


def _mask_labels(spec: dict[str, Any], prefix: str) -> dict[str, Any]:
    s = copy.deepcopy(spec)
    _labels_out(s, "Labels", prefix)
    return s


def _check(what: str, mask: Callable[[dict[str, Any], str], dict[str, Any]],
           current: Mapping[str, Any], new: Any, prefix: str, allowed: str) -> None:
    if not isinstance(new, dict):
        raise PolicyError(f"a {what} update's body must be a JSON object (the spec)")
    where = first_difference(mask(dict(current), prefix), mask(new, prefix))
    if where is not None:
        raise PolicyError(f"this {what} update changes {where}; the daemon changes only "
                          f"{allowed}")


SERVICE_ALLOWED = ("service labels under the prefix, gate constraints and the hold, its "
                   "env lines, device variables voided, its device mount, ForceUpdate, "
                   "MaxReplicas, Replicas, discrete generic resources, "
                   "UpdateConfig.Parallelism")


def is_swarmgpus(spec: Mapping[str, Any], prefix: str) -> bool:
    """Whether the daemon may write this service at all: it carries a label under the
    prefix (a GPU request, or what the daemon wrote), a gate constraint or one of its
    env template lines. The daemon writes no other service (its planners read only
    services with a request; everything it writes there is under the prefix)."""
    labels = spec.get("Labels")
    if isinstance(labels, dict) and any(k.startswith(prefix) for k in labels):
        return True
    tt = sub_object(spec, "TaskTemplate")
    cons = (sub_object(tt, "Placement") or {}).get("Constraints")
    if isinstance(cons, list) and any(is_gate_constraint(c, prefix) for c in cons):
        return True
    env = (sub_object(tt, "ContainerSpec") or {}).get("Env")
    # Only the template lines (they name labels under the prefix) mark a service:
    # CUDA_DEVICE_ORDER=PCI_BUS_ID is swarmgpu's too, but GPU services set it
    # themselves, and the daemon adds it only beside a gate and a template.
    return isinstance(env, list) and bool((owned_env(prefix) - {ORDER_ENV})
                                          & {e for e in env if isinstance(e, str)})


def check_service_update(current: Mapping[str, Any], new: Any, prefix: str) -> None:
    if not is_swarmgpus(current, prefix):
        # placement.ungranted: void -- the one write to a service that is not swarmgpu's
        _check("service", _mask_device_lines, current, new, prefix,
               f"the device variables' lines (voided) of a service without a label under "
               f"{prefix!r}, gate constraint or swarmgpu env template: the daemon does not "
               "write it otherwise")
        _check_device_lines(current, new, frozenset())
        return
    _check("service", _mask_service, current, new, prefix, SERVICE_ALLOWED)
    _check_device_lines(current, new, owned_env(prefix))
    _check_device_labels(current, new, prefix)
    _check_replicas(current, new)


_UNSET = object()


def _replicas(spec: Any) -> Any:
    rep = sub_object(spec, "Mode", "Replicated")
    return _UNSET if rep is None else rep.get("Replicas", 1)  # the engine's default: 1


def _check_replicas(current: Mapping[str, Any], new: Any) -> None:
    """The daemon raises a service's replicas by one at most (a make-before-break
    move's surge; its end lowers them again): a write that asks for more, or for a
    count that is not a whole number, is refused (thousands of tasks in the raft store
    are a denial of service the labels alone could not cause). Across writes the
    proxy's surge book (``swarmgpu.swarm.surges``) keeps a raised count from being
    raised again."""
    cur, got = _replicas(current), _replicas(new)
    if got is _UNSET or same(got, cur):  # not replicated (the mask checks the mode)
        return
    if not isinstance(got, int) or isinstance(got, bool) or got < 0:
        raise PolicyError(f"this service update sets Mode.Replicated.Replicas to {got!r}: "
                          "expected a whole number")
    if not isinstance(cur, int) or isinstance(cur, bool) or got > cur + 1:
        raise PolicyError(f"this service update raises Mode.Replicated.Replicas from {cur!r} "
                          f"to {got}; the daemon adds one replica at most (a make-before-"
                          "break move's surge)")


def _check_node_labels(current: Mapping[str, Any], new: Any, prefix: str) -> None:
    """No node write sets a label no node carries (``keys.never_on_a_node``): the hold
    and the renewal constraint read its absence, so ``<p>state.renew=<n>`` on a node
    would stop a service's task there. Removed, or left as the node has it, it passes."""
    had = current.get("Labels")
    had = had if isinstance(had, dict) else {}
    labels = new.get("Labels") if isinstance(new, dict) else None
    for key, value in (labels.items() if isinstance(labels, dict) else ()):
        if never_on_a_node(key, prefix) and not (key in had and same(had[key], value)):
            raise PolicyError(
                f"this node update sets Labels.{key[:80]} to {value!r:.80}: no node carries "
                f"{prefix}{HOLD} or a label under {prefix}{STATE} (swarmgpu's hold and "
                "renewal constraints read their absence; its records live on services and "
                "the swarm object), and the daemon writes none on a node: leave it out of "
                f"the write; one a node has goes with docker node update --label-rm "
                f"{key[:80]} NODE")


def check_node_update(current: Mapping[str, Any], new: Any, prefix: str) -> None:
    _check("node", _mask_labels, current, new, prefix, f"labels under {prefix!r}")
    _check_node_labels(current, new, prefix)


def check_swarm_update(current: Mapping[str, Any], new: Any, prefix: str) -> None:
    _check("swarm", _mask_labels, current, new, prefix, f"labels under {prefix!r}")


_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\.")


def write_checks(prefix: str) -> WriteChecks:
    """The proxy's checks of the three writes, for a daemon with ``sync.prefix``."""
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(f"prefix {prefix!r}: the daemon's sync.prefix, ending in '.', "
                         "e.g. swarmgpu.")
    reserved = docker_namespace(prefix)
    if reserved:
        # As the daemon's config refuses it: every stack service carries
        # com.docker.stack.namespace, so each would be the daemon's to write, that too.
        raise ValueError(f"prefix {prefix!r} overlaps {reserved}*, reserved by Docker "
                         "(com.docker.*, io.docker.*, org.dockerproject.*): give the "
                         "daemon's sync.prefix, e.g. swarmgpu.")
    return {"node-update": lambda cur, new: check_node_update(cur, new, prefix),
            "service-update": lambda cur, new: check_service_update(cur, new, prefix),
            "swarm-update": lambda cur, new: check_swarm_update(cur, new, prefix)}
