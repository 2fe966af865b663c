"""The search behind ``preempt.pick_victims``: of a node's ranked candidates (at most
``MAX_CANDIDATES``), the set of the fewest that frees enough GPUs and that ``allowed``
takes, the least by (its greatest reclaim rank, its highest priority, its total priority,
its indexes) among those of that size.

Tried one by one, a crowded node's 4,095 sets were each counted, and each one asked of a
``topology`` request's allocator (``preempt._GpuSets``): 72 ms a node for a preemptor no
set serves (``benchmarks/bench_preempt_topology.py``). Walked instead depth first in
index order (a set before those that add to it, a set before a later one of its size:
the key's last term), a branch is left whole when nothing in it can win: its sets
together free too few GPUs, or no GPU set the topology asks for (``may``: what no fewer
GPUs give either), or free too little CPU or memory, or keep a host port bound, its
victims that give the most, as many as a set that may still win holds (``Lack``: what
more victims only give; where that alone refused, a node's 4,095 sets were walked:
24 ms, 0.3 ms bounded), or are larger than a set found already, or of its size with a
key no less. The set chosen is the one the sets tried one by one gave
(``tests/test_victim_search.py`` holds that enumeration and compares them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

Rank = tuple[int, float, float]  # a victim set's reclaim rank (``preempt.reclaim_rank``)
Won = tuple[int, tuple[Rank, int, int], int]  # (size, the key's first terms, the set's bits)


class Victim(Protocol):
    """A candidate as the search reads it (``preempt.Candidate``)."""

    @property
    def service(self) -> str: ...

    @property
    def priority(self) -> int: ...

    @property
    def uuids(self) -> tuple[str, ...]: ...


C = TypeVar("C", bound=Victim)


@dataclass(frozen=True)
class Lack:
    """What ``allowed`` asks besides GPUs that more victims only give (``preemptview``'s
    ``victims_fit``): ``short`` of each resource (CPU and memory the node lacks without
    victims; 0: none), what each victim frees of them (``gives``, by its service), and
    those that must all go (``must``: they bind a host port it publishes). ``allowed``
    takes no set that gives less, or leaves one of ``must``: the walk skips it."""

    short: tuple[int, ...]
    gives: Callable[[str], tuple[int, ...]]
    must: frozenset[str] = frozenset()


@dataclass
class _Walk(Generic[C]):
    """One node's search: the candidates by index, a set of them as bits (``mask``), the
    GPUs it frees as bits of ``uuids``."""

    ranked: Sequence[tuple[Rank, C]]
    free: int  # how many GPUs are free already
    need: int
    allowed: Callable[[tuple[C, ...]], bool] | None
    may: Callable[[frozenset[str]], bool] | None
    lack: Lack | None
    uuids: list[str]  # the GPUs that may free: those a holder not ranked holds never do
    # per GPU: (the candidates listing it, those that must all go for it to free)
    gpus: list[tuple[int, int]]
    may_of: dict[int, bool] = field(default_factory=dict)  # GPUs freed -> ``may``
    # ``lack``'s resources packed in one int, ``width`` bits each (one addition adds
    # them all: a tuple a step cost more than the bound saved): index -> what it gives
    # (none below 0); index i, count r -> the most r of i and those after it give, each
    # resource apart; (shift, how short) where short; those that must go, as bits (-1:
    # one is not ranked)
    gain: list[int] = field(default_factory=list)
    most: list[list[int]] = field(default_factory=list)
    short: list[tuple[int, int]] = field(default_factory=list)
    width: int = 0
    must: int = 0
    touch: list[list[int]] = field(default_factory=list)  # index -> the GPUs it bears on
    suffix: list[int] = field(default_factory=list)  # index -> the bits of it and later
    # index i -> the GPUs freed by any set that holds i and all after it, whatever it
    # holds before i; and those such a set frees or not by what it holds before i
    tail: list[int] = field(default_factory=list)
    split: list[list[int]] = field(default_factory=list)
    won: Won | None = None
    cap: int = 0  # the largest set a walk tries
    capped: bool = False  # a walk left larger sets untried

    def __post_init__(self) -> None:
        n = len(self.ranked)
        self.suffix = [(1 << n) - (1 << i) for i in range(n + 1)]
        self.touch = [[g for g, (lists, must) in enumerate(self.gpus) if (lists | must) >> i & 1]
                      for i in range(n)]
        for i in range(n + 1):
            after, before = self.suffix[i], (1 << i) - 1
            self.tail.append(sum(1 << g for g, (lists, must) in enumerate(self.gpus)
                                 if lists & after and not must & before))
            self.split.append([g for g, (lists, must) in enumerate(self.gpus)
                               if (lists | must) & after and (must & before or not lists & after)])
        if self.lack is not None:
            self._read_lack(self.lack)

    def _read_lack(self, lack: Lack) -> None:
        names = [c.service for _r, c in self.ranked]
        gives = [[max(0, x) for x in lack.gives(name)] for name in names]
        k = range(len(lack.short))
        w = self.width = 1 + max((sum(g[j] for g in gives) for j in k), default=0).bit_length()
        self.gain = [sum(g[j] << j * w for j in k) for g in gives]
        for i in range(len(names) + 1):
            best = [sorted((g[j] for g in gives[i:]), reverse=True) for j in k]
            self.most.append([sum(sum(best[j][:r]) << j * w for j in k)
                              for r in range(len(names) - i + 1)])
        self.short = [(j * w, want) for j, want in enumerate(lack.short) if want > 0]
        self.must = -1 if not lack.must <= set(names) else sum(
            1 << j for j, name in enumerate(names) if name in lack.must)

    def enough(self, freed: int) -> bool:
        """``freed`` (with the free GPUs) is enough, and a set ``may`` takes."""
        if self.free + freed.bit_count() < self.need:
            return False
        if self.may is None:
            return True
        got = self.may_of.get(freed)
        if got is None:
            got = self.may_of[freed] = self.may(frozenset(
                u for g, u in enumerate(self.uuids) if freed >> g & 1))
        return got

    def room(self, bits: int, gain: int, i: int, r: int) -> bool:
        """Whether a set of ``bits`` (giving ``gain``) and at most ``r`` candidates from
        ``i`` on may give what ``lack`` asks: the ``r`` that give the most of each
        resource do, and the ``must`` it lacks are among them."""
        missing = self.must & ~bits
        if missing & ~self.suffix[i] or missing.bit_count() > r:
            return False
        got, ones = gain + self.most[i][min(r, len(self.ranked) - i)], (1 << self.width) - 1
        return all(got >> shift & ones >= want for shift, want in self.short)

    def bounds(self, mask: int, gain: int, i: int, size: int) -> bool:
        """``room`` for the sets that hold ``mask`` (``size`` of them), ``i`` and maybe
        more after it, no larger than a set found already; False too where only sets
        larger than ``cap`` may give it (noted: ``capped``)."""
        r = (self.won[0] if self.won is not None else len(self.ranked)) - size
        if not self.room(mask, gain, i, r):
            return False
        if size + r > self.cap and not self.room(mask, gain, i, self.cap - size):
            self.capped = True
            return False
        return True

    def takes(self, chosen: tuple[C, ...], mask: int, gain: int, i: int) -> bool:
        """``allowed`` of ``chosen`` (``mask``, giving ``gain``; its last ``i - 1``), not
        asked where it gives too little of ``lack``'s (``allowed`` asks more)."""
        if self.lack is not None and not self.room(mask, gain, i, 0):
            return False
        return self.allowed is None or self.allowed(chosen)

    def walk(self, start: int, chosen: tuple[C, ...], mask: int, freed: int, top: int,
             total: int, gain: int = 0) -> None:
        """The sets of ``chosen`` (``mask``, all before ``start``; ``freed``: the GPUs it
        frees, ``top``, ``total``: its priorities' greatest, sum; ``gain``: what it gives
        of ``lack``'s) and more from ``start`` on, in index order: the best kept in
        ``won``."""
        ranked, gpus, size = self.ranked, self.gpus, len(chosen)
        if self.lack is not None and not self.bounds(mask, gain, start, size):
            return  # (asked once a call: for each i it cost more than it saved)
        for i in range(start, len(ranked)):
            won = self.won
            if won is not None and size + 1 > won[0]:
                return
            # all these sets free at most what this and all later candidates do with mask
            most = self.tail[i] | freed
            for g in self.split[i]:
                lists, must = gpus[g]
                if lists & (mask | self.suffix[i]) and not must & ~(mask | self.suffix[i]):
                    most |= 1 << g
            if not self.enough(most):
                return  # (nor for a later i: its sets are among these)
            c = ranked[i][1]
            prio, m2, f2 = c.priority, mask | 1 << i, freed
            key = (ranked[i][0], max(top, prio), total + prio)  # (ranks rise with i)
            if won is not None and size + 1 == won[0] and key >= won[1]:
                if key[0] > won[1][0]:
                    return  # (ranks only rise further on)
                continue  # (a set as good comes first in index order: the key's last)
            for g in self.touch[i]:
                lists, must = gpus[g]
                if lists & m2 and not must & ~m2:
                    f2 |= 1 << g
            g2 = gain if self.lack is None else gain + self.gain[i]
            if self.enough(f2) and self.takes((*chosen, c), m2, g2, i + 1):
                self.won = (size + 1, key, m2)
                continue  # (those that add to it are larger)
            if size + 2 > self.cap:
                self.capped = True
                continue
            self.walk(i + 1, (*chosen, c), m2, f2, max(top, prio), total + prio, g2)


