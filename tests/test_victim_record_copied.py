"""A ``<p>state.preempted`` record copied onto a holder, then its own tasks made anew,
buys no victim cooldown: the hour's stop names its victim.

A victim's record counts for its cooldown (a new leader's) where the hour on the swarm
object has a stop in its second and, on a holder placed elsewhere since, each of its
tasks was made after that stop (``preempted.recorded_cooling``). The hour's seconds name
no victim and the record is its stack's label: a genuine record of any service's stop
copied onto a holder that ran all along, then ``docker service update --force`` (its
tasks made anew, after the stop), had that holder passed over as a victim for the rest
of the stop's ``victim_cooldown_s``, at a restart's cost, each time a preemption stopped
anyone. The preemption's own list of its victims, ``<p>state.preempted-victims``
(``<service id>@<second>``, written with the hour, before the stops), must name it."""

from __future__ import annotations

from support.pending_high import decide_recorded

AT = 4990.0  # the record's time, a stop in the stored hour
PREEMPTED = "preempt batch (priority 0) on gpu-node-2 for high (priority 100)"


def _decide(victims: str | None) -> list[str]:
    """What a fresh Preempter (a new leader) decides at 5000 s where batch, holding the
    RTX 4090 node with a task made after ``AT``, carries a record of a stop on n-9 at
    ``AT`` (in the stored hour); the preemption's victims list ``victims`` (None: none)."""
    return decide_recorded("n-9", AT, AT + 5, f"{AT:.0f}", victims)


def test_a_record_copied_from_anothers_stop_then_force_updated_buys_no_cooldown() -> None:
    # (no list, or one naming no victim at AT: AT is an earlier version's stop, which
    # counts for its record's victim: tests/test_victim_list_upgrade.py)
    assert _decide(f"id-other@{AT:.0f}") == [PREEMPTED]
    # (its own entry, of another stop)
    assert _decide(f"id-batch@{AT - 30:.0f},id-other@{AT:.0f}") == [PREEMPTED]


def test_the_victim_the_hour_names_still_cools() -> None:
    assert _decide(f"id-other@{AT:.0f},id-batch@{AT:.0f}") == []
