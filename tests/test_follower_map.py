"""A follower's cluster document (the GPU map, /api/v1/cluster). A daemon that led and
then stood by served its last term's document, frozen: its nodes, holders, pending
requests and findings, and ages judged by that document's time, as current beside
"Role follower", for as long as it stood by (a reader polling any manager's API got a
cluster hours old). A follower's is now as a daemon's that never led: no cluster of its
own; while who leads is unknown (its engine away) the last one stays, marked so."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.forged import RecordingSwarm, sw_node
from support.stepped_daemon import step_of, stepped_daemon

from swarmgpu.manager.cycle.rebalance import ROUTE, Rebalancer
from swarmgpu.manager.rebalance.moves import Proposal
from swarmgpu.swarm.client import SwarmUnavailable


def _gone() -> bool:
    raise SwarmUnavailable("Docker Engine unreachable at unix:///test: connection refused")


def test_a_follower_serves_no_cluster_of_its_last_term(monkeypatch: pytest.MonkeyPatch) -> None:
    swarm = RecordingSwarm([sw_node("n-01", "gpu-01")], [], [])
    d = stepped_daemon(monkeypatch, swarm, timeout_s=0.2)

    def cluster() -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(d.http_routes["/api/v1/cluster"]()[1])
        return doc

    d.cycle()
    assert [n["hostname"] for n in cluster()["nodes"]] == ["gpu-01"]
    monkeypatch.setattr(swarm, "is_leader", _gone)
    d.cycle()  # who leads unknown: the last document stays, marked unreachable
    assert cluster()["engine"] == "unreachable" and cluster()["nodes"]
    monkeypatch.setattr(swarm, "is_leader", lambda: False)
    d.cycle()
    doc = cluster()
    assert doc["leader"] is False and doc["nodes"] == [], doc["nodes"]
    assert doc["generated_at"] == 0.0


def test_a_follower_serves_no_rebalance_proposal_of_its_last_term(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``/api/rebalance``: the last term's proposal (its failing nodes, its notes) stood,
    frozen, on the follower, as the cluster document did."""
    swarm = RecordingSwarm([sw_node("n-01", "gpu-01")], [], [])
    d = stepped_daemon(monkeypatch, swarm, timeout_s=0.2)
    d.cycle()
    rebalance = step_of(d, Rebalancer)
    rebalance.last = Proposal(notes=["gpu-01: hot"], failing_nodes={"gpu-01": "agent lost"})
    monkeypatch.setattr(swarm, "is_leader", lambda: False)
    d.cycle()
    doc = json.loads(d.http_routes[ROUTE]()[1])
    assert doc["notes"] == [] and doc["health"]["failing_nodes"] == {}, doc
