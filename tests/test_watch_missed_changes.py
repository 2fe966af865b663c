"""The facts watch's word on the agents it did not read in time: said once per change
of that set, a change naming only the agents added to it and those read again. Before,
each change said the whole set again: with a set shifting by one agent between watches,
the same dozens of names were warned on every watch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.forged import sw_node
from support.loglines import log_lines

from swarmgpu.manager.engine.stop import NotRead
from swarmgpu.manager.nodes.watchmissed import WatchMissed
from swarmgpu.swarm.client import SwarmNode

NODES: list[SwarmNode] = [sw_node(f"n-{i:02d}", f"gpu-{i:02d}") for i in range(6)]
LATE = NotRead.LATE


@pytest.fixture
def lines() -> Iterator[list[str]]:
    yield from log_lines("INFO")


def _warned(lines: list[str]) -> list[str]:
    return [m for m in lines if "WARNING" in m and "facts watch" in m]


def test_a_shifted_unread_set_names_who_was_added_and_who_answers_again(
        lines: list[str]) -> None:
    said = WatchMissed()
    said.note(NODES, {"n-01": LATE, "n-02": LATE, "n-03": LATE}, 0.8, 60)
    first = _warned(lines)
    assert len(first) == 1 and "gpu-01, gpu-02, gpu-03 did not answer" in first[0]
    said.note(NODES, {"n-02": LATE, "n-03": LATE, "n-04": LATE}, 0.8, 60)
    warned = _warned(lines)
    assert len(warned) == 2, lines
    assert "gpu-04" in warned[1] and "gpu-01" in warned[1], warned[1]
    assert "gpu-02" not in warned[1] and "gpu-03" not in warned[1], warned[1]
    assert "answered again: gpu-01" in warned[1], warned[1]
    assert "3 agent(s) unread in all" in warned[1], warned[1]
    said.note(NODES, {"n-02": LATE, "n-03": LATE, "n-04": LATE}, 0.8, 60)
    assert len(_warned(lines)) == 2  # the same set: nothing more


def test_an_unread_agent_that_left_the_swarm_is_named_by_its_last_name(
        lines: list[str]) -> None:
    said = WatchMissed()
    said.note(NODES, {"n-05": NotRead.UNSTARTED, "n-01": LATE}, 0.8, 60)
    said.note(NODES[:5], {"n-01": LATE}, 0.8, 60)  # gpu-05 left the swarm
    warned = _warned(lines)
    assert len(warned) == 2 and "answered again: gpu-05" in warned[1], warned
    assert "gpu-01" not in warned[1], warned[1]


def test_every_agent_read_again_is_said_once(lines: list[str]) -> None:
    said = WatchMissed()
    said.note(NODES, {"n-01": LATE}, 0.8, 60)
    said.note(NODES, {}, 0.8, 60)
    said.note(NODES, {}, 0.8, 60)
    assert len([m for m in lines if "every agent answered within" in m]) == 1
