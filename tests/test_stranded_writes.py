"""The daemon's actuators' writes of a service (rebalancing) leave no task of
it waiting for good: Swarm's scheduler never tries again a waiting task of an older
service revision (moby/swarmkit 807f25e, ``noSuitableNode``; docs/deploy.md), and a
write of labels alone replaces no task."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from loguru import logger
from support.forged import (
    DGX_F,
    R4090_F,
    T_UUID,
    RecordingSwarm,
    repin_move,
    sw_node,
    sw_svc,
    victim_cluster,
    victim_move,
    victim_source_closed,
)

from swarmgpu.core.config import Config, PreemptionConfig, RebalanceConfig
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, assign_key, devices_key, gate_key
from swarmgpu.manager.placement.keys import is_renew
from swarmgpu.manager.rebalance.mover import Mover
from swarmgpu.manager.rebalance.moves import Outcome, Trigger
from swarmgpu.swarm.client import SwarmTask

P = "swarmgpu."
FACTS = {"n-dgx": DGX_F, "n-4090": R4090_F}
R_UUIDS = tuple(g.uuid for g in R4090_F.gpus)


class _Scheduling(RecordingSwarm):
    """A RecordingSwarm with a scheduler pass after each write: a task of a service that
    waits without a node runs on a node whose gate for it is open (but those in
    ``cannot_run``); one found no node after its service's spec was written is never
    tried again (``stranded``)."""

    cannot_run: frozenset[str] = frozenset()

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.stranded: set[str] = set()

    def _pass(self, written: str | None, fresh: frozenset[str] = frozenset()) -> None:
        """``fresh``: tasks made by the write, of its revision (tried again)."""
        for i, t in enumerate(self._tasks):
            if t.node_id or t.desired_state != "running" or t.id in self.stranded:
                continue
            name = self.service(t.service_id).name
            on = [n.id for n in self.nodes() if n.id not in self.cannot_run
                  and n.labels.get(gate_key(P, name)) == "true"]
            if on:
                self._tasks[i] = replace(t, node_id=on[0], state="running")
            elif t.service_id == written and t.id not in fresh:
                self.stranded.add(t.id)

    def update_service_spec(self, service_id: str, compute: Any, **kw: Any) -> bool:
        before = self.service(service_id)
        wrote = super().update_service_spec(service_id, compute, **kw)
        after = self.service(service_id)
        fresh: frozenset[str] = frozenset()
        # A task spec change (a ForceUpdate, a change of placement) replaces the tasks
        # without a node (swarmkit ``IsTaskDirty``); a running task stays where its node
        # meets the new constraints (the ones written here all do).
        if (after.force_update, after.constraints) != (before.force_update,
                                                       before.constraints):
            self._tasks = [replace(t, id=t.id + "-new") if t.service_id == service_id
                           and not t.node_id else t for t in self._tasks]
            fresh = frozenset(t.id for t in self._tasks if t.id.endswith("-new"))
        self._pass(service_id if wrote else None, fresh)
        return wrote

    def update_node_labels(self, node_id: str, compute: Any, **kw: Any) -> bool:
        wrote = super().update_node_labels(node_id, compute, **kw)
        self._pass(None)
        return wrote


def test_a_rolled_back_move_reopens_its_source_before_it_writes_the_spec() -> None:
    """Without make-before-break the source closes at once, and Swarm's replacement of
    its task waits for the target, which does not run it. Past the timeout the move was
    rolled back with its spec written first (the move label, "back"): the waiting task
    was of an older revision when Swarm next found no node for it, and the reopened
    source never got it. Now the gates move first, then the spec."""
    base = victim_cluster({})
    sw = _Scheduling(base.nodes(), base.services(), base.tasks())
    sw.cannot_run = frozenset({"n-4090"})  # its task never runs on the target
    # the source closed, the enforcer stops its task; its replacement waits
    _, now, m = victim_source_closed(sw, step_s=10.0)
    sw.run_task(SwarmTask("t-victim-2", "id-victim", "", 1, "pending", "running", ()))
    now[0] += 200.0  # past move_timeout_s
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in m.recent][-1] is Outcome.ROLLED_BACK
    assert sw.node("n-dgx").labels.get(gate_key(P, "victim")) == "true"
    assert not sw.stranded
    assert [(t.node_id, t.state) for t in sw.tasks() if t.service_id == "id-victim"] == [
        ("n-dgx", "running")]


def _moved_and_timed_out(trigger: Trigger) -> _Scheduling:
    """The victim's move without make-before-break to a target that never runs its task:
    the source closed, its task's replacement waiting; then past ``move_timeout_s``."""
    base = victim_cluster({})
    sw = _Scheduling(base.nodes(), base.services(), base.tasks())
    sw.cannot_run = frozenset({"n-4090"})
    now = [1000.0]
    cfg = RebalanceConfig(dry_run=False, move_timeout_s=120.0, make_before_break=False)
    m = Mover(sw, cfg, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    m.run_cycle([replace(victim_move(), trigger=trigger)], sw.nodes(), sw.services(),
                sw.tasks())
    now[0] += 10.0
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert gate_key(P, "victim") not in sw.node("n-dgx").labels  # the source closed
    sw.stop_tasks("id-victim", "n-dgx")  # the enforcer stops it; its replacement waits
    sw.run_task(SwarmTask("t-victim-2", "id-victim", "", 1, "pending", "running", ()))
    now[0] += 200.0
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    return sw


def test_a_health_move_ended_on_its_target_past_the_timeout_replaces_its_waiting_task(
        ) -> None:
    """A health move past its timeout ends on its target (no roll-back onto the failed
    GPU) with a write of the spec while its task waits for the target: that task, of
    an older revision, was never tried again, even once the target could run it. With
    nothing else of the service running, the write replaces it (a ForceUpdate)."""
    sw = _moved_and_timed_out(Trigger.HEALTH)
    assert sw.node("n-4090").labels.get(gate_key(P, "victim")) == "true"
    waiting = [t for t in sw.tasks() if t.service_id == "id-victim"]
    assert [t.id for t in waiting] == ["t-victim-2-new"] and not waiting[0].node_id
    assert not sw.stranded


def _repinned_and_waiting(trigger: Trigger, *, beside: bool = False
                          ) -> tuple[_Scheduling, Mover, list[float]]:
    """third (one replica) repinned on the 4090, whose replacement task then waits for a
    node (the 4090 takes it not: its CPU, say) past ``move_timeout_s``: one cycle there.
    ``beside``: a second replica of it runs on the DGX from then on."""
    base = victim_cluster({})
    sw = _Scheduling(base.nodes(), base.services(), base.tasks())
    sw.cannot_run = frozenset({"n-4090"})
    now = [1000.0]
    cfg = RebalanceConfig(dry_run=False, move_timeout_s=120.0)
    m = Mover(sw, cfg, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    m.run_cycle([replace(repin_move(), trigger=trigger)], sw.nodes(), sw.services(),
                sw.tasks())
    assert gate_key(P, "third") not in sw.node("n-4090").labels  # step 2: the gate closed
    if beside:  # a replica elsewhere (the move is checked at its start only)
        sw.run_task(SwarmTask("t-third-b", "id-third", "n-dgx", 2, "running", "running", ()))
    sw.stop_tasks("id-third", "n-4090")  # the enforcer stops it; its replacement waits
    sw.run_task(SwarmTask("t-third-2", "id-third", "", 1, "pending", "running", ()))
    now[0] += 10.0
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert sw.node("n-4090").labels.get(gate_key(P, "third")) == "true"  # step 3
    now[0] += 200.0  # past move_timeout_s
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    return sw, m, now


def _third(sw: _Scheduling) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(t.node_id, t.state, t.env) for t in sw.tasks() if t.service_id == "id-third"]


def test_a_repin_rolled_back_while_its_task_waits_for_a_node_replaces_that_task() -> None:
    """A repin whose new task waits for a node past its timeout was rolled back with a
    write of the spec first: that task, of an older revision, was never tried again, and
    it carried the repin's target GPU besides. With nothing else of the service running,
    the roll-back closes the gate first, then writes the spec with a ForceUpdate: a task
    of the roll-back's device map, which runs once the node takes it."""
    sw, m, now = _repinned_and_waiting(Trigger.HOTSPOT)
    assert not sw.stranded
    sw.cannot_run = frozenset()  # the node could take it now
    for _ in range(3):
        now[0] += 1.0
        m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert not sw.stranded
    assert [r.outcome for r in m.recent][-1] is Outcome.ROLLED_BACK
    assert [t[:2] for t in _third(sw)] == [("n-4090", "running")]
    assert sw.service("id-third").labels[devices_key(P, "n-4090")] == T_UUID


def test_a_health_repin_ended_past_its_timeout_replaces_its_waiting_task() -> None:
    """A health repin past its timeout ends on its new GPU with the end write of the spec
    while its task waits for the node: that task was never tried again. With nothing else
    of the service running, the end write replaces it (a ForceUpdate)."""
    sw, m, _ = _repinned_and_waiting(Trigger.HEALTH)
    assert [r.outcome for r in m.recent][-1] is Outcome.FAILED
    assert not sw.stranded
    assert [t.id for t in sw.tasks() if t.service_id == "id-third"] == ["t-third-2-new"]


def test_a_repin_is_not_rolled_back_while_its_task_waits_beside_a_running_replica(
        ) -> None:
    """Beside a running replica a ForceUpdate would restart it, and a roll-back's plain
    write of the spec would leave the waiting task of an older revision. The repin stays
    in flight (its waiting task carries the new GPUs, which the ledger holds) and ends
    once the node takes that task."""
    sw, m, now = _repinned_and_waiting(Trigger.HOTSPOT, beside=True)
    assert not sw.stranded and [r.outcome for r in m.recent] == [Outcome.STARTED]
    assert sw.service("id-third").force_update == 0
    sw.cannot_run = frozenset()
    sw._pass(None)  # Swarm's next pass: the node takes it
    now[0] += 1.0
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in m.recent][-1] is Outcome.DONE
    assert sorted(t[:2] for t in _third(sw)) == [("n-4090", "running"), ("n-dgx", "running")]
    assert sw.service("id-third").force_update == 0


