"""Each answer of the engine not streamed is read within a deadline: docker-py's timeout
bounds each read of the socket, not the answer, so an engine (or a proxy in front of it)
that sent its answer a byte at a time, each within that timeout, held its reader (the
daemon's cycle) without end. Past ``answerjson.ANSWER_DEADLINE_TIMEOUTS`` times the
client's timeout the answer is refused, naming the read, the deadline and the fix, its
connection closed with the rest unsent; the daemon's, ``doctor``'s and the agent's
clients alike. The event stream, idle for long by right, ends a line begun and not
ended within ``eventstream.MAX_LINE_S``. Real docker-py clients against an engine on
loopback trickling bytes (tests/support/loop_engine.py), deadlines cut short for the
test."""

from __future__ import annotations

import pytest

from swarmgpu.agent.procattr import engine_labels
from swarmgpu.swarm import answerjson, eventstream
from swarmgpu.swarm.client import SwarmClient, SwarmError, SwarmUnavailable
from tests.support.loop_engine import Trickled, doctor_refused, loop_engine, tasks_refused

# (300 bytes at 20 ms: 6 s whole, where the deadline set below is 0.5 s)
SLOW = Trickled(b"[" + b" " * 298 + b"]", 0.02)


def test_an_answer_trickled_past_its_deadline_is_refused_naming_it_unread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answerjson, "ANSWER_DEADLINE_TIMEOUTS", 0.5)
    # (cut at the deadline: not all of its body sent)
    tasks_refused(SLOW, r"answer to GET /tasks was not read whole within 0.5 s",
                  len(SLOW.body))


def test_an_answer_trickled_within_its_deadline_reads_as_before() -> None:
    with loop_engine({"/tasks": Trickled(b"[ ]", 0.02)}) as engine:
        sw = SwarmClient(f"tcp://127.0.0.1:{engine.server_port}", timeout_s=2)
        assert sw.tasks() == []  # (within 2 x 2 s)


def test_the_version_asked_as_a_client_is_made_has_the_deadline_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answerjson, "ANSWER_DEADLINE_TIMEOUTS", 0.5)
    with loop_engine({"/version": SLOW}) as engine, pytest.raises(
            SwarmUnavailable, match=r"GET /version was not read whole within 0.5 s"):
        SwarmClient(f"tcp://127.0.0.1:{engine.server_port}", timeout_s=1)


def test_doctors_docker_info_trickled_is_refused_naming_the_fix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answerjson, "ANSWER_DEADLINE_TIMEOUTS", 0.1)  # (of its 5 s)
    with loop_engine({"/info": SLOW}) as engine:
        doctor_refused(monkeypatch, engine.server_port,
                       "GET /info was not read whole within 0.5 s")


def test_the_agents_container_inspect_trickled_leaves_its_owner_unknown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answerjson, "ANSWER_DEADLINE_TIMEOUTS", 0.5)
    cid = "c" * 64
    body = b'{"Config": {"Labels": {}}' + b" " * 200 + b"}"  # (read whole: no labels)
    with loop_engine({f"/containers/{cid}/json": Trickled(body, 0.02)}) as engine:
        lookup = engine_labels(f"tcp://127.0.0.1:{engine.server_port}", timeout_s=1)
        assert lookup(cid) is None  # (unknown this time, as for an engine down)
        # Cut at the deadline, not read whole (which says no labels too): counted.
        assert engine.sent_all.wait(5) and engine.sent < len(body), engine.sent


def test_a_deadline_is_some_timeouts_of_the_clients_or_fixed_without_one() -> None:
    twice = answerjson.ANSWER_DEADLINE_TIMEOUTS
    assert answerjson.answer_deadline_s(30) == twice * 30
    assert answerjson.answer_deadline_s((5, 30)) == twice * 30
    assert answerjson.answer_deadline_s(None) == answerjson.NO_TIMEOUT_DEADLINE_S


def test_an_event_line_trickled_past_its_deadline_ends_the_stream_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (each byte well within the stream's idle timeout: before, read until it ended)
    monkeypatch.setattr(eventstream, "MAX_LINE_S", 0.5)
    line = Trickled(b'{"Type": "node", ' + b" " * 300, 0.02)
    with loop_engine({"/events": line}) as engine:
        sw = SwarmClient(f"tcp://127.0.0.1:{engine.server_port}", timeout_s=5)
        with pytest.raises(SwarmError, match=r"an event begun [0-9.]+ s ago without its end "
                                             r"of line .* the most waited is 0.5 s"):
            list(sw.events(idle_s=5))
        assert engine.sent_all.wait(5) and engine.sent < len(line.body), engine.sent
        assert engine.sent_all.wait(5)  # (its connection closed: the rest unsent)
        assert engine.sent < len(line.body), engine.sent
