"""Each answer of the engine is read to a bound: docker-py read it whole, then decoded
it, so a huge one (a broken or hostile engine behind a socket proxy, an answer without
end) took the daemon's memory. Past ``answerjson.MAX_ANSWER_BYTES`` it is refused,
naming the limit and the fix, its connection closed with the rest unread; an answer
within it is read as before, its connection back in the pool. ``doctor``'s ``docker
info`` is read so too, as strictly as the daemon's reads (a key twice refused). Real
docker-py clients against an engine on loopback (tests/support/loop_engine.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from swarmgpu.agent.procattr import engine_labels
from swarmgpu.core.config import ConfigError, load_config
from swarmgpu.swarm import answerjson
from swarmgpu.swarm.client import SwarmClient, SwarmError, SwarmUnavailable, manager_client
from tests.support.loop_engine import LoopEngine, Padded, doctor_engine, doctor_refused, loop_engine

MIB = 1024 * 1024
NODE = {"ID": "n1", "Version": {"Index": 7}, "Spec": {"Role": "worker", "Labels": {}},
        "Description": {"Hostname": "a"}, "Status": {"State": "ready", "Addr": "10.0.0.1"}}


@contextmanager
def cut_short(monkeypatch: pytest.MonkeyPatch, path: str) -> Iterator[LoopEngine]:
    """An engine whose answer to GET ``path`` is 64 MiB, under a 1 MiB limit; once the
    block is done, checked to have sent its all to a reader that left most unread."""
    monkeypatch.setattr(answerjson, "MAX_ANSWER_BYTES", MIB)
    with loop_engine({path: Padded(64 * MIB)}) as engine:
        yield engine
        assert engine.sent_all.wait(10)
        # (read whole, all 64 MiB left; the socket buffers hold some MiB past the limit)
        assert engine.sent < 32 * MIB, engine.sent


def tasks_refused(monkeypatch: pytest.MonkeyPatch) -> str:
    """A plain client's refusal of a 64 MiB GET /tasks under a 1 MiB limit."""
    with cut_short(monkeypatch, "/tasks") as engine:
        sw = SwarmClient(f"tcp://127.0.0.1:{engine.server_port}")
        with pytest.raises(SwarmError, match=r"answer to GET /tasks is over 1 MiB") as got:
            sw.tasks()
    return str(got.value)


def test_an_answer_past_the_limit_is_refused_naming_it_unread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    got = tasks_refused(monkeypatch)
    assert "task-history-limit" in got and "proxy" in got


def test_the_configs_engine_max_answer_mib_sets_the_managers_bound(tmp_path: Path) -> None:
    conf = tmp_path / "c.yml"
    conf.write_text("engine: {max_answer_mib: 1}\n")
    with loop_engine({"/tasks": Padded(64 * MIB), "/nodes": Padded(MIB)}) as engine:
        cfg = load_config(conf, env={"SWARMGPU_DOCKER_HOST":
                                     f"tcp://127.0.0.1:{engine.server_port}"})
        sw = manager_client(cfg)
        assert sw.nodes() == []  # (within it)
        with pytest.raises(SwarmError, match=r"GET /tasks is over 1 MiB.*engine.max_answer_mib"):
            sw.tasks()
    assert load_config(None, env={}).engine.max_answer_bytes == answerjson.MAX_ANSWER_BYTES


@pytest.mark.parametrize(("section", "said"), [
    ("{max_answer_mb: 1}", r"engine.max_answer_mb: unknown key; did you mean 'max_answer_mib'"),
    ("{max_answer_mib: 0}", r"engine.max_answer_mib: 0 is out of range; use 1 to 65536 MiB"),
])
def test_the_engine_sections_typo_or_bound_out_of_range_is_refused(
        tmp_path: Path, section: str, said: str) -> None:
    conf = tmp_path / "c.yml"
    conf.write_text(f"engine: {section}\n")
    with pytest.raises(ConfigError, match=said):
        load_config(conf, env={})


