"""Why an over-share restart is not done (``overshare.Restarter``): said once while the
reason holds, the cool-down's once for the whole cool-down, though its seconds-left
figure changes every cycle (before, an info line every cycle); and each service due is
judged movable on its own service's tasks (``rebalance.context.by_service``), where each
was given every task of the snapshot, with the same reasons. Pure, over the recording
Swarm stand-in (tests/support/forged.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.forged import THIRD, V_UUID, P, RecordingSwarm, snapshot, sw_svc, victim_cluster
from support.loglines import log_lines

from swarmgpu.core.config import Config, PlacementConfig
from swarmgpu.manager.rebalance.context import MOVED_AT, why_not_movable
from swarmgpu.manager.services import overshare
from swarmgpu.manager.services.overshare import Restarter, ServiceUse
from swarmgpu.swarm.client import SwarmTask

NOW = 1_000_000.0
VICTIM = ServiceUse("victim", "n-dgx", "gpu-node-1", 0, V_UUID, 30000, 20000, 1000,
                    ("t-victim",), (), ("d" * 12,))


@pytest.fixture
def infos() -> Iterator[list[str]]:
    yield from log_lines("INFO")


def _cluster(labels: dict[str, dict[str, str]],
             extra: Sequence[SwarmTask] = ()) -> RecordingSwarm:
    """victim_cluster, each service named in ``labels`` with those labels added, and the
    tasks ``extra`` beside its own."""
    base = victim_cluster({})
    services = [sw_svc(s.name, {**s.labels, **labels[s.name]}, gated=s.name != "attacker")
                if s.name in labels else s for s in base.services()]
    return RecordingSwarm(base.nodes(), services, [*base.tasks(), *extra],
                          base.swarm_labels())


def test_a_cool_down_is_said_once_though_its_seconds_left_change(
        tmp_path: Path, infos: list[str]) -> None:
    sw = _cluster({"third": {f"{P}{MOVED_AT}": f"{NOW - 10:.0f}"}})
    snap = snapshot(sw.nodes(), sw.services(), sw.tasks())
    cfg = Config(state_dir=str(tmp_path), dry_run=False,
                 placement=PlacementConfig(overshare="restart"))
    now = [NOW]
    r = Restarter(sw, cfg, clock=lambda: now[0], wait_s=0.0)  # type: ignore[arg-type]
    for _ in range(4):  # four cycles, 30 s apart, while it cools down
        assert r.run([THIRD], snap) == 0
        now[0] += 30.0
    said = [line for line in infos if "not done" in line]
    assert len(said) == 1, said
    assert "cooling down (590s left of 600s)" in said[0], said[0]
    assert sw.calls == []
    r.run([], snap)  # back within its share, then over again: told again
    r.run([THIRD], snap)
    assert len([line for line in infos if "not done" in line]) == 2


def test_a_new_reason_after_a_cool_down_is_said(tmp_path: Path, infos: list[str]) -> None:
    # (the figure is left out of the comparison, not the reason)
    sw = _cluster({"third": {f"{P}{MOVED_AT}": f"{NOW - 10:.0f}"}},
                  [SwarmTask("t-third-2", "id-third", "n-4090", 2, "starting", "running", ())])
    snap = snapshot(sw.nodes(), sw.services(), sw.tasks())
    cfg = Config(state_dir=str(tmp_path), placement=PlacementConfig(overshare="restart"))
    now = [NOW]
    r = Restarter(sw, cfg, clock=lambda: now[0], wait_s=0.0)  # type: ignore[arg-type]
    r.run([THIRD], snap)
    now[0] += 600.0  # cooled down: not converged is said next
    r.run([THIRD], snap)
    said = [line for line in infos if "not done" in line]
    assert len(said) == 2 and "not converged" in said[1], said


def test_each_service_due_reads_its_own_tasks_with_the_same_reasons(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, infos: list[str]) -> None:
    """victim cools down, third has a second task starting (not converged), the
    attacker's task is beside them: each is asked with its own service's tasks, and
    answered as on every task of the snapshot (the reasons recorded before the index)."""
    sw = _cluster({"victim": {f"{P}{MOVED_AT}": f"{NOW - 10:.0f}"}},
                  [SwarmTask("t-third-2", "id-third", "n-4090", 2, "starting", "running", ())])
    snap = snapshot(sw.nodes(), sw.services(), sw.tasks())
    asked: list[tuple[str, list[str], str | None, str | None]] = []
    real = why_not_movable

    def spy(s: Any, req: Any, tasks: Sequence[SwarmTask], *a: Any, **kw: Any) -> str | None:
        why = real(s, req, tasks, *a, **kw)
        asked.append((s.name, [t.id for t in tasks], why, real(s, req, snap.tasks, *a, **kw)))
        return why

    monkeypatch.setattr(overshare, "why_not_movable", spy)
    cfg = Config(state_dir=str(tmp_path), placement=PlacementConfig(overshare="restart"))
    r = Restarter(sw, cfg, clock=lambda: NOW, wait_s=0.0)  # type: ignore[arg-type]
    assert r.run([VICTIM, THIRD], snap) == 0
    assert [(name, ids) for name, ids, _, _ in asked] == [
        ("victim", ["t-victim"]), ("third", ["t-third", "t-third-2"])]
    assert all(why == on_all for _, _, why, on_all in asked), asked
    said = [line for line in infos if "not done" in line]
    assert len(said) == 2, said
    assert "victim on gpu-node-1 not done: cooling down (590s left of 600s)" in said[0]
    assert ("third on gpu-node-2 not done: not converged (1 running of 1, 1 placed); "
            "moved only once stable") in said[1], said[1]


def test_a_service_with_no_task_in_the_snapshot_reads_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sw = _cluster({})
    snap = snapshot(sw.nodes(), sw.services(), [t for t in sw.tasks() if t.id != "t-third"])
    seen: list[tuple[str, ...]] = []
    real = why_not_movable

    def spy(s: Any, req: Any, tasks: Sequence[SwarmTask], *a: Any, **kw: Any) -> str | None:
        seen.append(tuple(t.id for t in tasks))
        return real(s, req, tasks, *a, **kw)

    monkeypatch.setattr(overshare, "why_not_movable", spy)
    cfg = Config(state_dir=str(tmp_path), placement=PlacementConfig(overshare="restart"))
    r = Restarter(sw, cfg, clock=lambda: NOW, wait_s=0.0)  # type: ignore[arg-type]
    r.run([replace(THIRD)], snap)
    assert seen == [()]
