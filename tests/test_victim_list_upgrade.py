"""A rolling upgrade from a daemon that wrote no list of its victims (stop 80 and
before: ``<p>state.preempted-victims`` absent) kept no cool-down of its victims placed
again since: a victim's record counts on a holder only where that list names it, and
the old leader's stops named none, so each such victim could be preempted again at
once by the new leader, within its ``preemption.victim_cooldown_s``. As the mover's
list of ended moves reads an unnamed finish (``rebalance.endedlist.unnamed``), a stop
of the hour that no entry of the list names is an earlier version's: it counts for the
victim whose record has it, as before the list; within the hour every stop this
version makes is named, so a record copied from another's named stop still buys
nothing. Pure, over the Preempter's decision (tests/support/pending_high.py)."""

from __future__ import annotations

from support.pending_high import decide_recorded

AT = 4990.0  # batch's stop, by the old leader, in the stored hour
PREEMPTED = "preempt batch (priority 0) on gpu-node-2 for high (priority 100)"


def _decide(hour: str, victims: str | None) -> list[str]:
    """What a fresh Preempter (the upgraded leader) decides at 5000 s where batch,
    placed again on the RTX 4090 node (its task made after ``AT``), carries its record
    of a stop on n-9 at ``AT``; the hour ``hour`` and the victims list ``victims``."""
    return decide_recorded("n-9", AT, AT + 5, hour, victims)


def test_a_victim_an_earlier_version_stopped_keeps_its_cooldown_after_the_upgrade() -> None:
    assert _decide(f"{AT:.0f}", None) == []
    # (the new leader's own stop since, named: the old one's still unnamed)
    assert _decide(f"{AT:.0f},{AT + 5:.0f}", f"id-other@{AT + 5:.0f}") == []


def test_a_record_copied_from_a_stop_this_version_named_still_buys_nothing() -> None:
    assert _decide(f"{AT:.0f}", f"id-other@{AT:.0f}") == [PREEMPTED]
    # (a second unnamed after this version's first named stop is no earlier version's:
    # a victim counted without a write of its own, a move the mover's dry run made none of)
    assert _decide(f"{AT - 10:.0f},{AT:.0f}", f"id-other@{AT - 10:.0f}") == [PREEMPTED]
