"""One clock for the hold of a task Swarm is stopping (``keys.stop_hold_end``): until
when its GPUs' hold lasts, whether a preemptor waits for them and whether its stop is
overdue all read one start. That start is when the reader first saw it stopping, or,
for a task already stopping at the reader's first look (a one-shot `plan` or `status`,
a daemon restarted mid-stop), Swarm's own time for it (the task's ``UpdatedAt``) where
that is earlier: they then end the hold when a long-running daemon does."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from support.forged import FACTS, R_UUIDS, snapshot, sw_node, sw_svc

from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.placement.nominated import StoppingGpus
from swarmgpu.swarm.client import SwarmService, SwarmTask, task_from_api
from swarmgpu.swarm.taskstop import rfc3339_epoch

P = "swarmgpu."
LINE = f"NVIDIA_VISIBLE_DEVICES={R_UUIDS[0]}"  # pinned: its GPU read from the task itself
HELD = frozenset({("n-4090", R_UUIDS[0])})


def _stopping(s: SwarmService, updated_at: float | None = None) -> SwarmTask:
    """``s``'s task stopping on n-4090 (docker's default grace period, 10 s)."""
    t = SwarmTask("t-p", s.id, "n-4090", 1, "running", "shutdown", (LINE,))
    return t if updated_at is None else replace(t, updated_at=updated_at)


def _raw(**top: Any) -> dict[str, Any]:
    return {"ID": "t", "ServiceID": "s", "NodeID": "n-4090", "Slot": 1,
            "DesiredState": "shutdown", "Status": {"State": "running"},
            "Spec": {"ContainerSpec": {"Image": "x"}}, **top}


def test_a_stopping_tasks_gpus_learned_a_cycle_late_are_held_by_its_first_sight() -> None:
    """The task is seen stopping at 1000, its GPU known from 1005 (its node's facts read
    then). Its hold ends at 1000 + its grace period, and past that and the skew it is
    overdue and waited for no more, its GPU too. Before: its GPU's hold was timed from
    1005 (two clocks): at 1071 the task was overdue while its GPU was still waited for."""
    s = sw_svc("pinned", {})
    g = StoppingGpus(P)
    assert g.holds([_stopping(s)], [s], {}, [], {}, now=1000.0) == []
    g.holds([_stopping(s)], [s], {}, [], FACTS, now=1005.0)
    assert g.until == {"n-4090": 1010.0} and g.waits == HELD
    g.holds([_stopping(s)], [s], {}, [], FACTS, now=1071.0)
    assert g.overdue == {"t-p"} and not g.waits, (g.overdue, g.waits)


def test_a_tasks_updated_at_is_read_strictly() -> None:
    """``UpdatedAt`` (RFC 3339, as the engine writes it) is read into the task; absent,
    null, Go's zero time (the engine's for a time never set) or not such a time (a proxy's),
    it is unknown: the stop is timed from the reader's own sight, the longer hold, and the
    task list is read on (refused, one such task failed every cycle)."""
    stamp = "2026-12-06T10:00:00.123456789Z"
    assert task_from_api(_raw(UpdatedAt=stamp)).updated_at == rfc3339_epoch(stamp)
    assert task_from_api(_raw()).updated_at is None
    assert task_from_api(_raw(UpdatedAt=None)).updated_at is None
    assert task_from_api(_raw(UpdatedAt="0001-01-01T00:00:00Z")).updated_at is None
    for bad in ("2026-12-06 10:00:00Z", "yesterday", 1765015200, "", [1], {"a": 1}):
        assert task_from_api(_raw(UpdatedAt=bad)).updated_at is None


def test_a_fresh_reader_ends_a_stopping_hold_when_the_long_running_daemon_does() -> None:
    """Swarm set the task's desired state at 1000 (its UpdatedAt); a daemon saw it so at
    1000. A daemon restarted (or a one-shot) that first sees it at 1069 waits for it, as
    the first does; at 1071 both find it overdue. Before: the fresh one timed it from its
    own first sight, and waited for a stop the daemon waited for no more."""
    s = sw_svc("pinned", {})
    t = _stopping(s, updated_at=1000.0)
    daemon = StoppingGpus(P)
    daemon.holds([t], [s], {}, [], FACTS, now=1000.0)
    for now in (1069.0, 1071.0):
        daemon.holds([t], [s], {}, [], FACTS, now=now)
        fresh = StoppingGpus(P)
        fresh.holds([t], [s], {}, [], FACTS, now=now)
        assert (fresh.until, fresh.waits, fresh.overdue) == (
            daemon.until, daemon.waits, daemon.overdue) == (
            {"n-4090": 1010.0}, HELD if now < 1070 else frozenset(),
            frozenset() if now < 1070 else {"t-p"}), now


def test_swarms_time_never_lengthens_a_hold_nor_moves_one_the_daemon_saw_begin() -> None:
    """An UpdatedAt ahead of the reader's clock (a skewed or forged time) is read as its
    first sight: the hold ends no later than without it. A task the daemon saw begin to
    stop (absent from its earlier look) is timed by its own sight alone: a leader's
    clock behind its own never ends that hold early."""
    s = sw_svc("pinned", {})
    fresh = StoppingGpus(P)
    fresh.holds([_stopping(s, updated_at=1000.0 + 86400)], [s], {}, [], FACTS, now=1000.0)
    assert fresh.until == {"n-4090": 1010.0}
    daemon = StoppingGpus(P)
    daemon.holds([], [s], {}, [], FACTS, now=995.0)
    behind = _stopping(s, updated_at=900.0)
    daemon.holds([behind], [s], {}, [], FACTS, now=1000.0)
    daemon.holds([behind], [s], {}, [], FACTS, now=1069.0)
    assert daemon.until == {"n-4090": 1010.0} and daemon.waits == HELD
    assert not daemon.overdue


def test_plan_finds_a_task_long_stopping_overdue_as_the_daemon_does() -> None:
    """`plan` (a one-shot) sees a task Swarm set stopping 100 s ago (10 s grace period):
    overdue, as for the daemon that saw it then, its GPU held but waited for no more.
    Before: `plan` saw it for the first time and waited for it."""
    s = replace(sw_svc("pinned", {}), replicas=0)
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-4090", "gpu-node-2")]
    t = _stopping(s, updated_at=time.time() - 100)
    plan = make_plan(replace(snapshot(nodes, [s], []), stopping=[t]), Config())
    assert plan.stopping_overdue == {"t-p"} and not plan.stopping_waits
    assert plan.stopping_held.keys() >= HELD
