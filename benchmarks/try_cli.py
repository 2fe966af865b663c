"""The ``-- swarmgpu ...`` tail of a try's command line (benchmarks/rollout_try.py,
benchmarks/untouched_try.py): read, then run as ``swarmgpu`` in this process, so a
switch the try set beforehand holds (the replays' forked workers inherit it).

Imported after the try has put this checkout first on ``sys.path``."""

from __future__ import annotations

import argparse
import sys

from swarmgpu.cli import main as cli_main


def add_rest(ap: argparse.ArgumentParser) -> None:
    """The positional tail: ``--`` then swarmgpu's arguments."""
    ap.add_argument("rest", nargs=argparse.REMAINDER,
                    help="-- then swarmgpu's arguments (e.g. simulate ...)")


def rest_of(ap: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """swarmgpu's arguments, the ``--`` dropped; none is a usage error."""
    rest: list[str] = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    if not rest:
        ap.error("no swarmgpu command after --: e.g. -- simulate --trace default")
    return rest


def run_swarmgpu(rest: list[str]) -> int:
    """``swarmgpu REST`` in this process: its exit status."""
    sys.argv = ["swarmgpu", *rest]
    return int(cli_main() or 0)