def _held_lines(fn: Any) -> list[str]:
    """The WARNING lines said while ``fn`` runs."""
    lines: list[str] = []
    sink = logger.add(lambda msg: lines.append(str(msg.record["message"])), level="WARNING")
    try:
        fn()
    finally:
        logger.remove(sink)
    return lines


def test_a_repin_held_beside_a_running_replica_ends_past_its_hold_limit() -> None:
    """Beside a running replica the repin waited for its waiting task with no limit: a
    node that never takes it (Swarm's message stays the same) held the move, its record
    and its move budget, for good. The hold lasts ``move_timeout_s`` past the repin's
    own timeout (the mover's limit); then it ends where it is, as a move past its
    timeout does: one line names the service and its waiting task, the record and its
    budget go, and placement carries on (its renewal replaces the waiting task)."""
    sw, m, now = _repinned_and_waiting(Trigger.HOTSPOT, beside=True)
    now[0] += 20.0  # 230 s in: still within the hold's limit (2 x 120 s)
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in m.recent] == [Outcome.STARTED] and m.records()
    now[0] += 20.0  # 250 s in: past it
    lines = _held_lines(lambda: m.run_cycle([], sw.nodes(), sw.services(), sw.tasks()))
    assert [r.outcome for r in m.recent][-1] is Outcome.FAILED
    assert not m.records()  # the record, and the budget it held, gone
    said = [ln for ln in lines if "t-third-2" in ln]
    assert len(said) == 1 and "third" in said[0], lines
    assert sw.node("n-4090").labels.get(gate_key(P, "third")) == "true"
    assert sw.service("id-third").force_update == 0  # the running replica not restarted
    assert sorted(t[:2] for t in _third(sw)) == [("", "pending"), ("n-dgx", "running")]


