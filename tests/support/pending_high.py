"""A preemptor pending on a full RTX 4090 node, for the preemption's settle tests, and
a fresh Preempter's decision there where the victim carries a record of its stop."""

from __future__ import annotations

import json
import time
from dataclasses import replace

from support.forged import FACTS, R_UUIDS, P, sw_node, sw_svc
from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import plan_placement
from swarmgpu.manager.placement.keys import assign_key, gate_key
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.preempted import PREEMPTED_STATE
from swarmgpu.swarm.client import SwarmTask


def pending_high() -> tuple[Snapshot, object]:
    """batch (priority 0, ``id-batch``) holds all 8 RTX 4090s; high (priority 100,
    ``id-high``) asks for 2 of them."""
    held = Holding("batch", "n-4090", R_UUIDS, tuple(1000 for _ in R_UUIDS))
    nodes = [sw_node("n-4090", "gpu-node-2", {assign_key(P, "batch"): held.label_value(),
                                            gate_key(P, "batch"): "true"})]
    batch = sw_svc("batch", {f"{P}gpus": "8", f"{P}priority": "0"})
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*",
                           f"{P}priority": "100"})
    tasks = [SwarmTask("t-batch", batch.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ())]
    snap = Snapshot(nodes, [batch, high], tasks, {})
    return snap, plan_placement(nodes, [batch, high], tasks, FACTS)


def decide_recorded(node: str, at: float, made: float, hour: str,
                    victims: str | None) -> list[str]:
    """What a fresh Preempter (a new leader) decides at 5000 s in ``pending_high``
    where batch, its task made at ``made``, carries a record of other's stop (priority
    100) on ``node`` at ``at``; the swarm object's stored hour ``hour`` and list of
    victims ``victims`` (None: no such label)."""
    snap, plan = pending_high()
    record = json.dumps({"by": "other", "priority": 100, "at": at, "node": node})
    services = [replace(s, labels={**s.labels, P + PREEMPTED_STATE: record})
                if s.name == "batch" else s for s in snap.services]
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(made))
    tasks = [replace(t, created_at=created) if t.id == "t-batch" else t
             for t in snap.tasks]
    labels = {P + "state.preemptions": hour,
              **({P + "state.preempted-victims": victims} if victims is not None else {})}
    snap = replace(snap, services=services, tasks=tasks, swarm_labels=labels)
    got = Preempter(Config(), clock=lambda: 1000.0).decide(
        snap, plan, FACTS, None, 5000.0, mono=1000.0)  # type: ignore[arg-type]
    return [p.describe() for p in got]
