"""How long and how much memory `swarmgpu render --check` takes to refuse an alias bomb.

The 506-byte "billion laughs" stack of tests/test_render_engines.py (nine levels of nine
aliases: 387 million strings once expanded) took 1.4 GB and 29 s before a MemoryError
when YAML was read unbounded (issue 32). Measured here, each in a fresh process (the
real command line) beside the same command on a real example stack, in the same run:
wall time and the child's peak RSS (``getrusage``, the whole Python process with its
imports); and in this process the refusal alone: its time and the allocations it made
(``tracemalloc``).

    python benchmarks/bench_yaml_bomb.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.render_engines import BOMB  # noqa: E402

from swarmgpu.manager.commands.render import check_stack  # noqa: E402

_CHILD = """\
import resource, runpy, sys
sys.argv = ["swarmgpu", "render", "--check", sys.argv[1]]
code = 0
try:
    runpy.run_module("swarmgpu.cli", run_name="__main__")
except SystemExit as e:
    code = e.code or 0
print(f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss} {code}", file=sys.stderr)
"""


def _child(stack: Path) -> tuple[float, float, int]:
    """(wall s, the process's peak RSS MiB, exit code) of `swarmgpu render --check`, the
    real command line, in a new process."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", _CHILD, str(stack)], capture_output=True,
                       text=True, timeout=300, check=False)
    took = time.perf_counter() - t0
    rss_kib, code = r.stderr.strip().splitlines()[-1].split()
    return took, int(rss_kib) / 1024, int(code)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bomb = Path(tmp) / "bomb.yml"
        bomb.write_text(BOMB)
        example = REPO / "stacks" / "examples" / "llm-nvlink.yml"
        rows: dict[str, list[tuple[float, float, int]]] = {"bomb": [], "example": []}
        for _ in range(args.rounds):
            rows["example"].append(_child(example))
            rows["bomb"].append(_child(bomb))
    for name, runs in rows.items():
        walls = sorted(r[0] for r in runs)
        codes = {r[2] for r in runs}
        print(f"render --check {name:8s}: wall median {statistics.median(walls):.2f} s "
              f"(min {walls[0]:.2f}), peak RSS of the process {max(r[1] for r in runs):.0f} "
              f"MiB, exit {sorted(codes)}")
    times, peaks = [], []
    for _ in range(args.rounds):
        tracemalloc.start()
        t0 = time.perf_counter()
        errors = check_stack(BOMB, where="bomb.yml").errors
        times.append(time.perf_counter() - t0)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    print(f"refusal alone ({len(BOMB.encode())}-byte bomb): median "
          f"{statistics.median(times) * 1000:.1f} ms, allocations peak "
          f"{max(peaks) / 2**20:.2f} MiB; {errors[0][:90]}...")


if __name__ == "__main__":
    main()
