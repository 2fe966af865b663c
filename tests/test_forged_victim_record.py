"""A ``<p>state.preempted`` record holds GPUs for the preemptor it names in a one-shot's
plan (``plan``, ``status``, ``audit``, ``apply``: ``oneshot_holds``) only when the
preemption hour on the swarm object has its stop: swarmgpu's own record of it, which
managers alone write. The record is a label on the victim's own spec, which its stack
writes: before, one it made up (naming a live service, the node its stopping task is
on, a time within ``settle_s``) held the stopping task's GPUs for that service, where
the daemon, which preempted nothing, holds them from all until the task stops; a
preemptor named so read as placed on them, and `apply --service` wrote its plan.
Victim cooldowns check a record so already (``preempted.recorded_cooling``)."""

from __future__ import annotations

from dataclasses import replace

from support.forged import P, victim_stopping_on_4090s

from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.oneshot_holds import one_shot_nominations
from swarmgpu.manager.nodes.sync import facts_by_node


def _holds(hour: dict[str, str]) -> list[str]:
    """The one-shot's holds at 1000 s where the victim's record names high at 995 s and
    the swarm object's labels are ``hour``."""
    snap, _victim = victim_stopping_on_4090s(1000.0)
    snap = replace(snap, swarm_labels=hour)
    return [n.service for n in one_shot_nominations(snap, Config(), facts_by_node(snap))]


def test_a_record_whose_stop_the_hour_lacks_holds_nothing_for_the_preemptor_it_names() -> None:
    assert _holds({}) == []
    assert _holds({P + "state.preemptions": "990"}) == []  # another second's stop


def test_a_record_whose_stop_the_hour_counts_holds_for_its_preemptor() -> None:
    assert _holds({P + "state.preemptions": "995"}) == ["high"]
