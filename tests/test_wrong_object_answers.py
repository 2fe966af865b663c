"""An engine (a proxy in front of it) that answers an inspect with another object.

The daemon reads a node before it writes its labels and a service before it writes its
spec, each by ID, and posts the new spec with the version it read. A proxy answering
node n1's inspect with node n3's object had n1's labels written from n3's (and at n3's
version). Now such an answer refuses that write alone, as a part that cannot be read
does (``label write refused``, ``UnreadWrite``), naming the object asked for, the one
answered and the fix; the other objects are written. The reads that act on what the
answer says (the leader check, an event's inspect in the cache) refuse it too. These go
through docker-py's own ``APIClient``, only its HTTP answered here. The daemon asks by ID
only, so an object named so (Docker's answer where none has that ID) is refused too (a
node gone whose ID is a hostname is read by ID alone: tests/test_id_shaped_references.py);
the docker-proxy takes a path's ID, name, hostname or ID prefix as Docker resolves it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.answered_engine import answered_engine
from support.engine_stub import SERVICE
from support.proxy_write import proxy_write
from support.swarm_cache import cached

from swarmgpu.manager.cycle.grants import ImageEnvs
from swarmgpu.swarm.client import SwarmClient, SwarmError, SwarmWrongObject, UnreadWrite

FIX = "check the proxy in front of the engine"


def node_raw(nid: str, host: str, *, leader: bool = False) -> dict[str, Any]:
    """A node as Docker sends it (a manager, the leader where ``leader``)."""
    raw: dict[str, Any] = {
        "ID": nid, "Version": {"Index": 7},
        "Spec": {"Role": "worker", "Availability": "active", "Labels": {"gpu": host}},
        "Description": {"Hostname": host}, "Status": {"State": "ready", "Addr": "10.0.0.1"}}
    if leader:
        raw["ManagerStatus"] = {"Leader": True, "Reachability": "reachable"}
    return raw


def service_raw(sid: str, name: str) -> dict[str, Any]:
    return {"ID": sid, "Version": {"Index": 3}, "Spec": {
        "Name": name, "TaskTemplate": {"ContainerSpec": {"Image": "x"}},
        "Mode": {"Replicated": {"Replicas": 1}}}}


def engine(monkeypatch: pytest.MonkeyPatch, answers: dict[str, Any]
           ) -> tuple[SwarmClient, list[tuple[str, Any]]]:
    """A client built as the daemon builds it, its engine answering ``answers`` (by
    path), and the writes posted to it (path, body)."""
    sw, posted, _ = answered_engine(monkeypatch, answers)
    return sw, posted


def test_a_node_answered_with_another_nodes_object_gets_no_label_write(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """n1's inspect answers n3: n1's write is refused naming both and the fix (n3's
    labels and version never written to n1); n2, answered as itself, is written."""
    sw, posted = engine(monkeypatch, {"/nodes/n1": node_raw("n3", "gpu-3"),
                                      "/nodes/n2": node_raw("n2", "gpu-2")})
    with pytest.raises(SwarmError, match="label write refused: node 'n1' was asked for, "
                       r"the engine answered node 'n3' \(hostname 'gpu-3'\)") as got:
        sw.update_node_labels("n1", lambda cur: {**cur, "x": "1"})
    assert FIX in str(got.value) and not posted
    assert sw.update_node_labels("n2", lambda cur: {**cur, "x": "1"})
    assert posted == [("/nodes/n2/update", {"Role": "worker", "Availability": "active",
                                            "Labels": {"gpu": "gpu-2", "x": "1"}})]


def test_a_service_answered_with_another_services_object_gets_no_spec_write(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As a node: refused as a spec that cannot be read (``UnreadWrite``: its writers
    skip that service alone), the other service written."""
    sw, posted = engine(monkeypatch, {"/services/s1": service_raw("s3", "db"),
                                      "/services/s2": service_raw("s2", "llm")})
    with pytest.raises(UnreadWrite, match="service write refused: service 's1' was asked "
                       r"for, the engine answered service 's3' \(name 'db'\)") as got:
        sw.update_service_spec("s1", lambda spec: {**spec, "Labels": {"k": "v"}})
    assert FIX in str(got.value) and not posted
    assert sw.update_service_spec("s2", lambda spec: {**spec, "Labels": {"k": "v"}})
    assert [p for p, _ in posted] == ["/services/s2/update"] and sw.writes == 1


