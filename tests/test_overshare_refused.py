"""A service that refuses over-share restarts (``rebalance: never``, or replicas packed
on one node) is never restarted, and the operator is told once per change, in one
warning naming the service and the fix, not every cycle it stays over its share.
Before, the line was at info and named no fix. Pure, over the recording Swarm stand-in
(tests/support/forged.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.forged import (
    FACTS,
    R_UUIDS,
    T_UUID,
    THIRD,
    P,
    RecordingSwarm,
    held_labels,
    snapshot,
    sw_svc,
    victim_cluster,
)
from support.loglines import log_lines

from swarmgpu.core.config import Config, PlacementConfig
from swarmgpu.manager.placement import assign_key
from swarmgpu.manager.placement.ledger import packed_holding
from swarmgpu.manager.rebalance.context import MOVED_AT
from swarmgpu.manager.services.overshare import Restarter
from swarmgpu.swarm.client import SwarmTask


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    yield from log_lines("WARNING")


def _refused(labels: Mapping[str, str], held: str = "") -> tuple[RecordingSwarm, Any]:
    """victim_cluster with third labelled ``labels`` (its holding ``held`` if given)."""
    base = victim_cluster({})
    third = sw_svc("third", {**base.service("id-third").labels, **labels})
    nodes = [n if n.id != "n-4090" or not held else
             replace(n, labels={**n.labels, assign_key(P, "third"): held})
             for n in base.nodes()]
    services = [third if s.id == third.id else s for s in base.services()]
    sw = RecordingSwarm(nodes, services, base.tasks(), base.swarm_labels())
    return sw, snapshot(sw.nodes(), sw.services(), sw.tasks())


@pytest.mark.parametrize("case", ["never", "packed"])
def test_a_tenant_refusing_restarts_is_told_once_with_the_fix_and_left_running(
        tmp_path: Path, warnings: list[str], case: str) -> None:
    if case == "never":
        sw, snap = _refused({f"{P}rebalance": "never"})
        fix = f"opted out ({P}rebalance=never); remove that label"
    else:
        held = packed_holding("third", "n-4090", {1: ((T_UUID,), (1000,)),
                                                  2: ((R_UUIDS[1],), (1000,))})
        sw, snap = _refused({}, held.label_value())
        fix = f"{P}pack=never"
    cfg = Config(state_dir=str(tmp_path), dry_run=False,
                 placement=PlacementConfig(overshare="restart"))
    r = Restarter(sw, cfg, wait_s=0.0)  # type: ignore[arg-type]
    for _ in range(3):  # three cycles over its share
        assert r.run([THIRD], snap) == 0
    assert sw.calls == []  # nothing written: its task runs on
    said = [w for w in warnings if "third" in w]
    assert len(said) == 1, said
    assert "gpu-node-2" in said[0] and fix in said[0], said[0]
    assert "SWARMGPU_GPU_MEMORY_MIB" in said[0], said[0]
    r.run([], snap)  # back within its share, then over again: told again
    r.run([THIRD], snap)
    assert len([w for w in warnings if "third" in w]) == 2


# With tenants, an opt-out is the operator's to grant: ``may_opt_out`` (docs/requests.md,
# "Tenants") governs the over-share restart as it does preemption.
MAY_NOT = {"ops": {"services": ["ops-*"], "may_opt_out": True}}  # third: default's
MAY = {"ops": {"services": ["third"], "may_opt_out": True}}


def _running(labels: Mapping[str, str]) -> tuple[RecordingSwarm, Any]:
    """``_refused``, third's task running the container its reading was checked against."""
    sw, _ = _refused(labels)
    tasks = [replace(t, container_id="c" * 64) if t.id == "t-third" else t for t in sw.tasks()]
    sw = RecordingSwarm(sw.nodes(), sw.services(), tasks, sw.swarm_labels())
    return sw, snapshot(sw.nodes(), sw.services(), sw.tasks())


@pytest.mark.parametrize("labels", [
    pytest.param({f"{P}rebalance": "never"}, id="rebalance-never"),
    pytest.param({f"{P}gpu-memory": "lots"}, id="a-broken-label"),
])
def test_a_tenant_that_may_not_opt_out_is_restarted_over_its_share(
        tmp_path: Path, labels: Mapping[str, str]) -> None:
    """``rebalance: never``, or a label broken so that the request reads invalid, kept a
    share over its size running on its neighbours' memory: its owner's word alone. A
    tenant that may not opt out of preemption may not opt out of this either."""
    sw, _ = _running(labels)
    assert _restarted(sw, tmp_path) == 1


def test_a_tenant_that_may_opt_out_still_refuses_restarts(tmp_path: Path) -> None:
    sw, _ = _running({f"{P}rebalance": "never"})
    assert _restarted(sw, tmp_path, MAY) == 0
    assert sw.calls == []


