"""The preemption's two clocks (``manager.cycle.preemption``): what Swarm keeps is
wall-clock time, what the daemon keeps in memory only (a preemptor's settle time, the
hold of the GPUs freed for it: ``placement.nominated``) is measured on the monotonic
clock, so a wall clock stepped (NTP, a hand `date -s`) neither lengthens nor ends them.
The daemon's own path: ``cycle`` and ``nominated.current`` given no time."""

from __future__ import annotations

import time

import pytest
from support.forged import R4090_F, RecordingSwarm, sw_node, sw_svc

from swarmgpu.core.config import Config, PreemptionConfig
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, assign_key, devices_key, gate_key
from swarmgpu.swarm.client import SwarmTask

P = "swarmgpu."
R = tuple(g.uuid for g in R4090_F.gpus)  # 8 RTX 4090s on n-4090
FACTS = {"n-4090": R4090_F}
ON_4090 = {f"{P}gpu-product": "*RTX 4090*"}
CFG = Config(preemption=PreemptionConfig(dry_run=False, settle_s=30))


class Clocks:
    """time.time and time.monotonic, each stepped by its own shift (seconds)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.wall, self.mono = 0.0, 0.0
        real_wall, real_mono = time.time, time.monotonic
        monkeypatch.setattr(time, "time", lambda: real_wall() + self.wall)
        monkeypatch.setattr(time, "monotonic", lambda: real_mono() + self.mono)


def _preempted() -> tuple[Preempter, Snapshot]:
    """batch (priority 0) and filler (not preemptible) hold 4 GPUs each of n-4090; high
    (priority 100) waits for 4: the daemon's cycle, given no time, stops batch for it."""
    held = {"batch": R[:4], "filler": R[4:]}
    labels: dict[str, str] = {}
    for name, uuids in held.items():
        h = Holding(name, "n-4090", uuids, tuple(1000 for _ in uuids))
        labels |= {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}
    nodes = [sw_node("n-mgr", "manager", role="manager"),
             sw_node("n-4090", "gpu-node-2", labels)]
    svcs = [sw_svc(n, {f"{P}gpus": "4", devices_key(P, "n-4090"): ",".join(u), **ON_4090,
                       **({f"{P}preemptible": "false"} if n == "filler" else {})})
            for n, u in held.items()]
    svcs.append(sw_svc("high", {f"{P}gpus": "4", f"{P}priority": "100", **ON_4090}))
    tasks = [SwarmTask(f"t-{s.name}", s.id, "" if s.name == "high" else "n-4090", 1,
                       "pending" if s.name == "high" else "running", "running", ())
             for s in svcs]
    sw = RecordingSwarm(nodes, svcs, tasks)
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels())
    pre = Preempter(CFG)
    (p,) = pre.cycle(sw, snap, make_plan(snap, CFG), FACTS)  # type: ignore[arg-type]
    assert p.describe() == "preempt batch (priority 0) on gpu-node-2 for high (priority 100)"
    assert [sorted(n.uuids) for n in pre.nominated.current()] == [sorted(R[:4])]
    return pre, snap


def _settling(pre: Preempter, snap: Snapshot) -> bool:
    """high's preemption still settles: its GPUs held, its settle time kept."""
    pre.decide(snap, make_plan(snap, CFG), FACTS, None, time.time())
    held = [n.service for n in pre.nominated.current()]
    assert held == (["high"] if "high" in pre.preemptor_at else [])
    return bool(held)


def test_a_wall_clock_stepped_back_does_not_lengthen_a_hold_or_a_settle_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The wall clock steps an hour back while high waits. Before, its hold and settle
    time were wall-clock: they lasted that hour longer, its GPUs kept from the others and
    high preempting nothing more. Now settle_s (30 s) of the monotonic clock ends them."""
    clocks = Clocks(monkeypatch)
    pre, snap = _preempted()
    clocks.wall -= 3600
    clocks.mono += 29
    assert _settling(pre, snap)
    clocks.mono += 2  # 31 s since: settled, whatever the wall clock says
    assert not _settling(pre, snap)


def test_a_wall_clock_stepped_forward_does_not_end_a_hold_early(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The wall clock steps an hour forward a second after the preemption. Before, the
    hold and the settle time ended at once: an older service took the GPUs freed for high,
    which stopped another victim. Now they last their settle_s."""
    clocks = Clocks(monkeypatch)
    pre, snap = _preempted()
    clocks.wall += 3600
    clocks.mono += 1
    assert _settling(pre, snap)
