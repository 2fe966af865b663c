"""A one-shot's preemption holds (``plan``, ``status``, ``audit``, ``apply``): the daemon
keeps its own in memory, so a one-shot reads them from its victims' ``state.preempted``
records (``placement.recorded``), each checked against the preemption hour on the swarm
object, which managers alone write (``preempt_budget``): a record its victim's stack
wrote itself names no preemption swarmgpu made, and holds nothing. Split out of
``cycle.placement``, whose one-shot plans read them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swarmgpu.core.config import Config
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.cycle.preempt_budget import SpentHour
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement.nominated import Nomination, stops_waited
from swarmgpu.manager.placement.preempted import hour_seconds
from swarmgpu.manager.placement.recorded import left_out_victims, recorded_nominations


def one_shot_nominations(snap: Snapshot, cfg: Config, facts: Mapping[str, NodeFacts],
                         swarm: Any = None) -> list[Nomination]:
    """The holds a one-shot reads from its victims' records (``recorded_nominations``;
    ``swarm`` read for a victim the list left out: ``left_out_victims``): its plan's, and
    its preview of preemption's (``oneshot_plan.plan_as_daemon``). Only those whose stop
    the hour on the swarm object counts (read as the daemon reads it: ``SpentHour``)."""
    leaving = [*snap.stopping, *snap.rejected]
    left = left_out_victims(swarm, snap.services, leaving, snap.services_left_out)
    hour = SpentHour(cfg.sync.prefix)
    hour.read(snap.swarm_labels, snap.taken_at, ())
    return recorded_nominations([*snap.services, *left], leaving, facts, cfg.sync.prefix,
                                snap.taken_at, cfg.preemption.settle_s,
                                stops_waited(snap.stopping, snap.nodes),
                                snap.services_left_out, stopped=hour_seconds(hour.all))
