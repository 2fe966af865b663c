"""Stop 78's and 79's tries: ``swarmgpu simulate`` with untouched nodes priced for every
shape that only such a node hosts (``--rule whole``, the default:
``SwarmScorer.whole_untouched``; docs/simulate.md, "Main against FGD on h-bimodalseed,
and untouched nodes priced for every whole-node shape (stop 78)"), with the nodes other
tasks are expected to break counted in the price (stop 79, ``SwarmScorer.untouched_breaks``:
``--rule breaks`` at the rate the scorer broke them, ``--rule forced`` the bound from the
mix), or each of those with ``whole_untouched`` too (``both``, ``forced-both``). Since
stop 82 ``whole`` is main's rule (the same as plain ``swarmgpu simulate``); ``--rule
none`` turns it off, main's rule before stop 82, for the "before" figures. Main leaves
the breaks off.

    .venv/bin/python benchmarks/untouched_try.py --rule breaks -- \\
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

from try_cli import add_rest, rest_of, run_swarmgpu  # noqa: E402  (the benchmarks' folder, as run)

from swarmgpu.allocator.scorer import SwarmScorer  # noqa: E402


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rule",
                    choices=("whole", "none", "breaks", "both", "forced", "forced-both"),
                    default="whole", help="which switch to set (default: whole, stop 78's "
                                          "and main's since stop 82; none: main before)")
    add_rest(ap)
    args = ap.parse_args(argv)
    rest = rest_of(ap, args)
    SwarmScorer.whole_untouched = args.rule in ("whole", "both", "forced-both")
    SwarmScorer.untouched_breaks = ("rate" if args.rule in ("breaks", "both") else
                                    "forced" if args.rule.startswith("forced") else "")
    return run_swarmgpu(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
