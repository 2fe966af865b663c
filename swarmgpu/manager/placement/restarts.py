"""A service's spec changes that would restart a running task: decided, or held back.

Swarm replaces a running task whenever its task spec changes (``swarm.taskspec``), and
for a model server every replacement is a model load. So a plan's task spec change is
written only when it is a decision:

- nothing of the service runs (its next task carries the change: placement);
- it places tasks made before their device map, or re-places a running one
  (``devicemap``: the ForceUpdate that gives every task its map, with its reason);
- its task runs without a device list (no device env: it may see every GPU of its
  node), and the gate and env it is given now are its placement;
- a change of placement alone that the nodes its tasks run on satisfy (no restart).

Anything else -- the env lines a newer swarmgpu tells a share's container, the per-slot
template, the device mount (``placement.grants: mounts``), a generic reservation, a gate
constraint its node does not have yet -- is held
back: the write keeps only what restarts nothing (labels, ``MaxReplicas``, update
parallelism), and ``sp.held`` says what would change. The held changes go with the
service's next decided write, or with the operator's ``swarmgpu apply --service``
(``release``). Pure: the plan, the service and the nodes its tasks run on, in.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from swarmgpu.manager.placement.cycle import Cycle
from swarmgpu.manager.placement.envs import device_env
from swarmgpu.manager.placement.records import ServicePlan
from swarmgpu.manager.placement.specwrite import service_compute
from swarmgpu.swarm.client import SwarmNode, SwarmService
from swarmgpu.swarm.taskspec import restarts_on, task_changes

NOTHING_RUNS = ("none", "nothing of it runs: its next task carries the change")
PLACEMENT_ONLY = ("none", "a change of placement alone, which the nodes its tasks run "
                          "on satisfy: no task restarts")
UNGATED = ("place", "its task runs without a device list (no device env: it may see "
                    "every GPU of its node): placed now, its task restarts once with its "
                    "devices")
HOLD_HINT = "held back: it would restart its running task"


def settle_restarts(sp: ServicePlan, s: SwarmService, running_on: Mapping[str, int],
                    cyc: Cycle, release: Collection[str] = ()) -> None:
    """Give ``sp``'s task spec changes their decision, or hold them back (see the
    module). ``release``: services whose held changes the operator asked for now."""
    if not sp.needs_service_write:
        return
    new = service_compute(sp)(s.spec)
    if new is None:
        return
    changes = task_changes(s.spec, new)
    if not changes:
        return
    nodes = _running_nodes(running_on, cyc)
    if s.name in release:
        sp.decision = ("operator", f"the operator's word (swarmgpu apply --service {s.name})")
    elif not nodes:
        sp.decision = sp.decision or NOTHING_RUNS
    elif sp.decision is not None:
        pass  # decided by placement (devicemap)
    elif device_env(cyc.prefix, s.env) is None:
        sp.decision = UNGATED
    elif not restarts_on(s.spec, new, nodes):
        sp.decision = PLACEMENT_ONLY
    else:
        _hold(sp, s, nodes, changes)


def _running_nodes(running_on: Mapping[str, int], cyc: Cycle) -> list[SwarmNode]:
    """The nodes a task of the service runs on, with their labels as the spec write
    finds them: after phase 1 of the write (released gates and ledger entries), before
    phase 3 (gates that open)."""
    out: list[SwarmNode] = []
    for nid, n in running_on.items():
        node = cyc.by_id.get(nid)
        if not n or node is None:
            continue
        gone = cyc.plan.node_remove.get(nid)
        out.append(replace(node, labels={k: v for k, v in node.labels.items()
                                         if k not in gone}) if gone else node)
    return out


def _hold(sp: ServicePlan, s: SwarmService, nodes: list[SwarmNode],
          changes: list[str]) -> None:
    """Keep in ``sp`` what restarts nothing; list the rest in ``sp.held``."""
    sp.add_env, sp.replace_env, sp.add_mounts = [], [], []
    sp.force_update = False
    sp.set_generic = None
    new = service_compute(sp)(s.spec)
    if new is not None and restarts_on(s.spec, new, nodes):
        sp.add_constraints, sp.remove_constraints = [], []
        new = service_compute(sp)(s.spec)
    kept = task_changes(s.spec, new) if new is not None else []
    sp.held = [c for c in changes if c not in kept]
    if kept:
        sp.decision = PLACEMENT_ONLY
    # What adoption said it added was not added: the held note says what waits.
    sp.warnings = [w for w in sp.warnings if not w.startswith("adopted")]
    sp.warnings.append(f"{HOLD_HINT}: {'; '.join(sp.held)} -- applied with its next "
                       f"placement, or now with `swarmgpu apply --service {s.name}`")
