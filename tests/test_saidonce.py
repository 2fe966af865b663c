"""core.saidonce: a note is said once while it lasts, again when it changes or comes back."""

from __future__ import annotations

from swarmgpu.core.saidonce import SaidOnce


def _round(said: SaidOnce[str], *keys: str) -> list[str]:
    """One round with ``keys``: those to be said, in the order asked."""
    said.begin()
    out = [k for k in keys if said.fresh(k)]
    said.end()
    return out


def test_a_note_is_said_once_while_it_lasts_and_again_when_it_comes_back() -> None:
    said: SaidOnce[str] = SaidOnce()
    assert _round(said, "a", "b") == ["a", "b"]
    assert _round(said, "a", "b") == []
    assert _round(said, "b") == []  # a went away: forgotten
    assert _round(said, "a", "b") == ["a"]  # and came back: said again


def test_a_note_whose_value_changes_is_said_again() -> None:
    said: SaidOnce[str] = SaidOnce()
    said.begin()
    assert said.fresh("svc", ("pending", "no room"))
    said.end()
    said.begin()
    assert not said.fresh("svc", ("pending", "no room"))
    assert said.fresh("other", None)
    said.end()
    said.begin()
    assert said.fresh("svc", ("invalid", "bad label"))  # another value: said again
    assert not said.fresh("other")
    said.end()
    said.begin()
    assert said.fresh("svc", ("pending", "no room"))  # back to the first: said again
    said.end()


def test_every_ask_of_a_round_is_answered_against_the_last_round() -> None:
    """The same note twice in a round is said twice the first time (as each site logged
    it), and not at all while it lasts; its last value in the round is kept."""
    said: SaidOnce[str] = SaidOnce()
    assert _round(said, "x", "x") == ["x", "x"]
    assert _round(said, "x", "x") == []
    said.begin()
    assert said.fresh("k", 1) and said.fresh("k", 2)
    said.end()
    said.begin()
    assert said.fresh("k", 1) and not said.fresh("k", 2)
    said.end()


def test_a_round_that_raises_before_its_end_leaves_the_memory_as_it_was() -> None:
    """What a round that never closed saw is dropped by the next one: a note it saw
    for the first time is said again, one it did not see is still said."""
    said: SaidOnce[str] = SaidOnce()
    assert _round(said, "old") == ["old"]
    said.begin()
    assert said.fresh("new")  # ...and the cycle raises here: no end()
    assert list(said) == ["old"]
    assert _round(said, "old", "new") == ["new"]
    assert sorted(said) == ["new", "old"]


def test_a_round_never_opened_forgets_nothing() -> None:
    said: SaidOnce[str] = SaidOnce()
    assert _round(said, "a") == ["a"]
    assert list(said) == ["a"] and len(said) == 1  # cycles skipped: still said
    assert _round(said, "a") == []


def test_a_note_forgotten_in_its_round_is_said_again_next_time() -> None:
    said: SaidOnce[str] = SaidOnce()
    said.begin()
    assert said.fresh("a", "v") and said.fresh("b")
    said.forget("a")
    said.forget("never-seen")
    said.end()
    assert list(said) == ["b"]
    said.begin()
    assert said.fresh("a", "v") and not said.fresh("b")
    said.end()
