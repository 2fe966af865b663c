"""The daemon's memory across cycles shrinks back when what it names goes: services,
nodes and GPUs come and go for months (CI stacks every few minutes, nodes replaced), and
state kept by a name or ID that no longer exists is memory (and a state file) that only
grows. Each test makes many objects, runs the component's per-cycle entry point, lets
them go and runs it again."""

from __future__ import annotations

from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot

N = 1000  # objects made and gone


def test_preemption_settle_times_of_gone_services_are_dropped() -> None:
    """A victim's cooldown and a preemptor's settle time are by service name; past them
    a time decides nothing, and a month of CI stacks left one each in memory for good."""
    cfg = Config()
    pre = Preempter(cfg)
    for i in range(N):  # as cycle() leaves them after N preemptions at t=1000
        pre.victim_at[f"ci-{i}_victim"] = 1000.0
        pre.preemptor_at[f"ci-{i}_job"] = 1000.0
    snap = Snapshot([], [], [], {})
    plan = make_plan(snap, cfg)
    pre.decide(snap, plan, {}, None, 1000.0 + cfg.preemption.settle_s - 1)
    assert len(pre.preemptor_at) == N  # still settling: kept
    pre.decide(snap, plan, {}, None, 1000.0 + cfg.preemption.victim_cooldown_s - 1)
    assert not pre.preemptor_at and len(pre.victim_at) == N  # still cooling: kept
    pre.decide(snap, plan, {}, None, 1000.0 + cfg.preemption.victim_cooldown_s)
    assert not pre.victim_at
