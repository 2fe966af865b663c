"""The search behind ``preempt.pick_victims``: of a node's ranked candidates (at most
``MAX_CANDIDATES``), the set of the fewest that frees enough GPUs and that ``allowed``
takes, the least by (its greatest reclaim rank, its highest priority, its total priority,
its indexes) among those of that size.

Tried one by one, a crowded node's 4,095 sets were each counted, and each one asked of a
``topology`` request's allocator (``preempt._GpuSets``): 72 ms a node for a preemptor no
set serves (``benchmarks/bench_preempt_topology.py``). Walked instead depth first in
index order (the order of the key's last term), a branch is left whole when nothing
under it can win: its sets together free too few GPUs, or no GPU set the topology asks
for (``may``: what no subset passes either), or its key's least possible value is no
better than the best found already (every later set in the walk has greater indexes).
The set chosen is the one the sets tried one by one gave (``tests/test_victim_search.py``
holds that enumeration and compares them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

Rank = tuple[int, float, float]  # a victim set's reclaim rank (``preempt.reclaim_rank``)


class Victim(Protocol):
    """A candidate as the search reads it (``preempt.Candidate``)."""

    @property
    def service(self) -> str: ...

    @property
    def priority(self) -> int: ...

    @property
    def uuids(self) -> tuple[str, ...]: ...


C = TypeVar("C", bound=Victim)


@dataclass
class _Walk(Generic[C]):
    """One node's search (``best``): the candidates by index, the sets as bits."""

    ranked: Sequence[tuple[Rank, C]]
    free: int  # how many GPUs are free already
    need: int
    allowed: Callable[[tuple[C, ...]], bool] | None
    may: Callable[[frozenset[str]], bool] | None
    # GPU -> (the candidates listing it, those that must all go for it to free); a GPU
    # held by a holder not ranked here never frees and is not listed
    gpus: dict[str, tuple[int, int]] = field(default_factory=dict)
    suffix: list[int] = field(default_factory=list)  # index -> the bits of it and later
    freed_of: dict[int, frozenset[str]] = field(default_factory=dict)  # bits -> GPUs freed
    may_of: dict[frozenset[str], bool] = field(default_factory=dict)

    def freed(self, mask: int) -> frozenset[str]:
        got = self.freed_of.get(mask)
        if got is None:
            got = self.freed_of[mask] = frozenset(
                u for u, (lists, must) in self.gpus.items()
                if lists & mask and not must & ~mask)
        return got

    def enough(self, mask: int) -> bool:
        """The sets within ``mask`` may free enough GPUs and give a set ``may`` takes."""
        freed = self.freed(mask)
        if self.free + len(freed) < self.need:
            return False
        if self.may is None:
            return True
        got = self.may_of.get(freed)
        if got is None:
            got = self.may_of[freed] = self.may(freed)
        return got

    def best(self, k: int) -> tuple[C, ...] | None:
        """The least set of ``k`` candidates that frees enough and ``allowed`` takes."""
        n = len(self.ranked)
        ranks, prios = [r for r, _c in self.ranked], [c.priority for _r, c in self.ranked]
        won: list[tuple[tuple[Rank, int, int], tuple[int, ...]]] = []

        def walk(start: int, chosen: tuple[int, ...], mask: int, top: int, total: int,
                 ) -> None:
            left = k - len(chosen)
            for i in range(start, n - left + 1):
                if not self.enough(mask | self.suffix[i]):
                    return  # (nor for a later i: its sets are among these)
                # the least key of a set of ``chosen``, i and left - 1 after i; ranks
                # rise with the index, so a set's greatest is its last one's
                rest = sorted(prios[i + 1:])[:left - 1]
                low = (ranks[i + left - 1], max(top, prios[i], *rest[-1:]),
                       total + prios[i] + sum(rest))
                if won and low[0] > won[0][0][0]:
                    return  # (ranks only rise further on)
                if won and low >= won[0][0]:
                    continue  # (a set as good comes first in index order: the key's last)
                if left > 1:
                    walk(i + 1, (*chosen, i), mask | 1 << i, max(top, prios[i]),
                         total + prios[i])
                elif self.enough(mask | 1 << i) and (self.allowed is None or self.allowed(
                        tuple(self.ranked[j][1] for j in (*chosen, i)))):
                    won[:] = [(low, (*chosen, i))]

        walk(0, (), 0, min(prios), 0)  # (no priority is below the least: no bound)
        return tuple(self.ranked[j][1] for j in won[0][1]) if won else None


def best_victims(need: int, free: AbstractSet[str], ranked: Sequence[tuple[Rank, C]],
                 holders: Mapping[str, AbstractSet[str]],
                 allowed: Callable[[tuple[C, ...]], bool] | None,
                 may: Callable[[frozenset[str]], bool] | None,
                 ) -> tuple[C, ...] | None:
    """``pick_victims``' choice among ``ranked`` (rank, candidate), ascending by rank:
    the fewest that free ``need`` GPUs with ``free`` and that ``allowed`` takes, then the
    least key; None when no set does. ``may``: given the GPUs a set frees, False where
    ``allowed`` takes no set that frees only those, and then False for any fewer."""
    cands = [c for _r, c in ranked]
    w: _Walk[C] = _Walk(ranked, len(free), need, allowed, may)
    index = {c.service: j for j, c in enumerate(cands)}
    for j, c in enumerate(cands):
        for u in c.uuids:
            if u in free:
                continue
            who = holders.get(u, set())
            if not who <= index.keys():
                continue  # (held by one not ranked: stays held)
            lists, must = w.gpus.get(u, (0, sum(1 << index[s] for s in who)))
            w.gpus[u] = (lists | 1 << j, must)
    w.suffix = [0] * (len(cands) + 1)
    for j in range(len(cands) - 1, -1, -1):
        w.suffix[j] = w.suffix[j + 1] | 1 << j
    for k in range(1, len(cands) + 1):
        got = w.best(k)
        if got is not None:
            return got
    return None


def together_of(gpus: Sequence[int], k: int, ok: Callable[[int, int], bool] | None,
                budget: int = 10_000) -> bool:
    """Whether ``k`` of ``gpus`` may go together, each two of them ``ok`` (None: any);
    True too where that is not known after ``budget`` steps (a bound, never a refusal)."""
    if ok is None or k <= 1:
        return len(gpus) >= k
    steps = [0]

    def grow(chosen: tuple[int, ...], start: int) -> bool:
        if len(chosen) == k:
            return True
        for j in range(start, len(gpus) - (k - len(chosen)) + 1):
            steps[0] += 1
            if steps[0] > budget:
                return True
            g = gpus[j]
            if all(ok(c, g) for c in chosen) and grow((*chosen, g), j + 1):
                return True
        return False

    return grow((), 0)
