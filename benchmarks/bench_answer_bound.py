"""What reading each engine answer to a bound costs the daemon's task list.

``answerjson.strict_results`` reads every answer not streamed to at most
``MAX_ANSWER_BYTES`` (a requests response hook: the body in 64 KiB pieces, counted)
before docker-py decodes it; before, requests read it whole unbounded (its own 10 KiB
pieces). Measured here: a docker-py ``APIClient`` listing N tasks as Docker sends them
(benchmarks/engine_task.py) from an engine on loopback (tests/support/loop_engine.py,
chunked as Go sends it), strict decode included, with the bound and without it (the hook
taken off: as before), in turn; the best wall time of each (the engine's thread serves
in this process: the same for both), and the peak memory of one read (tracemalloc).

    python benchmarks/bench_answer_bound.py              # 5,000 tasks, best of 15
    python benchmarks/bench_answer_bound.py --tasks 20000 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # this checkout, not an installed one

import docker  # noqa: E402
from engine_task import raw_task  # noqa: E402  (the benchmarks' folder, as run)
from support.loop_engine import Chunked, loop_engine  # noqa: E402

from swarmgpu.swarm import answerjson  # noqa: E402


def client(port: int, bounded: bool) -> Any:
    """docker-py's client as the daemon sets it up; ``bounded`` False: the hook off."""
    api = docker.APIClient(base_url=f"tcp://127.0.0.1:{port}", version="1.43")
    answerjson.strict_results(api)
    if not bounded:
        api.hooks["response"].remove(answerjson._bounded)
    return api


def best_ms(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return {k: round(min(v) * 1e3, 1) for k, v in times.items()}


def peak_mib(fn: Callable[[], object]) -> float:
    tracemalloc.start()
    try:
        fn()
        return round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
    finally:
        tracemalloc.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    body = json.dumps([raw_task(i) for i in range(args.tasks)]).encode()
    with loop_engine({"/tasks": Chunked(body)}) as engine:
        before, now = client(engine.server_port, False), client(engine.server_port, True)
        fns: dict[str, Callable[[], object]] = {
            "unbounded (before)": before.tasks, "bounded (now)": now.tasks}
        for fn in fns.values():
            assert len(fn()) == args.tasks  # type: ignore[arg-type]  # (and warm)
        ms = best_ms(fns, args.repeat)
        peaks = {k: peak_mib(fn) for k, fn in fns.items()}
    print(f"{args.tasks} tasks, answer {len(body) / 2**20:.1f} MiB, best of {args.repeat}")
    for k in fns:
        print(f"  {k:20} {ms[k]:8.1f} ms   peak {peaks[k]:6.1f} MiB")


if __name__ == "__main__":
    main()
