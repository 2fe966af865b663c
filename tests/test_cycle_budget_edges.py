"""The cycle's engine budget at its edges (manager.cycle.budget): a write in flight as it
passes is not refused, but its own requests end within what is left of the budget and
its slack (before, each took its own deadline, and a slow engine held the cycle past the
watchdog). Real docker-py requests to an engine on loopback trickling its answers
(tests/support/loop_engine.py), each request's own deadline far past the cut, each
answer far past it: a loaded machine's lag, up to ``LAG_S``, flips none."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from swarmgpu.swarm import answerjson
from swarmgpu.swarm.client import SwarmClient, SwarmUnavailable
from tests.support.loop_engine import LoopEngine, Trickled, loop_engine

# Each request's own deadline is 20 s (the client's 1 s timeout, ``ANSWER_DEADLINE_
# TIMEOUTS`` 20 times); a long answer (600 bytes a 20 ms) would end 12 s in.
DEADLINE_TIMEOUTS = 20.0
LONG = Trickled(b"{" + b" " * 598 + b"}", 0.02)
LAG_S = 4.0
NODE = json.dumps({"ID": "n1", "Version": {"Index": 3},
                   "Spec": {"Labels": {}, "Role": "worker",
                            "Availability": "active"}}).encode()


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopEngine]:
    monkeypatch.setattr(answerjson, "ANSWER_DEADLINE_TIMEOUTS", DEADLINE_TIMEOUTS)
    with loop_engine({"/nodes/n1": NODE}) as served:
        yield served


def relabel(client: SwarmClient) -> None:
    """A write of node n1's labels."""
    client.update_node_labels("n1", lambda cur: {**cur, "swarmgpu.gpus": "2"})


def client_of(engine: LoopEngine) -> SwarmClient:
    """The daemon's client (a 1 s timeout) of ``engine``, made outside any budget."""
    return SwarmClient(f"tcp://127.0.0.1:{engine.server_port}", timeout_s=1)


def cut_within(engine: LoopEngine, budget: answerjson.CycleBudget, within_s: float,
               at_least_s: float) -> None:
    """``relabel`` within ``budget`` fails as a timeout that says the write's slack
    cut it, within ``within_s`` (``LAG_S`` more at most), not before ``at_least_s``."""
    client = client_of(engine)
    start = time.monotonic()
    with answerjson.within_budget(budget), pytest.raises(
            SwarmUnavailable, match=r"a write's, was not read within .* kept past it "
            r"for the writes in flight") as got:
        relabel(client)
    took = time.monotonic() - start
    assert at_least_s <= took < within_s + LAG_S, took
    assert "check the engine" in str(got.value)


def test_a_writes_slow_read_ends_within_what_is_left_of_the_budget_and_its_slack(
        engine: LoopEngine) -> None:
    # (the gate let it through with 0.5 s left: its read is not refused, nor cut at the
    # budget, but at the slack 1 s past it; before, it took its own 20 s deadline)
    engine.answers["/nodes/n1"] = LONG
    cut_within(engine, answerjson.CycleBudget(0.5, slack_s=1.0), 1.5, 1.0)


def test_a_writes_slow_post_ends_within_what_is_left_of_the_budget_and_its_slack(
        engine: LoopEngine) -> None:
    engine.answers["/nodes/n1/update"] = LONG
    cut_within(engine, answerjson.CycleBudget(0.5, slack_s=1.0), 1.5, 1.0)
    assert engine.posts == 1


def test_a_write_past_the_budget_and_its_slack_still_gets_the_floor(
        engine: LoopEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    # (the over-share restart's reopened gate, made after the budget passed long ago:
    # sent, and answered within the floor, else cut there)
    monkeypatch.setattr(answerjson, "WRITE_FLOOR_S", 1.0)
    budget = answerjson.CycleBudget(0.5, slack_s=1.0)
    budget.start -= 120
    client = client_of(engine)
    with answerjson.within_budget(budget), answerjson.outside_budget():
        relabel(client)
    assert engine.posts == 1
    engine.answers["/nodes/n1/update"] = LONG
    cut_within(engine, budget, 1.0, 1.0)
