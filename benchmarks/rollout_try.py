"""Stop 76's roll-out try at 96.0 placing only: ``swarmgpu simulate`` with a sampled
roll-out among near-best nodes (``allocator.rollout``; docs/simulate.md, "A sampled
roll-out among near-best nodes (stop 76)"; main leaves it off).

    .venv/bin/python benchmarks/rollout_try.py --rollout-k 3 --rollout-m 20 \\
        --rollout-leaf waste -- \\
        simulate --trace default --seeds 42,43,44 --bound off --policy swarmgpu --json

``--rollout-k K`` (2..4; 0: off) candidates within ``--rollout-margin`` of the best
score (0: exact ties of distinct node states; scores step by 10 per gradient point, 1
for "already in use") are each rolled out with ``--rollout-m M`` tasks drawn from the
scorer's mix; ``--rollout-leaf waste`` tells roll-outs that place as much apart by the
scorer's node cost (``milli``: they keep the base choice; ``whole``: first by the
untouched nodes they broke; ``frag``: by FGD's fragmentation instead; ``priced``: the
waste plus the scorer's price of each untouched node broken; ``sequenced``: each at the
untouched nodes left when it broke; ``covered``: as priced, at the values of every shape
that only an untouched node hosts; ``cpuheld``: as priced, plus the CPU step of the
one-GPU tasks above a node's CPU share). ``--rollout-mix full`` draws the tasks from
every shape the scorer learned, not only its typical tasks (95% of them).
``--rollout-distinct class`` rolls out beside the base choice only the near-best nodes
of another node class, or untouched where it is used (or the reverse), among the top K;
``class-zone`` the best K - 1 such in the whole tie zone; ``contested`` as ``class``
where the scorer's mix contests the CPU (``rollout.cpu_contested``), else any (stop 81);
``--rollout-warmup base``: no roll-out while the mix is mostly the learner's prior.
``--whole-untouched`` sets ``SwarmScorer.whole_untouched`` too (stop 78's U, as
``untouched_try.py --rule whole``), so the roll-out runs beside the untouched price
(stop 80); since stop 82 that is main's rule and the flag changes nothing, and
``--no-whole-untouched`` turns it off, as the roll-outs without the flag ran before.
``--rollout-draws R`` rolls each candidate out on R draws, the same for all;
``--rollout-rule every`` lets a candidate replace the base choice only if it beats it
on each of them (``mean``: the best by the keys summed over them). ``--stats DIR``:
each replay process writes what the roll-out did (tie zones, changed choices, seconds)
to DIR/rollout.<pid>.json as it goes. Everything after ``--`` is ``swarmgpu``'s command
line; the replays' worker processes are forked, so they inherit the switch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from try_cli import add_rest, rest_of, run_swarmgpu  # noqa: E402  (the benchmarks' folder, as run)

from swarmgpu.allocator.rollout import (  # noqa: E402
    DISTINCT,
    LEAVES,
    MIXES,
    RULES,
    Allocator,
    RollOut,
)
from swarmgpu.allocator.scorer import SwarmScorer  # noqa: E402
from swarmgpu.allocator.values import Demand, NodeState  # noqa: E402

STATS_EVERY = 100  # tie zones between writes of the stats file


class LoggedRollOut(RollOut):
    """A roll-out that writes its counts to a file per process (forked workers' counts
    would otherwise be lost)."""

    stats_dir: Path | None = None

    def choose(self, alloc: Allocator, d: Demand, cands: list[NodeState]) -> NodeState:
        got = super().choose(alloc, d, cands)
        if int(self.stats.get("tie_zones", 0)) % STATS_EVERY == 0:
            self.write()
        return got

    def write(self) -> None:
        if self.stats_dir is not None:
            out = self.stats_dir / f"rollout.{os.getpid()}.json"
            out.write_text(json.dumps(self.stats))


def add_rollout(ap: argparse.ArgumentParser) -> None:
    """The roll-out's options (``switch_on`` reads them)."""
    ap.add_argument("--rollout-k", type=int, default=0, help="candidates rolled out; 0: off")
    ap.add_argument("--rollout-m", type=int, default=20, help="tasks drawn per roll-out")
    ap.add_argument("--rollout-margin", type=float, default=0.0,
                    help="score below the best still in the tie zone")
    ap.add_argument("--rollout-leaf", choices=LEAVES, default="milli",
                    help="between roll-outs that place as much: milli (the base choice), "
                         "waste (the least growth of the scorer's node cost), whole (the "
                         "fewest untouched nodes broken, then waste) or frag (the least "
                         "growth of FGD's fragmentation) or priced (waste plus the "
                         "scorer's price of each untouched node broken) or sequenced "
                         "(as priced, each at the untouched nodes left when it broke) or "
                         "covered (as priced, over every shape only an untouched node "
                         "hosts) or cpuheld (as priced, plus the CPU step of the "
                         "one-GPU tasks above a node's CPU share)")
    ap.add_argument("--rollout-mix", choices=MIXES, default="typical",
                    help="what the roll-out's tasks are drawn from: typical (the scorer's "
                         "typical tasks, 95%% of them) or full (every shape it learned)")
    ap.add_argument("--rollout-distinct", choices=DISTINCT, default="",
                    help="which near-best nodes beside the base choice are rolled out: "
                         "\"\" (any), class (those of the top K of another node class, "
                         "or untouched where it is used or the reverse) or class-zone "
                         "(the best K - 1 such in the whole tie zone) or contested "
                         "(class where the scorer's mix contests the CPU, else any)")
    ap.add_argument("--rollout-draws", type=int, default=1,
                    help="independent draws each candidate is rolled out on (the same "
                         "for every candidate)")
    ap.add_argument("--rollout-rule", choices=RULES, default="mean",
                    help="how the draws decide: mean (the best by the keys summed over "
                         "them) or every (a candidate replaces the base choice only if "
                         "it beats it on every draw)")
    ap.add_argument("--rollout-warmup", choices=("class", "base"), default="class",
                    help="contested, while the mix is mostly the learner's prior: class "
                         "(the scorer's order among nodes of a class) or base (no roll-out)")
    ap.add_argument("--rollout-seed", type=int, default=0, help="the draws' base seed")
    ap.add_argument("--whole-untouched", action=argparse.BooleanOptionalAction,
                    default=None,
                    help="price untouched nodes for every shape only such a node hosts "
                         "(SwarmScorer.whole_untouched, stop 78's U; main's since stop "
                         "82) or, with --no-whole-untouched, not (main before)")
    ap.add_argument("--stats", type=Path, default=None,
                    help="folder for each replay process's roll-out counts")


