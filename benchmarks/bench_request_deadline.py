"""What bounding each request by its deadline costs one small engine answer.

``answerjson.deadline_requests`` starts a timer (a ``threading.Timer``: a thread) per
request, cancelled as it returns, and records the connection each request takes from
its pool; before, only the body was bounded (the ``_bounded`` hook). Measured here: a
docker-py ``APIClient`` asking ``GET /info`` (``{}``, kept alive) of an engine on
loopback (tests/support/loop_engine.py), with the request deadline and without it, in
turn in one run; the median and best per request of each.

    python benchmarks/bench_request_deadline.py              # 500 requests, 5 rounds
    python benchmarks/bench_request_deadline.py --requests 5000 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # this checkout, not an installed one

import docker  # noqa: E402
from support.loop_engine import loop_engine  # noqa: E402

from swarmgpu.swarm import answerjson  # noqa: E402


def client(port: int, deadline: bool) -> Any:
    """docker-py's client as the daemon sets it up; ``deadline`` False: as before (the
    body's hook alone)."""
    api = docker.APIClient(base_url=f"tcp://127.0.0.1:{port}", version="1.43", timeout=30)
    if deadline:
        answerjson.strict_results(api)
    else:
        api.hooks["response"].append(answerjson._bounded)
    return api


def per_request_us(api: Any, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        api.info()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with loop_engine({}) as engine:
        apis = {"before": client(engine.server_port, False),
                "after": client(engine.server_port, True)}
        times: dict[str, list[float]] = {k: [] for k in apis}
        for _ in range(args.rounds):
            for k, api in apis.items():
                times[k].append(per_request_us(api, args.requests))
    for k, v in times.items():
        print(f"{k:>6}: median {statistics.median(v):7.1f} us, best {min(v):7.1f} us "
              f"per request ({args.rounds} rounds of {args.requests})")


if __name__ == "__main__":
    main()
