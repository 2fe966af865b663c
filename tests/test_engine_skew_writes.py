"""A service spec written through an engine older than another manager's.

Docker's service update replaces the whole spec with what the engine written to decodes,
and an engine decodes only the fields its API types know (and answers only those): a
spec a newer manager's engine wrote with ``ContainerSpec.OomScoreAdj`` (Docker 27.0),
read and written back through a Docker 26.1 engine, loses it, its task spec changes and
Swarm replaces every task of the service. The engine here answers as such an older
engine does (the field left out of its inspect); the client must refuse the write,
naming the managers, their versions and the fix, and post nothing. These go through
docker-py's own ``APIClient``, only its HTTP answered (tests/support/answered_engine.py,
as for tests/test_wrong_object_answers.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.answered_engine import answered_engine
from support.loglines import log_lines

from swarmgpu.swarm.client import SwarmClient, SwarmError

# The spec as the newer manager's engine stored it, and as the older one answers it.
STORED = {"Name": "llm", "Labels": {}, "Mode": {"Replicated": {"Replicas": 2}},
          "TaskTemplate": {"ContainerSpec": {"Image": "vllm", "OomScoreAdj": 200}}}
OLD_VIEW = {**STORED, "TaskTemplate": {"ContainerSpec": {"Image": "vllm"}}}


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    yield from log_lines("WARNING")


def node_raw(nid: str, host: str, role: str, engine: str) -> dict[str, Any]:
    return {"ID": nid, "Version": {"Index": 5},
            "Spec": {"Role": role, "Availability": "active", "Labels": {}},
            "Description": {"Hostname": host, "Engine": {"EngineVersion": engine}},
            "Status": {"State": "ready", "Addr": "10.0.0.1"}}


def engine(monkeypatch: pytest.MonkeyPatch, own: str, others: list[tuple[str, str, str]]
           ) -> tuple[SwarmClient, list[tuple[str, Any]], list[str]]:
    """A client of an engine running Docker ``own`` (node m1, a manager) in a swarm with
    ``others`` (hostname, role, Docker version); the writes posted (path, body) and the
    paths read."""
    nodes = [node_raw("m1", "m1", "manager", own),
             *(node_raw(f"n{i}", h, r, v) for i, (h, r, v) in enumerate(others))]
    return answered_engine(monkeypatch, {
        "/version": {"ApiVersion": "1.43", "Version": own}, "/nodes": nodes,
        "/nodes/m1": nodes[0],
        "/services/s1": {"ID": "s1", "Version": {"Index": 3}, "Spec": OLD_VIEW}})


def relabel(spec: Any) -> Any:
    return {**spec, "Labels": {"swarmgpu.x": "1"}}


def test_a_spec_write_through_an_engine_older_than_a_manager_is_refused(
        monkeypatch: pytest.MonkeyPatch, warnings: list[str]) -> None:
    """m1 runs 26.1.5, m2 27.3.1: the write would post the spec without OomScoreAdj (a
    restart of both tasks); refused, nothing posted, the reason logged once for two
    writes, naming m2, its version and the fix."""
    sw, posted, _ = engine(monkeypatch, "26.1.5", [("m2", "manager", "27.3.1")])
    for _ in range(2):
        with pytest.raises(SwarmError, match=r"service spec writes refused: the engine at "
                           r"tcp://127.0.0.1:9 runs Docker '26.1.5', older than manager "
                           r"'m2' \(Docker '27.3.1'\)") as got:
            sw.update_service_spec("s1", relabel)
        assert "upgrade Docker on this manager" in str(got.value)
    assert posted == [] and sw.writes == 0
    assert len([w for w in warnings if "older than manager 'm2'" in w]) == 1


def test_node_label_writes_go_through_an_older_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node's spec has no field newer than the engines docker-py speaks to, and no task
    restarts for it: written as before."""
    sw, posted, _ = engine(monkeypatch, "26.1.5", [("m2", "manager", "27.3.1")])
    assert sw.update_node_labels("m1", lambda cur: {**cur, "x": "1"})
    assert [p for p, _ in posted] == ["/nodes/m1/update"]


@pytest.mark.parametrize("others", [
    [("m2", "manager", "26.1.4")],  # a patch release apart: one API version
    [("m2", "manager", "25.0.3"), ("w1", "worker", "28.0.1")],  # a worker writes no spec
    [("m2", "manager", "dev"), ("m3", "manager", "")],  # nothing to compare with
])
def test_a_spec_write_through_the_newest_managers_release_goes(
        monkeypatch: pytest.MonkeyPatch, others: list[tuple[str, str, str]]) -> None:
    sw, posted, _ = engine(monkeypatch, "26.1.5", others)
    assert sw.update_service_spec("s1", relabel)
    assert posted == [("/services/s1/update", relabel(OLD_VIEW))]


def test_an_engine_whose_version_is_not_numbers_lists_no_nodes_to_write(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sw, posted, read = engine(monkeypatch, "master-dockerproject-2025",
                              [("m2", "manager", "27.3.1")])
    assert sw.update_service_spec("s1", relabel)
    assert "/nodes" not in read and len(posted) == 1


def test_the_guard_lists_the_nodes_once_a_minute_and_takes_the_clients_own_lists(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes within a minute of the client's own node list list none again."""
    sw, posted, read = engine(monkeypatch, "26.1.5", [("m2", "manager", "26.1.5")])
    sw.nodes()
    for _ in range(3):
        assert sw.update_service_spec("s1", relabel)
    assert read.count("/nodes") == 1 and len(posted) == 3



def test_an_engine_upgraded_under_the_client_is_said_so_not_older_than_itself(
        monkeypatch: pytest.MonkeyPatch, warnings: list[str]) -> None:
    """Docker on the daemon's own manager upgraded in place (systemd keeps the daemon
    through a docker restart): the client still speaks the API version it read at start,
    at which a write drops the newer fields, so writes stay refused; but the reason is the
    client's, not an older engine: before, it said m1 (itself, now 27.3.1) was newer than
    it and told the operator to upgrade Docker there, which was done, for good."""
    nodes = [node_raw("m1", "m1", "manager", "26.1.5"),
             node_raw("n0", "m2", "manager", "26.1.5")]
    version = {"ApiVersion": "1.43", "Version": "26.1.5"}
    sw, posted, _ = answered_engine(monkeypatch, {
        "/version": version, "/nodes": nodes, "/nodes/m1": nodes[0],
        "/services/s1": {"ID": "s1", "Version": {"Index": 3}, "Spec": OLD_VIEW}})
    assert sw.update_service_spec("s1", relabel)  # one release: written
    for raw in nodes:  # both managers upgraded, this one's engine with them
        raw["Description"]["Engine"]["EngineVersion"] = "27.3.1"
    version["Version"] = "27.3.1"
    assert sw._skew is not None
    sw._skew.recheck_s = 0.0  # (the next write lists again: a minute has passed)
    for _ in range(2):
        with pytest.raises(SwarmError, match="restart swarmgpu") as got:
            sw.update_service_spec("s1", relabel)
        assert "older than manager" not in str(got.value)
        assert "now runs Docker '27.3.1'" in str(got.value) and "'26.1.5'" in str(got.value)
    assert len(posted) == 1
    assert len([w for w in warnings if "restart swarmgpu" in w]) == 1
