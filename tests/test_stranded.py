"""A service write that replaces no task leaves a task waiting for a node unscheduled for
good: Swarm's scheduler never tries again a task of an older service revision (moby/
swarmkit 807f25e, ``noSuitableNode``), and the orchestrator replaces only a task whose
own spec changed. So placement writes nothing but a ForceUpdate or a task spec change
while a task of the service waits without a node (docs/deploy.md)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from loguru import logger
from support.gpu_nodes import RTX4090
from support.memo import as_written
from support.placement import apply, node, svc
from support.placement import written as service_written
from support.scheduler import is_task_dirty

from swarmgpu.core.config import Config
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.cycle.placement import PlacementStep
from swarmgpu.manager.placement import PlacementPlan, Planner
from swarmgpu.manager.placement.records import ServicePlan
from swarmgpu.manager.placement.specwrite import service_compute
from swarmgpu.manager.services.sharing import env_lines
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

PAR = "swarmgpu.state.update-parallelism"
PREEMPTED = "swarmgpu.state.preempted"


def _tasks(s: SwarmService, on: list[str], state: str = "pending") -> list[SwarmTask]:
    """One task per entry of ``on`` ("" : no node yet), created at the service's
    current ForceUpdate."""
    return [SwarmTask(id=f"t-{s.name}-{i}", service_id=s.id, node_id=nid, slot=i,
                      state=state if nid else "pending", desired_state="running", env=(),
                      force_update=s.force_update)
            for i, nid in enumerate(on, start=1)]


def _as_written(s: SwarmService, parallelism: int = 1,
                add: dict[str, str] | None = None) -> SwarmService:
    """``s`` with the spec Swarm holds after the planner's writes: one replica a node
    (MaxReplicas 1), the update parallelism given, and labels ``add`` besides."""
    labels = {**s.labels, **(add or {})}
    tt = {"ContainerSpec": {"Env": list(s.env)},
          "Placement": {"Constraints": list(s.constraints), "MaxReplicas": 1}}
    return replace(s, labels=labels, max_replicas_per_node=1, spec={
        "Labels": labels, "TaskTemplate": tt, "UpdateConfig": {"Parallelism": parallelism}})


def _replaces_no_task(sp: ServicePlan, s: SwarmService) -> bool:
    """A write of ``sp`` that changes the spec but no task's spec (labels, parallelism)."""
    if not sp.needs_service_write or sp.force_update:
        return False
    new = service_compute(sp.writes)(s.spec)
    return new is not None and new.get("TaskTemplate") == s.spec.get("TaskTemplate")


def test_parallelism_is_not_given_back_while_its_tasks_wait_for_their_gates() -> None:
    """The cycle that opens the gates gave the owner's update parallelism back in the
    service write before the gate writes: a scheduler pass in between (any task or node
    event of the cluster) found no node for the waiting tasks and dropped them, and the
    gates opened for tasks Swarm never tried again."""
    nodes = [node("n-a", "node-a"), node("n-b", "node-b"), node("n-c", "node-c")]
    facts = {n.id: RTX4090.facts() for n in nodes}
    planner = Planner()
    s = svc("three", {"swarmgpu.gpus": "1"}, replicas=3)
    first = planner.plan(nodes, [s], _tasks(s, ["", "", ""]), facts)
    (sp1,) = first.services
    assert sp1.force_update and sp1.set_update_parallelism == 0 and sp1.gates_deferred
    nodes = apply(nodes, first)
    (s,) = as_written([s], first)
    s = _as_written(s, parallelism=0)
    waiting = _tasks(s, ["", "", ""])  # the forced update's tasks: no node yet
    opens = planner.plan(nodes, [s], waiting, facts)
    (sp2,) = opens.services
    assert all(labels.get("swarmgpu.service.three") == "true"
               for labels in opens.node_set.values()) and len(opens.node_set) == 3
    assert not _replaces_no_task(sp2, s), sp2.writes
    nodes = apply(nodes, opens)
    # Once its tasks are on their nodes, the parallelism goes back.
    on = sorted(opens.node_set)
    (sp3,) = planner.plan(nodes, [s], _tasks(s, on, "running"), facts).services
    assert sp3.set_update_parallelism == 1 and PAR in sp3.service_labels_remove


