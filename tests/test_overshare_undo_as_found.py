"""The over-share restart's undos act on what they find, and say what they did.

The restart writes its cool-down mark, closes the service's gate on the node, waits for
Swarm to stop the task, and reopens the gate (``overshare.Restarter``). Where no gate
closed, it takes its mark back (``_take_back``) unless one was written since: it said
"mark taken back" then too, though nothing was. The reopening wrote the gate "true"
whatever it found: a gate written meanwhile (an operator's, another daemon's) was
overwritten. Now it writes only where the gate is absent, as the restart left it. Pure,
over the recording Swarm stand-in (tests/support/forged.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import pytest
from support.forged import THIRD, P, RecordingSwarm, victim_cluster
from support.loglines import log_lines

from swarmgpu.core.config import Config, PlacementConfig, SyncConfig
from swarmgpu.manager.cycle.overshare import OvershareStep
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.placement import gate_key
from swarmgpu.manager.rebalance.context import MOVED_AT
from swarmgpu.swarm.client import SwarmTask

GATE = gate_key(P, "third")


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    yield from log_lines("WARNING")


class MarkedMeanwhile(RecordingSwarm):
    """The gate of third is gone before the restart closes it, and as it closes it
    another daemon's restart writes its own cool-down mark on the service."""

    def update_node_labels(self, node_id: str,
                           compute: Callable[[Mapping[str, str]], Mapping[str, str] | None],
                           **kw: Any) -> bool:
        if not getattr(self, "marked", False):
            self.marked = True
            super().update_node_labels(node_id, lambda cur: {
                k: v for k, v in cur.items() if k != GATE})
            self.update_service_spec("id-third", lambda spec: {
                **spec, "Labels": {**spec.get("Labels", {}), P + MOVED_AT: "other"}})
        return super().update_node_labels(node_id, compute, **kw)


class GateWrittenInTheWait(RecordingSwarm):
    """As the restart waits for the task to stop, the gate is written "false" (an
    operator holding the service off the node); the task stops."""

    def tasks(self, filters: Mapping[str, Any] | None = None, *,
              states: AbstractSet[str] | None = None, read: Any = None) -> list[SwarmTask]:
        if not getattr(self, "written", False):
            self.written = True
        else:
            super().update_node_labels("n-4090", lambda cur: {**cur, GATE: "false"})
            return []
        return super().tasks(filters, states=states)


def restarter_of(tmp_path: Path, kind: type[RecordingSwarm]) -> tuple[Any, OvershareStep]:
    base = victim_cluster({})
    sw = kind(base.nodes(), base.services(), base.tasks(), base.swarm_labels())
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 placement=PlacementConfig(overshare="restart"))
    step = OvershareStep(Daemon(cfg, swarm=sw))  # type: ignore[arg-type]
    step.restarter.wait_s = 0.3
    return sw, step


def test_a_mark_written_since_is_kept_and_not_said_taken_back(
        tmp_path: Path, warnings: list[str]) -> None:
    sw, step = restarter_of(tmp_path, MarkedMeanwhile)
    assert step.restarter._bounce(sw.service("id-third"), THIRD, MOVED_AT) is False
    assert sw.service("id-third").labels.get(P + MOVED_AT) == "other"
    said = [w for w in warnings if "third" in w and "cool-down mark" in w]
    assert said and not any("taken back" in w and "not taken" not in w for w in said), said
    assert any("written since" in w for w in said), said


def test_the_reopen_leaves_a_gate_written_during_the_wait(
        tmp_path: Path, warnings: list[str]) -> None:
    sw, step = restarter_of(tmp_path, GateWrittenInTheWait)
    step.restarter._bounce(sw.service("id-third"), THIRD, MOVED_AT)
    assert sw.node("n-4090").labels.get(GATE) == "false"
    assert any("not reopened" in w and "left as written" in w for w in warnings), warnings
