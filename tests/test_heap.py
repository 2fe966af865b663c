"""Garbage collection between the daemon's cycles (swarmgpu.manager.cycle.heap)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from swarmgpu.manager.cycle.heap import CycleCollector


@pytest.fixture(autouse=True)
def _thaw() -> Iterator[None]:
    yield
    gc.unfreeze()
    gc.enable()


def test_no_collection_during_a_cycle_and_survivors_frozen_after() -> None:
    c = CycleCollector(full_every=3)
    with c.around_cycle():
        assert not gc.isenabled()
        keep = [[i] for i in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(keep)


def test_cyclic_garbage_made_in_a_cycle_is_collected_after_it() -> None:
    c = CycleCollector()

    class Node:
        other: object = None

    with c.around_cycle():
        a, b = Node(), Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        assert gone() is not None  # collection is off
    assert gone() is None


def test_every_nth_cycle_unfreezes_everything() -> None:
    c = CycleCollector(full_every=3)
    c.after_cycle()
    assert gc.get_freeze_count() > 0
    frozen = gc.get_freeze_count()

    class Node:
        other: object = None

    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    c.after_cycle()  # frozen with the rest
    del a, b
    gc.collect()
    assert gone() is not None  # a frozen cycle is left alone
    c.after_cycle()  # the third: everything unfrozen and collected
    assert gone() is None
    # re-frozen from scratch, not frozen again on top (other threads of the test run
    # may allocate meanwhile: a loose bound)
    assert gc.get_freeze_count() < 2 * frozen


def test_collection_stays_off_when_it_was_off() -> None:
    gc.disable()
    with CycleCollector().around_cycle():
        pass
    assert not gc.isenabled()
