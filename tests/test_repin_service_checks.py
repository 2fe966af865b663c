"""A repin's reads of its service's tasks, and a preemption victim's renewal check
(``victimspec.renewed``), judge each task's service on Swarm's answer (its ServiceID),
not by the ``service`` filter sent with the list alone: an engine (or a proxy before it)
that dropped the filter answered every task of the swarm, and another service's task
counted as this one's. Before, a repin at step 2 saw another service's task running on
its node as its old one Swarm still wanted there: its gate never reopened. And a victim
was renewed (a spec write) for another service's task waiting for a node. Pure, over
the recording Swarm stand-in (tests/support/forged.py)."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from support.forged import P, RecordingSwarm, repin_gate_closed, victim_cluster

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.cycle.victimspec import renewed
from swarmgpu.manager.placement import gate_key
from swarmgpu.manager.rebalance.mover import Mover
from swarmgpu.swarm.client import SwarmTask

RB = RebalanceConfig(dry_run=False, move_timeout_s=120.0)


class NoServiceFilter(RecordingSwarm):
    """An engine (or a proxy before it) that answers the task list without its
    ``service`` filter: every service's tasks."""

    @classmethod
    def over(cls, base: RecordingSwarm) -> NoServiceFilter:
        return cls(base.nodes(), base.services(), base.tasks(), base.swarm_labels())

    def tasks(self, filters: Mapping[str, Any] | None = None, *,
              states: AbstractSet[str] | None = None) -> list[SwarmTask]:
        f = {k: v for k, v in (filters or {}).items() if k != "service"}
        return super().tasks(f, states=states)


def test_another_service_s_task_on_the_node_does_not_hold_a_repin_s_gate_closed() -> None:
    base, now = repin_gate_closed(RB)  # third's repin at step 2 on gpu-node-2
    base.stop_tasks("id-third", "n-4090")  # the enforcer stopped its old task
    # attacker's task runs on that node too (a CPU service beside it)
    base.run_task(SwarmTask("t-other", "id-attacker", "n-4090", 1, "running", "running", ()))
    sw = NoServiceFilter.over(base)
    now[0] += 5.0
    m = Mover(sw, RB, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    # step 3: Swarm no longer wants third's task there, so its gate reopens
    assert sw.node("n-4090").labels.get(gate_key(P, "third")) == "true"
    assert list(m.recent) == []  # nothing ended: its new task starts next


def test_another_service_s_waiting_task_does_not_renew_a_victim() -> None:
    base = victim_cluster({})
    base.run_task(SwarmTask("t-wait", "id-attacker", "", 1, "pending", "running", ()))
    sw = NoServiceFilter.over(base)
    assert renewed(sw, "id-victim") is None  # type: ignore[arg-type]
    # its own task waiting for a node renews it, as ever
    sw.run_task(SwarmTask("t-v2", "id-victim", "", 2, "pending", "running", ()))
    got = renewed(sw, "id-victim")  # type: ignore[arg-type]
    assert got is not None and got.id == "id-victim"
