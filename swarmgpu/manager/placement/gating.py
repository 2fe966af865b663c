"""The gate constraint and env lines a GPU service needs: present, adopted, or reported."""

from __future__ import annotations

from swarmgpu.manager.placement.cycle import Cycle
from swarmgpu.manager.placement.envs import (
    ORDER_ENV,
    device_env,
    device_mount,
    device_mount_spec,
    env_template,
    mount_target,
)
from swarmgpu.manager.placement.keys import GATE, gate_constraint, is_hold
from swarmgpu.manager.placement.records import ServicePlan, State, Status
from swarmgpu.manager.services.sharing import missing_env
from swarmgpu.swarm.client import SwarmService

HOLD_ADOPTED = "adopted its hold"  # a stack deployed as written, on its documented path


def gate_service(sp: ServicePlan, s: SwarmService, cyc: Cycle) -> bool:
    """The gate constraint and env template: present, added (adopted), or reported.
    A gate naming another service (a stack rendered or deployed under another name) is
    replaced: with it the tasks would wait forever. The hold of a stack deployed as
    written (``<p>hold``) is replaced by the gate, in the same write as the device map,
    env and template: the task made from the file never runs. False when the service
    waits."""
    prefix = cyc.prefix
    gate = gate_constraint(prefix, s.name)
    own = f"node.labels.{prefix}{GATE}".lower()
    foreign: list[str] = []
    holds: list[str] = []
    has_gate = False
    for c in s.constraints:
        bare = c.replace(" ", "")
        if bare == gate:
            has_gate = True
        elif bare.lower().startswith(own):
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
    _share_env(sp, s, cyc)
    if foreign:
        sp.warnings.append(
            f"its gate constraint {', '.join(foreign)} names another service (a stack "
            f"rendered or deployed under another name): swarmgpu replaces it with {gate}; "
            f"fix the stack file (render with -n matching the deploy name)")
        sp.remove_constraints.extend(foreign)
        if not has_gate:
            sp.add_constraints.append(gate)
        has_gate = True
    if has_gate and has_env and has_mount and not holds:
        return True
    missing = [x for x, ok in ((f"constraint {gate}", has_gate),
                               (f"env {tmpl}", has_env),
                               (f"mount /dev/null -> {mount_target(prefix)}", has_mount))
               if not ok]
    if not cyc.adopt_ungated:
        sp.status, sp.state = Status.PENDING, State.PENDING
        sp.reason = ("held: placement.adopt_ungated is off, so its hold is not replaced; "
                     "deploy through `swarmgpu render`" if holds else
                     "not gated: add " + " and ".join(missing) +
                     " to the service (or deploy through `swarmgpu render`)")
        return False
    if holds:  # the documented path: nothing to advise
        sp.remove_constraints.extend(holds)
        sp.warnings.append(f"{HOLD_ADOPTED}: swarmgpu replaced it with constraint {gate}"
                           + ("" if has_env else f" and added env {tmpl}"))
    else:
        sp.warnings.append("adopted: swarmgpu added " + " and ".join(missing) +
                           "; put them in the stack file so a re-deploy keeps them, or "
                           f"use the hold (constraint {prefix}hold) instead")
    if not has_gate:
        sp.add_constraints.append(gate)
    if not has_env:
        sp.add_env.append(tmpl)
    if not has_mount:
        sp.add_mounts.append(device_mount_spec(prefix))
    if ORDER_ENV not in s.env:
        sp.add_env.append(ORDER_ENV)
    return True


def _share_env(sp: ServicePlan, s: SwarmService, cyc: Cycle) -> None:
    """A shared GPU's containers are told their share (``swarmgpu.manager.services.sharing``)."""
    r = sp.request
    share_env = missing_env(cyc.prefix, s.env) if r is not None and r.is_fraction else []
    if share_env and cyc.adopt_ungated:
        sp.add_env.extend(share_env)
        sp.warnings.append("adopted: swarmgpu added the env lines that tell each container "
                           "its share; put them in the stack file so a re-deploy keeps them")
    elif share_env:
        sp.warnings.append("its containers are not told their share: add env "
                           + " and ".join(share_env))