def best_victims(need: int, free: AbstractSet[str], ranked: Sequence[tuple[Rank, C]],
                 holders: Mapping[str, AbstractSet[str]],
                 allowed: Callable[[tuple[C, ...]], bool] | None,
                 may: Callable[[frozenset[str]], bool] | None,
                 lack: Lack | None = None,
                 ) -> tuple[C, ...] | None:
    """``pick_victims``' choice among ``ranked`` (rank, candidate), ascending by rank:
    the fewest that free ``need`` GPUs with ``free`` and that ``allowed`` takes, then the
    least key; None when no set does. ``may``: given the GPUs a set frees, False where
    ``allowed`` takes no set that frees only those, and then False for any fewer.
    ``lack``: what ``allowed`` asks that more victims only give (``Lack``)."""
    index = {c.service: j for j, (_r, c) in enumerate(ranked)}
    by_gpu: dict[str, tuple[int, int]] = {}
    for j, (_r, c) in enumerate(ranked):
        for u in c.uuids:
            who = holders.get(u, set())
            if u in free or not who <= index.keys():
                continue  # (free already, or held by one not ranked: stays held)
            lists, must = by_gpu.get(u, (0, sum(1 << index[s] for s in who)))
            by_gpu[u] = (lists | 1 << j, must)
    w: _Walk[C] = _Walk(ranked, len(free), need, allowed, may, lack, list(by_gpu),
                        list(by_gpu.values()))
    low = min((c.priority for _r, c in ranked), default=0)  # (none below it: no bound)
    # Sets of 2 at most first: where they serve (most often), the walk does not go deep
    # into larger sets before it finds them; where nothing serves, it goes on once.
    for w.cap in (2, len(ranked)):
        w.capped = False
        w.walk(0, (), 0, 0, low, 0)
        if w.won is not None:
            return tuple(c for j, (_r, c) in enumerate(ranked) if w.won[2] >> j & 1)
        if not w.capped:
            break
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
