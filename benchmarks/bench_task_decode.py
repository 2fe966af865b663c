"""What decoding the task list costs the daemon, and what a job's history cost it.

The daemon lists tasks through docker-py, which decodes the engine's answer with the
standard library's ``json`` (``requests``' ``Response.json``), then parses each task
(``task_from_api``). Measured here on a task list of N tasks as Docker sends them (a GPU
service's, of usual size): that decode beside orjson's and msgspec's (when importable:
neither is a dependency; ``--venv`` names a site-packages to find them in), each with
the cyclic garbage collector paused too (the decode makes some 40 objects a task, and
the collector walks them as they are made), and the parse of every task beside it.
Nothing is asserted. The daemon's own decode now refuses a key named twice in one object
(``swarm.answerjson``: ``json.loads`` with ``jsonkeys.unique_keys``), measured beside the
standard one it replaced. The proxy's strict read (``jsonstrict.load_json``: NaN and
numbers past 64 bits refused too) is not on this path: it refuses a list this large.

Second table: ``take_snapshot`` with a replicated job whose earlier runs completed H
tasks (Swarm keeps them all), its tasks parsed as now (the history left out before it is
parsed: ``jobs.job_raw_read``) and as before (every task of the job parsed), through a
fake engine that answers as the real one does (JSON encoded, decoded as docker-py does).

    python benchmarks/bench_task_decode.py               # 5,000 tasks; H 0, 2,000, 10,000
    python benchmarks/bench_task_decode.py --tasks 20000 --history 0,50000 \\
        --venv /tmp/venv-tasklist/lib/python3.11/site-packages
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from engine_task import raw_task  # noqa: E402  (the benchmarks' folder, as run)

from swarmgpu.core.config import Config  # noqa: E402
from swarmgpu.core.jsonkeys import unique_keys  # noqa: E402
from swarmgpu.manager.nodes import sync  # noqa: E402
from swarmgpu.manager.placement import jobs  # noqa: E402
from swarmgpu.swarm.client import SwarmClient, SwarmTask, task_from_api  # noqa: E402


def best_ms(fns: Mapping[str, Callable[[], object]], repeat: int,
            paused: bool = False) -> dict[str, float]:
    """The best CPU time of each ``fn()`` (this process's: a shared machine's load adds
    little), run in turn ``repeat`` times; ``paused``: with the cyclic collector paused."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            gc.collect()
            if paused:
                gc.disable()
            try:
                t = time.process_time()
                fn()
                times[k].append(time.process_time() - t)
            finally:
                gc.enable()
    return {k: round(min(v) * 1e3, 1) for k, v in times.items()}


def strict_loads(body: bytes) -> Any:
    """The daemon's decode of an engine answer (``swarm.answerjson``): the standard
    library's, an object that names a key twice refused."""
    return json.loads(body, object_pairs_hook=unique_keys)


def decoders() -> dict[str, Callable[[bytes], Any] | None]:
    """The decoders measured: the standard library's (docker-py's), the daemon's strict
    one (``strict_loads``), orjson's and msgspec's when importable (None: not
    installed)."""
    out: dict[str, Callable[[bytes], Any] | None] = {
        "json (docker-py's, before)": json.loads,
        "json, repeated keys refused (the daemon's, now)": strict_loads}
    try:
        import orjson
        out["orjson"] = orjson.loads
    except ImportError:
        out["orjson"] = None
    try:
        import msgspec
        out["msgspec"] = msgspec.json.decode
    except ImportError:
        out["msgspec"] = None
    return out


def _runs(fn: Callable[[bytes], Any], body: bytes) -> tuple[Callable[[], object], ...]:
    """(decode, decode and parse every task) of ``body`` with ``fn``."""
    return (lambda: fn(body)), (lambda: [task_from_api(t) for t in fn(body)])


def decode_table(n: int, repeat: int) -> None:
    body = json.dumps([raw_task(i) for i in range(n)]).encode()
    found = {k: f for k, f in decoders().items() if f is not None}
    runs = {k: _runs(f, body) for k, f in found.items()}
    alone = best_ms({k: r[0] for k, r in runs.items()}, repeat)
    paused = best_ms({k: r[0] for k, r in runs.items()}, repeat, paused=True)
    whole = best_ms({k: r[1] for k, r in runs.items()}, repeat)
    print(f"{n} tasks, {len(body)} bytes; best CPU time of {repeat} (ms), in turn")
    print("| decoder | decode | decode, collector paused | decode + parse every task "
          "| x (decode + parse) vs json |")
    print("|---|---|---|---|---|")
    base = whole[next(iter(whole))]
    for name in decoders():
        if name not in found:
            print(f"| {name} | not installed | | | |")
            continue
        print(f"| {name} | {alone[name]} | {paused[name]} | {whole[name]} "
              f"| {base / whole[name]:.2f} |")


