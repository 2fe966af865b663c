"""A health repin that ends at its hold limit leaves its gate closed on purpose
(``rebalance/repin.py`` ``_health_over``): the old task, made with the failed GPU's
devices, still runs there because Swarm has not let it go, and the closed gate is what has
Swarm's enforcer stop it. Placement must not reopen that gate while the old task is still
wanted on the node: it opens once Swarm has let it go, as the repin's own step 3 does.
Pure: ``plan_placement`` on the state the repin leaves."""

from __future__ import annotations

from support.forged import sw_node, sw_svc
from support.gpu_nodes import RTX4090
from support.health import mark

from swarmgpu.manager.placement import Holding, assign_key, devices_key, gate_key, plan_placement
from swarmgpu.swarm.client import SwarmTask

P = "swarmgpu."
F4090 = RTX4090.facts()
U = [g.uuid for g in F4090.gpus]


def _gate_write(old_desired: str, failed: bool = True, old_state: str = "") -> str | None:
    """g (a whole GPU) moved by a health repin from gpu-node-2 GPU 1 (failed) to GPU 0:
    the ledger names GPU 0, its device map too, the gate closed; its old task on the node
    has desired state ``old_desired``. The gate value placement writes for g there."""
    n = sw_node("n-4090", "gpu-node-2",
                {assign_key(P, "g"): Holding("g", "n-4090", (U[0],), (1000,)).label_value()})
    g = sw_svc("g", {f"{P}gpus": "1", devices_key(P, "n-4090"): U[0]}, mode={"Global": {}})
    state = old_state or ("running" if old_desired == "running" else "shutdown")
    old = SwarmTask("t-g-old", g.id, "n-4090", None, state, old_desired, ())
    facts = {"n-4090": mark(F4090, failed=[1] if failed else [])}
    plan = plan_placement([n], [g], [old], facts)
    return plan.node_set.get("n-4090", {}).get(gate_key(P, "g"))


def test_placement_keeps_a_health_repins_gate_closed_while_its_old_task_is_wanted() -> None:
    assert _gate_write("running") is None
    assert _gate_write("shutdown") == "true"  # Swarm let the old task go: it opens


def test_a_running_task_with_no_failed_gpu_on_its_node_keeps_its_gate_opened() -> None:
    """No failed GPU on the node: placement opens the gate where the task runs, as
    before (an adopted or relabelled node's running task is not stopped)."""
    assert _gate_write("running", failed=False) == "true"


def test_an_old_task_assigned_there_but_not_running_keeps_the_gate_closed_too() -> None:
    """Swarm put the old task on the node before the gate closed and it has not started
    (assigned to ready): of the map's own generation, it is no newer task the gate is
    for, and an opened gate would let it start on the failed GPU's devices."""
    for state in ("assigned", "accepted", "preparing", "ready"):
        assert _gate_write("running", old_state=state) is None, state
    assert _gate_write("running", failed=False, old_state="assigned") == "true"


def test_an_open_gate_beside_a_failed_gpu_is_not_held_for_its_running_task() -> None:
    """The hold-off is for a closed gate only: g runs on healthy GPU 0 with its gate
    open, and another GPU of the node has failed. Its gate stays open and nothing of it
    waits (a closed gate is one Swarm's enforcer is already acting on: its tasks'
    constraints read it, so the hold lasts as long as Swarm takes to stop the task)."""
    n = sw_node("n-4090", "gpu-node-2",
                {assign_key(P, "g"): Holding("g", "n-4090", (U[0],), (1000,)).label_value(),
                 gate_key(P, "g"): "true"})
    g = sw_svc("g", {f"{P}gpus": "1", devices_key(P, "n-4090"): U[0]}, mode={"Global": {}})
    run = SwarmTask("t-g", g.id, "n-4090", None, "running", "running", ())
    plan = plan_placement([n], [g], [run], {"n-4090": mark(F4090, failed=[1])})
    (sp,) = plan.services
    assert not sp.gates_deferred and gate_key(P, "g") not in plan.node_remove.get("n-4090", ())
