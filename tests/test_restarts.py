"""placement.restarts: a plan's task spec changes are a decision or held back; the hold
of a stack deployed as written; ``render`` of such a file (pure, planner only)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import yaml
from support.forged import DGX_F, R4090_F, sw_node
from support.write_paths import svc

from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.commands.render import render_stack
from swarmgpu.manager.placement import (
    ClusterAllocator,
    Holding,
    PlacementPlan,
    Planner,
    assign_key,
    devices_key,
    env_template,
    env_template_per_node,
    gate_constraint,
    gate_key,
    hold_constraint,
    is_hold,
)
from swarmgpu.manager.placement.cycle import Cycle
from swarmgpu.manager.placement.records import SpecWrites
from swarmgpu.manager.placement.restarts import settle_restarts
from swarmgpu.manager.services.sharing import env_lines
from swarmgpu.swarm.client import SwarmTask

P = "swarmgpu."
FACTS = {"n-dgx": DGX_F, "n-4090": R4090_F}
U = R4090_F.gpus[0].uuid


def half(env: list[str], cons: list[str]) -> Any:
    return svc("half", {f"{P}gpu-fraction": "0.5", devices_key(P, "n-4090"): U}, env, cons)


def nodes(gate: bool = True) -> list[Any]:
    h = Holding("half", "n-4090", (U,), (500,))
    return [sw_node("n-dgx", "gpu-node-1"),
            sw_node("n-4090", "gpu-node-2", {assign_key(P, "half"): h.label_value(),
                                           **({gate_key(P, "half"): "true"} if gate else {})})]


def plan_of(services: list[Any], tasks: list[SwarmTask], ns: list[Any] | None = None,
            release: set[str] | None = None) -> Any:
    p = Planner(prefix=P)
    p.release = release or set()
    plan = p.plan(ns if ns is not None else nodes(), services, tasks, FACTS)
    return {sp.name: sp for sp in plan.services}


RUNNING = [SwarmTask("t1", "id-half", "n-4090", 1, "running", "running", ())]
WAITING = [SwarmTask("t1", "id-half", "", 1, "pending", "running", ())]


def test_new_env_lines_for_a_running_task_are_held() -> None:
    s = half([env_template_per_node(P), "CUDA_DEVICE_ORDER=PCI_BUS_ID"],
             [gate_constraint(P, "half")])
    sp = plan_of([s], RUNNING)["half"]
    assert [c.split("=", 1)[0] for c in sp.held] == [
        "add env SWARMGPU_GPU_FRACTION", "add env SWARMGPU_GPU_MEMORY_MIB",
        "add env CUDA_DEVICE_MEMORY_LIMIT", "add env CUDA_DEVICE_SM_LIMIT"]
    assert sp.add_env == () and not sp.force_update
    assert sp.service_labels_set  # its share labels: written, they restart nothing
    assert any(w.startswith("held back: it would restart its running task") for w in sp.warnings)
    assert not any(w.startswith("adopted") for w in sp.warnings)  # nothing was added
    # Nothing of it runs: nothing to restart, so nothing is held.
    sp = plan_of([s], WAITING)["half"]
    assert sp.held == () and set(env_lines(P)) <= set(sp.add_env)
    # The operator's word lets it through.
    sp = plan_of([s], RUNNING, release={"half"})["half"]
    assert sp.held == () and sp.decision is not None and sp.decision[0] == "operator"


def test_a_gate_constraint_is_added_only_where_its_node_has_the_gate() -> None:
    env = [env_template(P), "CUDA_DEVICE_ORDER=PCI_BUS_ID", *env_lines(P)]
    sp = plan_of([half(env, [])], RUNNING)["half"]  # its node has the gate: no restart
    assert sp.add_constraints == (gate_constraint(P, "half"),) and sp.held == ()
    assert sp.decision is not None and sp.decision[0] == "none"
    sp = plan_of([half(env, [])], RUNNING, nodes(gate=False))["half"]
    assert sp.add_constraints == () and sp.held == (
        f"add constraint {gate_constraint(P, 'half')}",)


def test_a_running_task_without_a_device_list_is_placed() -> None:
    s = svc("loose", {f"{P}gpus": "1"}, ["V=1"], [])
    t = [SwarmTask("t1", "id-loose", "n-dgx", 1, "running", "running", ())]
    sp = plan_of([s], t, [sw_node("n-dgx", "gpu-node-1"), sw_node("n-4090", "gpu-node-2")])["loose"]
    assert sp.decision is not None and sp.decision[0] == "place" and sp.held == ()
    assert env_template(P) in sp.add_env


def test_the_hold_is_replaced_by_the_gate_in_the_placement_write() -> None:
    s = svc("web", {f"{P}gpus": "1"}, ["V=1"], [hold_constraint(P), "node.role==worker"])
    t = [SwarmTask("t1", "id-web", "", 1, "pending", "running", ())]
    sp = plan_of([s], t, [sw_node("n-dgx", "gpu-node-1"), sw_node("n-4090", "gpu-node-2")])["web"]
    assert sp.status == "placed" and sp.placements
    assert sp.remove_constraints == (hold_constraint(P),)
    assert sp.add_constraints == (gate_constraint(P, "web"),)
    assert env_template(P) in sp.add_env and sp.force_update
    assert sp.decision is not None and sp.decision[0] == "place"
    assert any(w.startswith("adopted its hold") for w in sp.warnings)
    assert is_hold("node.labels.swarmgpu.hold == TRUE", P)
    assert not is_hold("node.labels.swarmgpu.HOLD==true", P)  # keys are exact in Swarm
    # With adoption off the hold stays: the service waits, and says why.
    p = Planner(prefix=P, adopt_ungated=False)
    (sp,) = p.plan([sw_node("n-dgx", "gpu-node-1")], [s], t, FACTS).services
    assert sp.status == "pending" and "hold" in (sp.reason or "")


def test_the_hold_is_read_as_swarm_reads_it() -> None:
    # swarmkit reads the node.labels. prefix in any case, trims each part and compares the
    # value in any case; the label key is exact (keys.gate_of reads a gate the same way).
    for c in ("Node.Labels.swarmgpu.hold==true", "NODE.LABELS.swarmgpu.hold == True",
              "node.labels.swarmgpu.hold==\ttrue"):
        assert is_hold(c, P), c
    for c in ("node.labels.swarmgpu.HOLD==true", "node.labels.swarmgpu.hold!=true",
              "node.labels.swarmgpu.hold==false", "node.labels. swarmgpu.hold==true",
              "engine.labels.swarmgpu.hold==true", "node.labels.swarmgpu.holder==true"):
        assert not is_hold(c, P), c
    # The planner adopts such a hold as it does the lower-case one (it waited for a node
    # with the label, which none has).
    held = "Node.Labels.swarmgpu.hold == true"
    s = svc("web", {f"{P}gpus": "1"}, ["V=1"], [held])
    t = [SwarmTask("t1", "id-web", "", 1, "pending", "running", ())]
    sp = plan_of([s], t, [sw_node("n-dgx", "gpu-node-1")])["web"]
    assert sp.status == "placed" and sp.remove_constraints == (held,)
    assert sp.add_constraints == (gate_constraint(P, "web"),)


def test_render_replaces_the_hold_with_the_gate() -> None:
    text = yaml.safe_dump({"version": "3.8", "services": {"m": {
        "image": "x", "deploy": {"labels": {f"{P}gpus": "1"},
                                 "placement": {"constraints": [hold_constraint(P)]}}}}})
    out, plan = render_stack(text, "st", [sw_node("n-dgx", "gpu-node-1")], [], [], FACTS)
    doc = yaml.safe_load(out.split("\n", 2)[2])
    assert doc["services"]["m"]["deploy"]["placement"]["constraints"] == [
        gate_constraint(P, "st_m")]
    assert plan.services[0].status == "placed"


def _web_on_4090() -> tuple[Any, list[Any], list[SwarmTask]]:
    """A settled service whose task runs on its GPU of n-4090 (ledger, gate, device list)."""
    s = svc("web", {f"{P}gpus": "1", devices_key(P, "n-4090"): U},
            [env_template(P), "CUDA_DEVICE_ORDER=PCI_BUS_ID"], [gate_constraint(P, "web")])
    h = Holding("web", "n-4090", (U,), (1000,))
    ns = [sw_node("n-dgx", "gpu-node-1"),
          sw_node("n-4090", "gpu-node-2", {assign_key(P, "web"): h.label_value(),
                                           gate_key(P, "web"): "true"})]
    return s, ns, [SwarmTask("t1", "id-web", "n-4090", 1, "running", "running", ())]


def test_a_node_whose_facts_cannot_be_read_keeps_its_running_holdings() -> None:
    # An agent unreachable when a new leader (or a restarted daemon) starts, with no
    # last good facts to stand in, or one whose source could not list its GPUs (NVML
    # cannot initialise: "Driver/library version mismatch" after a driver upgrade) says
    # nothing about the GPUs its running task holds: releasing them would close the gate
    # under that task (Swarm stops it) and place the model anew elsewhere.
    unread = NodeFacts(hostname="gpu-node-2", errors=("nvml: cannot initialise NVML",))
    for facts in ({"n-dgx": DGX_F}, {"n-dgx": DGX_F, "n-4090": unread}):
        s, ns, tasks = _web_on_4090()
        p = Planner(prefix=P)
        plan = p.plan(ns, [s], tasks, facts)
        (sp,) = plan.services
        assert "n-4090" not in plan.node_remove
        assert [pl.node_id for pl in sp.placements] == ["n-4090"]
        assert not sp.needs_service_write and sp.decision is None
        # Its facts back: the holding is counted again (its GPU is given to nobody else).
        plan = p.plan(ns, [s, svc("b", {f"{P}gpus": "8"}, [], [])], tasks,
                      {"n-dgx": DGX_F, "n-4090": R4090_F})
        by_name = {sp.name: sp for sp in plan.services}
        web, b = by_name["web"], by_name["b"]
        assert "n-4090" not in plan.node_remove and not web.needs_service_write
        assert all(p.node_id != "n-4090" for p in b.placements)


def _cycle_on(ns: list[Any], node_remove: dict[str, list[str]] | None = None) -> Any:
    """The cycle ``settle_restarts`` reads: the nodes, the plan's removals so far."""
    return Cycle(cluster=ClusterAllocator(), by_id={n.id: n for n in ns}, facts={},
                 prefix=P, zone_label="", all_zones=set(), adopt_ungated=True,
                 plan=PlacementPlan(node_remove=node_remove or {}),
                 exclude=lambda s: frozenset())


