"""References that are an ID to one reader and a name to another.

Docker reads a node or service reference as a whole ID first, then as a name (a node's
hostname, a service's ``Spec.Name``), then as an ID prefix, refusing a prefix two
objects share (moby's daemon/cluster/helpers.go, ``getNode``, ``getService``).

- The daemon reads a node of a move by the ID its record keeps. Once that node was
  gone and another node's hostname was that ID, Docker answered the other node: the
  read was refused as a wrong object every cycle (a warning each time), the move never
  judged. Now the node is read by its ID alone (the node list's ``id`` filter): gone,
  said once, naming both nodes and the fix.
- ``swarmgpu docker-proxy`` refused a write whose path is a service's name shaped as a
  whole ID (25 lowercase letters and digits). It takes it now as Docker resolves it,
  and forwards the write to the full ID of the object it checked, so the engine cannot
  resolve it to another.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from support.engine_stub import SERVICE
from support.loglines import log_lines
from support.proxy_write import proxy_write
from support.swarm_cache import cached

from swarmgpu.manager.rebalance.record import node_by_id
from swarmgpu.swarm.client import SwarmClient, SwarmNotFound, SwarmWrongObject

GONE = "7bq2m4k9x1c3v5n8z0a2s4d6f"  # a removed node's ID (Swarm's: 25 base-36 digits)
OTHER = "p0o9i8u7y6t5r4e3w2q1a2s3d"  # the node whose hostname is GONE
NAME = "a1b2c3d4e5f6g7h8i9j0k1l2m"  # a service name shaped as a whole ID


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    yield from log_lines("WARNING")


def node_raw(nid: str, host: str) -> dict[str, Any]:
    return {"ID": nid, "Version": {"Index": 7},
            "Spec": {"Role": "worker", "Availability": "active", "Labels": {}},
            "Description": {"Hostname": host}, "Status": {"State": "ready"}}


class DockerNodes:
    """The engine's node reads as Docker resolves them: an inspect by whole ID, then
    hostname, then ID prefix; the list's ``id`` filter by ID prefix alone."""

    def __init__(self, *nodes: dict[str, Any]) -> None:
        self.all = list(nodes)
        self.lists = 0

    def nodes(self, filters: Any = None) -> list[Any]:
        self.lists += 1
        ids = (filters or {}).get("id")
        return [n for n in self.all if not ids or any(n["ID"].startswith(i) for i in ids)]

    def services(self) -> list[Any]:
        return []

    def inspect_node(self, ref: str) -> Any:
        for match in (lambda n: n["ID"] == ref, lambda n: n["Description"]["Hostname"] == ref,
                      lambda n: n["ID"].startswith(ref)):
            got = [n for n in self.all if match(n)]
            if got:
                return got[0]
        raise docker.errors.NotFound(f"node {ref} not found")


def client(api: Any) -> SwarmClient:
    sw = SwarmClient.__new__(SwarmClient)
    sw.endpoint, sw._api = "unix:///test", api
    return sw


def test_a_gone_node_whose_id_is_another_nodes_hostname_reads_as_gone() -> None:
    """The move's node GONE was removed; OTHER's hostname is GONE. Read as gone (the
    move sees its node left), not as OTHER, nor refused every cycle."""
    sw = client(DockerNodes(node_raw(OTHER, GONE)))
    assert node_by_id(sw, GONE) is None
    with pytest.raises(SwarmNotFound, match=f"no node has the ID '{GONE}'"):
        sw.node(GONE)


def test_an_ambiguous_node_reference_is_said_once_naming_both_and_the_fix(
        warnings: list[str]) -> None:
    gone, other = "g" + GONE[1:], "h" + OTHER[1:]  # (a pair no other test says)
    sw = client(DockerNodes(node_raw(other, gone)))
    for _ in range(3):  # three cycles
        assert node_by_id(sw, gone) is None
    said = [w for w in warnings if gone in w]
    assert len(said) == 1, said
    assert other in said[0] and "rename" in said[0] and "hostname" in said[0], said[0]


