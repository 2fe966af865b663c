"""Label sync's write-time task check covers a service created after the snapshot.

Label sync plans a node's labels from the snapshot, whose task list was read before
the agents and the plan. At write time a change is checked against the node's tasks
as Swarm has them then (``Actuator.label_compute``): a task placed there meanwhile,
whose constraints read a key about to change, would be stopped by Swarm's constraint
enforcer. That re-read was skipped for keys no constraint of the snapshot read
(``sync._watched``): a service created after the snapshot, its task on the node and
constrained on such a key, was not seen, and the change stopped it. Pure, over the
recording Swarm stand-in (tests/support/forged.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from support.forged import RecordingSwarm
from support.placement import FACTS, R4090, P

from swarmgpu.core.config import Config, SyncConfig
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.agentbook import AgentBook
from swarmgpu.manager.nodes.sync import LabelSync, Snapshot
from swarmgpu.swarm.client import SwarmTask
from swarmgpu.swarm.labels import desired_labels


def test_label_sync_holds_a_change_a_service_created_since_the_snapshot_reads(
        tmp_path: Path) -> None:
    node = replace(R4090, labels={**desired_labels(FACTS["n-4090"], P), "zone": "a"})
    # Created and placed after the snapshot: in Swarm's task list, in no snapshot.
    new = SwarmTask("t-new", "s-new", node.id, 1, "running", "running", (),
                    constraints=(f"node.labels.{P}gpu.present==true",))
    sw = RecordingSwarm([node], [], [new])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False))
    labels = LabelSync(sw, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]
    none = FactsResult(node.id, node.hostname, "", NodeFacts(hostname=node.hostname), None, 1.0)
    labels.cycle(Snapshot([node], [], [], {node.id: none}))
    labels.flush()
    assert sw.node(node.id).labels[f"{P}gpu.present"] == "true"
