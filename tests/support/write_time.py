"""Label sync's write-time task check (``Actuator.label_compute``) over a task the
snapshot lacks: the RTX 4090 node, its agent's answer without GPUs (so gpu.present
would go), and one running task on it, constrained on gpu.present, that Swarm's task
list holds and the snapshot does not.

First written in tests/test_label_sync_new_service.py."""

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
from swarmgpu.swarm.unkeyed import Unkeyed


def gpu_present_after_sync(tmp: Path, task_id: str, service_id: str, desired: str,
                           unkeyed: Unkeyed | None = None) -> str | None:
    """The node's gpu.present label after one label sync cycle and its flush, the unread
    task ``task_id`` of ``service_id`` (desired state ``desired``) on the node, the
    snapshot's left-out entries ``unkeyed``."""
    node = replace(R4090, labels={**desired_labels(FACTS["n-4090"], P), "zone": "a"})
    task = SwarmTask(task_id, service_id, node.id, 1, "running", desired, (),
                     constraints=(f"node.labels.{P}gpu.present==true",))
    sw = RecordingSwarm([node], [], [task])
    cfg = Config(state_dir=str(tmp), sync=SyncConfig(watch_events=False))
    labels = LabelSync(sw, cfg, DaemonMetrics(), AgentBook())  # type: ignore[arg-type]
    none = FactsResult(node.id, node.hostname, "", NodeFacts(hostname=node.hostname), None, 1.0)
    labels.cycle(Snapshot([node], [], [], {node.id: none}, unkeyed=unkeyed or Unkeyed()))
    labels.flush()
    return sw.node(node.id).labels.get(f"{P}gpu.present")
