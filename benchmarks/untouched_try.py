"""Stop 78's try: ``swarmgpu simulate`` with untouched nodes priced for every shape that
only such a node hosts (``SwarmScorer.whole_untouched``; docs/simulate.md, "Main against
FGD on h-bimodalseed, and untouched nodes priced for every whole-node shape (stop 78)";
main leaves it off).

    .venv/bin/python benchmarks/untouched_try.py -- \\
        simulate --trace default --seeds 42,43,44 --bound off --policy swarmgpu --json

Everything after ``--`` is ``swarmgpu``'s command line; the replays' worker processes
are forked, so they inherit the switch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from swarmgpu.allocator.scorer import SwarmScorer  # noqa: E402
from swarmgpu.cli import main as cli_main  # noqa: E402


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rest", nargs=argparse.REMAINDER,
                    help="-- then swarmgpu's arguments (e.g. simulate ...)")
    args = ap.parse_args(argv)
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    if not rest:
        ap.error("no swarmgpu command after --: e.g. -- simulate --trace default")
    SwarmScorer.whole_untouched = True
    sys.argv = ["swarmgpu", *rest]
    return int(cli_main() or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
