"""benchmarks/failed_at_full.py with the roll-out switched on as benchmarks/rollout_try.py
sets it (docs/simulate.md, "A sampled roll-out among near-best nodes (stop 76)"), and
which choices the roll-out changed, by the node classes involved.

    .venv/bin/python benchmarks/rollout_failed.py --rollout-k 3 --rollout-m 20 \\
        --rollout-leaf waste -- --pods derived.csv --seeds 42-44 --by-class --no-fgd

Everything after ``--`` is failed_at_full.py's command line. After each seed (a new
allocator) and at the end: the tie zones rolled out and the choices changed, by (the
base choice's class, whether it was untouched) -> (the chosen node's class, whether it
was untouched); a class is (GPU model, GPUs, cores), untouched is every GPU and all the
CPU free. Figures, not assertions.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

import failed_at_full  # noqa: E402  (the benchmarks' folder, as run)
from rollout_try import LoggedRollOut, switched_on  # noqa: E402

from swarmgpu.allocator.rollout import Allocator, untouched  # noqa: E402
from swarmgpu.allocator.values import Demand, NodeState  # noqa: E402

# (GPU model, GPUs, cores, untouched): a node as the choice log names it
Named = tuple[str, int, int, bool]


def named(n: NodeState) -> Named:
    return (n.product, len(n.free), (n.spec.cpu_milli or 0) // 1000, untouched(n))


def _cmp(a: float, b: float) -> str:
    return "more" if a > b else "fewer" if a < b else "same"


def within(d: Demand, base: NodeState, got: NodeState) -> tuple[str, str, str]:
    """A same-class change told apart: the demand's kind, the chosen node's free whole
    GPUs and CPU left per free GPU-milli, each against the base's."""
    kind = ("share" if d.gpu_milli else f"{d.num_gpu}GPU" + (
        " >16c" if d.cpu_milli > 16_000 else "") if d.num_gpu else "cpu")

    def per(n: NodeState) -> float:
        return (n.cpu_left or 0) / max(1, sum(n.free))
    whole = sum(1 for f in got.free if f >= 1000) - sum(1 for f in base.free if f >= 1000)
    return kind, _cmp(whole, 0), _cmp(per(got), per(base))


class ChoiceLog(LoggedRollOut):
    """A roll-out that counts its tie zones by the base choice and its changed choices
    by (base, chosen), per allocator (one per seed)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.alloc: Allocator | None = None
        self.zones: Counter[Named] = Counter()
        self.changes: Counter[tuple[Named, Named]] = Counter()
        # same-class changes between used nodes: (the demand's kind, free whole GPUs of
        # the chosen against the base, its CPU left per free GPU against the base's)
        self.within: Counter[tuple[str, str, str]] = Counter()

    def choose(self, alloc: Allocator, d: Demand, cands: list[NodeState]) -> NodeState:
        if alloc is not self.alloc:
            self.show()
            self.alloc = alloc
        base = named(cands[0])
        got = super().choose(alloc, d, cands)
        self.zones[base] += 1
        if got is not cands[0]:
            self.changes[(base, named(got))] += 1
            if base == named(got) and not base[3]:
                self.within[within(d, cands[0], got)] += 1
        return got

    def show(self) -> None:
        """Print the counts since the last allocator, then clear them."""
        if not self.zones:
            return
        print(f"roll-out: {sum(self.zones.values())} tie zones, "
              f"{sum(self.changes.values())} choices changed; base -> chosen "
              "(model, GPUs, cores, untouched): changes / the base's tie zones")
        for (a, b), v in self.changes.most_common():
            print(f"    {a} -> {b}: {v} / {self.zones[a]}")
        moved = Counter((a[3], b[3]) for a, b in self.changes.elements())
        print("  by untouched (base, chosen): " + ", ".join(
            f"{k}: {v}" for k, v in sorted(moved.items())))
        print("  used -> used of one class, (demand, chosen's free whole GPUs, its CPU left "
              "per free GPU; against the base's): " + ", ".join(
                  f"{k}: {v}" for k, v in self.within.most_common()))
        self.zones.clear()
        self.changes.clear()
        self.within.clear()


def main(argv: list[str]) -> int:
    rest = switched_on(argv, __doc__, ChoiceLog)
    sys.argv = ["failed_at_full.py", *rest]
    got = failed_at_full.main()
    from swarmgpu.allocator.scorer import SwarmScorer
    if isinstance(SwarmScorer.rollout, ChoiceLog):
        SwarmScorer.rollout.show()
    return got


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
