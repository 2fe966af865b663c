"""The allocator's score memo: one demand's scores per group state, and the live states by
score, so that a decision reads only the best score's states."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping


class GroupScores:
    """One demand's scores per group state (None: it cannot host the demand), and the
    live states by score, so a decision reads the best score's states instead of every
    state (most keep their score from one decision to the next)."""

    __slots__ = ("by_score", "era", "of", "order", "read", "seen")

    def __init__(self) -> None:
        self.era = -1  # of the allocator's log of new states, and how far it was read
        self.read = 0
        self.of: dict[int, float | None] = {}
        self.by_score: dict[float, set[int]] = {}
        self.order: list[float] = []  # the scores of ``by_score``, ascending
        # states in ``by_score`` or that cannot host the demand: a state that left the
        # live set is dropped from ``by_score`` and ``seen``, and keeps its score
        self.seen: set[int] = set()

    def put(self, gk: int, s: float | None) -> None:
        self.of[gk] = s
        self.seen.add(gk)
        if s is None or s != s or s == -math.inf:  # never chosen (as the scan did)
            return
        got = self.by_score.get(s)
        if got is None:
            got = self.by_score[s] = set()
            bisect.insort(self.order, s)
        got.add(gk)

    def best(self, live: Mapping[int, object], rank: Mapping[int, int],
             ) -> tuple[float, int] | None:
        """The highest score among ``live`` states, and its state of the lowest rank
        (``rank``: a state's lowest node rank)."""
        order, by_score = self.order, self.by_score
        while order:
            s = order[-1]
            gks = by_score[s]
            now = gks & live.keys()
            if len(now) != len(gks):
                self.seen -= gks - now
                by_score[s] = now
            if now:
                return s, min(now, key=rank.__getitem__)
            del by_score[s]
            order.pop()
        return None


