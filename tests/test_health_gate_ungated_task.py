"""A closed gate on a node with a failed GPU waits while an old task of the service is
wanted there (``devicemap._old_task_stays``: the closed gate has Swarm's enforcer stop
it). A service adopted without a gate (``placement.adopt_ungated``) whose update runs
start-first keeps its old task, made before the gate constraint was added: that task
reads no gate, so Swarm never stops it for one, and its new task (which reads the gate)
waits for the gate, which waited for the old task. Before: deferred for good. Now only a
task whose constraints read the gate (or are unknown) holds it closed. Pure:
``plan_placement`` on that state."""

from __future__ import annotations

from support.forged import sw_node, sw_svc
from support.gpu_nodes import RTX4090
from support.health import mark

from swarmgpu.manager.placement import (
    Holding,
    assign_key,
    devices_key,
    gate_constraint,
    gate_key,
    plan_placement,
)
from swarmgpu.swarm.client import SwarmTask, task_from_api

P = "swarmgpu."
F4090 = RTX4090.facts()
U = [g.uuid for g in F4090.gpus]


def _gate_write(old_rules: tuple[str, ...] | None) -> str | None:
    """g (a whole GPU, replicated, start-first) adopted last cycle: its spec carries the
    gate and env, the ledger names GPU 0 of gpu-node-2, its device map too, the gate not
    yet open; GPU 1 there has failed. Its old task (constraints ``old_rules``) runs on the
    node, its new one waits for a node. The gate value placement writes there."""
    n = sw_node("n-4090", "gpu-node-2",
                {assign_key(P, "g"): Holding("g", "n-4090", (U[0],), (1000,)).label_value()})
    g = sw_svc("g", {f"{P}gpus": "1", devices_key(P, "n-4090"): U[0]})
    old = SwarmTask("t-g-old", g.id, "n-4090", 1, "running", "running", (),
                    constraints=old_rules)
    new = SwarmTask("t-g-new", g.id, "", 1, "pending", "running", (),
                    constraints=(gate_constraint(P, "g"),))
    plan = plan_placement([n], [g], [old, new], {"n-4090": mark(F4090, failed=[1])})
    return plan.node_set.get("n-4090", {}).get(gate_key(P, "g"))


def test_an_old_task_that_reads_no_gate_does_not_hold_the_gate_closed() -> None:
    assert _gate_write(()) == "true"
    assert _gate_write(("node.role==worker",)) == "true"
    # one that reads the gate is stopped by it: the gate waits, as before
    assert _gate_write((gate_constraint(P, "g"),)) is None
    assert _gate_write((" node.labels.swarmgpu.service.g == TRUE ",)) is None
    assert _gate_write(None) is None  # not read: as one that reads it


def test_a_tasks_constraints_are_read_strictly() -> None:
    """Anything but a list of texts is not read (None), never a text's letters."""
    def rules(c: object) -> tuple[str, ...] | None:
        return task_from_api({"ID": "t", "Spec": {"Placement": {"Constraints": c}}}).constraints

    assert rules(["node.role==worker"]) == ("node.role==worker",)
    assert rules(None) == () and rules([]) == ()
    assert rules("node.labels.swarmgpu.service.g==true") is None
    assert rules([1, "x"]) is None and rules({"a": 1}) is None
    assert task_from_api({"ID": "t", "Spec": {"Placement": "x"}}).constraints is None


def test_a_falsy_constraints_value_that_is_no_list_is_not_read_as_none() -> None:
    """Absent or null reads as no constraint (()); an empty list too. A present value
    that is no list (``""``, ``{}``, ``0``; a ``Placement`` that is no mapping, ``[]``)
    is not read (None), as a non-empty one is: read as (), it read no gate, and a closed
    gate beside a failed GPU opened under a task that may read it."""
    def rules(spec: dict[str, object]) -> tuple[str, ...] | None:
        return task_from_api({"ID": "t", "Spec": spec}).constraints

    assert rules({}) == () and rules({"Placement": None}) == ()
    assert rules({"Placement": {}}) == () and rules({"Placement": {"Constraints": None}}) == ()
    assert rules({"Placement": {"Constraints": []}}) == ()
    for c in ("", {}, 0, False):
        assert rules({"Placement": {"Constraints": c}}) is None, c
    for pl in ([], "", 0):
        assert rules({"Placement": pl}) is None, pl
    assert _gate_write(rules({"Placement": {"Constraints": ""}})) is None