def _restarted(sw: RecordingSwarm, tmp_path: Path,
               tenants: Mapping[str, Any] = MAY_NOT) -> int:
    """The over-share restarts one cycle makes of THIRD, over ``sw`` as it stands now."""
    cfg = Config(state_dir=str(tmp_path), dry_run=False, tenants=tenants,
                 placement=PlacementConfig(overshare="restart"))
    snap = snapshot(sw.nodes(), sw.services(), sw.tasks())
    return Restarter(sw, cfg, wait_s=0.0).run([THIRD], snap)  # type: ignore[arg-type]


def _stamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + "Z"


def _two_replicas(sw: RecordingSwarm, made: float, other_made: float,
                  labels: Mapping[str, str] | None = None) -> RecordingSwarm:
    """``sw`` with third at two replicas, one a node: its task on n-4090 made at ``made``,
    a second running on n-dgx's GPU 1 made at ``other_made``; the swarm object's labels
    and ``labels``."""
    dgx_gpu1 = FACTS["n-dgx"].gpus[1].uuid
    third = replace(sw.service("id-third"), replicas=2, max_replicas_per_node=1)
    nodes = [replace(n, labels={**n.labels, **held_labels("third", "n-dgx", dgx_gpu1)})
             if n.id == "n-dgx" else n for n in sw.nodes()]
    tasks = [replace(t, created_at=_stamp(made)) if t.id == "t-third" else t
             for t in sw.tasks()]
    tasks.append(SwarmTask("t-third-2", third.id, "n-dgx", 2, "running", "running", (),
                           created_at=_stamp(other_made)))
    services = [third if s.id == third.id else s for s in sw.services()]
    return RecordingSwarm(nodes, services, tasks, {**sw.swarm_labels(), **(labels or {})})


@pytest.mark.parametrize(("made_ago", "recorded", "restarted"), [
    pytest.param(3600.0, False, 1, id="a-mark-its-stack-wrote-on-a-task-that-ran-all-along"),
    pytest.param(-5.0, False, 1, id="its-owner-force-restarted-its-task-after-the-mark"),
    pytest.param(-5.0, True, 0, id="the-daemons-restart-made-its-task-after-the-mark"),
    pytest.param(3600.0, True, 1, id="a-recorded-restarts-mark-on-a-task-that-ran-all-along"),
])
def test_a_cool_down_mark_counts_only_when_the_daemon_recorded_its_restart(
        tmp_path: Path, made_ago: float, recorded: bool, restarted: int) -> None:
    """``<p>state.moved-at`` is the restart's (and a move's) mark, but a label its stack
    can write: written again each minute it kept every restart away (cooling down) from
    a share over its size. For a tenant that may not opt out it counts only where the
    daemon's own list of its restarts (``state.restarts`` on the swarm object, managers'
    alone) has this service's restart at that second and its task there was made after
    it, as the restart's replacement is. Before, a task of it made after the mark was
    taken for the restart's replacement: its owner wrote the mark, then force-restarted
    its own task (``docker service update --force``), and had its cool-down at a
    restart's cost, each time; and the record alone, a task that ran all along kept."""
    mark = time.time() - 10
    sw, _ = _running({P + MOVED_AT: f"{mark:.0f}"})
    tasks = [replace(t, created_at=_stamp(mark - made_ago)) if t.id == "t-third" else t
             for t in sw.tasks()]
    labels = {**sw.swarm_labels(),
              **({P + "state.restarts": f"id-other@{mark:.0f},id-third@{mark:.0f}"}
                 if recorded else {P + "state.restarts": f"id-other@{mark:.0f}"})}
    sw = RecordingSwarm(sw.nodes(), sw.services(), tasks, labels)
    for tenants, want in ((MAY, 0), (MAY_NOT, restarted)):  # (one that may: as before)
        assert _restarted(sw, tmp_path, tenants) == want, tenants


@pytest.mark.parametrize(("finished", "restarted"), [
    pytest.param(True, 0, id="the-movers-list-has-the-move-finished-at-the-mark"),
    pytest.param(False, 1, id="no-move-finished-then"),
])
def test_a_moves_cool_down_mark_counts_though_its_task_was_made_before_it(
        tmp_path: Path, finished: bool, restarted: int) -> None:
    """A move writes ``moved-at`` at its end (``record.end_move``), after the task it
    started on its target (make-before-break: a cycle or more, and a model server's
    load), so no task of it was made after the mark. The mover's list of finished moves
    on the swarm object (``state.moves-finished``, managers' alone) has its end in that
    very second: for a tenant that may not opt out the mark counts then too. Before, a
    move that took over a minute cooled nothing, and the restart followed it at once."""
    mark = time.time() - 10
    sw, _ = _running({P + MOVED_AT: f"{mark:.0f}"})
    tasks = [replace(t, created_at=_stamp(mark - 300)) if t.id == "t-third" else t
             for t in sw.tasks()]
    labels = {**sw.swarm_labels(),
              **({P + "state.moves-finished": f"{mark - 900:.0f},{mark:.0f}"} if finished
                 else {P + "state.moves-finished": f"{mark - 900:.0f}"})}
    sw = RecordingSwarm(sw.nodes(), sw.services(), tasks, labels)
    assert _restarted(sw, tmp_path) == restarted


