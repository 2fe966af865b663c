"""A pod the daemon's planner could not place, given room by moving running tasks: the
daemon's ``defrag`` rebalance policy in the planner replay (``simulate --policy swarmgpu
--rebalance-moves N``).

The daemon keeps such a service pending; its next rebalance pass asks the ``defrag``
policy for the fewest moves that make room (``swarmgpu.allocator.rescue.plans``, each
moved task to where placement puts it, away from its node), the mover carries them out,
and the next placement cycle places the pending service. The replay does the same at
once: the moves are made on the planner's allocator and in the Swarm objects as
``FragmentationMover``'s are, then the planner places the service again. The replay has
none of the daemon's limits on targets (metrics, constraints), as for fragmentation
moves, and its budgets per cycle and per node only with ``--move-limits daemon``
(``sim.limits``).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace
from typing import TYPE_CHECKING

from swarmgpu.allocator.rescue import RoomMove, make_room
from swarmgpu.allocator.values import Choice, Demand
from swarmgpu.core.rebalanceconfig import DefragConfig
from swarmgpu.sim.limits import DaemonLimits
from swarmgpu.sim.rebalance import Hopeless

if TYPE_CHECKING:
    from swarmgpu.manager.placement import Planner
    from swarmgpu.sim.trace import TracePod


def gpu_tasks(planner: Planner, pods: dict[str, TracePod]
              ) -> dict[str, dict[Hashable, tuple[Demand, Choice]]]:
    """node -> service -> (what it asked, where it runs): the planner's GPU holdings, the
    tasks a rescue may move (a CPU-only service is not the daemon's to move)."""
    running: dict[str, dict[Hashable, tuple[Demand, Choice]]] = {}
    for (svc, nid), h in planner.cluster.held_items():
        p = pods.get(svc)
        if p is not None and h.choice is not None and h.choice.gpus:
            # its task's CPU and memory leave with it (the node's usage counts them once
            # the task runs, the holding's choice before): the search gives them back
            running.setdefault(nid, {})[svc] = (p.demand(), replace(
                h.choice, cpu_milli=p.cpu_milli, memory_mib=p.memory_mib))
    return running


class PlannerRescuer:
    """``make_room`` over the planner's holdings, with the baselines' memory of demands
    that found no plan (``sim.rebalance.Hopeless``). ``limits``: each call a daemon
    cycle under its budgets (``sim.limits``): a plan they refuse is not made."""

    def __init__(self, forget_after: int = 50,
                 max_moves: int = DefragConfig().max_moves,
                 limits: DaemonLimits | None = None) -> None:
        self.hopeless = Hopeless(forget_after)
        self.max_moves = max_moves  # the daemon's default (rebalance.defrag.max_moves)
        self.limits = limits

    def __call__(self, planner: Planner, pods: dict[str, TracePod], pod: TracePod,
                 budget: int) -> list[tuple[str, str, Choice]] | None:
        """Moves made on the planner's allocator, as (service, old node, new choice), or
        None (nothing changed). ``pods``: service name -> its pod."""
        d = pod.demand()
        if self.limits is not None:
            self.limits.call()
            budget = self.limits.rescue_room(budget)
            if budget < 1:
                return None
        if self.hopeless.skip(d):
            return None
        alloc = planner.cluster.alloc
        got = make_room(alloc, gpu_tasks(planner, pods), d, budget, self.max_moves)
        self.hopeless.outcome(d, got is not None)
        if got is None:
            return None
        moves: list[RoomMove] = got[0]
        if self.limits is not None and not self.limits.admit_all(
                [(mv.old.node, mv.new.node) for mv in moves]):
            for mv in moves:  # a node a move in flight holds: the plan is not made
                alloc.release(mv.new)
            for mv in moves:
                alloc.commit(mv.old)
            return None
        committed = dict(planner.cluster.held_items())
        for mv in moves:  # what the node's usage still counts: ``carry_out`` moves it
            h = committed.get((str(mv.key), mv.old.node))
            had = h.choice if h is not None and h.choice is not None else mv.old
            extra = (mv.old.cpu_milli - had.cpu_milli, mv.old.memory_mib - had.memory_mib)
            if extra != (0, 0):
                alloc.commit(Choice(mv.old.node, (), (), 0.0, "usage", *extra))
        return [(str(mv.key), mv.old.node, mv.new) for mv in moves]