def test_a_repin_done_beside_a_replica_that_waits_for_good_ends_past_its_hold_limit(
        ) -> None:
    """The repin's own task runs on its new GPU, but another replica of the service waits
    for good (Swarm never tries it again): the end write waited for it with no limit,
    the move in flight and its budget held. Past the hold's limit the end is written
    (the move done), with one line naming the waiting task."""
    base = victim_cluster({})
    sw = _Scheduling(base.nodes(), base.services(), base.tasks())
    now = [1000.0]
    cfg = RebalanceConfig(dry_run=False, move_timeout_s=120.0)
    m = Mover(sw, cfg, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    m.run_cycle([repin_move()], sw.nodes(), sw.services(), sw.tasks())
    sw.run_task(SwarmTask("t-third-w", "id-third", "", 2, "pending", "running", ()))
    sw.stranded.add("t-third-w")  # of an older revision: never placed again
    sw.stop_tasks("id-third", "n-4090")  # the enforcer stops it; its replacement waits
    sw.run_task(SwarmTask("t-third-2", "id-third", "", 1, "pending", "running", ()))
    for _ in range(2):
        now[0] += 10.0
        m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert ("n-4090", "running") in [t[:2] for t in _third(sw)]  # the repin's task runs
    assert [r.outcome for r in m.recent] == [Outcome.STARTED] and m.records()
    now[0] += 200.0  # 220 s in: held still
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert m.records()
    now[0] += 30.0  # 250 s in: past 2 x move_timeout_s
    lines = _held_lines(lambda: m.run_cycle([], sw.nodes(), sw.services(), sw.tasks()))
    assert [r.outcome for r in m.recent][-1] is Outcome.DONE
    assert not m.records()
    said = [ln for ln in lines if "t-third-w" in ln]
    assert len(said) == 1 and "third" in said[0], lines
    assert sw.service("id-third").labels[devices_key(P, "n-4090")] == R_UUIDS[2]


def _preemption_move(make_before_break: bool) -> tuple[_Scheduling, Mover, list[float]]:
    """The victim moved as preemption moves it (``Preemption.moves``: ``Mover.start``, a
    ``preemption`` move, no window) to a target that never runs its task; its new task
    waits (the surge task, or without make-before-break the replacement of the task the
    closed source stopped); then past ``move_timeout_s``: one cycle there."""
    base = victim_cluster({})
    sw = _Scheduling(base.nodes(), base.services(), base.tasks())
    sw.cannot_run = frozenset({"n-4090"})
    now = [1000.0]
    cfg = RebalanceConfig(dry_run=False, move_timeout_s=120.0,
                          make_before_break=make_before_break)
    m = Mover(sw, cfg, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    mv = replace(victim_move(), trigger=Trigger.PREEMPTION, window_s=None)
    assert m.start(mv, sw.service("id-victim")).ok
    if make_before_break:  # the surge task, of the start's revision
        assert sw.service("id-victim").replicas == 2
        # MaxReplicas 1 (the surge's) keeps it off the source, which runs one already
        sw.cannot_run = frozenset({"n-4090", "n-dgx"})
        sw.run_task(SwarmTask("t-victim-2", "id-victim", "", 2, "pending", "running", ()))
    else:
        now[0] += 10.0
        m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
        assert gate_key(P, "victim") not in sw.node("n-dgx").labels  # the source closed
        sw.stop_tasks("id-victim", "n-dgx")  # the enforcer stops it; its replacement waits
        sw.run_task(SwarmTask("t-victim-2", "id-victim", "", 1, "pending", "running", ()))
    sw._pass(None)  # Swarm's pass: the target does not take it
    now[0] += 200.0
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    return sw, m, now


def test_a_victim_moved_by_preemption_and_rolled_back_keeps_running_on_its_source() -> None:
    """With make-before-break (the default) the roll-back's spec write restores the
    replica count: Swarm's scale-down drops the surge task that never ran (stood in for
    here), so the task it strands is gone; the victim's task on its source ran all
    along."""
    sw, m, _ = _preemption_move(True)
    assert [r.outcome for r in m.recent][-1] is Outcome.ROLLED_BACK
    assert sw.service("id-victim").replicas == 1
    sw._tasks = [t for t in sw._tasks if t.node_id or t.service_id != "id-victim"]
    assert not sw.stranded & {t.id for t in sw.tasks()}
    assert [(t.id, t.node_id, t.state) for t in sw.tasks() if t.service_id == "id-victim"
            ] == [("t-victim", "n-dgx", "running")]
    assert sw.node("n-dgx").labels.get(gate_key(P, "victim")) == "true"
    assert gate_key(P, "victim") not in sw.node("n-4090").labels


def test_a_victim_moved_by_preemption_without_a_surge_is_rolled_back_onto_its_source(
        ) -> None:
    """Without make-before-break its source closes at once; rolled back, the gates move
    before the spec write (the mover's roll-back), so its waiting task runs on the source
    again and none is left waiting for good."""
    sw, m, _ = _preemption_move(False)
    assert [r.outcome for r in m.recent][-1] is Outcome.ROLLED_BACK
    assert not sw.stranded
    assert [(t.node_id, t.state) for t in sw.tasks() if t.service_id == "id-victim"] == [
        ("n-dgx", "running")]


def test_a_victims_write_replaces_its_replica_that_waits_for_a_node() -> None:
    """batch (priority 0, 2 replicas of 8 GPUs) runs one replica on the 4090, which
    high (priority 100) preempts; its second replica waits for a node. The victim's
    spec write (its device list gone, the preempted record: labels only) left that
    task of an older revision, never tried again: it waited until batch's next
    placement forced it. The write carries the renewal constraint now (a change of
    placement alone, which every node meets): the waiting task is replaced by one of the
    write's revision; the running one stays until its gate closes."""
    held = Holding("batch", "n-4090", R_UUIDS, tuple(1000 for _ in R_UUIDS))
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", {assign_key(P, "batch"): held.label_value(),
                                            gate_key(P, "batch"): "true"})]
    batch = sw_svc("batch", {f"{P}gpus": "8", f"{P}priority": "0",
                             devices_key(P, "n-4090"): ",".join(R_UUIDS)}, replicas=2)
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*",
                           f"{P}priority": "100"})
    tasks = [SwarmTask("t-batch-1", batch.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-batch-2", batch.id, "", 2, "pending", "running", ()),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ())]
    sw = _Scheduling(nodes, [batch, high], tasks)
    sw.cannot_run = frozenset({"n-4090"})  # MaxReplicas 1: it runs one of batch already
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels())
    cfg = Config(preemption=PreemptionConfig(dry_run=False))
    done = Preempter(cfg).cycle(sw, snap, make_plan(snap, cfg), FACTS,  # type: ignore[arg-type]
                                now=5000.0)
    assert [p.describe() for p in done] == [
        "preempt batch (priority 0) on gpu-node-2 for high (priority 100)"]
    assert gate_key(P, "batch") not in sw.node("n-4090").labels  # stopped
    assert not sw.stranded
    assert [t.id for t in sw.tasks() if t.service_id == batch.id] == [
        "t-batch-1", "t-batch-2-new"]  # the running one was not replaced by the write
    spec = sw.service(batch.id)
    assert spec.force_update == 0 and [c for c in spec.constraints if is_renew(c, P)]
    assert devices_key(P, "n-4090") not in spec.labels
