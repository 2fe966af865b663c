"""A victim's cool-down after it was preempted is its own, by service ID: Swarm's names
are unique and a service cannot be renamed, so a listed service of a cooling victim's
name but another ID was created under it after the victim was removed (its stack
removed and deployed again), and was never preempted. Before, ``Preempter.victim_at``
went by name alone: such a service could not be a victim until the removed one's
cool-down ended."""

from __future__ import annotations

from support.forged import FACTS
from support.pending_high import pending_high

from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.placement.preempt import Candidate, Preemption


def _batch_preempted(sid: str) -> tuple[Preemption, list[Candidate]]:
    """A preemption, 5 s ago elsewhere, of a service named batch with id ``sid``."""
    v = Candidate("batch", sid, "n-9", 0, "", ())
    return Preemption("other", "id-other", 100, "n-9", "gpu-node-9", (v,)), [v]


def test_a_service_created_under_a_cooling_victims_name_may_be_a_victim_at_once() -> None:
    snap, plan = pending_high()
    pre = Preempter(Config(), clock=lambda: 1000.0)
    pre.took(*_batch_preempted("id-old"), 995.0)  # the removed batch's
    got = pre.decide(snap, plan, FACTS, None, 5000.0, mono=1000.0)  # type: ignore[arg-type]
    assert [p.describe() for p in got] == [
        "preempt batch (priority 0) on gpu-node-2 for high (priority 100)"]


def test_a_cooling_victim_of_its_own_id_is_still_passed_over() -> None:
    snap, plan = pending_high()
    pre = Preempter(Config(), clock=lambda: 1000.0)
    pre.took(*_batch_preempted("id-batch"), 995.0)
    assert pre.decide(snap, plan, FACTS, None, 5000.0, mono=1000.0) == []  # type: ignore[arg-type]
    assert set(pre.victim_at) == {"id-batch"}
