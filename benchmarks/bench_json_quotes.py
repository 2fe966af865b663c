"""How long the proxy's strict JSON read (``jsonstrict.load_json``) takes to refuse a body
of quotes that never close, beside a body of the same length it reads.

``["`` then ``\\"`` n times: a strings' pattern that could fail at the end rescanned the
rest from each quote (quadratic: seconds at 400,000). Timed at n and 2n beside a closed
string of the same length (the reference, read whole), in the same run; linear work
doubles with n. The test counts the scan's matches instead
(tests/test_proxy_policy.py::test_a_body_of_too_many_json_values_is_refused_before_it_is_parsed).

    python benchmarks/bench_json_quotes.py [--rounds 5] [--n 400000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from swarmgpu.swarm.jsonstrict import JsonError, load_json


def timed(body: bytes, rounds: int) -> tuple[float, bool]:
    """(median seconds of ``load_json(body)``, whether it was refused)."""
    took, refused = [], False
    for _ in range(rounds):
        t0 = time.perf_counter()
        try:
            load_json(body)
        except JsonError:
            refused = True
        took.append(time.perf_counter() - t0)
    return statistics.median(took), refused


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=400_000)
    args = ap.parse_args()
    print(f"{'body':44}{'bytes':>10}{'median':>12}  (every figure from this run)")
    for n in (args.n, 2 * args.n):
        unclosed = b'["' + b'\\"' * n
        closed = b'["' + b'\\"' * (n - 1) + b'"]'  # (the reference: same length, read)
        for what, body in (
            (f"closed string, {n} escapes (reference)", closed),
            (f"unclosed string, {n} escapes", unclosed),
        ):
            s, refused = timed(body, args.rounds)
            print(f"{what:44}{len(body):>10}{s * 1000:9.1f} ms  {'refused' if refused else 'read'}")


if __name__ == "__main__":
    main()
