"""The facts watch reads the swarm's nodes from the cache within its own budget
(``agents.watch_s``): where that budget cuts the cache's full list (``BudgetCut``), the
cache stays stale (the next read lists) and that list still compares what changed with
no event named it (the stall check, ``watch_verdict``). Before, the list tried again
after a cut was taken as a failed one and compared nothing: a stalled stream the cut
minute's list would have caught went unnoticed for another minute, every cycle reading
what the stream did not tell."""

from __future__ import annotations

import pytest
from support.swarm_cache import Clock, Source, event, same

from swarmgpu.swarm.cache import SwarmCache
from swarmgpu.swarm.client import BudgetCut


def _cut() -> None:
    raise BudgetCut("the cycle's engine budget has passed (test)")


def _cache(src: Source, clock: Clock, cuts: list[float]) -> SwarmCache:
    cache = SwarmCache(src, relist_s=600.0, clock=clock)
    cache.cut_with(lambda: cuts.append(clock.t))
    cache.opened()
    cache.read()
    src.lists = 0
    return cache


def test_a_silent_streams_list_cut_at_the_budget_still_checks_for_a_stall() -> None:
    src, clock, cuts = Source(), Clock(), list[float]()
    cache = _cache(src, clock, cuts)
    src.bump("s2")  # a change the stalled stream says nothing of
    clock.t = 60.0
    src.during_list = _cut  # the facts watch's read: its budget passes in the list
    with pytest.raises(BudgetCut):
        cache.read()
    src.during_list = None
    clock.t = 61.0
    assert same(cache, src) and src.lists == 2  # stale: the next read lists
    clock.t = 91.0
    assert same(cache, src)
    assert cuts == [91.0]  # the stall noticed, as had the list not been cut


def test_an_event_after_a_cut_list_is_no_change_unseen() -> None:
    src, clock, cuts = Source(), Clock(), list[float]()
    cache = _cache(src, clock, cuts)
    cache.on_event(event("node", "n0"))  # named before the cut list
    src.bump("n0")
    clock.t = 60.0
    src.during_list = _cut
    with pytest.raises(BudgetCut):
        cache.read()
    src.during_list = None
    src.bump("s2")
    cache.on_event(event("service", "s2"))  # its event, while the list is due again
    clock.t = 61.0
    assert same(cache, src)
    clock.t = 200.0
    assert same(cache, src)
    assert cuts == [] and "no event for a change" not in cache.stats.reasons
