"""The daemon's actuators' writes of a service (rebalancing) leave no task of
it waiting for good: Swarm's scheduler never tries again a waiting task of an older
service revision (moby/swarmkit 807f25e, ``noSuitableNode``; docs/deploy.md), and a
write of labels alone replaces no task."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from support.forged import (
    DGX_F,
    R4090_F,
    RecordingSwarm,
    victim_cluster,
    victim_move,
)

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.placement import gate_key
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
        force = self.service(service_id).force_update
        wrote = super().update_service_spec(service_id, compute, **kw)
        fresh: frozenset[str] = frozenset()
        if self.service(service_id).force_update != force:  # the waiting tasks replaced
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
    now = [1000.0]
    cfg = RebalanceConfig(dry_run=False, move_timeout_s=120.0, make_before_break=False)
    m = Mover(sw, cfg, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    now[0] += 10.0
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert gate_key(P, "victim") not in sw.node("n-dgx").labels  # the source closed
    sw.stop_tasks("id-victim", "n-dgx")  # the enforcer stops it; its replacement waits
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