class _Api:
    """The engine's task list for ``take_snapshot``: filtered by service and desired state
    as Moby filters it, sent as JSON and decoded as docker-py does."""

    def __init__(self, raw: list[dict[str, Any]], job: dict[str, Any]) -> None:
        self.raw, self.job = raw, job
        self.bodies: dict[str, bytes] = {}  # encoded once: the engine's side

    def tasks(self, filters: Mapping[str, Any]) -> Any:
        key = json.dumps(filters, sort_keys=True)
        body = self.bodies.get(key)
        if body is None:
            want, sids = filters.get("desired-state"), filters.get("service")
            body = self.bodies[key] = json.dumps(
                [t for t in self.raw if (want is None or t["DesiredState"] in want)
                 and (sids is None or t["ServiceID"] in sids)]).encode()
        return json.loads(body)

    def nodes(self, **_: object) -> list[object]:
        return []

    def services(self, **_: object) -> list[object]:
        return [self.job]

    def inspect_swarm(self) -> dict[str, object]:
        return {}


class _Before(SwarmClient):
    """The client as before: every task of a job's list parsed."""

    def tasks(self, filters: Mapping[str, Any] | None = None, *, states: Any = None,
              read: Any = None) -> list[SwarmTask]:
        return super().tasks(filters, states=states)


def _job_client(running: int, history: int, before: bool) -> SwarmClient:
    """The client of a fake engine with ``running`` tasks and a job whose earlier runs
    completed ``history`` (its current run: 16, 8 of them running)."""
    jid = "job0000000000000000000000"
    job: dict[str, Any] = {"ID": jid, "Version": {"Index": 9},
           "JobStatus": {"JobIteration": {"Index": 50}},
           "Spec": {"Name": "train", "Labels": {"swarmgpu.gpus": "1"},
                    "TaskTemplate": {"ContainerSpec": {"Image": "x"}},
                    "Mode": {"ReplicatedJob": {"MaxConcurrent": 8, "TotalCompletions": 64}}}}
    raw = [raw_task(i) for i in range(running)]
    raw += [raw_task(running + i, "complete", "complete", jid, 1 + i % 49)
            for i in range(history)]
    raw += [raw_task(running + history + i, "complete", ("complete", "running")[i < 8],
                     jid, 50) for i in range(16)]
    kind = _Before if before else SwarmClient
    sw = kind.__new__(kind)
    sw.endpoint, sw._api = "unix:///bench", _Api(raw, job)
    return sw


def _snapshot(sw: SwarmClient) -> sync.Snapshot:
    # as before, every task of a job's list was kept, whatever its run
    read = jobs.job_task_read
    if isinstance(sw, _Before):
        vars(sync)["job_task_read"] = lambda t, run=None: read(t)
    try:
        return sync.take_snapshot(sw, Config())
    finally:
        vars(sync)["job_task_read"] = read


def job_row(running: int, history: int, repeat: int) -> str:
    now, old = (_job_client(running, history, b) for b in (False, True))
    ms = best_ms({"now": lambda: _snapshot(now), "before": lambda: _snapshot(old)}, repeat)
    return (f"| {history} | {ms['now']} | {ms['before']} | {len(_snapshot(now).tasks)} "
            f"| {len(_snapshot(old).tasks)} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=5000)
    ap.add_argument("--history", default="0,2000,10000")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--venv", default="", help="a site-packages to import orjson/msgspec from")
    a = ap.parse_args()
    if a.venv:
        sys.path.append(a.venv)
    sync.fetch_agents = lambda *_a, **_k: {}  # (no agents)
    decode_table(a.tasks, a.repeat)
    print(f"\ntake_snapshot: {a.tasks} running tasks, a job's run of 16 tasks beside H "
          f"completed in its earlier runs; best CPU time of {a.repeat} (ms)")
    print("| H | snapshot (now) | snapshot (before) | tasks kept (now) "
          "| tasks kept (before) |")
    print("|---|---|---|---|---|")
    for h in a.history.split(","):
        print(job_row(a.tasks, int(h), a.repeat))


if __name__ == "__main__":
    main()
