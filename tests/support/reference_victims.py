"""``preempt.pick_victims`` as it was before ``victimsearch``: every set of the ranked
candidates tried, size by size, the least key kept. The reference the search is compared
with (``tests/test_victim_search.py``) and timed against
(``benchmarks/bench_preempt_topology.py``); ``may`` and ``lack`` are taken and not read."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import combinations

from swarmgpu.manager.placement.preempt import (
    MAX_CANDIDATES,
    Candidate,
    reclaim_rank,
    rule_sorted,
)
from swarmgpu.manager.placement.victimsearch import Lack, Rank


def every_set(need: int, free: AbstractSet[str], candidates: Sequence[Candidate],
              holders: Mapping[str, AbstractSet[str]],
              allowed: Callable[[tuple[Candidate, ...]], bool] | None = None,
              over: Mapping[str, tuple[float, float]] | None = None,
              may: Callable[[frozenset[str]], bool] | None = None,
              lack: Lack | None = None,
              ) -> tuple[Candidate, ...] | None:
    """The victims, as ``pick_victims`` chose them by trying every set."""
    if len(free) >= need and (allowed is None or allowed(())):
        return ()
    ranked = sorted(((reclaim_rank(c, over or {}), c) for c in rule_sorted(candidates)),
                    key=lambda rc: rc[0])[:MAX_CANDIDATES]
    for k in range(1, len(ranked) + 1):
        best: tuple[tuple[Rank, int, int, tuple[int, ...]], tuple[Candidate, ...]] | None = None
        for idx in combinations(range(len(ranked)), k):
            combo = tuple(ranked[i][1] for i in idx)
            names = {c.service for c in combo}
            freed = {u for c in combo for u in c.uuids if holders.get(u, set()) <= names}
            if len(free) + len(freed - free) < need:
                continue
            if allowed is not None and not allowed(combo):
                continue
            key = (max(ranked[i][0] for i in idx), max(c.priority for c in combo),
                   sum(c.priority for c in combo), idx)
            if best is None or key < best[0]:
                best = (key, combo)
        if best is not None:
            return best[1]
    return None
