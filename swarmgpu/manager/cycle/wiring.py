"""The daemon's steps, in their order: what `swarmgpu run` runs each cycle (as leader).

    label-sync   node labels from facts; its node writes held for placement (the daemon
                 puts it first: ``Daemon.use``)
    placement    the plan, and its writes (label sync's folded in)
    grants       services that see GPUs without a grant (judged on placement's grants)
    metrics      every node's metrics page, once (a stop cuts it: the cycle ends)
    rebalance    windows, policies, movers (rebalance.enabled); no new move of its own
                 in a slot of the budgets a preemption waited for last cycle, nor onto
                 GPUs a preemption holds for its preemptor
    preemption   after placement's writes and the rebalancer's moves (placement.enabled)
    observe      the cluster document, the over-share watch, the map
    overshare    placement.overshare: restart, on observe's watch

Each step declares what it requires and provides (``cycle.session.Slot``); ``Pipeline``
checks this order when the daemon is wired, so a step moved before what it reads is
refused before any cycle runs. Steps a config turns off are left out, and the steps
after them no longer require what they would have provided.
"""

from __future__ import annotations

from swarmgpu.manager.cycle.grants import GrantsStep
from swarmgpu.manager.cycle.host import CycleHost
from swarmgpu.manager.cycle.observe import ObserveStep
from swarmgpu.manager.cycle.overshare import OvershareStep
from swarmgpu.manager.cycle.pipeline import Step
from swarmgpu.manager.cycle.placement import PlacementStep
from swarmgpu.manager.cycle.preempt_step import PreemptStep
from swarmgpu.manager.cycle.rebalance import Rebalancer, serve
from swarmgpu.manager.cycle.scrape import ScrapeStep


def daemon_steps(host: CycleHost) -> list[Step]:
    """The steps after label sync for ``host``'s config, in order (``Daemon.use`` takes
    them); building them registers their HTTP routes and metrics on ``host``."""
    cfg = host.cfg
    placement = cfg.placement.enabled
    steps: list[Step] = []
    preempt = PreemptStep(host, after_moves=cfg.rebalance.enabled) if placement else None
    if preempt is not None:  # the GPUs its preemptions freed, held for their preemptors
        steps.append(PlacementStep(host, nominated=preempt.preempter.nominated.current))
    steps += [GrantsStep(host, placement=placement), ScrapeStep(host)]
    # A preemption that waited for the move budgets holds the slot its move needs from
    # the rebalancer's next cycle (which runs first): its moves, handed over as a call;
    # so are the GPUs its preemptions hold (no move lands there).
    rebalancer = Rebalancer(host, placement=placement,
                            reserved=preempt.preempter.reserved if preempt else tuple,
                            nominated=preempt.preempter.nominated.current if preempt
                            else tuple) if cfg.rebalance.enabled else None
    if rebalancer is not None:
        serve(host, rebalancer)
        steps.append(rebalancer)
    if preempt is not None:
        steps.append(preempt)
    steps.append(ObserveStep(host, placement=placement,
                             moves=rebalancer.to_dict if rebalancer is not None else None,
                             looks=rebalancer.looks if rebalancer is not None else None))
    if cfg.placement.overshare == "restart":
        steps.append(OvershareStep(host))
    return steps
