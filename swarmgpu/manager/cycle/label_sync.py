"""The cycle's first step: each node's labels from its agent's facts (``sync.LabelSync``).

It hands later steps the facts as this cycle judges them (GPU health states applied, an
unreachable agent's last good facts standing in) and, when a later step requires
``held`` (placement: one write per node per cycle), its node writes held back for that
step to fold into its own; the daemon writes whatever that step did not take right
after it.
"""

from __future__ import annotations

from swarmgpu.manager.cycle.pipeline import Step
from swarmgpu.manager.cycle.session import CycleSession, Slot
from swarmgpu.manager.nodes.sync import LabelSync, facts_by_node


class LabelSyncStep(Step):
    name = "label-sync"
    requires = frozenset({Slot.SNAPSHOT})
    provides = frozenset({Slot.REPORT, Slot.FACTS, Slot.HELD})

    def __init__(self, labels: LabelSync, *, hold: bool) -> None:
        self.labels = labels
        self.hold = hold  # a later step folds these writes into its own

    def stand_by(self) -> None:
        self.labels.stand_by()

    def run(self, session: CycleSession) -> None:
        snap = session.snapshot
        session.report = self.labels.cycle(snap, hold=self.hold)
        session.held = self.labels.held
        fallback = {nid: r.facts for nid, r in self.labels.book.records.items()
                    if r.facts is not None}
        session.facts = facts_by_node(snap, fallback)
