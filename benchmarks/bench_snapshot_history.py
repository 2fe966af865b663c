"""What the snapshot's list of stopping tasks costs beside a swarm's task history.

``take_snapshot`` lists the tasks Swarm is stopping with the task list's only state
filter, ``desired-state`` (shutdown, remove): Moby has no filter on the actual state, so
the answer holds every ended task Swarm keeps (``TaskHistoryRetentionLimit``, 5 per slot
by default: a swarm's whole history of rollouts, restarts and scale-downs), read and
parsed each cycle to keep the few still running. Measured here through a fake engine
that answers as the real one does (the API's task objects, JSON encoded and decoded as
docker-py does, then ``task_from_api``): the snapshot with no ended task, and with a
history of N, side by side, with the bytes the engine sends; beside them, the same with
every listed task parsed, as before only the tasks still on a node were
(``SwarmClient.tasks(states=...)``). Nothing is asserted; the
engine's own cost (reading its store, encoding the answer, the socket) is not in it and
grows with the same bytes.

    python benchmarks/bench_snapshot_history.py  # 1,000 running; 0, 2,000, 10,000 ended
    python benchmarks/bench_snapshot_history.py --running 5000 --ended 0,2000,25000
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

import engine_task  # noqa: E402  (the benchmarks' folder, as run)

from swarmgpu.core.config import Config  # noqa: E402
from swarmgpu.manager.nodes import sync  # noqa: E402
from swarmgpu.swarm.client import SwarmNode, SwarmTask, task_from_api  # noqa: E402
from swarmgpu.swarm.unkeyed import Unkeyed  # noqa: E402


def raw_task(i: int, desired: str, state: str) -> dict[str, Any]:
    """One task as the engine's task list gives it (a GPU service's, of usual size)."""
    return engine_task.raw_task(i, desired, state, label=f"s{i % 500}", ended="shutdown")


class Engine:
    """The engine's answers for ``take_snapshot``: the task list filtered by desired
    state as Moby filters it, sent as JSON and decoded as the client does."""

    def __init__(self, running: int, ended: int, stopping: int, parse_all: bool) -> None:
        self.parse_all = parse_all  # as before the cut: every task of the list parsed
        raw = [raw_task(i, "running", "running") for i in range(running)]
        raw += [raw_task(running + i, "shutdown", "running") for i in range(stopping)]
        raw += [raw_task(running + stopping + i, ("shutdown", "remove")[i % 2],
                         ("shutdown", "failed", "complete")[i % 3]) for i in range(ended)]
        self.raw = raw
        self.bodies: dict[frozenset[str], str] = {}  # encoded once: the engine's side
        self.sent = 0  # bytes of task lists answered

    def tasks(self, filters: Mapping[str, Any] | None = None, *,
              states: AbstractSet[str] | None = None) -> list[SwarmTask]:
        want = frozenset((filters or {}).get("desired-state") or ())
        body = self.bodies.get(want)
        if body is None:
            body = self.bodies[want] = json.dumps(
                [t for t in self.raw if not want or t["DesiredState"] in want])
        self.sent += len(body)
        raw = json.loads(body)
        if states is None or self.parse_all:
            return [task_from_api(t) for t in raw]
        return [task_from_api(t) for t in raw if t["Status"]["State"] in states]

    def swarm_labels(self) -> Mapping[str, str]:
        return {}

    def nodes(self) -> list[SwarmNode]:
        return []

    def services(self) -> list[Any]:
        return []

    def unkeyed(self) -> Unkeyed:
        return Unkeyed()  # every entry has its ID


def measure(running: int, ended: int, stopping: int, repeat: int,
            parse_all: bool = False) -> dict[str, Any]:
    engine = Engine(running, ended, stopping, parse_all)
    times, cfg = [], Config()
    snap = None
    for _ in range(repeat):
        engine.sent = 0
        t = time.perf_counter()
        snap = sync.take_snapshot(engine, cfg)  # type: ignore[arg-type]
        times.append(time.perf_counter() - t)
    assert snap is not None
    return {"ended": ended, "snapshot_ms": round(statistics.median(times) * 1e3, 1),
            "task_bytes": engine.sent, "stopping_found": len(snap.stopping)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--running", type=int, default=1000)
    ap.add_argument("--stopping", type=int, default=5)
    ap.add_argument("--ended", default="0,2000,10000")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    sync.fetch_agents = lambda *_a, **_k: {}  # (no agents)
    rows = [(measure(a.running, int(n), a.stopping, a.repeat),
             measure(a.running, int(n), a.stopping, a.repeat, parse_all=True))
            for n in a.ended.split(",")]
    print(f"{a.running} running tasks, {a.stopping} stopping; median of {a.repeat}")
    print("| ended tasks kept | snapshot ms | every listed task parsed (before) ms "
          "| task list bytes | stopping found |")
    print("|---|---|---|---|---|")
    for r, before in rows:
        print(f"| {r['ended']} | {r['snapshot_ms']} | {before['snapshot_ms']} "
              f"| {r['task_bytes']} | {r['stopping_found']} |")


if __name__ == "__main__":
    main()
