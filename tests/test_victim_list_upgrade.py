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

import json
import time
from dataclasses import replace

from support.forged import FACTS, P
from support.pending_high import pending_high

from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.placement.preempted import PREEMPTED_STATE

AT = 4990.0  # batch's stop, by the old leader, in the stored hour
PREEMPTED = "preempt batch (priority 0) on gpu-node-2 for high (priority 100)"


def _decide(hour: str, victims: str | None) -> list[str]:
    """What a fresh Preempter (the upgraded leader) decides at 5000 s where batch,
    placed again on the RTX 4090 node (its task made after ``AT``), carries its record
    of a stop on n-9 at ``AT``; the hour ``hour`` and the victims list ``victims``."""
    snap, plan = pending_high()
    record = json.dumps({"by": "other", "priority": 100, "at": AT, "node": "n-9"})
    services = [replace(s, labels={**s.labels, P + PREEMPTED_STATE: record})
                if s.name == "batch" else s for s in snap.services]
    made = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(AT + 5))
    tasks = [replace(t, created_at=made) if t.id == "t-batch" else t for t in snap.tasks]
    labels = {P + "state.preemptions": hour,
              **({P + "state.preempted-victims": victims} if victims is not None else {})}
    snap = replace(snap, services=services, tasks=tasks, swarm_labels=labels)
    got = Preempter(Config(), clock=lambda: 1000.0).decide(
        snap, plan, FACTS, None, 5000.0, mono=1000.0)  # type: ignore[arg-type]
    return [p.describe() for p in got]


def test_a_victim_an_earlier_version_stopped_keeps_its_cooldown_after_the_upgrade() -> None:
    assert _decide(f"{AT:.0f}", None) == []
    # (the new leader's own stop since, named: the old one's still unnamed)
    assert _decide(f"{AT:.0f},{AT + 5:.0f}", f"id-other@{AT + 5:.0f}") == []


def test_a_record_copied_from_a_stop_this_version_named_still_buys_nothing() -> None:
    assert _decide(f"{AT:.0f}", f"id-other@{AT:.0f}") == [PREEMPTED]
    # (a second unnamed after this version's first named stop is no earlier version's:
    # a victim counted without a write of its own, a move the mover's dry run made none of)
    assert _decide(f"{AT - 10:.0f},{AT:.0f}", f"id-other@{AT - 10:.0f}") == [PREEMPTED]
