"""Choosing GPU sets inside one node by interconnect (go-gpuallocator pair scores).

What is maximised, in this order (``SetChoice.key``):

1. the set's score: the sum of the pair scores of its pairs (go-gpuallocator's set score);
2. among equal scores, the score left among the free GPUs that stay free, i.e. the
   smallest *cut* between the chosen set and the rest. Taking from a group that is
   already broken cuts fewer good links, so NVLink cliques and PIX switches stay whole
   for the requests that need them (for k == 1 this hands out the worst-connected GPU,
   HAMi's idea);
3. the score between the chosen set and the GPUs already in use (pack next to them);
4. the lexicographically smallest set (determinism).

How: GPUs that are interchangeable - same score and same allowed-ness to every other
GPU, free or used - are merged into classes (an NVLink clique, a PIX switch, a NUMA
node). A choice is then a count per class, and every term of the key is a function of
the counts. Real nodes have few classes (a DGX has one, 8x RTX 4090 two, eight SYS-joined
8-GPU boards eight), so an exact branch and bound over counts stays small even at 64 GPUs.
Where it does not (no symmetry, e.g. many hybrid cube meshes), the search stops after a
node budget and a greedy-plus-swap local search over the same counts takes over.

go-gpuallocator's best-effort policy instead scores every partition of the free GPUs into
sets of size k; that enumeration is exponential and unusable beyond 8 GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

PairScore = Callable[[int, int], int]
AllowedPair = Callable[[int, int], bool]

# DFS nodes the exact search may visit before the heuristic takes over. A count, not a
# time, so the answer does not depend on machine speed.
EXACT_NODE_BUDGET = 20_000

Key = tuple[int, int, int]  # (score, -cut, affinity to used GPUs): larger is better


@dataclass(frozen=True)
class SetChoice:
    """A chosen GPU set and why it won."""

    gpus: tuple[int, ...]
    score: int  # sum of pair scores inside the set
    cut: int  # sum of pair scores between the set and the free GPUs left over
    used_affinity: int  # sum of pair scores between the set and the GPUs already in use
    exact: bool  # True when the search proved this the best by ``key``

    @property
    def key(self) -> Key:
        return (self.score, -self.cut, self.used_affinity)


def set_score(gpus: Sequence[int], pair_score: PairScore) -> int:
    """Sum of pair scores over every pair of the set (go-gpuallocator's set score)."""
    return sum(pair_score(a, b) for a, b in combinations(gpus, 2))


def best_gpu_set(
    free: Sequence[int],
    k: int,
    pair_score: PairScore,
    *,
    all_gpus: Sequence[int] | None = None,
    allowed_pair: Callable[[int, int], bool] | None = None,
) -> tuple[int, ...] | None:
    """The k GPUs out of ``free`` to hand out, or None when no valid set exists.

    Maximises the set's interconnect score; among equals, prefers the set whose taking
    leaves the best-connected groups of ``all_gpus`` free. ``allowed_pair`` restricts
    which pairs may be in one set (e.g. NVLink-only or same-NUMA requests).
    For k == 1 it returns the GPU whose removal hurts the remaining free GPUs least
    (HAMi's idea: hand out the worst-connected GPU).
    """
    choice = choose_gpu_set(
        free, k, pair_score, all_gpus=all_gpus, allowed_pair=allowed_pair
    )
    return None if choice is None else choice.gpus


def choose_gpu_set(
    free: Sequence[int],
    k: int,
    pair_score: PairScore,
    *,
    all_gpus: Sequence[int] | None = None,
    allowed_pair: AllowedPair | None = None,
    node_budget: int = EXACT_NODE_BUDGET,
) -> SetChoice | None:
    """Like ``best_gpu_set`` but says the score, the cut and whether it is proven best.

    ``node_budget`` caps the exact search (0 forces the heuristic, for tests/benchmarks).
    """
    if k < 0:
        raise ValueError(f"k={k}: the number of GPUs must be >= 0")
    free_sorted = sorted(free)
    if len(set(free_sorted)) != len(free_sorted):
        raise ValueError(f"free={list(free)}: a GPU is listed twice")
    if k > len(free_sorted):
        return None
    if k == 0:
        return SetChoice((), 0, 0, 0, exact=True)
    used = sorted(set(all_gpus or ()) - set(free_sorted))
    classes = _Classes.build(free_sorted, used, pair_score, allowed_pair)
    return _Search(classes, k, node_budget).run()


# --- classes of interchangeable GPUs -------------------------------------------------


@dataclass
class _Classes:
    members: list[tuple[int, ...]]  # ascending GPU ids per class; classes by first member
    w: list[list[int]]  # w[a][b]: score of one pair across classes a, b (w[a][a] inside a)
    ok: list[list[bool]]  # ok[a][b]: may a GPU of a and one of b share a set
    deg: list[int]  # per GPU of the class: score to every other free GPU
    aff: list[int]  # per GPU of the class: score to every used GPU

    @property
    def size(self) -> list[int]:
        return [len(m) for m in self.members]

    @classmethod
    def build(
        cls,
        free: list[int],
        used: list[int],
        pair_score: PairScore,
        allowed_pair: AllowedPair | None,
    ) -> _Classes:
        n = len(free)
        s = [[0] * n for _ in range(n)]
        a = [[True] * n for _ in range(n)]
        for i in range(n):
            for j in range(i + 1, n):
                s[i][j] = s[j][i] = pair_score(free[i], free[j])
                if allowed_pair is not None:
                    a[i][j] = a[j][i] = bool(allowed_pair(free[i], free[j]))
        to_used = [[pair_score(g, u) for u in used] for g in free]

        def twins(i: int, j: int) -> bool:
            if to_used[i] != to_used[j]:
                return False
            return all(
                s[i][x] == s[j][x] and a[i][x] == a[j][x]
                for x in range(n)
                if x != i and x != j
            )

        # Twin-ness is transitive (see module doc), so comparing with one representative
        # per class is enough.
        groups: list[list[int]] = []
        for i in range(n):
            for g in groups:
                if twins(g[0], i):
                    g.append(i)
                    break
            else:
                groups.append([i])
        m = len(groups)
        w = [[0] * m for _ in range(m)]
        ok = [[True] * m for _ in range(m)]
        for p, gp in enumerate(groups):
            for q, gq in enumerate(groups):
                if p == q:
                    if len(gp) > 1:
                        w[p][p] = s[gp[0]][gp[1]]
                        ok[p][p] = a[gp[0]][gp[1]]
                else:
                    w[p][q] = s[gp[0]][gq[0]]
                    ok[p][q] = a[gp[0]][gq[0]]
        deg = [sum(s[g[0]]) for g in groups]
        aff = [sum(to_used[g[0]]) for g in groups]
        return cls(
            members=[tuple(free[i] for i in g) for g in groups],
            w=w,
            ok=ok,
            deg=deg,
            aff=aff,
        )

    def gpus(self, counts: Sequence[int]) -> tuple[int, ...]:
        """The lowest ids of each class: the lexicographically smallest set for counts."""
        out: list[int] = []
        for members, c in zip(self.members, counts, strict=True):
            out.extend(members[:c])
        return tuple(sorted(out))

    def feasible(self, counts: Sequence[int]) -> bool:
        chosen = [t for t, c in enumerate(counts) if c > 0]
        for t in chosen:
            if counts[t] > 1 and not self.ok[t][t]:
                return False
        return all(self.ok[p][q] for p, q in combinations(chosen, 2))

    def score(self, counts: Sequence[int]) -> int:
        total = 0
        for p, cp in enumerate(counts):
            if cp == 0:
                continue
            total += cp * (cp - 1) // 2 * self.w[p][p]
            for q in range(p + 1, len(counts)):
                total += cp * counts[q] * self.w[p][q]
        return total


# --- search over counts per class -----------------------------------------------------


class _Search:
    def __init__(self, classes: _Classes, k: int, node_budget: int) -> None:
        self.c = classes
        self.k = k
        self.m = len(classes.members)
        self.size = classes.size
        self.node_budget = node_budget
        self.nodes = 0
        self.best_key: Key | None = None
        self.best_counts: list[int] | None = None
        self.best_gpus: tuple[int, ...] = ()

    def run(self) -> SetChoice | None:
        exact = self._exact()
        if not exact:
            self._heuristic()
        if self.best_counts is None:
            # Exact search finished without a feasible set: none exists. (A heuristic
            # miss after a blown budget is reported the same way; see _heuristic.)
            return None
        counts = self.best_counts
        score = self.c.score(counts)
        dsum = sum(cnt * d for cnt, d in zip(counts, self.c.deg, strict=True))
        asum = sum(cnt * x for cnt, x in zip(counts, self.c.aff, strict=True))
        return SetChoice(
            gpus=self.c.gpus(counts),
            score=score,
            cut=dsum - 2 * score,
            used_affinity=asum,
            exact=exact,
        )

    def _offer(self, counts: list[int], key: Key) -> None:
        if self.best_key is None or key > self.best_key:
            self.best_key, self.best_counts = key, list(counts)
            self.best_gpus = self.c.gpus(counts)
        elif key == self.best_key:
            gpus = self.c.gpus(counts)
            if gpus < self.best_gpus:
                self.best_counts, self.best_gpus = list(counts), gpus

    # Exact: DFS over classes in order, choosing a count for each, with an upper bound on
    # the score still to gain. Ties must be explored (they are decided by the later key
    # terms), so only strictly worse branches are cut.
    def _exact(self) -> bool:
        m, w = self.m, self.c.w
        cap_suffix = [0] * (m + 1)
        wmax_suffix = [0] * (m + 1)
        for t in range(m - 1, -1, -1):
            cap_suffix[t] = cap_suffix[t + 1] + self.size[t]
            inner = max((w[t][u] for u in range(t + 1, m)), default=0)
            self_w = w[t][t] if self.size[t] > 1 else 0
            wmax_suffix[t] = max(wmax_suffix[t + 1], inner, self_w)
        counts = [0] * m
        link = [0] * m  # link[t]: score from one more GPU of class t to those chosen
        blocked = [0] * m  # chosen classes that may not share a set with class t

        def dfs(t: int, left: int, score: int, dsum: int, asum: int) -> bool:
            self.nodes += 1
            if self.nodes > self.node_budget:
                return False
            if left == 0:
                self._offer(counts, (score, -(dsum - 2 * score), asum))
                return True
            if t == m or cap_suffix[t] < left:
                return True
            if self.best_key is not None:
                reach = max(
                    (link[u] for u in range(t, m) if blocked[u] == 0), default=0
                )
                bound = score + left * reach + left * (left - 1) // 2 * wmax_suffix[t]
                if bound < self.best_key[0]:
                    return True
            top = min(self.size[t], left)
            if blocked[t] or not self.c.ok[t][t]:
                top = min(top, 0 if blocked[t] else 1)
            for cnt in range(top, -1, -1):
                if cnt:
                    gain = cnt * link[t] + cnt * (cnt - 1) // 2 * w[t][t]
                    counts[t] = cnt
                    for u in range(m):
                        link[u] += cnt * w[t][u]
                        if u != t and not self.c.ok[t][u]:
                            blocked[u] += 1
                    done = dfs(
                        t + 1,
                        left - cnt,
                        score + gain,
                        dsum + cnt * self.c.deg[t],
                        asum + cnt * self.c.aff[t],
                    )
                    for u in range(m):
                        link[u] -= cnt * w[t][u]
                        if u != t and not self.c.ok[t][u]:
                            blocked[u] -= 1
                    counts[t] = 0
                else:
                    done = dfs(t + 1, left, score, dsum, asum)
                if not done:
                    return False
            return True

        return dfs(0, self.k, 0, 0, 0)

    # Heuristic: from every class as a seed, add GPUs greedily by the marginal key, then
    # improve by moving one GPU between classes while the key rises.
    def _heuristic(self) -> None:
        seen: set[tuple[int, ...]] = set()
        for seed in range(self.m):
            for fill in (False, True):
                counts = self._greedy(seed, fill)
                if counts is None or tuple(counts) in seen:
                    continue
                seen.add(tuple(counts))
                counts = self._improve(counts)
                self._offer(counts, self._key(counts))

    def _key(self, counts: Sequence[int]) -> Key:
        score = self.c.score(counts)
        dsum = sum(cnt * d for cnt, d in zip(counts, self.c.deg, strict=True))
        asum = sum(cnt * x for cnt, x in zip(counts, self.c.aff, strict=True))
        return (score, -(dsum - 2 * score), asum)

    def _can_add(self, counts: Sequence[int], t: int) -> bool:
        if counts[t] >= self.size[t]:
            return False
        if counts[t] >= 1 and not self.c.ok[t][t]:
            return False
        return all(
            self.c.ok[u][t] for u in range(self.m) if u != t and counts[u] > 0
        )

    def _greedy(self, seed: int, fill: bool) -> list[int] | None:
        """Grow a set from one GPU of class ``seed``.

        Each step adds the GPUs with the best gain per GPU. With ``fill`` a step may take
        as many GPUs of one class as still fit (a whole NVLink clique or PIX switch at
        once), which escapes the trap of starting a group that cannot be completed.
        """
        w, m = self.c.w, self.m
        counts = [0] * m
        link = [0] * m
        t, amount = seed, 1
        while True:
            counts[t] += amount
            for u in range(m):
                link[u] += amount * w[t][u]
            left = self.k - sum(counts)
            if left == 0:
                return counts
            best: tuple[Fraction, int, int, int, int] | None = None
            for u in range(m):
                if not self._can_add(counts, u):
                    continue
                room = self.size[u] - counts[u] if self.c.ok[u][u] else 1
                a = min(room, left) if fill else 1
                gain = a * link[u] + a * (a - 1) // 2 * w[u][u]
                # gain per GPU, then cut added, affinity to used GPUs, low class id
                cand = (
                    Fraction(gain, a),
                    -(a * self.c.deg[u] - 2 * gain),
                    a * self.c.aff[u],
                    -u,
                    a,
                )
                if best is None or cand > best:
                    best = cand
            if best is None:
                return None
            t, amount = -best[3], best[4]

    def _improve(self, counts: list[int]) -> list[int]:
        w, m = self.c.w, self.m
        link = [sum(counts[j] * w[j][u] for j in range(m)) for u in range(m)]
        score = self.c.score(counts)
        dsum = sum(cnt * d for cnt, d in zip(counts, self.c.deg, strict=True))
        asum = sum(cnt * x for cnt, x in zip(counts, self.c.aff, strict=True))
        key: Key = (score, -(dsum - 2 * score), asum)
        for _ in range(4 * self.k + 8):  # each move strictly raises the key; cap anyway
            best: tuple[Key, int, int] | None = None
            for a in range(m):
                if counts[a] == 0:
                    continue
                loss = link[a] - w[a][a]
                for b in range(m):
                    if b == a or counts[b] >= self.size[b]:
                        continue
                    new_score = score - loss + link[b] - w[a][b]
                    new_d = dsum - self.c.deg[a] + self.c.deg[b]
                    new_key = (
                        new_score,
                        -(new_d - 2 * new_score),
                        asum - self.c.aff[a] + self.c.aff[b],
                    )
                    if new_key <= key or (best is not None and new_key <= best[0]):
                        continue
                    counts[a] -= 1
                    fits = self._can_add(counts, b)
                    counts[a] += 1
                    if fits:
                        best = (new_key, a, b)
            if best is None:
                break
            key, a, b = best
            counts[a] -= 1
            counts[b] += 1
            for u in range(m):
                link[u] += w[b][u] - w[a][u]
            score, asum = key[0], key[2]
            dsum = dsum - self.c.deg[a] + self.c.deg[b]
        return counts
