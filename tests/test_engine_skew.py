"""``swarm.engineskew``: Docker releases compared, and the guard's verdict over time
(the client's writes through it: tests/test_engine_skew_writes.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from support.loglines import log_lines

from swarmgpu.swarm.engineskew import (
    EngineBehind,
    SkewGuard,
    behind_text,
    newer_managers,
    release,
)
from swarmgpu.swarm.swarmnode import SwarmNode, node_from_api


@pytest.fixture
def said() -> Iterator[list[str]]:
    yield from log_lines("INFO")


def node(host: str, engine: str, role: str = "manager") -> SwarmNode:
    return SwarmNode(id=host, hostname=host, addr="", role=role, state="ready",
                     availability="active", labels={}, engine_labels={}, version=1,
                     generic_resources={}, discrete_resources={}, engine_version=engine)


@pytest.mark.parametrize(("text", "want"), [
    ("27.5.1", (27, 5)), ("20.10.24+dfsg1", (20, 10)), ("17.06.2-ee-16", (17, 6)),
    ("v28.0.0", (28, 0)), (" 1.13.1", (1, 13)), ("dev", None), ("", None), ("27", None),
])
def test_a_docker_version_reads_as_its_release(text: str, want: tuple[int, int] | None
                                               ) -> None:
    assert release(text) == want


def test_only_managers_of_a_newer_release_count() -> None:
    nodes = [node("a", "27.3.1"), node("b", "27.3.0"), node("c", "28.0.0", "worker"),
             node("d", "28.1.0"), node("e", "nightly")]
    assert [n.hostname for n in newer_managers("27.3.0", nodes)] == ["d"]  # (a: a patch apart)
    assert [n.hostname for n in newer_managers("20.10.24", nodes)] == ["a", "b", "d"]
    assert newer_managers("dev", nodes) == []


def test_the_verdict_follows_the_last_list_and_is_said_once_as_it_changes(
        said: list[str]) -> None:
    now = [0.0]
    lists = [[node("m1", "26.1.5"), node("m2", "27.3.1")]]
    guard = SkewGuard("unix:///run/docker.sock", "26.1.5", clock=lambda: now[0])
    for t in (0.0, 30.0, 59.0):
        now[0] = t
        with pytest.raises(EngineBehind, match="older than manager 'm2'"):
            guard.check(lambda: lists[0])
    lists[0] = [node("m1", "26.1.5"), node("m2", "26.1.5")]  # m2 rolled back
    now[0] = 60.0
    guard.check(lambda: lists[0])
    assert [s for s in said if "older than manager" in s] != [] and len(said) == 2
    assert "service spec writes resumed" in said[1]


def test_a_manager_upgraded_since_the_last_list_is_seen_within_a_minute() -> None:
    now = [0.0]
    lists = [[node("m1", "26.1.5"), node("m2", "26.1.5")]]
    guard = SkewGuard("unix:///run/docker.sock", "26.1.5", clock=lambda: now[0])
    guard.check(lambda: lists[0])
    lists[0] = [node("m1", "26.1.5"), node("m2", "27.0.0")]
    now[0] = 59.0
    guard.check(lambda: lists[0])
    now[0] = 60.0
    with pytest.raises(EngineBehind):
        guard.check(lambda: lists[0])


def test_more_than_five_newer_managers_are_counted_not_listed() -> None:
    guard = SkewGuard("e", "20.10.24")
    guard.seen([node(f"m{i}", "27.0.0") for i in range(8)])
    assert "'m4' (Docker '27.0.0') and 3 more;" in guard.why
    assert "'m5'" not in guard.why


def test_a_node_reads_its_engine_version_and_no_text_there_leaves_it_read() -> None:
    raw = {"ID": "n1", "Spec": {"Role": "manager"},
           "Description": {"Hostname": "h", "Engine": {"EngineVersion": "27.3.1"}}}
    assert node_from_api(raw).engine_version == "27.3.1"
    raw["Description"] = {"Hostname": "h", "Engine": {"EngineVersion": 27}}
    got = node_from_api(raw)
    assert got.engine_version == "" and got.unread == ""


def test_the_engine_is_asked_its_version_once_a_minute_though_the_client_lists_each_cycle(
        ) -> None:
    """The daemon lists the nodes every cycle (``seen``), so the guard's list is never a
    minute old: the engine's own version is asked on its own minute, else an engine
    upgraded under the client was never seen so."""
    now, running, asked = [0.0], ["26.1.5"], []
    guard = SkewGuard("e", "26.1.5", clock=lambda: now[0],
                      running=lambda: asked.append(1) or running[0])
    managers = [node("m1", "26.1.5"), node("m2", "26.1.5")]
    guard.check(lambda: managers)
    running[0] = "27.3.1"
    managers = [node("m1", "27.3.1"), node("m2", "27.3.1")]
    for t, why in ((30.0, "older than manager"), (61.0, "restart swarmgpu"),
                   (90.0, "restart swarmgpu")):
        now[0] = t
        guard.seen(managers)  # (the cycle's own list, just read)
        with pytest.raises(EngineBehind, match=why):
            guard.check(lambda: managers)
    assert len(asked) == 1  # at 61 (at 0, as the client was made: its own)
    guard.seen(managers)
    assert "restart swarmgpu" in guard.why  # (a list alone does not lift it)


def test_a_newer_manager_that_is_down_is_named_with_its_removal() -> None:
    """A manager that left with `docker swarm leave --force` stays listed (Down) until
    `docker node rm`: its newer engine refused every write, and the fix said only to
    upgrade this manager (stop 80)."""
    gone = replace(node("m2", "28.0.1"), state="down")
    text = behind_text("unix:///run/docker.sock", "27.3.1", [gone, node("m3", "28.0.1")])
    assert "'m2' is Down" in text and "docker swarm leave --force" in text, text
    assert "docker node demote m2" in text and "docker node rm m2" in text, text
    assert "m3" not in text.partition("is Down")[2], text  # (m3 is up: not to remove)
    up = behind_text("unix:///run/docker.sock", "27.3.1", [node("m3", "28.0.1")])
    assert "Down" not in up and "docker node rm" not in up, up
