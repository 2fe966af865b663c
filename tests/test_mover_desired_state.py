"""A move's reads of its service's tasks judge each task's desired state on Swarm's
answer (``MEANT_STATES``), not by a ``desired-state`` filter sent with the list (as
``victimspec.renewed``): the list is one service's tasks, its ended ones included (a
few per slot), so nothing large is read. Before, ``Mover.advance`` counted any task
the list returned on the source as one that may start there: the old task Swarm shut
down (kept in its history), returned by an engine or proxy that dropped the filter,
held the move open until its timeout rolled it back. Pure, over the recording Swarm
stand-in (tests/support/forged.py)."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from support.forged import P, RecordingSwarm, victim_cluster, victim_source_closed

from swarmgpu.manager.rebalance.mover import read_records
from swarmgpu.manager.rebalance.moves import Outcome
from swarmgpu.swarm.client import SwarmTask


class Unfiltered(RecordingSwarm):
    """An engine (or a proxy before it) that answers the task list without its
    ``desired-state`` filter: every task of the service, ended ones too."""

    def tasks(self, filters: Mapping[str, Any] | None = None, *,
              states: AbstractSet[str] | None = None) -> list[SwarmTask]:
        f = {k: v for k, v in (filters or {}).items() if k != "desired-state"}
        return super().tasks(f, states=states)


def test_a_shut_down_task_on_the_source_does_not_hold_a_move_open() -> None:
    base = victim_cluster({})
    # its source closed; the enforcer stopped the old task: Swarm keeps it, desired and
    # observed shutdown, and runs its replacement on the target.
    sw, now, m = victim_source_closed(Unfiltered(base.nodes(), base.services(), base.tasks()))
    sw.run_task(SwarmTask("t-victim", "id-victim", "n-dgx", 1, "shutdown", "shutdown", ()))
    sw.run_task(SwarmTask("t-victim-2", "id-victim", "n-4090", 1, "running", "running", ()))
    now[0] += 5.0
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert {r.service: r.outcome for r in m.recent} == {"victim": Outcome.DONE}
    assert read_records(sw.swarm_labels(), P) == {}
