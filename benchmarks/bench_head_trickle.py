"""CPU the docker-proxy's request reader (``httpframe.RequestReader``) spends on a head
that trickles in a byte a read, beside the same head in one read.

A slowloris on the proxy's unix socket sends its head a byte at a time; each read
searched the whole head so far again (quadratic: some 13 s of CPU for a 31 KiB head,
more than the request's 10 s deadline, per connection). Both figures from this run; the
test counts the bytes searched instead (tests/test_proxy_head_scan.py).

    python benchmarks/bench_head_trickle.py [--kib 31]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from swarmgpu.swarm.httpframe import RequestReader


def cpu_s(raw: bytes, piece: int) -> float:
    """Process CPU seconds to read ``raw`` in reads of ``piece`` bytes."""
    reader, t0 = RequestReader(), time.process_time()
    for i in range(0, len(raw), piece):
        reader.feed(raw[i : i + piece])
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kib", type=int, default=31, help="head size (at most 31: the bound)")
    args = ap.parse_args()
    lines = max(1, args.kib * 1024 // 7910)  # header lines of 7.9 KiB (each under 8 KiB)
    raw = (
        b"GET /v1.41/nodes HTTP/1.1\r\nHost: d"
        + b"".join(b"\r\nX%d: " % i + b"a" * (args.kib * 1024 // lines - 10) for i in range(lines))
        + b"\r\n\r\n"
    )
    print(f"a {len(raw)}-byte head (every figure from this run)")
    print(f"  in one read (reference): {cpu_s(raw, len(raw)) * 1000:9.1f} ms CPU")
    print(f"  a byte a read:           {cpu_s(raw, 1) * 1000:9.1f} ms CPU")


if __name__ == "__main__":
    main()