def test_a_hold_names_the_maxreplicas_change_swarm_restarts_a_stray_task_for() -> None:
    # A task runs on a node without its gate (nothing of this write removes it): Swarm
    # replaces it for any change of placement, so MaxReplicas waits too, and the note
    # names it. Before: "held back: it would restart its running task:  --" (nothing
    # named), and MaxReplicas written under "a change of placement alone, which the
    # nodes its tasks run on satisfy" -- the task replaced for it.
    s = svc("web", {f"{P}gpus": "1"}, [env_template(P)], [gate_constraint(P, "web")])
    w = SpecWrites(service_labels_set={f"{P}x": "1"}, set_max_replicas=1)
    r = settle_restarts(w, None, s, {"n-4090": 1}, {},
                        _cycle_on([sw_node("n-4090", "gpu-node-2")]))
    assert r is not None and r.held == ("change Placement.MaxReplicas",)
    assert r.decision is None and r.writes == replace(w, set_max_replicas=None)
    assert r.note is not None and "MaxReplicas" in r.note and "task:  --" not in r.note


@pytest.mark.parametrize("availability", ["active", "pause"])
def test_a_task_whose_gate_the_write_closes_is_not_restarted_by_it(availability: str) -> None:
    # Phase 1 of the write removes the gate of the node its task runs on: Swarm's
    # constraint enforcer stops that task on the node update (an active node), so the
    # spec write restarts nothing there and nothing is held. A paused node is not
    # enforced: its task runs on, and the env line would restart it (held).
    s = svc("web", {f"{P}gpus": "1"}, [env_template(P)], [gate_constraint(P, "web")])
    n = replace(sw_node("n-4090", "gpu-node-2", {gate_key(P, "web"): "true"}),
                availability=availability)
    w = SpecWrites(service_labels_set={f"{P}x": "1"}, set_max_replicas=1,
                   add_env=("CUDA_DEVICE_ORDER=PCI_BUS_ID",))
    r = settle_restarts(w, None, s, {"n-4090": 1}, {"n-4090": (gate_key(P, "web"),)},
                        _cycle_on([n]))
    assert r is not None
    if availability == "pause":
        assert r.held == ("add env CUDA_DEVICE_ORDER=PCI_BUS_ID",
                          "change Placement.MaxReplicas")
        return
    assert r.held == () and r.note is None and r.writes == w
    assert r.decision is not None and r.decision[0] == "none"
    assert "no longer meet its constraints" in r.decision[1]
    # Where the node keeps its gate the env line would restart the task: held, named.
    r = settle_restarts(w, None, s, {"n-4090": 1}, {}, _cycle_on([n]))
    assert r is not None and r.held == ("add env CUDA_DEVICE_ORDER=PCI_BUS_ID",)
    assert r.note is not None and "CUDA_DEVICE_ORDER" in r.note


def test_a_spec_without_a_container_spec_gets_no_hold_naming_nothing() -> None:
    # A service whose spec has no ContainerSpec (the planner tests' own helper builds
    # such): a MaxReplicas write is a change of placement alone. Before: the write made
    # an empty ContainerSpec, taken for a restart, and the plan said "held back: it
    # would restart its running task:  --" with nothing held.
    s = replace(svc("web", {f"{P}gpus": "1"}, [env_template(P)], []), spec={"Name": "web"})
    w = SpecWrites(set_max_replicas=2)
    r = settle_restarts(w, None, s, {"n-4090": 1}, {},
                        _cycle_on([sw_node("n-4090", "gpu-node-2")]))
    assert r is not None and r.held == () and r.note is None and r.writes == w
    assert r.decision is not None and r.decision[0] == "none"