def test_a_service_asked_by_id_answered_by_one_named_so_gets_no_write(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon asks by ID only. Docker answers a name where no object has the ID
    asked (s1 removed, a service named 's1' deployed), and its update takes the name
    too: s1's write was made to that other service (its gate, its device env); a proxy
    answering so was let through alike. Now refused, naming both."""
    sw, posted = engine(monkeypatch, {"/services/s1": service_raw("s9", "s1")})
    with pytest.raises(UnreadWrite, match="service 's1' was asked for, the engine answered "
                       r"service 's9' \(name 's1'\)") as got:
        sw.update_service_spec("s1", lambda spec: {**spec, "Labels": {"k": "v"}})
    assert "no service has the ID 's1'" in str(got.value) and not posted
    with pytest.raises(SwarmWrongObject, match="no service has the ID 's1'"):
        sw.service("s1")


@pytest.mark.parametrize(("path", "read"), [
    ("/nodes/n1", lambda sw: sw.node("n1")),
    ("/services/n1", lambda sw: sw.service("n1")),
])
def test_an_inspect_answered_with_another_object_is_refused_naming_both(
        monkeypatch: pytest.MonkeyPatch, path: str, read: Any) -> None:
    other = node_raw("n3", "gpu-3") if "nodes" in path else service_raw("s3", "db")
    sw, _ = engine(monkeypatch, {path: other})
    with pytest.raises(SwarmWrongObject, match="'n1' was asked for, the engine answered "
                       r"\w+ '[ns]3'") as got:
        read(sw)
    assert FIX in str(got.value)


def test_the_leader_check_refuses_another_nodes_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """This engine's node n1 is a follower; a proxy answering its inspect with the
    leader's object (n3) had this daemon take the lead and write beside the leader's."""
    sw, _ = engine(monkeypatch, {"/info": {"Swarm": {"NodeID": "n1"}},
                                 "/nodes/n1": node_raw("n3", "gpu-3", leader=True)})
    with pytest.raises(SwarmError, match="'n1' was asked for, the engine answered node 'n3'"):
        sw.is_leader()


class ProxyApi:
    """An engine's lists and inspects by ID (``inspect``: what an inspect answers)."""

    def __init__(self, services: dict[str, Any]) -> None:
        self.s = services
        self.inspect = dict(services)

    def nodes(self, filters: Any = None) -> list[Any]:
        return [node_raw("n1", "gpu-1")]

    def services(self) -> list[Any]:
        return list(self.s.values())

    def inspect_node(self, node_id: str) -> Any:
        return node_raw(node_id, "gpu-1")

    def inspect_service(self, service_id: str) -> Any:
        return self.inspect[service_id]


def test_an_events_inspect_answered_with_another_service_keeps_it_and_lists() -> None:
    """train's event, its inspect answered with web's object: train was dropped from the
    cache as removed (its holdings then read as a removed service's and released) until
    the timer's list. Now it is kept and everything listed at once."""
    api = ProxyApi({"s1": service_raw("s1", "web"), "s2": service_raw("s2", "train")})
    _, cache = cached(api)
    api.inspect["s2"] = service_raw("s1", "web")
    cache.on_event({"Type": "service", "Actor": {"ID": "s2"}})
    _, services = cache.read()
    assert sorted(s.name for s in services) == ["train", "web"]
    assert cache.stats.reasons.get("answered another object") == 1


def test_events_inspects_answered_with_other_objects_stop_at_the_first() -> None:
    """A proxy answering every inspect with another object: each object an event named
    was inspected and warned of in turn (up to 16 a cycle, or 0.5% of the services),
    then everything listed anyway. Now the first such answer ends the inspects: the
    list that follows reads them all."""
    names = {f"s{i}": service_raw(f"s{i}", f"app{i}") for i in range(1, 6)}
    api = ProxyApi(names)
    _, cache = cached(api)
    api.inspect = {sid: service_raw("s1", "app1") for sid in names}
    for sid in ("s2", "s3", "s4", "s5"):
        cache.on_event({"Type": "service", "Actor": {"ID": sid}})
    _, services = cache.read()
    assert sorted(s.name for s in services) == [f"app{i}" for i in range(1, 6)]
    assert cache.stats.inspects == 1 and cache.stats.relists == 2


class ImageApi:
    """The engine's two image reads: the list finds ``sha256:0123abcd``, the inspect
    answers ``answered``'s object."""

    def __init__(self, answered: str) -> None:
        self.answered = answered

    def images(self, filters: Any) -> list[dict[str, str]]:
        return [{"Id": "sha256:0123abcd"}]

    def inspect_image(self, image_id: str) -> dict[str, Any]:
        return {"Id": self.answered, "Config": {"Env": ["NVIDIA_VISIBLE_DEVICES=all"]}}


def test_an_image_answered_with_another_images_object_has_no_env() -> None:
    """The grants read an image's env to decide what a service's spec gets written;
    another image's env stood in for it. Now it is unknown, naming both and the fix."""
    sw = SwarmClient.__new__(SwarmClient)
    sw.endpoint, sw._api = "unix:///test", ImageApi("sha256:ffff")  # type: ignore[assignment]
    with pytest.raises(SwarmError, match="image 'local/app:1': image '0123abcd' was asked "
                       "for, the engine answered image 'sha256:ffff'") as got:
        sw.image_env("local/app:1")
    assert FIX in str(got.value)
    found = ImageEnvs(sw).lookup(["local/app:1"])["local/app:1"]
    assert found.env is None and "'sha256:ffff'" in found.note
    sw._api = ImageApi("sha256:0123abcd")  # type: ignore[assignment]
    assert sw.image_env("local/app:1") == ("NVIDIA_VISIBLE_DEVICES=all",)


def test_the_docker_proxy_refuses_a_write_whose_read_answers_another_service(
        tmp_path: Path) -> None:
    """The proxy checks a service write against the spec it reads of it, then writes the
    ID that answer names: an engine answering svc2's read with svc1's had svc1 written
    (checked against svc1's spec) for a write the daemon addressed to svc2."""
    got, seen = proxy_write(tmp_path, b"/services/svc2/update", SERVICE["Spec"])
    assert got.startswith(b"HTTP/1.1 502"), got
    assert b"service 'svc2' was asked for, the engine answered service 'svc1'" in got, got
    assert not [r for r in seen if r.startswith(b"POST")]


NODE_ID = "4xg1b2c3d4e5f6g7h8i9j0k1l"  # (a Swarm ID: 25 lowercase letters and digits)


def test_the_docker_proxy_writes_a_node_its_path_names_by_hostname(tmp_path: Path) -> None:
    """Docker's node update takes a hostname (``docker node update --label-add x
    worker1``), as its inspect does: the proxy read the node so, and then refused the
    answer (its ID is not the hostname), a 502 for a write Docker takes. Written now, to
    the ID the answer names."""
    node = node_raw(NODE_ID, "gpu-1")
    got, seen = proxy_write(tmp_path, b"/nodes/gpu-1/update", node["Spec"],
                            lambda e: e.raw.update({b"/nodes/gpu-1": json.dumps(node).encode()}))
    assert got.startswith(b"HTTP/1.1 200"), got
    assert seen[-1].startswith(b"POST /nodes/%s/update?version=7 " % NODE_ID.encode())


def test_the_docker_proxy_writes_a_service_its_path_names_by_an_id_prefix(
        tmp_path: Path) -> None:
    # (Docker's inspect and update take a unique prefix of the ID: svc1 for 'svc')
    got, seen = proxy_write(tmp_path, b"/services/svc/update", SERVICE["Spec"])
    assert got.startswith(b"HTTP/1.1 200"), got
    assert seen[-1].startswith(b"POST /services/svc1/update?version=3 ")


def test_the_docker_proxy_writes_a_full_id_shaped_name_to_the_id_it_resolves_to(
        tmp_path: Path) -> None:
    """A write to a path shaped as a whole Swarm ID answered with a service whose name it
    is: Docker answers so only where no service has that ID (ID first, then name), so
    that is the service Docker's update would take. Refused before; now written to the
    ID answered (``/services/svc1/update``), which the engine cannot read as another.
    More in tests/test_id_shaped_references.py."""
    def named(e: Any) -> None:
        e.service["Spec"]["Name"] = NODE_ID

    got, seen = proxy_write(tmp_path, b"/services/%s/update" % NODE_ID.encode(),
                            {**SERVICE["Spec"], "Name": NODE_ID}, named)
    assert got.startswith(b"HTTP/1.1 200"), got
    assert seen[-1].startswith(b"POST /services/svc1/update?version=3 ")


LONG_ID = "sha256:" + "0123abcd" * 8  # (Docker's image IDs: 64 hex digits)


class LongImageApi:
    """The engine's two image reads with IDs as Docker sends them; the inspect answers
    ``answered`` (a mapping: its ``Id`` left out where None; ``null`` where ``bare``)."""

    def __init__(self, answered: str | None, *, bare: bool = False) -> None:
        self.answered, self.bare = answered, bare

    def images(self, filters: Any) -> list[dict[str, str]]:
        return [{"Id": LONG_ID}]

    def inspect_image(self, image_id: str) -> dict[str, Any] | None:
        body: dict[str, Any] = {"Config": {"Env": ["NVIDIA_VISIBLE_DEVICES=all"]}}
        if self.answered is not None:
            body["Id"] = self.answered
        return None if self.bare else body


@pytest.mark.parametrize("bare", [False, True])
def test_an_image_answered_without_an_id_has_no_env(bare: bool) -> None:
    """Docker sends every image's ``Id``: an answer without one (or ``null``, read as
    an image with no env: none of its GPU variables) cannot be told from another
    image's, whose env stood in (the check was skipped)."""
    sw = SwarmClient.__new__(SwarmClient)
    sw.endpoint = "unix:///test"
    sw._api = LongImageApi(None, bare=bare)  # type: ignore[assignment]
    with pytest.raises(SwarmWrongObject, match="answered no image ID"):
        sw.image_env("local/app:1")


def test_the_grants_note_names_the_image_answered_and_the_fix() -> None:
    """With Docker's 64-digit IDs the grants' note (cut at 200 characters, as every
    engine error) lost the image answered and the fix, and said the engine 'could not
    be asked'."""
    other = "sha256:" + "f" * 64
    sw = SwarmClient.__new__(SwarmClient)
    sw.endpoint, sw._api = "unix:///test", LongImageApi(other)  # type: ignore[assignment]
    note = ImageEnvs(sw).lookup(["local/app:1"])["local/app:1"].note
    assert other in note and FIX in note and "could not be asked" not in note, note


def test_the_docker_proxy_refuses_a_service_answered_for_a_name_of_other_case(
        tmp_path: Path) -> None:
    """Docker matches a service's name exactly: swarmkit's name index folds case, but
    its control API keeps only exact matches, so /services/WEB is a 404 where only 'web'
    is. An answer of 'web' for it is a proxy's: refused, nothing written."""
    got, seen = proxy_write(tmp_path, b"/services/WEB/update", SERVICE["Spec"])
    assert got.startswith(b"HTTP/1.1 502"), got
    assert not any(b"/update" in r for r in seen), seen