def test_answers_within_the_limit_read_as_before_on_one_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answerjson, "MAX_ANSWER_BYTES", MIB)
    answers: dict[str, bytes | Padded] = {
        "/tasks": Padded(MIB), "/nodes": json.dumps([NODE]).encode(), "/big": Padded(2 * MIB)}
    with loop_engine(answers) as engine:
        sw = SwarmClient(f"tcp://127.0.0.1:{engine.server_port}")
        for _ in range(3):
            assert sw.tasks() == [] and [n.id for n in sw.nodes()] == ["n1"]
        assert engine.connections == 1  # (each answer read to its end released it)
        with pytest.raises(SwarmError, match="over 1 MiB"):
            sw._call(lambda: sw._api._result(sw._api._get(sw._api._url("/big")), True))
        assert [n.id for n in sw.nodes()] == ["n1"]  # (on a new connection)


def test_a_streamed_answer_is_not_bounded_here(monkeypatch: pytest.MonkeyPatch) -> None:
    # (events and logs: their readers bound each line, swarm.eventstream)
    monkeypatch.setattr(answerjson, "MAX_ANSWER_BYTES", MIB)
    with loop_engine({"/events": Padded(2 * MIB)}) as engine:
        api = SwarmClient(f"tcp://127.0.0.1:{engine.server_port}")._api
        resp = api._get(api._url("/events"), stream=True)
        assert sum(len(c) for c in resp.iter_content(65536)) == 2 * MIB


def test_doctors_docker_info_naming_a_key_twice_is_refused_naming_the_fix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (docker-py's own client read it as json does: the last one kept, here "inactive")
    info = (b'{"Swarm": {"LocalNodeState": "active", "NodeID": "n1", '
            b'"LocalNodeState": "inactive"}}')
    with loop_engine({"/info": info}) as engine:
        check = doctor_engine(monkeypatch, engine.server_port)
    assert check["status"] == "fail", check
    assert "docker info" in check["found"] and "'LocalNodeState' twice" in check["found"]
    assert "proxy in front of the engine" in check["fix"], check


def test_doctors_docker_info_that_is_no_object_is_refused_naming_the_fix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (a proxy's answer: every check read it as an object, and doctor failed whole)
    with loop_engine({"/info": b"[]"}) as engine:
        doctor_refused(monkeypatch, engine.server_port,
                       "docker info: the engine's answer is no JSON object (a list)")


def test_doctors_docker_info_read_once_strictly_reads_as_before(
        monkeypatch: pytest.MonkeyPatch) -> None:
    info = b'{"Swarm": {"LocalNodeState": "active", "NodeID": "n1"}}'
    with loop_engine({"/info": info}) as engine:
        check = doctor_engine(monkeypatch, engine.server_port)
    assert check["status"] == "ok" and "node n1" in check["found"], check


def test_the_version_asked_as_a_client_is_made_is_bounded_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (docker-py asks it in APIClient's constructor, before any hook: read whole)
    with (cut_short(monkeypatch, "/version") as engine,
          pytest.raises(SwarmUnavailable, match=r"answer to GET /version is over 1 MiB")):
        SwarmClient(f"tcp://127.0.0.1:{engine.server_port}")


def test_the_agents_container_inspect_client_bounds_the_version_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with cut_short(monkeypatch, "/version") as engine:
        lookup = engine_labels(f"tcp://127.0.0.1:{engine.server_port}", timeout_s=10)
        assert lookup("c" * 64) is None  # (unknown this time, as for an engine down)


def test_doctors_version_past_the_limit_is_refused_naming_the_fix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with cut_short(monkeypatch, "/version") as engine:
        doctor_refused(monkeypatch, engine.server_port,
                       "GET /version is over 1 MiB")


def test_a_version_naming_a_key_twice_is_refused_as_the_engines(
        monkeypatch: pytest.MonkeyPatch) -> None:
    twice = b'{"ApiVersion": "1.43", "ApiVersion": "1.24", "Version": "24.0.0"}'
    with loop_engine({"/version": twice}) as engine, pytest.raises(
            SwarmUnavailable, match="'ApiVersion' twice"):
        SwarmClient(f"tcp://127.0.0.1:{engine.server_port}")


def test_a_bound_no_config_sets_names_no_setting_as_its_fix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (doctor's and the agent's reads: engine.max_answer_mib is the manager's, and
    # raising it there changes nothing here; the manager's own refusal names it: above)
    got = tasks_refused(monkeypatch)
    assert "max_answer_mib" not in got, got
    assert "task-history-limit" in got