def test_a_record_is_not_dropped_while_a_task_waits_for_a_node() -> None:
    """A preempted service placed again drops its record in a write of its labels
    alone: with one replica running and the other's task waiting for a node (its gate
    open, the node's CPU still taken), that write left the waiting task unscheduled."""
    nodes = [node("n-a", "node-a"), node("n-b", "node-b")]
    facts = {n.id: RTX4090.facts() for n in nodes}
    planner = Planner()
    s = svc("two", {"swarmgpu.gpus": "1"}, replicas=2)
    for _ in range(3):
        plan = planner.plan(nodes, [s], [], facts)
        nodes, (s,) = apply(nodes, plan), as_written([s], plan)
    record = '{"at": 1.0, "by": "hi", "node": "n-b", "priority": 5}'
    s = replace(_as_written(s, add={PREEMPTED: record}), version=s.version + 1)
    tasks = _tasks(s, ["n-a", ""], "running")
    (sp,) = planner.plan(nodes, [s], tasks, facts).services
    assert not _replaces_no_task(sp, s), sp.writes
    # With no task waiting, the record goes.
    (sp,) = Planner().plan(nodes, [s], _tasks(s, ["n-a", "n-b"], "running"), facts).services
    assert PREEMPTED in sp.service_labels_remove and not sp.force_update


def _one_placed() -> tuple[list[SwarmNode], dict[str, NodeFacts], Planner, SwarmService]:
    """One service of one GPU placed on node-a, its writes landed (nodes and spec), by
    the planner that placed it."""
    nodes = [node("n-a", "node-a")]
    facts = {"n-a": RTX4090.facts()}
    planner = Planner()
    s = svc("one", {"swarmgpu.gpus": "1"})
    for _ in range(3):
        plan = planner.plan(nodes, [s], [], facts, now=1000.0)
        nodes, (s,) = apply(nodes, plan), as_written([s], plan)
    return nodes, facts, planner, s


def test_a_task_swarm_left_behind_an_open_gate_is_replaced_where_it_is() -> None:
    """A write by anyone else (an operator's label, a preemption's record) left the
    service's waiting task of an older revision: Swarm keeps the message it gave before
    the gate opened and never tries the task again. The converge step read that as
    Swarm refusing the node and, with no other node to take the replica, waited for
    good. Nothing of it runs: its waiting task is replaced where it is (a ForceUpdate),
    under the back-off."""
    nodes, facts, planner, s = _one_placed()
    assert nodes[0].labels.get("swarmgpu.service.one") == "true"
    s = _as_written(s, add={"team": "ml"})  # the operator's label: a new revision
    (t,) = _tasks(s, [""])
    t = replace(t, error="no suitable node (scheduling constraints not satisfied on 1 node)")
    (sp,) = planner.plan(nodes, [s], [t], facts, now=1001.0).services
    assert not sp.force_update and sp.status == "pending"  # within the gate's grace
    (sp,) = planner.plan(nodes, [s], [t], facts, now=1010.0).services
    assert sp.force_update and sp.decision is not None and sp.decision[0] == "place"
    assert "swarmgpu.state.replaced" in sp.service_labels_set
    assert nodes[0].labels.get("swarmgpu.assign.one") and "n-a" not in sp.node_remove
    # Replaced once: the back-off holds the next try.
    s2 = replace(s, force_update=s.force_update + 1,
                 labels={**s.labels, **sp.service_labels_set})
    (t2,) = _tasks(s2, [""])
    t2 = replace(t2, error=t.error)
    (sp,) = planner.plan(nodes, [s2], [t2], facts, now=1012.0).services
    assert not sp.force_update and "backed off" in (sp.reason or "")


