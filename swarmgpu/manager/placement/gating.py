"""The gate constraint and env lines a GPU service needs: present, adopted, or reported."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from swarmgpu.manager.placement.cycle import Cycle
from swarmgpu.manager.placement.envs import (
    DEVICE_VAR,
    ORDER_ENV,
    device_env,
    device_mount,
    device_mount_spec,
    env_template,
    mount_target,
    own_device_line,
)
from swarmgpu.manager.placement.keys import ORDER_STATE, gate_constraint, gate_of, is_hold
from swarmgpu.manager.placement.records import SpecWrites
from swarmgpu.manager.services.requests import GpuRequest
from swarmgpu.manager.services.sharing import missing_env
from swarmgpu.swarm.client import SwarmService

HOLD_ADOPTED = "adopted its hold"  # a stack deployed as written, on its documented path


@dataclass(frozen=True, slots=True)
class Gating:
    """The gate step's answer: what the service's spec needs added or replaced (its
    gate, the env template, the device mount, a share's env), what to say, and, when it
    is not gated and not adopted, why it waits."""

    add_constraints: tuple[str, ...] = ()
    remove_constraints: tuple[str, ...] = ()  # gates naming others, then the hold
    add_env: tuple[str, ...] = ()
    add_mounts: tuple[Mapping[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()
    waits: str | None = None  # the service waits (pending): why
    record_env: tuple[tuple[str, str], ...] = ()  # SpecWrites.record_env

    def writes(self) -> SpecWrites:
        return SpecWrites(add_constraints=self.add_constraints,
                          remove_constraints=self.remove_constraints,
                          add_env=self.add_env, add_mounts=self.add_mounts,
                          record_env=self.record_env)


GATED = Gating()  # gated as it is: nothing to write or say


def gate_service(s: SwarmService, r: GpuRequest | None, cyc: Cycle) -> Gating:
    """The gate constraint and env template: present, added (adopted), or reported
    (``r`` None: an invalid request, whose share no one knows: no share env).
    A gate naming another service (a stack rendered or deployed under another name) is
    replaced: with it the tasks would wait forever. The hold of a stack deployed as
    written (``<p>hold``) is replaced by the gate, in the same write as the device map,
    env and template: the task made from the file never runs."""
    prefix = cyc.prefix
    gate = gate_constraint(prefix, s.name)
    foreign: list[str] = []
    holds: list[str] = []
    has_gate = False
    for c in s.constraints:  # any other constraint on a gate label is the owner's: kept
        gated = gate_of(c, prefix)
        if gated == s.name:
            has_gate = True
        elif gated is not None:
            foreign.append(c)
        elif is_hold(c, prefix):
            holds.append(c)
    tmpl = env_template(prefix)
    has_env = device_env(prefix, s.env) is not None
    # placement.grants: mounts -- the same lists as a /dev/null mount the toolkit reads
    # (where it ignores the variables of unprivileged containers): needed beside the env.
    mounts = ((s.spec.get("TaskTemplate") or {}).get("ContainerSpec") or {}).get("Mounts")
    has_mount = cyc.grants != "mounts" or any(
        device_mount(prefix, m) for m in mounts or [] if isinstance(m, dict))
    share_env, warnings = _share_env(s, r, cyc) if r is not None else ([], [])
    if not foreign and not share_env and not warnings and has_gate and has_env \
            and has_mount and not holds:
        return GATED  # (most services, every cycle)
    add_env, add_constraints = list(share_env), []
    if foreign:
        warnings.append(
            f"its gate constraint {', '.join(foreign)} names another service (a stack "
            f"rendered or deployed under another name): swarmgpu replaces it with {gate}; "
            f"fix the stack file (render with -n matching the deploy name)")
        if not has_gate:
            add_constraints.append(gate)
        has_gate = True
    if has_gate and has_env and has_mount and not holds:
        return Gating(tuple(add_constraints), tuple(foreign), tuple(add_env),
                      warnings=tuple(warnings))
    own = own_device_line(s.env, prefix)
    if not has_env and own is not None:
        # The owner's line is never overwritten, and the template cannot go beside it
        # (docker reads the later line): gated with it, its tasks would see the GPUs it
        # names (`all`: every GPU of the node) instead of the ones placement holds.
        return Gating(tuple(add_constraints), tuple(foreign), warnings=tuple(warnings), waits=(
            f"its env sets {own} itself: swarmgpu gives a service its GPUs through "
            f"{DEVICE_VAR} (env {tmpl}) and never overwrites a value of yours; remove "
            f"yours (docker service update --env-rm {DEVICE_VAR} {s.name}, or from the "
            "stack file) and swarmgpu adds its own"))
    missing = [x for x, ok in ((f"constraint {gate}", has_gate),
                               (f"env {tmpl}", has_env),
                               (f"mount /dev/null -> {mount_target(prefix)}", has_mount))
               if not ok]
    if not cyc.adopt_ungated:
        return Gating(tuple(add_constraints), tuple(foreign), tuple(add_env),
                      warnings=tuple(warnings), waits=(
                          "held: placement.adopt_ungated is off, so its hold is not "
                          "replaced; deploy through `swarmgpu render`" if holds else
                          "not gated: add " + " and ".join(missing) +
                          " to the service (or deploy through `swarmgpu render`)"))
    if holds:  # the documented path: nothing to advise
        warnings.append(f"{HOLD_ADOPTED}: swarmgpu replaced it with constraint {gate}"
                        + ("" if has_env else f" and added env {tmpl}"))
    else:
        warnings.append("adopted: swarmgpu added " + " and ".join(missing) +
                        "; put them in the stack file so a re-deploy keeps them, or "
                        f"use the hold (constraint {prefix}hold) instead")
    if not has_gate:
        add_constraints.append(gate)
    if not has_env:
        add_env.append(tmpl)
    record = _order_env(s.env, prefix)
    add_env += [line for line, _ in record]
    return Gating(tuple(add_constraints), (*foreign, *holds), tuple(add_env),
                  () if has_mount else (device_mount_spec(prefix),), tuple(warnings),
                  record_env=record)


def _order_env(env: Sequence[str], prefix: str) -> tuple[tuple[str, str], ...]:
    """The CUDA_DEVICE_ORDER line adoption adds, with the label that records it as
    swarmgpu's (so a release takes back only its own: ``ungate``); none where the
    owner's is there, a value or a bare name (unset): the GPUs are pinned by UUID, so
    the order only numbers them inside the container."""
    return () if _has_var(env, ORDER_ENV) else ((ORDER_ENV, prefix + ORDER_STATE),)


def stale_order_record(s: SwarmService, prefix: str) -> str | None:
    """The record that CUDA_DEVICE_ORDER is swarmgpu's (``<p>state.order-env``), when the
    spec no longer has the line it records: the owner took it out. Read against the spec
    each cycle and dropped (this key is returned for removal), so a line the owner
    writes again later is theirs, and a release (``ungate``) leaves it."""
    key = prefix + ORDER_STATE
    return key if key in s.labels and ORDER_ENV not in s.env else None


def _has_var(env: Sequence[str], line: str) -> bool:
    """Whether ``env`` has a line for ``line``'s variable: ``NAME=...`` or a bare ``NAME``."""
    name = line.partition("=")[0]
    return any(x.partition("=")[0] == name for x in env)


def _share_env(s: SwarmService, r: GpuRequest, cyc: Cycle) -> tuple[list[str], list[str]]:
    """A shared GPU's containers are told their share (``swarmgpu.manager.services.sharing``):
    the env lines to add, and what to say."""
    share_env = missing_env(cyc.prefix, s.env) if r.is_fraction else []
    if share_env and cyc.adopt_ungated:
        return share_env, ["adopted: swarmgpu added the env lines that tell each container "
                           "its share; put them in the stack file so a re-deploy keeps them"]
    if share_env:
        return [], ["its containers are not told their share: add env "
                    + " and ".join(share_env)]
    return [], []
