"""A service's spec changes that would restart a running task: decided, or held back.

Swarm replaces a running task whenever its task spec changes (``swarm.taskspec``), and
for a model server every replacement is a model load. So a plan's task spec change is
written only when it is a decision:

- nothing of the service runs (its next task carries the change: placement), or its
  tasks run only on nodes whose labels the write's first phase changes so that they no
  longer meet its constraints (Swarm's constraint enforcer stops those tasks on that
  node update, whatever the spec says: the write restarts nothing);
- it places tasks made before their device map, or re-places a running one
  (``devicemap``: the ForceUpdate that gives every task its map, with its reason);
- its task runs without a device list (no device env: it may see every GPU of its
  node), and the gate and env it is given now are its placement;
- a change of placement alone that the nodes its tasks run on satisfy (no restart).

Anything else -- the env lines a newer swarmgpu tells a share's container, the per-slot
template, the device mount (``placement.grants: mounts``), a generic reservation, a gate
constraint its node does not have yet -- is held
back: the write keeps only what restarts nothing (labels, ``MaxReplicas``, update
parallelism; ``MaxReplicas`` too is held where a task runs on a node that does not meet
the service's constraints: Swarm replaces it for any change of placement), and ``held``
says what would change. The held changes go with the
service's next decided write, or with the operator's ``swarmgpu apply --service``
(``release``). Pure: the plan, the service and the nodes its tasks run on, in.

A write that replaces no task (labels, update parallelism: ``strands_waiting``) waits
while a task of the service waits for a node: Swarm's scheduler never tries again a task
of an older service revision (moby/swarmkit 807f25e, ``noSuitableNode``) and the
orchestrator replaces only a task whose own spec changed, so such a write would leave
that task pending for good, its gate open or not (docs/deploy.md). A task reads the
labels it was created with: none of these writes is for a waiting task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from swarmgpu.manager.placement.cycle import Cycle
from swarmgpu.manager.placement.envs import device_env
from swarmgpu.manager.placement.jobs import JOB_MODES
from swarmgpu.manager.placement.records import SpecWrites
from swarmgpu.manager.placement.specwrite import service_compute
from swarmgpu.manager.placement.tasks import Waiting
from swarmgpu.swarm.client import SwarmNode, SwarmService
from swarmgpu.swarm.constraints import node_satisfies, parse_all
from swarmgpu.swarm.taskspec import restarts_on, task_changes

NOTHING_RUNS = ("none", "nothing of it runs: its next task carries the change")
STOPPED_BY_LABELS = ("none", "its tasks run only on nodes whose labels this write "
                             "changes so that they no longer meet its constraints (Swarm "
                             "stops them as the labels change): its next task carries "
                             "the change")
PLACEMENT_ONLY = ("none", "a change of placement alone, which the nodes its tasks run "
                          "on satisfy: no task restarts")
UNGATED = ("place", "its task runs without a device list (no device env: it may see "
                    "every GPU of its node): placed now, its task restarts once with its "
                    "devices")
HOLD_HINT = "held back: it would restart its running task"


@dataclass(frozen=True, slots=True)
class Restarts:
    """The restarts step's answer: the decision the plan's task spec change is written
    under, what of the writes goes now (``writes``), and what is held back (``held``,
    each as it would change the spec), with the note that says so."""

    decision: tuple[str, str] | None
    writes: SpecWrites
    held: tuple[str, ...] = ()
    note: str | None = None


def settle_restarts(writes: SpecWrites, decision: tuple[str, str] | None, s: SwarmService,
                    running_on: Mapping[str, int], removed: Mapping[str, Sequence[str]],
                    cyc: Cycle) -> Restarts | None:
    """Give the plan's task spec changes their decision, or hold them back (see the
    module); None: nothing to decide. ``removed``: node id -> this plan's own removals
    (the cycle's plan holds the others'); ``cyc.release``: services whose held changes
    the operator asked for now."""
    if not writes:
        return None
    new = service_compute(writes)(s.spec)
    if new is None:
        return None
    changes = task_changes(s.spec, new)
    if not changes:
        return None
    nodes = _running_nodes(s, running_on, removed, cyc)
    if s.name in cyc.release:
        return Restarts(("operator", f"the operator's word (swarmgpu apply --service "
                                     f"{s.name})"), writes)
    if not nodes:
        gone = NOTHING_RUNS if not any(running_on.values()) else STOPPED_BY_LABELS
        return Restarts(decision or gone, writes)
    if decision is not None:
        return Restarts(decision, writes)  # decided by placement (devicemap)
    if device_env(cyc.prefix, s.env) is None:
        return Restarts(UNGATED, writes)
    if not restarts_on(s.spec, new, nodes):
        return Restarts(PLACEMENT_ONLY, writes)
    return _hold(writes, s, nodes, changes)


def strands_waiting(writes: SpecWrites, s: SwarmService, waiting: Waiting) -> bool:
    """``writes`` change the spec but no task's (no ForceUpdate, the task template as it
    is) while a task of the service waits without a node: held back until none does (see
    the module). A job is left out: any write of its spec runs it again, new tasks."""
    if not writes or writes.force_update or s.mode in JOB_MODES:
        return False
    if waiting.count <= waiting.placed:  # every waiting task is on a node already
        return False
    new = service_compute(writes)(s.spec)
    return new is not None and not task_changes(s.spec, new)


def _running_nodes(s: SwarmService, running_on: Mapping[str, int],
                   removed: Mapping[str, Sequence[str]], cyc: Cycle) -> list[SwarmNode]:
    """The nodes a task of the service runs on that the spec write could restart it on,
    with their labels as the write finds them: after phase 1 of the write (released
    gates and ledger entries), before phase 3 (gates that open). A node whose labels
    phase 1 changes so that it no longer meets the service's constraints is left out:
    Swarm's constraint enforcer stops its task on that node update (by the service's
    constraints, not the task's; on an active node: a drained one runs none, a paused
    one is not enforced), so the write restarts nothing there (a constraint that does
    not parse: kept, as a restart)."""
    out: list[SwarmNode] = []
    before = cyc.plan.node_remove
    cons, bad = parse_all(_constraints(s.spec))
    for nid, n in running_on.items():
        node = cyc.by_id.get(nid)
        if not n or node is None:
            continue
        gone = {*before.get(nid, ()), *removed.get(nid, ())} & node.labels.keys()
        if not gone:
            out.append(node)
            continue
        node = replace(node, labels={k: v for k, v in node.labels.items() if k not in gone})
        if bad or node.availability not in ("active", "drain") or node_satisfies(cons, node):
            out.append(node)
    return out


def _constraints(spec: Mapping[str, Any]) -> list[str]:
    tt = spec.get("TaskTemplate") or {}
    return list((tt.get("Placement") or {}).get("Constraints") or [])


def _hold(writes: SpecWrites, s: SwarmService, nodes: list[SwarmNode],
          changes: list[str]) -> Restarts:
    """Keep of ``writes`` what restarts nothing; hold back the rest."""
    keep = replace(writes, add_env=(), replace_env=(), remove_env=(), add_mounts=(),
                   force_update=False, set_generic=None)
    new = service_compute(keep)(s.spec)
    if new is not None and restarts_on(s.spec, new, nodes):
        keep = replace(keep, add_constraints=(), remove_constraints=())
        new = service_compute(keep)(s.spec)
    if new is not None and restarts_on(s.spec, new, nodes):
        # A task runs on a node that does not meet the service's constraints as they
        # are (nothing of this write removes them): Swarm replaces it for any change of
        # placement, MaxReplicas too, so that waits as well (named in ``held``).
        keep = replace(keep, set_max_replicas=None)
        new = service_compute(keep)(s.spec)
    kept = task_changes(s.spec, new) if new is not None else []
    held = tuple(c for c in changes if c not in kept)
    return Restarts(PLACEMENT_ONLY if kept else None, keep, held,
                    f"{HOLD_HINT}: {'; '.join(held)} -- applied with its next placement, "
                    f"or now with `swarmgpu apply --service {s.name}`")
