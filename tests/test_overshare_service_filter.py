"""The over-share restart (``overshare.Restarter``) waits for its service's own task on
the node to stop, each task's service judged on Swarm's answer (its ServiceID), not by
the ``service`` filter sent with the list alone. Before, an engine (or a proxy before it)
that dropped the filter answered every task of the swarm, and another service's task
running on the node counted as the old one still running: the restart held the gate
closed its whole ``wait_s``, then warned. Pure, over the recording Swarm stand-in
(tests/support/forged.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from loguru import logger
from support.forged import T_UUID, P, RecordingSwarm, victim_cluster

from swarmgpu.core.config import Config, PlacementConfig
from swarmgpu.manager.placement import gate_key
from swarmgpu.manager.rebalance.context import MOVED_AT
from swarmgpu.manager.services.overshare import Restarter, ServiceUse
from swarmgpu.swarm.client import SwarmTask


class NoServiceFilter(RecordingSwarm):
    """An engine that answers the task list without its ``service`` filter, and whose
    constraint enforcer stops a service's task on a node once its gate there closes.
    Counts the task lists read (``reads``)."""

    reads = 0

    def tasks(self, filters: Mapping[str, Any] | None = None, *,
              states: AbstractSet[str] | None = None) -> list[SwarmTask]:
        self.reads += 1
        f = {k: v for k, v in (filters or {}).items() if k != "service"}
        return super().tasks(f, states=states)

    def update_node_labels(self, node_id: str,
                           compute: Callable[[Mapping[str, str]], Mapping[str, str] | None],
                           **kw: Any) -> bool:
        done = super().update_node_labels(node_id, compute, **kw)
        if gate_key(P, "third") not in self.node(node_id).labels:
            self.stop_tasks("id-third", node_id)
        return done


def test_another_service_s_task_on_the_node_does_not_hold_a_restart(tmp_path: Path) -> None:
    base = victim_cluster({})
    # attacker's task runs on third's node too (a CPU service beside it)
    base.run_task(SwarmTask("t-other", "id-attacker", "n-4090", 1, "running", "running", ()))
    sw = NoServiceFilter(base.nodes(), base.services(), base.tasks(), base.swarm_labels())
    cfg = Config(state_dir=str(tmp_path), placement=PlacementConfig(overshare="restart"))
    r = Restarter(sw, cfg, wait_s=3.0)  # type: ignore[arg-type]
    u = ServiceUse("third", "n-4090", "gpu-node-2", 0, T_UUID, 30000, 20000, 1000,
                   ("t-third",), (), ())
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        assert r._bounce(sw.service("id-third"), u, MOVED_AT)
    finally:
        logger.remove(sink)
    assert not any("still runs" in line for line in lines), lines
    # Its own task stopped at once: the wait ended at its first look, not after a
    # look every 0.2 s of wait_s (15) for another's.
    assert sw.reads <= 3, sw.reads
    assert sw.node("n-4090").labels.get(gate_key(P, "third")) == "true"  # reopened