def test_a_renewal_of_several_waiting_replicas_replaces_them_all_at_once() -> None:
    """The renewal of waiting tasks left behind their open gates is a ForceUpdate; with
    the owner's update parallelism (1) Swarm's rolling updater replaced one task, waited
    for it to run, and left the others behind for as long as it did not: the renewal
    replaces them all at once (parallelism 0, the owner's recorded and given back once
    they are on their nodes), as the device map's first forced update does."""
    nodes = [node("n-a", "node-a"), node("n-b", "node-b")]
    facts = {n.id: RTX4090.facts() for n in nodes}
    planner = Planner()
    s = svc("two", {"swarmgpu.gpus": "1"}, replicas=2)
    for _ in range(3):
        plan = planner.plan(nodes, [s], [], facts, now=1000.0)
        nodes, (s,) = apply(nodes, plan), as_written([s], plan)
    assert all(n.labels.get("swarmgpu.service.two") == "true" for n in nodes)
    s = _as_written(s, parallelism=1, add={"team": "ml"})  # the owner's, and a new label
    err = "no suitable node (scheduling constraints not satisfied on 2 nodes)"
    waiting = [replace(t, error=err) for t in _tasks(s, ["", ""])]
    planner.plan(nodes, [s], waiting, facts, now=1001.0)
    (sp,) = planner.plan(nodes, [s], waiting, facts, now=1010.0).services
    assert sp.force_update and "replaced where it is" in (sp.reason or ""), sp.reason
    assert sp.set_update_parallelism == 0 and PAR not in sp.service_labels_remove
    assert {**s.labels, **sp.service_labels_set}.get(PAR) == "1"  # the owner's, kept


def _beside_running(on: list[str], parallelism: int = 1,
                    labels: dict[str, str] | None = None) -> tuple[
        list[SwarmNode], SwarmService, list[SwarmTask], Planner, dict[str, NodeFacts]]:
    """A service of ``len(on)`` replicas placed, its gates open, then a new revision
    (an operator's label): tasks on ``on`` ("" : waiting without a node, Swarm's old
    message standing), the others running; the planner has seen them once."""
    nodes = [node(f"n-{c}", f"node-{c}") for c in "abc"[: len(on)]]
    facts = {n.id: RTX4090.facts() for n in nodes}
    planner = Planner()
    s = svc("two", labels or {"swarmgpu.gpus": "1"}, replicas=len(on))
    for _ in range(3):
        plan = planner.plan(nodes, [s], [], facts, now=1000.0)
        nodes, (s,) = apply(nodes, plan), as_written([s], plan)
    s = _as_written(s, parallelism=parallelism, add={"team": "ml"})  # a new revision
    err = f"no suitable node (scheduling constraints not satisfied on {len(on)} nodes)"
    tasks = [t if t.node_id else replace(t, error=err) for t in _tasks(s, on, "running")]
    planner.plan(nodes, [s], tasks, facts, now=1001.0)
    return nodes, s, tasks, planner, facts


def _replaced(s: SwarmService, sp: ServicePlan, tasks: list[SwarmTask],
              nodes: list[SwarmNode]) -> list[str]:
    """The tasks Swarm's updater replaces for the plan's write (``is_task_dirty``): each
    made from ``s``'s task template."""
    new = service_compute(sp.writes)(s.spec) if sp.needs_service_write else s.spec
    assert new is not None
    labels = {n.id: n.labels for n in nodes}
    return [t.id for t in tasks if is_task_dirty(s.spec["TaskTemplate"], new,
                                                 labels[t.node_id] if t.node_id else None)]


