"""The over-share restarts' list on the swarm object (``<p>state.restarts``) is bounded
(``restartlist.KEEP``), and what a bound drops decides whose cool-down goes. It dropped
the oldest entry: a tenant whose own shares were restarted, again and again (each over
its share a window, which its own code decides), pushed another tenant's restart out of
the list within that one's cool-down, whose mark then cooled nothing: that tenant's
share was restarted again before ``rebalance.cooldown_s`` ran, for a tenant that may
not opt out. A service's older entries go first; its newest stays. Pure, over the
recording Swarm stand-in (tests/support/forged.py)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from support.forged import THIRD, P, RecordingSwarm, snapshot, victim_cluster

from swarmgpu.core.config import Config, PlacementConfig
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.rebalance.context import MOVED_AT
from swarmgpu.manager.services.overshare import Restarter
from swarmgpu.manager.services.restartlist import KEEP, RESTARTS, record_restart, restart_times

MAY_NOT = {"ops": {"services": ["ops-*"], "may_opt_out": True}}  # third: default's


def _stamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + "Z"


def test_anothers_many_restarts_leave_this_ones_restart_and_its_cool_down(
        tmp_path: Path) -> None:
    mark = time.time() - 300  # third's restart, within its cool-down (600 s)
    base = victim_cluster({})
    third = replace(base.service("id-third"),
                    labels={**base.service("id-third").labels, P + MOVED_AT: f"{mark:.0f}"})
    tasks = [replace(t, container_id="c" * 64, created_at=_stamp(mark + 2))  # its replacement
             if t.id == "t-third" else t for t in base.tasks()]
    services = [third if s.id == third.id else s for s in base.services()]
    sw = RecordingSwarm(base.nodes(), services, tasks, base.swarm_labels())
    writes = Writes(sw, dry_run=False, who="test", prefix=P)  # type: ignore[arg-type]
    assert record_restart(writes, P, "id-third", f"{mark:.0f}", mark) == ""
    for i in range(KEEP):  # another tenant's eight shares, restarted over and over since
        at = mark + 10 + i
        assert record_restart(writes, P, f"id-other-{i % 8}", f"{at:.0f}", at) == ""
    kept = restart_times(sw.swarm_labels(), P)
    assert float(f"{mark:.0f}") in kept.get("id-third", ()), sw.swarm_labels()[P + RESTARTS]
    assert len(sw.swarm_labels()[P + RESTARTS].split(",")) <= KEEP
    cfg = Config(state_dir=str(tmp_path), dry_run=False, tenants=MAY_NOT,
                 placement=PlacementConfig(overshare="restart"))
    snap = snapshot(sw.nodes(), sw.services(), sw.tasks())
    assert Restarter(sw, cfg, wait_s=0.0).run([THIRD], snap) == 0  # type: ignore[arg-type]


def test_each_services_newest_restart_is_kept_and_the_list_stays_bounded() -> None:
    sw = victim_cluster({})
    writes = Writes(sw, dry_run=False, who="test", prefix=P)  # type: ignore[arg-type]
    now = time.time()
    for i in range(3 * KEEP):
        record_restart(writes, P, f"id-{i % 5}", f"{now + i:.0f}", now + i)
    kept = restart_times(sw.swarm_labels(), P)
    assert {sid: max(ts) for sid, ts in kept.items()} == {
        f"id-{k}": float(f"{now + max(i for i in range(3 * KEEP) if i % 5 == k):.0f}")
        for k in range(5)}
    assert len(sw.swarm_labels()[P + RESTARTS].split(",")) == KEEP


def test_an_entry_at_no_clocks_time_is_dropped_as_read() -> None:
    """(the finite check: ``inf``, ``nan``, ``1e309`` no clock wrote; ``-0`` is a time,
    dropped at the next write as older than the hour)"""
    text = "a@inf,b@nan,c@1e309,d@-inf,e@-0,f@,@5,g@1796656247"
    assert restart_times({P + RESTARTS: text}, P) == {
        "e": frozenset({0.0}), "g": frozenset({1796656247.0})}