def test_a_node_there_is_read_by_its_id_whatever_hostnames_say() -> None:
    """Node GONE is there: Docker's inspect answers it (an ID first), no list read."""
    api = DockerNodes(node_raw(OTHER, GONE), node_raw(GONE, "gpu-1"))
    assert client(api).node(GONE).hostname == "gpu-1" and api.lists == 0


def test_another_node_answered_is_still_refused_as_a_proxys() -> None:
    """An answer whose hostname is not the ID asked is no Docker fallback: refused."""
    class Proxy(DockerNodes):
        def inspect_node(self, ref: str) -> Any:
            return self.all[0]

    with pytest.raises(SwarmWrongObject, match="check the proxy"):
        client(Proxy(node_raw(OTHER, "gpu-1"))).node(GONE)


def test_an_events_inspect_of_a_gone_node_named_so_drops_it_without_listing(
        warnings: list[str]) -> None:
    """The cache's inspect after GONE's removal event: dropped as gone, not listed
    again with a warning as an answer of another object."""
    api = DockerNodes(node_raw(GONE, "gpu-9"), node_raw(OTHER, GONE))
    _, cache = cached(api)
    api.all.pop(0)
    cache.on_event({"Type": "node", "Actor": {"ID": GONE}})
    nodes, _ = cache.read()
    assert [n.id for n in nodes] == [OTHER]
    assert "answered another object" not in cache.stats.reasons
    assert not [w for w in warnings if "listing everything" in w]


# --- the docker-proxy ---------------------------------------------------------------


def named(name: str) -> Any:
    def setup(e: Any) -> None:
        e.service["Spec"]["Name"] = name
    return setup


def posts(seen: list[bytes]) -> list[bytes]:
    return [r.split(b" HTTP/1.1", 1)[0] for r in seen if r.startswith(b"POST")]


def test_the_proxy_writes_a_service_named_as_an_id_to_its_full_id(tmp_path: Path) -> None:
    """Service svc1 is named NAME (an ID's shape), and no service has the ID NAME:
    Docker resolves the path to svc1, as the proxy's read did; the write goes to
    /services/svc1/update, so the engine acts on the object checked. Refused before."""
    got, seen = proxy_write(tmp_path, b"/services/%s/update" % NAME.encode(),
                            {**SERVICE["Spec"], "Name": NAME}, named(NAME))
    assert got.startswith(b"HTTP/1.1 200"), got
    assert posts(seen) == [b"POST /services/svc1/update?version=3"]


def test_a_write_by_an_id_shaped_name_is_checked_as_the_service_it_resolves_to(
        tmp_path: Path) -> None:
    """The name path gets no more than the ID path: a write that drops the service's
    capability drop is refused (403), nothing written."""
    spec = json.loads(json.dumps(SERVICE["Spec"]))
    spec["Name"] = NAME
    spec["TaskTemplate"]["ContainerSpec"]["CapabilityDrop"] = []
    got, seen = proxy_write(tmp_path, b"/services/%s/update" % NAME.encode(), spec,
                            named(NAME))
    assert got.startswith(b"HTTP/1.1 403"), got
    assert not posts(seen)


def test_the_proxys_own_service_is_refused_by_an_id_shaped_name(tmp_path: Path) -> None:
    own = "z9y8x7w6v5u4t3s2r1q0p9o8n"

    def setup(e: Any) -> None:
        e.service["ID"], e.service["Spec"]["Name"] = own, NAME

    got, seen = proxy_write(tmp_path, b"/services/%s/update" % NAME.encode(),
                            {**SERVICE["Spec"], "Name": NAME}, setup, own)
    assert got.startswith(b"HTTP/1.1 403") and b"own service" in got, got
    assert not posts(seen)