def test_a_task_left_behind_an_open_gate_beside_a_running_replica_is_replaced_alone(
        ) -> None:
    """A replica of the service runs, so its waiting task, which Swarm no longer tries,
    was not replaced (a ForceUpdate restarts the running replica too): it waited for
    good, the pending line naming the operator's `docker service update --force`. Now a
    change of placement alone that every node meets (the renewal constraint, on a label
    no node has) replaces the task without a node and leaves the running one (swarmkit
    ``IsTaskDirty``), under the back-off."""
    nodes, s, tasks, planner, facts = _beside_running(["n-a", ""])
    (sp,) = planner.plan(nodes, [s], tasks, facts, now=1010.0).services
    assert not sp.force_update and sp.decision is not None, sp.reason
    assert _replaced(s, sp, tasks, nodes) == ["t-two-2"]  # the waiting one alone
    (renew,) = sp.writes.add_constraints
    assert renew.startswith("node.labels.swarmgpu.state.renew!="), renew
    assert "keep running" in (sp.reason or "") and "--force" not in (sp.reason or "")
    assert "swarmgpu.state.replaced" in sp.service_labels_set
    assert sp.set_update_parallelism is None  # one task waits: one batch already
    assert sp.renewed and sp.transient and sp.transient in (sp.reason or "")  # (the log)
    # The next renewal (the back-off past) writes another value in its place.
    spec = service_compute(sp.writes)(s.spec)
    assert spec is not None
    s2 = replace(service_written(s, sp), spec=spec,
                 constraints=tuple(spec["TaskTemplate"]["Placement"]["Constraints"]))
    waiting = replace(tasks[1], id="t-two-2b")
    (sp2,) = planner.plan(nodes, [s2], [tasks[0], waiting], facts, now=1012.0).services
    assert not sp2.needs_service_write and "backed off" in (sp2.reason or "")
    (sp3,) = planner.plan(nodes, [s2], [tasks[0], waiting], facts, now=5000.0).services
    assert sp3.writes.remove_constraints == (renew,)
    assert sp3.writes.add_constraints and sp3.writes.add_constraints != (renew,)
    assert _replaced(s2, sp3, [tasks[0], waiting], nodes) == ["t-two-2b"]


def test_several_tasks_left_behind_beside_a_running_replica_are_replaced_not_it() -> None:
    """Two tasks wait beside a running replica, the owner's update parallelism 1: both
    are replaced (the rolling updater one after the other), the running one not at
    all, and the owner's parallelism stays: a forced update landing while it were 0
    would restart every running replica at once."""
    nodes, s, tasks, planner, facts = _beside_running(["n-a", "", ""])
    (sp,) = planner.plan(nodes, [s], tasks, facts, now=1010.0).services
    assert not sp.force_update
    assert _replaced(s, sp, tasks, nodes) == ["t-two-2", "t-two-3"]
    assert sp.set_update_parallelism is None
    assert PAR not in sp.service_labels_set


def test_a_renewal_beside_a_running_replica_carries_no_change_held_back() -> None:
    """A change held back for the running replica (the share's env lines a newer
    swarmgpu tells its container: they would restart it) stays held when the waiting
    task is renewed beside it: the renewal is no decision that lets it through."""
    nodes, s, tasks, planner, facts = _beside_running(
        ["n-a", ""], labels={"swarmgpu.gpu-fraction": "0.5"})
    env = tuple(e for e in s.env if e not in env_lines("swarmgpu."))
    tt = {**s.spec["TaskTemplate"], "ContainerSpec": {"Env": list(env)}}
    s = replace(s, env=env, spec={**s.spec, "TaskTemplate": tt})
    planner.plan(nodes, [s], tasks, facts, now=1001.0)
    (sp,) = planner.plan(nodes, [s], tasks, facts, now=1010.0).services
    assert sp.held and not sp.add_env and not sp.force_update, (sp.held, sp.writes)
    assert sp.writes.add_constraints, sp.reason
    assert _replaced(s, sp, tasks, nodes) == ["t-two-2"]


def _refused_at(planner: Planner, nodes: list[SwarmNode], facts: dict[str, NodeFacts],
                s: SwarmService, i: int) -> tuple[PlacementPlan, ServicePlan]:
    """Cycle ``i`` (a cycle every 20 s) with ``s``'s one task refused by its node."""
    (t,) = _tasks(s, [""])
    err = "no suitable node (scheduling constraints not satisfied on 1 node)"
    plan = planner.plan(nodes, [s], [replace(t, error=err)], facts, now=1000.0 + 20 * i)
    (sp,) = plan.services
    return plan, sp


