"""How long the daemon's /healthz takes while 400 clients hold answers they never read.

The daemon's real HTTP server (tests/support/webauth.py's ``web_daemon``: 4 MiB at
``/big``) and a flood in a child process (tests/support/slowflood.py ``--complete``: 40
connections from each of ten addresses, 127.0.0.20-29, that ask for ``/big`` with the
token, shrink their receive buffer and never read). ``/healthz`` and a proved client's
``/api/v1/cluster``, from a fresh address, are timed under the flood beside the same
calls without it, in the same run. The tests count what the server did instead
(tests/test_webauth.py::test_healthz_answered_beside_400_unread_answers_while_they_hold_the_server);
before stuck answers were evictable and /healthz answered on the reserve, it waited for
the write deadline (10 s) or was refused.

    python benchmarks/bench_unread.py [--rounds 10] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO)]

from support import slowflood  # noqa: E402
from support.webauth import TOKEN, get, web_daemon  # noqa: E402

from swarmgpu.core.httpguard import WRITE_DEADLINE_S, GuardedServer  # noqa: E402

SRC = "127.0.0.9"  # the honest client's address, none of the flood's


def timed(call: Callable[[int], int], port: int, rounds: int) -> tuple[int, list[float]]:
    """(answered 200, latency in seconds of each round, answered or not)."""
    ok, lat = 0, []
    for _ in range(rounds):
        t0 = time.monotonic()
        with contextlib.suppress(OSError):  # not answered: its latency still counts
            ok += call(port) == 200
        lat.append(time.monotonic() - t0)
        time.sleep(0.2)  # the flood's reconnects get their turn between rounds
    return ok, lat


def line(what: str, ok: int, lat: list[float]) -> str:
    worst = max(lat)
    return (f"{what:48}{ok:>4}/{len(lat):<3}{statistics.median(lat) * 1000:9.1f} ms"
            f"{worst * 1000:9.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--smoke", action="store_true", help="one round, 40 connections")
    args = ap.parse_args()
    rounds, per_source = (1, 4) if args.smoke else (args.rounds, 40)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    calls: dict[str, Callable[[int], int]] = {
        "/healthz": lambda port: get(port, "/healthz", src=SRC, timeout=WRITE_DEADLINE_S)[0],
        "/api/v1/cluster (token)": lambda port: get(
            port, "/api/v1/cluster", bearer, src=SRC, timeout=WRITE_DEADLINE_S)[0],
    }
    print(f"{'':48}{'answered':>8}{'median':>12}{'max':>12}  (every figure from this run)")
    with tempfile.TemporaryDirectory() as tmp:
        d = web_daemon(Path(tmp))
        srv = d._http
        assert isinstance(srv, GuardedServer)
        port = srv.server_address[1]
        try:
            for what, call in calls.items():
                print(line(f"{what}, no flood (reference)", *timed(call, port, rounds)))
            flood = slowflood.start(port, "127.0.0.20-29", per_source, for_s=60,
                                    complete="/big", headers=(f"Authorization: Bearer {TOKEN}",),
                                    rcvbuf=4096, renew_s=5.0)
            try:
                time.sleep(1.0)  # the flood at full strength
                for what, call in calls.items():
                    print(line(f"{what}, {10 * per_source} unread answers",
                               *timed(call, port, rounds)))
                print(f"held {srv.connection_counts()[0]} of {srv.max_connections}; "
                      f"evicted {srv.evicted_total}, refused {srv.refused_total}")
            finally:
                slowflood.stop(flood)
        finally:
            srv.shutdown()
            srv.server_close()


if __name__ == "__main__":
    main()