def test_a_moves_mark_copied_onto_a_share_that_ran_all_along_buys_no_cool_down(
        tmp_path: Path) -> None:
    """The mover's list of finished moves says a move ended in a second, not whose: a
    genuine ``moved-at`` mark copied from another service's move (its spec is anyone's to
    read) onto a share over its size that had run all along cooled it down as though it
    had been moved. A move's mark counts only where the share's task on that node was
    made during a move ending then (within twice ``move_timeout_s``, a cycle and the
    managers' skew before it), as the task a move starts is."""
    mark = time.time() - 10
    sw, _ = _running({P + MOVED_AT: f"{mark:.0f}"})
    tasks = [replace(t, created_at=_stamp(mark - 3600)) if t.id == "t-third" else t
             for t in sw.tasks()]
    labels = {**sw.swarm_labels(), P + "state.moves-finished": f"{mark:.0f}"}
    sw = RecordingSwarm(sw.nodes(), sw.services(), tasks, labels)
    assert _restarted(sw, tmp_path) == 1


def test_a_moves_mark_copied_then_force_restarted_buys_no_cool_down(tmp_path: Path) -> None:
    """A move's task is made before its end (its mark written after the task it started
    runs). A genuine mark copied from another service's move, then its owner's own
    ``docker service update --force``, made a task after the move's end, which a move's
    span (counted back from the end) took as the move's: a cool-down at a restart's
    cost each time a move finished anywhere. A task made more than the managers' skew
    after the end is no move's."""
    mark = time.time() - 200  # (within rebalance.cooldown_s)
    sw, _ = _running({P + MOVED_AT: f"{mark:.0f}"})
    tasks = [replace(t, created_at=_stamp(mark + 120)) if t.id == "t-third" else t
             for t in sw.tasks()]
    labels = {**sw.swarm_labels(), P + "state.moves-finished": f"{mark:.0f}"}
    sw = RecordingSwarm(sw.nodes(), sw.services(), tasks, labels)
    assert _restarted(sw, tmp_path) == 1


@pytest.mark.parametrize("recorded", [
    pytest.param(False, id="its-owners-mark"),
    pytest.param(True, id="the-daemons-restart-of-the-other-replica-recorded-then"),
])
def test_a_fresh_task_of_another_replica_does_not_bear_out_the_mark_on_this_node(
        tmp_path: Path, recorded: bool) -> None:
    """A restart's mark is borne out by the replacement it makes on the node it restarts.
    Any task of the service counted: a replica elsewhere that its own code ended (Swarm
    makes a new task there) with the mark written again at the same time kept the
    replica over its share on this node cooling down for good. So did the daemon's own
    record of a restart (``state.restarts``) of the other replica: the record names the
    service, not the node; the replica on this node ran all along."""
    mark = time.time() - 10
    sw, _ = _running({P + MOVED_AT: f"{mark:.0f}"})
    if recorded:
        sw = RecordingSwarm(sw.nodes(), sw.services(), sw.tasks(),
                            {**sw.swarm_labels(), P + "state.restarts": f"id-third@{mark:.0f}"})
    sw = _two_replicas(sw, made=mark - 3600, other_made=mark + 5)
    assert _restarted(sw, tmp_path) == 1


@pytest.mark.parametrize(("tenants", "restarted"), [
    pytest.param(MAY_NOT, 1, id="a-tenant-that-may-not-opt-out"),
    pytest.param(MAY, 0, id="a-tenant-that-may"),
])
def test_a_replica_left_waiting_keeps_no_share_over_its_size_from_the_restart(
        tmp_path: Path, tenants: Mapping[str, Any], restarted: int) -> None:
    """A service asking for more replicas than it is given (its queue at its max, no GPU
    free) is not converged, which kept each of its running replicas from the over-share
    restart for as long as one waits: scaling up past the quota was an opt-out. For a
    tenant that may not opt out the restart judges the replica on its node alone (one
    holding, its one task there running); one that may opt out is judged as before."""
    sw, _ = _running({})
    third = replace(sw.service("id-third"), replicas=2, max_replicas_per_node=1)
    tasks = [*sw.tasks(), SwarmTask("t-third-2", third.id, "", 2, "pending", "running", ())]
    services = [third if s.id == third.id else s for s in sw.services()]
    sw = RecordingSwarm(sw.nodes(), services, tasks, sw.swarm_labels())
    assert _restarted(sw, tmp_path, tenants) == restarted


