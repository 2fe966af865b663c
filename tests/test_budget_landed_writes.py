"""A batch of writes ended by the cycle's engine budget (the write gate's ``OverBudget``)
or a stop keeps what its landed writes made (``engine.writes.write_each``'s ``taken``):
counted in the cycle's report and metrics, recorded for the steps after; only the writes
left are "not made". Before, the batch's results went with the exception: label sync's
writes that landed were not counted, nor placement's (its ``written`` metric), and a
ledger entry that landed was missing from ``plan.landed`` (the rebalancer's ledger)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from support.forged import RecordingSwarm, sw_node
from support.rebalance import U2, P

from swarmgpu.core.config import AgentsConfig, Config, SyncConfig
from swarmgpu.manager.cycle.budget import OverBudget
from swarmgpu.manager.cycle.placement import apply_plan
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.engine.actuator import ApplyResult
from swarmgpu.manager.engine.stop import Stopped, StopRequest
from swarmgpu.manager.engine.writes import write_each
from swarmgpu.manager.nodes.sync import CycleReport, Snapshot
from swarmgpu.manager.placement import PlacementPlan, assign_key
from swarmgpu.swarm.client import SwarmNode


class Gate:
    """The write gate past the budget: ``cut`` item's write finds it passed, and every
    write that starts after it; the others land after ``LAND_S``."""

    LAND_S = 0.1

    def __init__(self, cut: int) -> None:
        self.cut, self.passed = cut, threading.Event()
        self.request = StopRequest()
        self.landed: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, item: int) -> int:
        if item == self.cut or self.passed.is_set():
            self.passed.set()
            self.request.leave(1)
            raise OverBudget(self.request)
        time.sleep(self.LAND_S)
        with self._lock:
            self.landed.append(item)
        return item * 10


@pytest.mark.parametrize("parallel", [1, 8])
def test_a_batch_the_budget_ends_hands_over_the_writes_that_landed(parallel: int) -> None:
    gate = Gate(cut=3)
    taken: list[tuple[int, int]] = []
    with pytest.raises(Stopped):
        write_each(list(range(12)), gate, parallel,
                   taken=lambda item, got: taken.append((item, got)))
    assert taken == [(i, i * 10) for i in sorted(gate.landed)]  # each once, in order
    assert gate.landed and len(gate.landed) + gate.request.left == 12


def test_a_whole_batch_hands_over_every_write() -> None:
    taken: list[int] = []
    assert write_each([1, 2, 3], lambda x: x, 2, taken=lambda _x, got: taken.append(got)) \
        == [1, 2, 3] == taken


def _nodes(n: int) -> list[SwarmNode]:
    return [sw_node(f"n-{i:02d}", f"gpu-{i:02d}") for i in range(n)]


def test_label_syncs_writes_that_landed_before_the_budget_ended_them_are_counted(
        tmp_path: Path) -> None:
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False))
    d = Daemon(cfg, swarm=RecordingSwarm(_nodes(12), [], []))  # type: ignore[arg-type]
    gate = Gate(cut=3)

    def apply(_plan: object, node: SwarmNode, *_: object) -> ApplyResult:
        gate(int(node.id[2:]))
        return ApplyResult(node.id, True, False, hostname=node.hostname)

    d.labels.actuator.apply_labels = apply  # type: ignore[method-assign,assignment]
    report = CycleReport()
    todo: list[Any] = [(None, n, None) for n in _nodes(12)]
    with pytest.raises(OverBudget):
        d.labels._write_now(todo, Snapshot(_nodes(12), [], [], {}), report)
    assert report.writes == len(gate.landed) > 0


def test_a_cycle_ended_at_its_budget_keeps_its_label_writes_that_landed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(identity="none", timeout_s=0.3, watch_s=0))
    d = Daemon(cfg, swarm=RecordingSwarm(_nodes(2), [], []))  # type: ignore[arg-type]

    def cut_cycle(_snap: Snapshot, *, hold: bool = False) -> CycleReport:
        d.labels.report = CycleReport(writes=3, errors=["gpu-01: label write failed"])
        raise OverBudget(StopRequest())

    monkeypatch.setattr(d.labels, "cycle", cut_cycle)
    report = d.cycle()
    assert report.aborted and "ended at its engine budget" in report.errors[0]
    assert report.writes == 3 and "gpu-01: label write failed" in report.errors
    monkeypatch.setattr(d.labels, "cycle", lambda *_a, **_k: (_ for _ in ()).throw(
        OverBudget(StopRequest())))
    assert d.cycle().writes == 0  # (not the last cycle's)


def test_placements_ledger_entries_that_landed_before_the_budget_are_recorded() -> None:
    nodes = [sw_node("n1", "gpu-node-1"), sw_node("n2", "gpu-node-2")]
    sw = RecordingSwarm(nodes, [], [])
    plain: Callable[..., bool] = sw.update_node_labels

    def update(node_id: str, compute: Callable[[Mapping[str, str]], Any], **kw: Any) -> bool:
        if node_id == "n2":
            raise OverBudget(StopRequest())
        time.sleep(0.1)  # (lands after n2's is refused)
        return plain(node_id, compute, **kw)

    sw.update_node_labels = update  # type: ignore[method-assign]
    entry = {assign_key(P, "c"): f"{U2[0]}@1000"}
    plan = PlacementPlan(node_set={"n1": entry, "n2": {assign_key(P, "d"): f"{U2[1]}@1000"}})
    with pytest.raises(OverBudget):
        apply_plan(sw, plan, dry_run=False, services=[], prefix=P)  # type: ignore[arg-type]
    assert plan.landed is not None and plan.landed.set == {"n1": entry}
    assert plan.landed.written == 1
    assert sw.nodes()[0].labels == entry  # (as Swarm has it)


def test_a_cycle_a_stop_ends_mid_label_sync_keeps_its_label_writes_that_landed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, the stop's cycle reported no write (an empty report), where the budget's
    kept them."""
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(identity="none", timeout_s=0.3, watch_s=0))
    d = Daemon(cfg, swarm=RecordingSwarm(_nodes(2), [], []))  # type: ignore[arg-type]

    def stopped_cycle(_snap: Snapshot, *, hold: bool = False) -> CycleReport:
        d.labels.report = CycleReport(writes=3, errors=["gpu-01: label write failed"])
        raise Stopped(d.stop_event)

    monkeypatch.setattr(d.labels, "cycle", stopped_cycle)
    report = d.cycle()
    assert report.aborted and report.writes == 3
    assert "gpu-01: label write failed" in report.errors
