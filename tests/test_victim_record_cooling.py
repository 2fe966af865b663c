"""A victim's ``<p>state.preempted`` record as its cooldown (a new leader's): the checks
that make it one (``preempted.recorded_cooling``).

A victim whose spec write landed (its ``<p>state.preempted`` record) but whose gate
never closed is not cooling down: Swarm never stopped its task, so nothing preempted it.

A preemption's victims get their specs written, then their gates close in one node
write (``victimstop.close_gates``); where that write fails, or a later victim's spec
write does, the record stays on the spec until placement takes it back (next cycle's
writes). Its time is in the stored hour when the stop is counted half made, or when
another preemption stopped a victim in that second. The record counted for the victim
cooldown then, while the victim still held the node it names: passed over for a cycle
as if preempted. It still counts where the victim no longer holds that node (its gate
closed), whatever it holds elsewhere: there, placed again, its tasks were made after
the stop (``preempted.made_after``; tests/test_tenants.py for a record on a holder whose
tasks were not). The holder's task here is made after the record either way, so the
node check stands alone: a job's spec write runs it anew, its new tasks made after a
stop whose gate never closed.

A stop's second is stored whole in the hour (``round(now)``) and to the millisecond in
the record: a stop in the last half millisecond before the half second of an odd second
read back as the next second (``round`` of x.5 goes to the even one), no stop in the hour
at it, and the victim was not cooling."""

from __future__ import annotations

from support.pending_high import decide_recorded

AT = 4990.0  # the record's time, in the stored hour


def _decide(node: str, at: float = AT, hour: str = f"{AT:.0f}") -> list[str]:
    """What a fresh Preempter (a new leader) decides at 5000 s where batch, holding the
    RTX 4090 node with a task made a second after ``at``, carries a record of a
    preemption on ``node`` at ``at``, the stored hour's seconds ``hour``."""
    # (the victims' list names it)
    return decide_recorded(node, at, at + 1, hour, f"id-batch@{hour}")


def test_a_victim_whose_gate_never_closed_on_the_recorded_node_is_not_cooling() -> None:
    assert _decide("n-4090") == [
        "preempt batch (priority 0) on gpu-node-2 for high (priority 100)"]


def test_a_victim_stopped_on_another_node_still_cools_where_it_holds() -> None:
    assert _decide("n-9") == []


def test_a_stop_half_a_millisecond_before_an_odd_seconds_half_still_cools() -> None:
    """Made at 4991.4996 s: the hour stores 4991, the record 4991.5 (read as 4992)."""
    assert _decide("n-9", at=round(4991.4996, 3), hour=f"{round(4991.4996):.0f}") == []
    assert _decide("n-9", at=4992.5, hour="4992") == []  # (an even one read so before)