def test_the_proxy_writes_a_node_whose_hostname_is_id_shaped_to_its_id(
        tmp_path: Path) -> None:
    node = node_raw(OTHER, GONE)

    def setup(e: Any) -> None:
        e.raw[b"/nodes/" + GONE.encode()] = json.dumps(node).encode()

    got, seen = proxy_write(tmp_path, b"/nodes/%s/update" % GONE.encode(), node["Spec"],
                            setup)
    assert got.startswith(b"HTTP/1.1 200"), got
    assert posts(seen) == [b"POST /nodes/%s/update?version=7" % OTHER.encode()]


def test_a_whole_id_answered_by_another_service_is_still_refused(tmp_path: Path) -> None:
    """Neither its ID nor its name: no resolution of Docker's answers so (a proxy's)."""
    got, seen = proxy_write(tmp_path, b"/services/%s/update" % NAME.encode(),
                            SERVICE["Spec"])
    assert got.startswith(b"HTTP/1.1 502"), got
    assert b"the engine answered service 'svc1'" in got and not posts(seen)


def test_a_prefix_two_services_share_is_refused_as_the_engine_refuses_it(
        tmp_path: Path) -> None:
    """Docker refuses a reference that is no ID and no name but a prefix of two IDs; the
    proxy's read gets that refusal and passes it on, nothing written."""
    def setup(e: Any) -> None:
        e.errors[b"/services/svc"] = b"service svc is ambiguous (2 matches found)"

    got, seen = proxy_write(tmp_path, b"/services/svc/update", SERVICE["Spec"], setup)
    assert got.startswith(b"HTTP/1.1 400") and b"ambiguous" in got, got
    assert not posts(seen)


# --- the proxy's references, attacked (reader77c) -------------------------------------


def test_a_service_renamed_between_the_proxys_read_and_its_write_is_not_written(
        tmp_path: Path) -> None:
    """The path names svc1 by its name; svc1 is renamed (its version moves on) after the
    proxy's read, before its write: the write goes to svc1's ID at the version checked,
    which the engine refuses, so neither svc1 nor a service newly named so is written."""
    def setup(e: Any) -> None:
        named(NAME)(e)

        def rename() -> None:
            e.service["Spec"] = {**e.service["Spec"], "Name": "renamed"}
            e.service["Version"] = {"Index": e.service["Version"]["Index"] + 1}

        e.before_write = rename

    got, seen = proxy_write(tmp_path, b"/services/%s/update" % NAME.encode(),
                            {**SERVICE["Spec"], "Name": NAME}, setup)
    assert got.startswith(b"HTTP/1.1 500") and b"out of sequence" in got, got
    assert posts(seen) == [b"POST /services/svc1/update?version=3"]


OWN = "z9y8x7w6v5u4t3s2r1q0p9o8n"  # the proxy's own service's ID


@pytest.mark.parametrize("alias", [b"web", OWN[:7].encode()], ids=["name", "id-prefix"])
def test_the_proxys_own_service_is_refused_by_its_name_or_an_id_prefix(
        tmp_path: Path, alias: bytes) -> None:
    """However the path names the proxy's own service, the check is of the ID read."""
    def setup(e: Any) -> None:
        e.service["ID"] = OWN

    got, seen = proxy_write(tmp_path, b"/services/%s/update" % alias, SERVICE["Spec"],
                            setup, OWN)
    assert got.startswith(b"HTTP/1.1 403") and b"own service" in got, got
    assert not posts(seen)


@pytest.mark.parametrize("path", [b"/services/WEB/update", b"/services/SVC1/update",
                                  b"/services/Svc/update"])
def test_a_case_variant_answered_with_the_service_is_refused(tmp_path: Path,
                                                             path: bytes) -> None:
    """Docker's names and ID prefixes match case and all; an answer of svc1 ("web") to
    another spelling is no resolution of Docker's: refused, nothing written."""
    got, seen = proxy_write(tmp_path, path, SERVICE["Spec"])
    assert got.startswith(b"HTTP/1.1 502"), got
    assert not posts(seen)


@pytest.mark.parametrize("path", [b"/services/svc%31/update", b"/nodes/n%2F..%2Fx/update",
                                  b"/services/%77eb/update"])
