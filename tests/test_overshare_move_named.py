"""A move's cool-down mark counts for the over-share restart (a tenant that may not opt
out) only where the mover's list names that service's move ending in the mark's second.
The mover's list of finished moves (``state.moves-finished``) names no service: a
genuine ``moved-at`` mark copied from another service's move, with its owner's own
``docker service update --force`` made just before that move's end (its task then made
within the move's span), bought a cool-down at a self-restart's cost. The per-service
list ``state.moves-ended`` (``<service id>@<second>``, written in the same write) names
it; a finish no entry names is an earlier version's, counted as before (a rolling
upgrade). Pure, over the recording Swarm stand-in (tests/support/forged.py)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from support.forged import THIRD, P, RecordingSwarm, snapshot, victim_cluster

from swarmgpu.core.config import Config, PlacementConfig
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.rebalance.context import MOVED_AT
from swarmgpu.manager.rebalance.record import drop_record, record_key
from swarmgpu.manager.services.overshare import Restarter

MAY_NOT = {"ops": {"services": ["ops-*"], "may_opt_out": True}}  # third: default's


def _stamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + "Z"


def _restarts(mark: float, made: float, swarm_labels: dict[str, str], tmp_path: Path) -> int:
    """One cycle's over-share restarts of THIRD, marked ``moved-at`` ``mark``, its task
    (the container its reading was checked against) made at ``made``."""
    base = victim_cluster({})
    third = base.service("id-third")
    services = [replace(s, labels={**s.labels, P + MOVED_AT: f"{mark:.0f}"})
                if s.id == third.id else s for s in base.services()]
    tasks = [replace(t, container_id="c" * 64, created_at=_stamp(made))
             if t.id == "t-third" else t for t in base.tasks()]
    sw = RecordingSwarm(base.nodes(), services, tasks,
                        {**base.swarm_labels(), **swarm_labels})
    cfg = Config(state_dir=str(tmp_path), dry_run=False, tenants=MAY_NOT,
                 placement=PlacementConfig(overshare="restart"))
    snap = snapshot(sw.nodes(), sw.services(), sw.tasks())
    return Restarter(sw, cfg, wait_s=0.0).run([THIRD], snap)  # type: ignore[arg-type]


@pytest.mark.parametrize(("ended", "restarted"), [
    pytest.param("id-other", 1, id="another-services-move-ended-then"),
    pytest.param("id-third", 0, id="its-own-move-ended-then"),
    pytest.param("", 0, id="a-finish-an-earlier-version-named-no-service-for"),
])
def test_a_moves_mark_counts_only_where_the_list_names_its_service(
        tmp_path: Path, ended: str, restarted: int) -> None:
    mark = time.time() - 10
    labels = {P + "state.moves-finished": f"{mark - 900:.0f},{mark:.0f}"}
    if ended:
        labels[P + "state.moves-ended"] = f"id-x@{mark - 900:.0f},{ended}@{mark:.0f}"
    # (made 30 s before the end: as a move's task is, and as its owner's force-restart
    # just before another service's move ended makes one)
    assert _restarts(mark, mark - 30, labels, tmp_path) == restarted


def test_the_mover_names_the_service_whose_move_ended(tmp_path: Path) -> None:
    """``record.drop_record`` of a finished move writes both lists in one write."""
    base = victim_cluster({})
    sw = RecordingSwarm(base.nodes(), base.services(), base.tasks(),
                        {**base.swarm_labels(), record_key(P, "id-third"): "{}"})
    writes = Writes(sw, dry_run=False, who="test", prefix=P)  # type: ignore[arg-type]
    now = time.time()
    assert drop_record(writes, P, "id-third", now, finished=True, started=False)
    got = sw.swarm_labels()
    assert got[P + "state.moves-finished"] == f"{now:.0f}"
    assert got[P + "state.moves-ended"] == f"id-third@{now:.0f}"


def test_other_services_moves_do_not_push_a_moves_entry_out_within_its_cool_down(
        tmp_path: Path) -> None:
    """The list keeps at most 256 entries, the oldest dropped first: another tenant's
    services moved again and again (their ``moved-at`` their owner's to remove, so no
    cool-down holds them back; ``rebalance.max_moves_per_cycle`` allows 1000) pushed this
    service's move out within its cool-down, whose mark then cooled nothing: restarted
    at once. A service's older entries go first now (as ``restartlist`` drops them),
    and the unnamed list's seconds (its last 64) stay named."""
    base = victim_cluster({})
    sw = RecordingSwarm(base.nodes(), base.services(), base.tasks(), base.swarm_labels())
    writes = Writes(sw, dry_run=False, who="test", prefix=P)  # type: ignore[arg-type]
    mark = time.time() - 400
    ends = [("id-third", mark)] + [(f"id-o{i % 5}", mark + 1 + i) for i in range(300)]
    for sid, at in ends:
        sw._swarm_labels[record_key(P, sid)] = "{}"
        assert drop_record(writes, P, sid, at, finished=True, started=False)
    got = sw.swarm_labels()
    named = {e.partition("@")[2] for e in got[P + "state.moves-ended"].split(",")}
    assert set(got[P + "state.moves-finished"].split(",")) <= named  # none read as anyone's
    labels = {k: v for k, v in got.items() if "state.moves-" in k}
    assert _restarts(mark, mark - 30, labels, tmp_path) == 0
