"""A follower's /metrics: the gauges that describe the cluster (per-service GPU use,
agents unreachable, pending requests, GPUs by health...) are its leader's to export. A
daemon that stands by kept the values of its last cycle as leader, frozen: a dashboard's
``sum by (service)`` counted them twice beside the new leader's, ``max`` kept showing a
node unreachable long since mended."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from support.empty_swarm import EmptySwarm
from support.stepped_daemon import step_of, stepped_daemon

from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.cycle.grants import GrantsStep
from swarmgpu.manager.cycle.observe import ObserveStep
from swarmgpu.manager.cycle.rebalance import Rebalancer
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.swarm.client import SwarmNode, SwarmUnavailable

CLUSTER_GAUGES = ("swarmgpu_agents_unreachable", "swarmgpu_nodes_gpus_unread",
                  "swarmgpu_label_changes_held", "swarmgpu_pending_requests",
                  "swarmgpu_ungranted_services", "swarmgpu_health_failing_nodes",
                  "swarmgpu_nodes_facts_stale", "swarmgpu_health_agent_lost_nodes")


def _not_leading(how: str) -> bool:
    if how == "follower":
        return False
    raise SwarmUnavailable("this engine's swarm is locked (autolock, after a restart): "
                           "run `docker swarm unlock` on it")


@pytest.mark.parametrize("how", ["follower", "leadership-unknown"])
def test_a_follower_exports_none_of_its_last_terms_cluster_gauges(
        monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """``leadership-unknown``: its engine cannot say who leads (locked, unreachable, no
    quorum): its term ended, its gauges 0 as a follower's; they stood frozen beside the
    new leader's for as long as a locked manager waited for its unlock."""
    swarm = EmptySwarm()
    d = stepped_daemon(monkeypatch, swarm)
    d.cycle()
    reg = d.metrics.registry
    # What a leader's cycle over a busy cluster leaves (set here: the swarm is empty)
    observe = step_of(d, ObserveStep)
    observe.gauges.rows = ({("llm", "gpu-1", "n1", "0"): 90.0},
                           {("llm", "gpu-1", "n1", "0"): 1000.0}, {}, {})
    m = d.metrics
    grants = step_of(d, GrantsStep)
    rebalance = step_of(d, Rebalancer)
    for gauge in (m.agents_unreachable, m.nodes_gpus_unread, m.held_changes, m.pending,
                  m.facts_stale, grants.count, rebalance.failing, rebalance.agent_lost):
        gauge.set(2)
    m.planned.labels(status="pending").set(3)
    d.labels.health.gauge.labels(level="failed").set(1)  # type: ignore[union-attr]
    assert reg.get_sample_value("swarmgpu_service_gpu_util",
                                {"service": "llm", "node": "gpu-1", "node_id": "n1",
                                 "gpu": "0"}) == 90.0
    swarm.is_leader = lambda: _not_leading(how)  # type: ignore[method-assign]
    d.cycle()
    text = generate_latest(reg).decode()
    assert 'service="llm"' not in text, text
    for name in CLUSTER_GAUGES:
        assert reg.get_sample_value(name) == 0, name
    assert reg.get_sample_value("swarmgpu_planned_services", {"status": "pending"}) == 0
    assert reg.get_sample_value("swarmgpu_gpus_by_health", {"level": "failed"}) == 0
    assert reg.get_sample_value("swarmgpu_is_leader") == 0


def test_a_new_term_counts_an_agent_lost_from_its_own_first_look(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The agents' records are the daemon's memory of its own reads: a follower reads no
    agent. Leading again hours later, an agent that missed the first read was taken for
    lost since its last answer in the last term (hours, past node_lost_grace_s), and the
    health policy could drain its node at once; a restarted daemon, with no record,
    waits the grace. Within a term the loss still counts from the last answer."""
    d = stepped_daemon(monkeypatch, EmptySwarm())
    rebalance = step_of(d, Rebalancer)
    mono = [100.0]  # the daemon's monotonic clock, as its losses are counted
    rebalance.clock = lambda: mono[0]
    node = SwarmNode("n1", "gpu-node-1", "10.0.0.1", "worker", "ready", "active", {}, {}, 1,
                     {}, {})
    answered = FactsResult("n1", "gpu-node-1", "", NodeFacts("gpu-node-1"), None, 1000.0,
                           fetched_mono=100.0)
    d.book.record(answered)

    def lost(wall: float, at: float) -> dict[str, float]:
        mono[0] = at
        down = {"n1": FactsResult("n1", "gpu-node-1", "", None, "timed out", wall,
                                  fetched_mono=at)}
        return dict(rebalance.health_inputs(Snapshot([node], [], [], down,
                                                     taken_at=wall)).lost)

    assert rebalance.health_inputs(Snapshot([node], [], [], {"n1": answered},
                                            taken_at=1000.0)).lost == {}  # (the term's first)
    assert lost(1300.0, 400.0) == {"n1": 300.0}  # (this term's own answer)
    d.pipeline.stand_by()  # a follower for hours
    assert lost(50_000.0, 49_100.0) == {"n1": 0.0}
    assert lost(50_400.0, 49_500.0) == {"n1": 400.0}