def test_a_task_its_node_truly_refuses_is_said_once_then_counted() -> None:
    """Swarm's message cannot tell a task its node truly refuses from one Swarm stopped
    trying, so it is replaced where it is after each back-off (what is written stays so).
    The daemon's pending line was said again with each renewal and every cycle between
    (the back-off's countdown, "backed off for 140 s more", made each a new note): said
    once now, then a short line with the count at each renewal, also where a cycle
    comes before Swarm's word on the new task (not pending then)."""
    nodes, facts, planner, s = _one_placed()
    step = PlacementStep(SimpleNamespace(cfg=Config()))  # type: ignore[arg-type]
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="INFO")
    renewals = 0
    try:
        for i in range(1, 60):  # a cycle every 20 s, the task refused each time
            plan, sp = _refused_at(planner, nodes, facts, s, i)
            step._log(plan)
            if i == 1:  # within the gate's grace: Swarm's word alone, said as such
                assert not sp.force_update and sp.status == "pending"
                lines.clear()
            renewals += sp.force_update
            s = service_written(s, sp)
            if sp.force_update:  # a cycle before Swarm's word on the new task: not pending
                (t,) = _tasks(s, [""])
                gap = planner.plan(nodes, [s], [t], facts, now=1001.0 + 20 * i)
                assert gap.services[0].status == "placed" and not gap.services[0].writes
                step._log(gap)
    finally:
        logger.remove(sink)
    assert renewals >= 6  # written as before: replaced after each back-off
    said = [x for x in lines if x.startswith("pending: ")]
    assert len(said) == 1 and "replaced where it is" in said[0], lines
    again = [x for x in lines if not x.startswith("pending: ")]
    assert len(again) == renewals - 1, again
    assert all("again" in x and "backed off" not in x and len(x) < 200 for x in again)
    assert again[-1].count(f"{renewals - 1} time") == 1, again[-1]


def test_a_renewal_value_too_long_for_a_number_does_not_stop_the_cycle() -> None:
    """A renewal constraint in the spec whose value is a number Python will not read
    (over 4300 digits: ``int`` raises ValueError) raised out of the planner when the
    waiting task was renewed, and no service was planned in that cycle or any after.
    Now it is a value like any other not swarmgpu's form: taken out, a new one written."""
    nodes, s, tasks, planner, facts = _beside_running(["n-a", ""])
    odd = "node.labels.swarmgpu.state.renew!=" + "9" * 5000
    cons = (*s.constraints, odd)
    tt = {**s.spec["TaskTemplate"],
          "Placement": {**s.spec["TaskTemplate"]["Placement"], "Constraints": list(cons)}}
    s = replace(s, constraints=cons, spec={**s.spec, "TaskTemplate": tt})
    planner.plan(nodes, [s], tasks, facts, now=1001.0)
    (sp,) = planner.plan(nodes, [s], tasks, facts, now=1010.0).services
    assert odd in sp.writes.remove_constraints, sp.reason
    (renew,) = sp.writes.add_constraints
    assert renew.startswith("node.labels.swarmgpu.state.renew!=") and renew != odd
    assert _replaced(s, sp, tasks, nodes) == ["t-two-2"]


def test_a_hand_edited_parallelism_record_is_not_written_back() -> None:
    """The record of the owner's update parallelism is a label anyone may edit: one that
    is not a decimal integer Docker takes (its Parallelism is a uint64) was written
    back as the spec's, and Docker refused the write every cycle, so the gate and
    release writes of that service never landed. Such a record is not trusted: no
    give-back (as with no record), and it is said once, naming service, label, value."""
    nodes = [node("n-a", "node-a"), node("n-b", "node-b")]
    facts = {n.id: RTX4090.facts() for n in nodes}
    lines: list[str] = []
    for bad in ("-3", str(2**64), "2x", "+2", "\u0661"):  # (an Arabic-Indic 1)
        planner = Planner()
        s = svc("one", {"swarmgpu.gpus": "1"}, replicas=2)
        first = planner.plan(nodes, [s], _tasks(s, ["", ""]), facts)
        nodes_w = apply(nodes, first)
        (s,) = as_written([s], first)
        s = _as_written(s, parallelism=0, add={PAR: bad})
        opens = planner.plan(nodes_w, [s], _tasks(s, ["", ""]), facts)
        nodes_w, on = apply(nodes_w, opens), sorted(opens.node_set)
        step = PlacementStep(SimpleNamespace(cfg=Config()))  # type: ignore[arg-type]
        lines.clear()
        sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="INFO")
        try:
            for _ in range(3):
                plan = planner.plan(nodes_w, [s], _tasks(s, on, "running"),
                                    facts)
                (sp,) = plan.services
                assert sp.set_update_parallelism is None, (bad, sp.writes)
                step._log(plan)
        finally:
            logger.remove(sink)
        said = [x for x in lines if PAR in x]
        assert len(said) == 1 and "one" in said[0] and repr(bad) in said[0], (bad, lines)
    # The largest value Docker takes is given back as it is.
    s = replace(_as_written(s, parallelism=0, add={PAR: str(2**64 - 1)}), version=9)
    (sp,) = planner.plan(nodes_w, [s], _tasks(s, on, "running"),
                         facts).services
    assert sp.set_update_parallelism == 2**64 - 1


