"""A move in flight is judged on its own service's tasks, checked by their ServiceID on
Swarm's answer, not by the ``service`` filter sent with the list alone (as its desired
state is: ``test_mover_desired_state``). Before, ``Mover.advance`` took every task an
engine or proxy that dropped the filter returned as the service's own: another
service's task running on the target finished the move there (the moved replica not
running anywhere: the source closed), and another's on the source held it open until its
timeout rolled it back; a repin's (``Repin.advance``) alike, on its one node. Pure, over
the recording Swarm stand-in (tests/support/forged.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from support.forged import (
    P,
    RecordingSwarm,
    outcomes_of_a_cycle,
    repin_gate_closed,
    victim_cluster,
    victim_source_closed,
)

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.placement import gate_key
from swarmgpu.manager.rebalance.mover import read_records
from swarmgpu.manager.rebalance.moves import Outcome
from swarmgpu.swarm.client import SwarmTask


class NoServiceFilter(RecordingSwarm):
    """An engine (or a proxy before it) that answers the task list without its
    ``service`` filter: every service's tasks."""

    def tasks(self, filters: Mapping[str, Any] | None = None, *,
              states: AbstractSet[str] | None = None) -> list[SwarmTask]:
        f = {k: v for k, v in (filters or {}).items() if k != "service"}
        return super().tasks(f, states=states)


def _source_closed() -> tuple[NoServiceFilter, list[float], Any]:
    """The victim's move to gpu-node-2 at step 3 (its source closed, its old task
    stopped) under an engine that drops the ``service`` filter; third runs on the target."""
    base = victim_cluster({})
    sw, now, m = victim_source_closed(NoServiceFilter(base.nodes(), base.services(),
                                                      base.tasks()))
    assert isinstance(sw, NoServiceFilter)
    return sw, now, m


def test_another_services_task_on_the_target_does_not_finish_a_move() -> None:
    sw, now, m = _source_closed()
    now[0] += 5.0
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    # the victim's task does not run on the target yet: the move waits (no outcome)
    assert "victim" not in {r.service for r in m.recent if r.outcome is not Outcome.STARTED}
    assert set(read_records(sw.swarm_labels(), P)) == {"id-victim"}


def test_another_services_task_on_the_source_does_not_hold_a_move_open() -> None:
    sw, now, m = _source_closed()
    sw.run_task(SwarmTask("t-attacker-2", "id-attacker", "n-dgx", 2, "running", "running", ()))
    sw.run_task(SwarmTask("t-victim-2", "id-victim", "n-4090", 1, "running", "running", ()))
    now[0] += 5.0
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert {r.service: r.outcome for r in m.recent if r.outcome is not Outcome.STARTED} \
        == {"victim": Outcome.DONE}
    assert read_records(sw.swarm_labels(), P) == {}


def test_another_services_task_on_a_repins_node_neither_holds_nor_finishes_it() -> None:
    rb = RebalanceConfig(dry_run=False, move_timeout_s=120.0)
    base, now = repin_gate_closed(rb)  # third's repin at step 2: its gate closed
    base.stop_tasks("id-third", "n-4090")  # Swarm let its old task go
    sw = NoServiceFilter(base.nodes(), base.services(), base.tasks(), base.swarm_labels())
    # another service's task runs on the node (neither third's old task nor its new one)
    sw.run_task(SwarmTask("t-attacker-2", "id-attacker", "n-4090", 2, "running", "running", ()))
    now[0] += 5.0
    assert outcomes_of_a_cycle(sw, rb, now) == []
    assert sw.node("n-4090").labels.get(gate_key(P, "third")) == "true"  # step 3
    now[0] += 5.0
    # third's new task is not running yet: the repin waits, not finished on another's
    assert outcomes_of_a_cycle(sw, rb, now) == []
    assert set(read_records(sw.swarm_labels(), P)) == {"id-third"}
