"""How long the daemon's event-stream reader takes to refuse a line sent a byte a chunk.

A proxy or a hung engine that sends an event one byte per chunk, never ending it: the
reader (``swarm.eventstream.read_events``) refuses it once it passes the bound
(``MAX_EVENT_BYTES``). Its CPU time is printed beside the reference, the same bytes in
one chunk, in the same run (before stop 68 each chunk searched the whole line again:
8 to 17 s for 1 MiB on the 2-core test machine).

    python benchmarks/bench_event_trickle.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterable
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]

from swarmgpu.swarm.eventstream import MAX_EVENT_BYTES, NotAnEvent, read_events  # noqa: E402


def refuse(chunks: Iterable[bytes]) -> float:
    """CPU seconds until the reader refuses ``chunks``."""
    start = time.process_time()
    try:
        list(read_events(chunks, "bench"))
    except NotAnEvent:
        return time.process_time() - start
    raise SystemExit("the over-long line was not refused")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    n = MAX_EVENT_BYTES + 2
    trickle = [refuse(b"x" for _ in range(n)) for _ in range(args.rounds)]
    whole = [refuse([b"x" * n]) for _ in range(args.rounds)]
    print(f"{n:,} bytes, median of {args.rounds}: a byte a chunk "
          f"{statistics.median(trickle):.3f} s CPU; reference, one chunk "
          f"{statistics.median(whole):.4f} s")


if __name__ == "__main__":
    main()
