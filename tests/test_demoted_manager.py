"""A manager demoted to worker (``docker node demote``) while its daemon runs: its engine
answers, as a worker's, that it is no manager. The daemon took that for an engine it
could not reach: each cycle "cannot reach the Swarm manager", /healthz degraded with
``"engine": "unreachable"`` and leadership unknown, and a demotion mid-cycle failed each
later write with that error instead of ending the term. A worker's engine leads nothing:
it is now a follower, as any manager that does not lead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import docker
import pytest
import requests

from swarmgpu.core.config import AgentsConfig, Config, HttpConfig, SyncConfig
from swarmgpu.manager.cycle.term import LeaderTerm
from swarmgpu.manager.cycle.wiring import daemon_steps
from swarmgpu.manager.daemon import Daemon
from swarmgpu.swarm.client import SwarmClient, SwarmError, SwarmUnavailable


class WorkerApi:
    """A worker's engine: its info says no control (ControlAvailable false), and every
    cluster read is refused 503, as Docker refuses it; ``manager``: still one."""

    def __init__(self, manager: bool = False, quorum: bool = True) -> None:
        self.manager, self.quorum = manager, quorum
        self.asked: list[str] = []

    def info(self) -> dict[str, Any]:
        return {"Swarm": {"NodeID": "n1", "LocalNodeState": "active",
                          "ControlAvailable": self.manager}}

    def inspect_node(self, node_id: str) -> dict[str, Any]:
        self.asked.append(node_id)
        if self.manager and self.quorum:
            return {"ID": node_id, "Version": {"Index": 1},
                    "Spec": {"Role": "manager", "Availability": "active", "Labels": {}},
                    "Description": {"Hostname": "m1"},
                    "Status": {"State": "ready", "Addr": "10.0.0.1"},
                    "ManagerStatus": {"Leader": True, "Reachability": "reachable"}}
        resp = requests.Response()
        resp.status_code = 503
        why = ("rpc error: code = Unknown desc = The swarm does not have a leader"
               if self.manager else "This node is not a swarm manager. Worker nodes can't "
               "be used to view or modify cluster state.")
        raise docker.errors.APIError(why, response=resp)


def client(api: WorkerApi) -> SwarmClient:
    sw = SwarmClient.__new__(SwarmClient)
    sw.endpoint, sw._api = "unix:///test", api  # type: ignore[assignment]
    return sw


def test_a_workers_engine_is_no_leader_and_asks_no_cluster_read() -> None:
    api = WorkerApi()
    assert client(api).is_leader() is False
    assert api.asked == []


def test_a_manager_without_quorum_still_cannot_say_who_leads() -> None:
    """No quorum: who leads is unknown, not "not this one" (the engine's error)."""
    with pytest.raises(SwarmUnavailable, match="no quorum"):
        client(WorkerApi(manager=True, quorum=False)).is_leader()
    assert client(WorkerApi(manager=True)).is_leader() is True


def test_a_demoted_managers_daemon_is_a_follower_not_an_engine_unreachable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(timeout_s=0.5, identity="none", watch_s=0),
                 http=HttpConfig(listen="127.0.0.1:0"))
    d = Daemon(cfg, swarm=client(WorkerApi()))
    report = d.cycle()
    assert not report.aborted and report.leader is False
    doc = d.health()
    assert doc["status"] == "ok" and doc["engine"] == "reachable", doc
    assert doc["leader"] is False, doc


def test_a_demotion_mid_cycle_ends_the_term_at_the_next_write() -> None:
    """The write's leader check (``LeaderTerm.holds``) asks again: the worker's engine
    says "not the leader", so the term ends and the rest of the cycle's writes are
    refused, rather than each failing on the engine's 503."""
    api = WorkerApi(manager=True)
    term = LeaderTerm(client(api).is_leader, check_s=0.0)
    term.start()
    assert term.holds() is True
    api.manager = False  # docker node demote
    assert term.holds() is False and term.lost


