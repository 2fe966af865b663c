"""``placement.overshare: restart`` in the cycle: restart the task of a holder that has
been over its GPU share for a whole window (``overshare.Restarter``), judged on the
over-share watch the observe step updated in this cycle."""

from __future__ import annotations

from swarmgpu.manager.cycle.host import CycleHost
from swarmgpu.manager.cycle.pipeline import Step
from swarmgpu.manager.cycle.session import CycleSession, Slot
from swarmgpu.manager.services.overshare import Restarter
from swarmgpu.swarm.identity import metrics_may_act


class OvershareStep(Step):
    name = "overshare"
    requires = frozenset({Slot.SNAPSHOT, Slot.OVERSHARE})
    provides: frozenset[Slot] = frozenset()

    def __init__(self, host: CycleHost) -> None:
        self.host = host
        self.restarter = Restarter(host.swarm, host.cfg, stop=host.stop_event)

    def run(self, session: CycleSession) -> None:
        cfg = self.host.cfg
        watch = session.overshare
        # Per-process use read without a checked identity reports, never restarts.
        if self.host.leader and metrics_may_act(cfg):
            self.restarter.run(watch.due(cfg.placement.overshare_window_s),
                               session.snapshot, watch.forget)
