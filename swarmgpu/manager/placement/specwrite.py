"""The read-modify-write of a service spec that applies one service's plan's writes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from swarmgpu.manager.placement.envs import DEVICE_VAR, VOID_LINE
from swarmgpu.manager.placement.records import SpecWrites

SpecCompute = Callable[[Mapping[str, Any]], Mapping[str, Any] | None]


def service_compute(sp: SpecWrites) -> SpecCompute:
    """The read-modify-write of one service's spec that applies a plan's ``writes``:
    None when the spec already says it all (no write). The spec given is never changed:
    each mapping and list on a path ``sp`` changes is copied; the rest is shared with it
    (a deep copy of every spec took a fifth of ``simulate``'s time outside placement)."""

    def compute(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
        new = dict(spec)
        labels = dict(new.get("Labels") or {})
        for k in sp.service_labels_remove:
            labels.pop(k, None)
        labels.update(sp.service_labels_set)
        new["Labels"] = labels
        tt = new["TaskTemplate"] = dict(new.get("TaskTemplate") or {})
        placement = tt["Placement"] = dict(tt.get("Placement") or {})
        gone = {c.replace(" ", "") for c in sp.remove_constraints}
        cons = [c for c in placement.get("Constraints") or [] if c.replace(" ", "") not in gone]
        for c in sp.add_constraints:
            if c not in cons:
                cons.append(c)
        if cons or placement.get("Constraints"):  # (the last one removed: none left)
            placement["Constraints"] = cons
        if sp.set_max_replicas is not None:
            placement["MaxReplicas"] = sp.set_max_replicas
        if sp.force_update:
            tt["ForceUpdate"] = int(tt.get("ForceUpdate") or 0) + 1
        if sp.set_generic is not None:
            kind, count = sp.set_generic
            resources = tt["Resources"] = dict(tt.get("Resources") or {})
            reservations = resources["Reservations"] = dict(resources.get("Reservations") or {})
            others = [g for g in reservations.get("GenericResources") or []
                      if (g.get("DiscreteResourceSpec") or {}).get("Kind") != kind]
            # a count of 0 (gpus: "0") is no reservation of the kind: Swarm would still
            # want the kind advertised on the node
            mine = [{"DiscreteResourceSpec": {"Kind": kind, "Value": count}}] if count else []
            if others or mine:
                reservations["GenericResources"] = [*others, *mine]
            else:
                reservations.pop("GenericResources", None)
        if sp.set_update_parallelism is not None:
            update = new["UpdateConfig"] = dict(new.get("UpdateConfig") or {})
            update["Parallelism"] = sp.set_update_parallelism
        cs = tt["ContainerSpec"] = dict(tt.get("ContainerSpec") or {})
        env = list(cs.get("Env") or [])
        for old, repl in sp.replace_env:
            # Only swarmgpu's own line, exactly as written, is replaced.
            env = [repl if x == old else x for x in env]
        if sp.remove_env:  # (as replaced: only its own lines, exactly as written)
            env = [x for x in env if x not in sp.remove_env]
        for e in sp.add_env:
            name = e.partition("=")[0]
            if name == DEVICE_VAR and VOID_LINE in env:
                # void (no GPU; placement.ungranted: void writes it) is what the template
                # gives outside a grant: the template in its place widens nothing.
                first = env.index(VOID_LINE)
                env = [e if i == first else x for i, x in enumerate(env)
                       if i == first or x != VOID_LINE]
            # A user's own value for the same variable is kept: never overwrite env. A
            # bare NAME counts (docker: unset the image's); a line after it would win.
            elif not any(x.partition("=")[0] == name for x in env):
                env.append(e)
                for line, key in sp.record_env:
                    if line == e:  # appended by this write: recorded as swarmgpu's
                        labels[key] = "true"
        if env or cs.get("Env"):  # (every line of it removed: none left)
            cs["Env"] = env
        if sp.add_mounts:  # placement.grants: mounts; a mount at the same target is kept
            mounts = list(cs.get("Mounts") or [])
            have = {m.get("Target") for m in mounts if isinstance(m, Mapping)}
            mounts += [m for m in sp.add_mounts if m["Target"] not in have]
            cs["Mounts"] = mounts
        _no_empty_parts(spec, new)
        return None if new == spec else new

    return compute


def _no_empty_parts(spec: Mapping[str, Any], new: dict[str, Any]) -> None:
    """The parts ``compute`` made that the spec had not and that stay empty, taken out
    again: an empty ``ContainerSpec`` where there was none is a task spec change (Swarm
    replaces tasks for it, and placement held it back naming nothing)."""
    tt = new["TaskTemplate"]
    had = spec.get("TaskTemplate") or {}
    for key in ("Placement", "ContainerSpec"):
        if key not in had and not tt[key]:
            del tt[key]
    if "TaskTemplate" not in spec and not tt:
        del new["TaskTemplate"]
    if "Labels" not in spec and not new["Labels"]:
        del new["Labels"]