class LockedApi(WorkerApi):
    """A manager's engine restarted on an autolocked swarm: its manager role does not run
    until unlocked (no NodeID, no control), or one whose swarm node failed to start."""

    def __init__(self, state: str, error: str = "") -> None:
        super().__init__(manager=True)
        self.state, self.error = state, error

    def info(self) -> dict[str, Any]:
        return {"Swarm": {"NodeID": "", "LocalNodeState": self.state,
                          "ControlAvailable": False, "Error": self.error}}


@pytest.mark.parametrize(("state", "error", "said"), [
    ("locked", "", "docker swarm unlock"),
    ("error", "certificate has expired", "certificate has expired"),
    # an engine in no swarm (left it, or docker_host names another engine): it can never
    # lead, and its daemon said "ok", a follower, for as long as it ran
    ("inactive", "", "in no swarm")])
def test_a_locked_managers_daemon_says_so_not_a_healthy_follower(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: str, error: str,
        said: str) -> None:
    """Its engine leads nothing until unlocked, and neither may any other manager of a
    swarm all of whose managers restarted: /healthz said "ok", a follower, and the log
    "not the Swarm leader" at debug, with nothing placed anywhere."""
    with pytest.raises(SwarmUnavailable, match=said):
        client(LockedApi(state, error)).is_leader()
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(timeout_s=0.5, identity="none", watch_s=0),
                 http=HttpConfig(listen="127.0.0.1:0"))
    d = Daemon(cfg, swarm=client(LockedApi(state, error)))
    assert d.cycle().aborted
    doc = d.health()
    assert doc["status"] == "degraded" and doc["leader"] is None, doc
    assert said in doc["engine_error"], doc


@pytest.mark.parametrize("state", ["locked", "error", "inactive"])
def test_an_engine_that_answers_with_its_swarm_node_stalled_is_not_said_unreachable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: str) -> None:
    """/healthz, open to any caller (no reason given there), and the cluster document
    (the map names no ``engine_error``) said ``"engine": "unreachable"``: the operator
    looked for a stopped dockerd or a socket proxy gone, while the engine answered and
    its swarm waited for ``docker swarm unlock``. They now say its swarm node's state,
    Docker's ``Swarm.LocalNodeState``."""
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(timeout_s=0.5, identity="none", watch_s=0),
                 http=HttpConfig(listen="127.0.0.1:0"))
    d = Daemon(cfg, swarm=client(LockedApi(state)))
    d.use(daemon_steps(d))  # (the map's routes)
    assert d.cycle().aborted
    assert d.health(detail=False)["engine"] == state
    cluster = json.loads(d.http_routes["/api/v1/cluster"]()[1])
    assert cluster["engine"] == state and cluster["leader"] is False, cluster


class InfoApi(WorkerApi):
    """An engine whose info is ``answer`` as sent."""

    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__(manager=True)
        self.answer = answer

    def info(self) -> dict[str, Any]:
        return self.answer


@pytest.mark.parametrize("answer", [
    {},  # no Swarm part (a proxy that trims the answer)
    {"Swarm": {}},
    {"Swarm": {"NodeID": "", "LocalNodeState": "active", "ControlAvailable": True}},
    {"Swarm": {"NodeID": "", "ControlAvailable": False}},  # no state
], ids=["no-swarm-part", "empty-swarm", "active-without-id", "no-state"])
def test_an_info_without_the_node_id_docker_sends_is_unread_not_a_follower(
        answer: dict[str, Any]) -> None:
    """Docker sends ``Swarm.NodeID``, ``LocalNodeState`` and ``ControlAvailable`` always
    (moby's swarm.Info, none omitted when empty), and a node ID in every state but
    pending and those ``localstate`` names. An answer without them was read as "not the
    leader": a healthy follower, for as long as a proxy trimmed it, and no manager led."""
    with pytest.raises(SwarmError, match=r"Swarm\.NodeID"):
        client(InfoApi(answer)).is_leader()


def test_a_node_joining_is_a_follower() -> None:
    """Pending (joining, or waiting for its managers): no node ID yet, no control."""
    api = InfoApi({"Swarm": {"NodeID": "", "LocalNodeState": "pending",
                             "ControlAvailable": False}})
    assert client(api).is_leader() is False and api.asked == []