def test_a_hand_edited_parallelism_record_is_not_given_back_on_release() -> None:
    """The same record read when the owner takes the request away (``ungate``): not
    written back; the records go as before, the spec's parallelism stays 0."""
    step = PlacementStep(SimpleNamespace(cfg=Config()))  # type: ignore[arg-type]
    nodes = [node("n-a", "node-a")]
    s = svc("gone", {PAR: "-3"})
    s = replace(s, spec={"UpdateConfig": {"Parallelism": 0}})
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="INFO")
    try:
        for _ in range(2):
            plan = Planner().plan(nodes, [s], [], {})
            (sp,) = plan.services
            assert sp.set_update_parallelism is None and PAR in sp.service_labels_remove
            step._log(plan)
    finally:
        logger.remove(sink)
    said = [x for x in lines if PAR in x]
    assert len(said) == 1 and "gone" in said[0] and "'-3'" in said[0], lines


def test_the_release_note_of_a_hand_edited_record_says_it_goes_with_the_release() -> None:
    """On release (``ungate``) the hand-edited record is swarmgpu's own label and leaves
    the spec in the same write as its others; the note told the owner to ``--label-rm``
    it, a needless step (and a write of the spec the release is writing). It says the
    record goes, the spec's parallelism stays 0, and how to set the owner's."""
    s = replace(svc("gone", {PAR: "2x"}), spec={"UpdateConfig": {"Parallelism": 0}})
    (sp,) = Planner().plan([node("n-a", "node-a")], [s], [], {}).services
    assert PAR in sp.service_labels_remove and sp.set_update_parallelism is None
    (note,) = sp.warnings
    assert "--label-rm" not in note and "'2x'" in note and "gone" in note, note
    assert "removed with" in note and "stays 0" in note, note
    assert "docker service update --update-parallelism N gone" in note, note


def test_a_renewal_write_says_its_decision_and_placement_once_then_counts(
        tmp_path: object) -> None:
    """Each renewal of a task its node truly refuses is a spec write (a ForceUpdate):
    the log said "decision (place: its waiting task ... replaced where it is)" and
    "placement written: [...]" again at every one, the same lines after each back-off.
    Said once per change now; the renewals after it are counted (debug), not re-said."""
    from support.forged import RecordingSwarm

    from swarmgpu.manager.cycle.placement import WrittenSaid, apply_plan

    nodes, facts, planner, s = _one_placed()
    said = WrittenSaid()
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="INFO")
    renewals = writes = 0
    try:
        for i in range(1, 60):  # a cycle every 20 s, the task refused each time
            plan, sp = _refused_at(planner, nodes, facts, s, i)
            renewals += sp.force_update
            sw = RecordingSwarm(nodes, [s], [])  # Swarm holds what was written
            apply_plan(sw, plan, dry_run=False, services=[s], said=said)  # type: ignore[arg-type]
            writes += sw.calls.count(("service", s.id))
            s = service_written(s, sp)
    finally:
        logger.remove(sink)
    assert renewals >= 4 and writes == renewals, (renewals, writes)
    decided = [x for x in lines if "decision (" in x]
    assert len(decided) == 1 and "replaced where it is" in decided[0], decided
    assert len([x for x in lines if x.startswith("placement written")]) == 1, lines
    assert said.renewals(s.id) == renewals - 1