def switch_on(args: argparse.Namespace, ro: type[LoggedRollOut] | None = None) -> None:
    """``SwarmScorer.rollout`` as ``add_rollout``'s options ask (``ro``: the class;
    nothing with ``--rollout-k 0``); ``SwarmScorer.whole_untouched`` as
    ``--[no-]whole-untouched`` asks (neither: main's rule), whatever K."""
    if args.whole_untouched is not None:
        SwarmScorer.whole_untouched = args.whole_untouched
    if args.rollout_k:
        got = (ro or LoggedRollOut)(k=args.rollout_k, m=args.rollout_m,
                                    margin=args.rollout_margin, seed=args.rollout_seed,
                                    leaf=args.rollout_leaf, mix=args.rollout_mix,
                                    distinct=args.rollout_distinct,
                                    warmup=args.rollout_warmup,
                                    draws=args.rollout_draws, rule=args.rollout_rule)
        if args.stats is not None:
            args.stats.mkdir(parents=True, exist_ok=True)
            got.stats_dir = args.stats
        SwarmScorer.rollout = got


def switched_on(argv: list[str], doc: str, ro: type[LoggedRollOut] | None = None) -> list[str]:
    """``argv`` read as a roll-out try's command line (the roll-out's options, then
    ``--`` and the rest), the roll-out switched on as it asks: the rest. ``doc``: the
    try's docstring, its first paragraph the help's description."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    add_rollout(ap)
    add_rest(ap)
    args = ap.parse_args(argv)
    rest = rest_of(ap, args)
    switch_on(args, ro)
    return rest


def main(argv: list[str]) -> int:
    return run_swarmgpu(switched_on(argv, __doc__))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
