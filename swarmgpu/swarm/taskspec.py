"""Which service spec changes make Swarm replace a running task.

Swarm's updater replaces a task when the service's task spec no longer equals the one
the task was created from (swarmkit ``orchestrator.IsTaskDirty``), or its endpoint spec
(published ports, their mode) the one the task was made with, with one exception: a
change of ``Placement`` alone leaves a task where it is when the node it runs on
satisfies the new constraints. Labels of the service, its mode (replica count) and its
update config are not part of either: changing them replaces nothing.

``task_changes`` names what a write changes in the task spec (one phrase each, for
logs, ``plan`` and ``audit``); ``restarts_on`` says whether it would replace a task
running on a given node. Pure: two specs (and a node) in, an answer out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from swarmgpu.swarm.constraints import NodeLike, node_satisfies, parse_all
from swarmgpu.swarm.specread import spec_count, spec_list, spec_object


def _tt(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    return spec.get("TaskTemplate") or {}


def _same_task(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """The task template and the endpoint spec both unchanged (an absent endpoint spec
    is not ``{}``: Swarm gets none for the one, an empty one for the other)."""
    return _tt(old) == _tt(new) and old.get("EndpointSpec") == new.get("EndpointSpec")


def _constraints(tt: Mapping[str, Any]) -> list[str]:
    return list((tt.get("Placement") or {}).get("Constraints") or [])


def task_rules(spec: Mapping[str, Any]) -> tuple[str, ...] | None:
    """A task spec's ``Placement.Constraints`` (() for none); None where it is anything
    but a list of texts (not read: a text would be read as its letters)."""
    # Absent or null is none; a present value of another kind is not read, a falsy one
    # ("", {}, 0) too: read as none, it read no gate (``devicemap._old_task_stays``).
    pl = spec.get("Placement")
    if pl is None:
        return ()
    c = pl.get("Constraints") if isinstance(pl, Mapping) else None
    if c is None:
        return () if isinstance(pl, Mapping) else None
    return tuple(c) if isinstance(c, list) and all(isinstance(x, str) for x in c) else None


def _diff_keys(a: Mapping[str, Any], b: Mapping[str, Any], skip: tuple[str, ...]) -> list[str]:
    return sorted(k for k in set(a) | set(b) if k not in skip and a.get(k) != b.get(k))


def task_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What ``new`` changes in ``old``'s task spec, one phrase per change ([]: no task
    of the service is replaced for this write)."""
    if _same_task(old, new):
        return []
    if _tt(old) == _tt(new):
        return ["change EndpointSpec"]
    # Each part read as Docker sends it, else ``UnreadSpec`` naming it: read unguarded,
    # a string there raised an AttributeError out of whichever write's step had it.
    a, b = (spec_object(s.get("TaskTemplate"), "TaskTemplate") for s in (old, new))
    out: list[str] = []
    csa, csb = (spec_object(t.get("ContainerSpec"), "TaskTemplate.ContainerSpec")
                for t in (a, b))
    ea, eb = (spec_list(cs.get("Env"), "TaskTemplate.ContainerSpec.Env") for cs in (csa, csb))
    out += [f"add env {e}" for e in eb if e not in ea]
    out += [f"remove env {e}" for e in ea if e not in eb]
    pa, pb = (spec_object(t.get("Placement"), "TaskTemplate.Placement") for t in (a, b))
    ca, cb = (spec_list(pl.get("Constraints"), "TaskTemplate.Placement.Constraints")
              for pl in (pa, pb))
    out += [f"add constraint {c}" for c in cb if c not in ca]
    out += [f"remove constraint {c}" for c in ca if c not in cb]
    fa, fb = (spec_count(t.get("ForceUpdate"), "TaskTemplate.ForceUpdate") for t in (a, b))
    if fa != fb:
        out.append(f"ForceUpdate {fa} -> {fb} (every task is replaced)")
    out += [f"change {k}" for k in _diff_keys(a, b, ("ForceUpdate", "Placement",
                                                     "ContainerSpec"))]
    out += [f"change ContainerSpec.{k}" for k in _diff_keys(csa, csb, ("Env",))]
    out += [f"change Placement.{k}" for k in _diff_keys(pa, pb, ("Constraints",))]
    out += ["change EndpointSpec"] if old.get("EndpointSpec") != new.get("EndpointSpec") else []
    return out or ["change the order of its env or constraints"]


def placement_only(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """The task specs differ in ``Placement`` alone (swarmkit
    ``IsTaskDirtyPlacementConstraintsOnly``)."""
    a, b = dict(_tt(old)), dict(_tt(new))
    if a.get("Placement") == b.get("Placement") or \
            old.get("EndpointSpec") != new.get("EndpointSpec"):
        return False
    a.pop("Placement", None)
    b.pop("Placement", None)
    return a == b


def restarts_on(old: Mapping[str, Any], new: Mapping[str, Any],
                nodes: Iterable[NodeLike]) -> bool:
    """Whether writing ``new`` over ``old`` replaces a task that runs (created from
    ``old``) on one of ``nodes``: any task spec change does, but a change of placement
    alone does not where the node satisfies the new constraints (a constraint swarmgpu
    cannot parse counts as unsatisfied, as swarmkit reads a constraint it cannot parse
    as matching nothing)."""
    if _same_task(old, new):
        return False
    if not placement_only(old, new):
        return True
    cons, bad = parse_all(_constraints(_tt(new)))
    if bad:
        return True
    return not all(node_satisfies(cons, n) for n in nodes)


def describe(changes: Sequence[str]) -> str:
    return "; ".join(changes) if changes else "nothing in its task spec"