@pytest.mark.parametrize(("own_restart_ago", "recorded", "restarted"), [
    pytest.param(200.0, True, 0, id="its-own-restart-within-the-cool-down"),
    pytest.param(3600.0, True, 1, id="its-task-older-than-the-cool-down"),
    pytest.param(200.0, False, 1, id="the-other-replicas-mark-not-the-daemons"),
])
def test_a_restart_of_another_replica_leaves_this_ones_own_cool_down(
        tmp_path: Path, own_restart_ago: float, recorded: bool, restarted: int) -> None:
    """The mark is one per service and each restart writes it anew. Two replicas over
    their share, one restarted on n-4090, the other on n-dgx 200 s later: the second
    restart's mark is borne out on n-dgx alone, so n-4090's own cool-down was dropped
    and its replica restarted again within ``rebalance.cooldown_s`` of its last restart,
    the daemon's own marks undoing each other. A mark a task elsewhere bears out cools
    this node from the making of its task there (a restart's or a move's; no longer
    than the mark's), as that task's own restart would have; but only where the mark
    is borne out there as on the node judged, the daemon's list having that restart: a
    mark its owner wrote, with a fresh task of the other replica, cools nothing."""
    mark = time.time() - 10  # n-dgx's restart
    sw, _ = _running({P + MOVED_AT: f"{mark:.0f}"})
    # (n-dgx's restart in the daemon's list: a mark counts only so, here or elsewhere)
    listed = {P + "state.restarts": f"id-third@{mark:.0f}"} if recorded else {}
    sw = _two_replicas(sw, made=mark - own_restart_ago, other_made=mark + 5, labels=listed)
    assert _restarted(sw, tmp_path) == restarted


@pytest.mark.parametrize(("ended_ago", "restarted"), [
    pytest.param(650.0, 1, id="the-move-ended-past-the-cool-down"),
    pytest.param(200.0, 0, id="the-move-ended-within-the-cool-down"),
])
def test_a_moves_mark_borne_out_elsewhere_cools_no_longer_than_the_mark(
        tmp_path: Path, ended_ago: float, restarted: int) -> None:
    """A move of the replica on n-dgx ended at the mark (its task there made during the
    move); the replica on n-4090 was made after that end (its container ended, Swarm
    made a new task), which bears out no move there. Cooled from its own task's making
    as an other replica's mark is, it cooled past the mark, its genuine move long
    cooled: a cool-down counts from the mark at the latest."""
    mark = time.time() - ended_ago
    sw, _ = _running({P + MOVED_AT: f"{mark:.0f}"})
    sw = _two_replicas(sw, made=mark + 120, other_made=mark - 100,  # (the move's)
                       labels={P + "state.moves-finished": f"{mark:.0f}"})
    assert _restarted(sw, tmp_path) == restarted


def test_the_daemons_restart_is_recorded_and_its_mark_cools_the_next_one(
        tmp_path: Path) -> None:
    """The over-share restart writes its service's restart to the swarm object's list
    before its mark: the next cycle (this daemon's, or the next leader's) reads its mark
    as the daemon's own, and, its replacement on that node made after the mark, the
    tenant that may not opt out cools down as it should."""
    sw, _ = _running({})
    assert _restarted(sw, tmp_path) == 1
    mark = sw.service("id-third").labels[P + MOVED_AT]
    assert sw.swarm_labels()[P + "state.restarts"] == f"id-third@{mark}"
    # Swarm's replacement (the stand-in makes none): made after the mark, on that node
    tasks = [replace(t, created_at=_stamp(float(mark) + 1)) if t.id == "t-third" else t
             for t in sw.tasks()]
    sw = RecordingSwarm(sw.nodes(), sw.services(), tasks, sw.swarm_labels())
    assert _restarted(sw, tmp_path) == 0


def test_a_restart_whose_record_cannot_be_stored_is_not_made(tmp_path: Path) -> None:
    """Unrecorded, its mark would read as its owner's and cool nothing: the mark is
    taken back, its gate never closed, and it is tried again next cycle."""
    from swarmgpu.swarm.client import SwarmError

    sw, _ = _running({})

    def refused(*_a: Any, **_k: Any) -> bool:
        raise SwarmError("update out of sequence")

    sw.update_swarm_labels = refused  # type: ignore[method-assign]
    assert _restarted(sw, tmp_path) == 0
    assert P + MOVED_AT not in sw.service("id-third").labels
    assert not any(kind == "node" for kind, _ in sw.calls), sw.calls
