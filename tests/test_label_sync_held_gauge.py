"""``swarmgpu_label_changes_held`` counts every label change label sync held back because
it would stop running tasks, on nodes whose agent answered and on those whose did not."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry
from support.empty_swarm import EmptySwarm

from swarmgpu.core.config import AgentsConfig, Config, SyncConfig
from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.agentbook import AgentBook
from swarmgpu.manager.nodes.sync import LabelSync, Snapshot
from swarmgpu.swarm.client import SwarmNode, SwarmTask


def test_held_gauge_counts_a_held_removal_on_a_node_whose_agent_is_down(
        tmp_path: Path) -> None:
    """A node without facts still has the labels no node carries removed (a hand-set
    ``state.`` key), under the same guard: one a running task's constraint reads is held
    and said, but the gauge counted only nodes whose agent answered and read 0."""
    cfg = Config(state_dir=str(tmp_path), dry_run=True, sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(identity="none", service=""))
    metrics = DaemonMetrics(CollectorRegistry())
    sync = LabelSync(EmptySwarm(), cfg, metrics, AgentBook())  # type: ignore[arg-type]
    node = SwarmNode("n1", "gpu-node-1", "10.0.0.1", "worker", "ready", "active",
                     {"swarmgpu.state.pin": "a"}, {}, 1, {}, {})
    task = SwarmTask("t1", "s1", "n1", 1, "running", "running", (),
                     constraints=("node.labels.swarmgpu.state.pin==a",))
    down = {"n1": FactsResult("n1", "gpu-node-1", "", None, "timed out", 0.0)}
    report = sync.cycle(Snapshot([node], [], [task], down))
    assert [h.key for p in report.plans for h in p.held] == ["swarmgpu.state.pin"]
    assert metrics.registry.get_sample_value("swarmgpu_label_changes_held") == 1
