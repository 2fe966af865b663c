"""The preemption step of the daemon's cycle (``PreemptStep``): ``preemption.Preempter``
run after placement's writes and the rebalancer's moves, and the next cycle brought near
once it stopped or moved victims."""

from __future__ import annotations

from swarmgpu.manager.cycle.host import CycleHost
from swarmgpu.manager.cycle.pipeline import Step
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.cycle.session import CycleSession, Slot
from swarmgpu.manager.cycle.triggers import follow_up


class PreemptStep(Step):
    """Preemption after placement's writes and the rebalancer's moves: placement's
    writes (a re-deploy's device map) cannot reopen a gate closed here, and a move
    started here is judged by the rebalancer's mover only from the next snapshot on,
    which carries its label (as for the mover's own moves)."""

    name = "preemption"
    provides: frozenset[Slot] = frozenset()

    def __init__(self, host: CycleHost, *, after_moves: bool) -> None:
        """``after_moves``: the rebalancer runs in this cycle (this step comes after it)."""
        self.host = host
        self.requires = frozenset({Slot.SNAPSHOT, Slot.FACTS, Slot.PLACEMENT, Slot.PLANNER,
                                   *([Slot.MOVES] if after_moves else [])})
        self.preempter = Preempter(host.cfg)

    def stand_by(self) -> None:
        """Not the leader: a new term holds no slot until its own cycle waits."""
        self.preempter.waiting = ()

    def run(self, session: CycleSession) -> None:
        host, cfg = self.host, self.host.cfg
        # A node whose facts are stale takes no placement (``agentbook.stale_nodes``):
        # a victim stopped there would free GPUs its preemptor is never placed on.
        stale = session.planner.cluster.stale
        facts = {nid: f for nid, f in session.facts.items() if nid not in stale}
        done = self.preempter.cycle(host.swarm, session.snapshot, session.placement,
                                    facts, session.planner.refused_nodes,
                                    ports=session.planner.port_takers)
        if done and not (cfg.preemption.dry_run or cfg.dry_run):
            # The victims' tasks stop within their grace period: plan again soon.
            follow_up(host.trigger)
