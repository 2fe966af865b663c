"""A node reference Docker answers by hostname (no node has that ID; another node has it
as its hostname) is said once a process per (reference, node), in a memory of at most
``SAID_MAX`` pairs: any ID a record names may come here, so the memory is bounded, and
a pair first seen when it is full is still said (the memory starts afresh: a pair said
before is said once more, never one left unsaid)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.loglines import log_lines

from swarmgpu.swarm import unkeyed
from swarmgpu.swarm.errors import SwarmNotFound
from swarmgpu.swarm.unkeyed import SAID_MAX, by_id_alone


@pytest.fixture
def warned() -> Iterator[list[str]]:
    yield from log_lines("WARNING")


@pytest.fixture(autouse=True)
def _fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(unkeyed.__dict__, "_said_ambiguous", set())


def _ask(i: int) -> None:
    asked = f"{i:025d}"  # an ID-shaped hostname of node n-i
    raw: Any = {"ID": f"n-{i}", "Description": {"Hostname": asked}}
    with pytest.raises(SwarmNotFound):
        by_id_alone(raw, asked, list)


def _said(warned: list[str]) -> int:
    return sum("is ambiguous" in w for w in warned)


def test_each_ambiguity_is_said_once(warned: list[str]) -> None:
    for _ in range(3):
        _ask(7)
    assert _said(warned) == 1


def test_the_memory_stays_bounded_and_a_new_ambiguity_past_it_is_said(
        warned: list[str]) -> None:
    for i in range(3 * SAID_MAX):
        _ask(i)
        assert len(unkeyed.__dict__["_said_ambiguous"]) <= SAID_MAX
    assert _said(warned) == 3 * SAID_MAX  # each new pair said, the 1,025th and on too
    _ask(3 * SAID_MAX - 1)  # one in the memory now: not said again
    assert _said(warned) == 3 * SAID_MAX