def test_a_percent_encoded_reference_is_refused_before_any_read(tmp_path: Path,
                                                                path: bytes) -> None:
    got, seen = proxy_write(tmp_path, path, SERVICE["Spec"])
    assert got.startswith(b"HTTP/1.1 400"), got
    assert seen == []


def test_a_worker_named_as_a_managers_id_is_written_as_itself(tmp_path: Path) -> None:
    """Worker OTHER's hostname is manager GONE's ID, and Docker answers the manager for
    it (an ID first): the write goes to the manager's ID, checked on the manager's spec,
    a role change refused; never to the worker."""
    manager = node_raw(GONE, "mgr-1")
    manager["Spec"]["Role"] = "manager"

    def setup(e: Any) -> None:
        e.raw[b"/nodes/" + GONE.encode()] = json.dumps(manager).encode()

    spec = {**manager["Spec"], "Labels": {"swarmgpu.gpu.count": "0"}}
    got, seen = proxy_write(tmp_path, b"/nodes/%s/update" % GONE.encode(), spec, setup)
    assert got.startswith(b"HTTP/1.1 200"), got
    assert posts(seen) == [b"POST /nodes/%s/update?version=7" % GONE.encode()]
    demote = {**manager["Spec"], "Role": "worker"}
    again = tmp_path / "again"  # (a fresh engine and proxy)
    again.mkdir()
    got, seen = proxy_write(again, b"/nodes/%s/update" % GONE.encode(), demote, setup)
    assert got.startswith(b"HTTP/1.1 403"), got
    assert not posts(seen)


# --- an ID prefix two objects share, checked by the proxy itself (tenantleft) ---------


def _listed(*ids: str) -> Any:
    def setup(e: Any) -> None:
        e.more_services = [{**SERVICE, "ID": i} for i in ids]

    return setup


def test_a_prefix_two_services_share_is_refused_by_the_proxys_own_list(
        tmp_path: Path) -> None:
    """An engine (or a proxy before this one) answered svc1 for the prefix svc, which
    svc2's ID starts with too: the proxy wrote svc1, trusting the engine to refuse a
    shared prefix. It lists the services by that prefix itself and refuses, naming
    both."""
    got, seen = proxy_write(tmp_path, b"/services/svc/update", SERVICE["Spec"],
                            _listed("svc2"))
    assert got.startswith(b"HTTP/1.1 400"), got
    assert (b"service 'svc' is ambiguous: the ID prefix of 2 services (svc1, svc2); "
            b"nothing written: name it by its whole ID") in got, got
    assert not posts(seen)


def test_a_prefix_of_one_service_is_written_to_its_whole_id(tmp_path: Path) -> None:
    got, seen = proxy_write(tmp_path, b"/services/svc/update", SERVICE["Spec"],
                            _listed("other"))
    assert got.startswith(b"HTTP/1.1 200"), got
    assert posts(seen) == [b"POST /services/svc1/update?version=3"]
    assert any(b"GET /services?filters=" in r for r in seen)  # it listed by the prefix


def test_a_list_that_leaves_out_the_answered_service_refuses_the_write(
        tmp_path: Path) -> None:
    def setup(e: Any) -> None:
        e.raw[b"/services/svc"] = json.dumps({**SERVICE, "ID": "svc9"}).encode()

    got, seen = proxy_write(tmp_path, b"/services/svc/update", SERVICE["Spec"], setup)
    assert got.startswith(b"HTTP/1.1 502") and b"leave out service 'svc9'" in got, got
    assert not posts(seen)


@pytest.mark.parametrize("path", [b"/services/svc1/update", b"/services/web/update"])
def test_a_name_or_whole_id_needs_no_list(tmp_path: Path, path: bytes) -> None:
    """Docker takes an object's ID, then its name, before any prefix: the one meant."""
    got, seen = proxy_write(tmp_path, path, SERVICE["Spec"], _listed("svc1x"))
    assert got.startswith(b"HTTP/1.1 200"), got
    assert not any(b"GET /services?filters=" in r for r in seen), seen
