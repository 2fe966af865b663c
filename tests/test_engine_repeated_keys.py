"""The daemon's own reads of the engine refuse an object that names a key twice.

docker-py decoded every answer with ``json``, which keeps the last of two repeated keys
silently: a task ``{"NodeID": "a", "NodeID": "b"}`` from a proxy in front of the engine
was read as on node b. Now such an answer is refused, naming the key and the entry:
a node or a service fails alone (unread: nothing placed on it or written for it), a
task list fails whole (the cycle), as a task that cannot be read does; an answer read
whole (info, the swarm, an event) is refused. These go through docker-py's own
``APIClient`` (its ``_result``), only its HTTP answered here.
"""

from __future__ import annotations

import pytest
from support.answered_engine import answered_engine

from swarmgpu.swarm.client import SwarmClient, SwarmError, SwarmUnkeyed, UnreadWrite
from swarmgpu.swarm.eventstream import NotAnEvent, parse_event

FIX = "check the proxy in front of the engine"


def node_text(nid: str, host: str, extra: str = "") -> str:
    """A node as Docker sends it, as JSON text; ``extra``: more keys in its Spec."""
    return (f'{{"ID": "{nid}", "Version": {{"Index": 7}}, "Spec": {{"Role": "worker", '
            f'"Availability": "active", "Labels": {{"gpu": "yes"{extra}}}}}, '
            f'"Description": {{"Hostname": "{host}"}}, "Status": {{"State": "ready", '
            f'"Addr": "10.0.0.1"}}}}')


def service_text(sid: str, name: str, extra: str = "") -> str:
    return (f'{{"ID": "{sid}", "Version": {{"Index": 3}}, "Spec": {{"Name": "{name}"{extra}, '
            '"TaskTemplate": {"ContainerSpec": {"Image": "x"}}, '
            '"Mode": {"Replicated": {"Replicas": 1}}}}')


def task_text(tid: str, node: str, state: str = "running") -> str:
    return (f'{{"ID": "{tid}", "ServiceID": "s1", {node}, "Slot": 1, '
            f'"DesiredState": "running", "Status": {{"State": "{state}"}}, '
            '"Spec": {"ContainerSpec": {"Image": "x"}}}')


def engine(monkeypatch: pytest.MonkeyPatch, answers: dict[str, str]) -> SwarmClient:
    """A client built as the daemon builds it, its engine answering ``answers`` (by path)."""
    return answered_engine(monkeypatch, answers)[0]


def test_a_node_naming_a_key_twice_is_unread_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    twice = node_text("n2", "b", ', "gpu": "no"')
    listed = f'[ {node_text("n1", "a")} ,\n {twice} , {node_text("n3", "c")}]'

    sw = engine(monkeypatch, {"/nodes": listed})
    nodes = {n.id: n for n in sw.nodes()}
    assert sorted(nodes) == ["n1", "n2", "n3"]
    assert nodes["n1"].unread == nodes["n3"].unread == ""
    assert nodes["n1"].labels == {"gpu": "yes"}
    why = nodes["n2"].unread
    assert "'gpu' twice" in why and "node 2 (ID 'n2')" in why and FIX in why, why


def test_an_inspected_node_naming_a_key_twice_is_unread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sw = engine(monkeypatch, {"/nodes/n2": node_text("n2", "b", ', "gpu": "no"')})
    why = sw.node("n2").unread
    assert "'gpu' twice" in why and "node (ID 'n2')" in why and FIX in why, why


def test_a_service_naming_a_key_twice_is_unread_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    twice = service_text("s2", "llm", ', "Name": "other"')
    listed = f'[{service_text("s1", "web")}, {twice}]'

    sw = engine(monkeypatch, {"/services": listed,
                              "/services/s2": service_text("s2", "llm", ', "Name": "x"')})
    got = {s.id: s for s in sw.services()}
    assert got["s1"].unread == "" and got["s1"].name == "web"
    assert "'Name' twice" in got["s2"].unread and FIX in got["s2"].unread
    assert "service (ID 's2')" in sw.service("s2").unread


def test_a_task_naming_its_node_twice_fails_the_task_list(
        monkeypatch: pytest.MonkeyPatch) -> None:
    once, twice = task_text("t1", '"NodeID": "a"'), task_text("t2", '"NodeID": "a", "NodeID": "b"')
    listed = f"[{once}, {twice}]"
    sw = engine(monkeypatch, {"/tasks": listed})
    with pytest.raises(SwarmError, match="task 2 \\(ID 't2'\\) of the list names 'NodeID' "
                                         "twice") as got:
        sw.tasks()
    assert FIX in str(got.value)
    # a state the caller skips does not skip it: its state is not known either
    with pytest.raises(SwarmError, match="'NodeID' twice"):
        sw.tasks(states=frozenset({"complete"}))


def test_a_task_list_without_repeated_keys_reads_as_before(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sw = engine(monkeypatch, {"/tasks": "[" + task_text("t1", '"NodeID": "a"') + "]"})
    assert [(t.id, t.node_id) for t in sw.tasks()] == [("t1", "a")]


def test_an_answer_read_whole_naming_a_key_twice_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sw = engine(monkeypatch, {"/swarm": '{"Spec": {"Labels": {"k": "1", "k": "2"}}}',
                              "/info": '{"Swarm": {"NodeID": "a", "NodeID": "b"}}'})
    with pytest.raises(SwarmError, match="'k' twice in one object") as got:
        sw.swarm_labels()
    assert FIX in str(got.value)
    with pytest.raises(SwarmError, match="'NodeID' twice"):
        sw.self_node_id()


def test_an_event_naming_a_key_twice_is_not_an_event() -> None:
    line = b'{"Type": "node", "Actor": {"ID": "n1", "ID": "n2"}, "Action": "update"}'
    with pytest.raises(NotAnEvent, match="'ID' twice") as got:
        parse_event(line, "unix:///x.sock")
    assert FIX in str(got.value)


def test_a_node_naming_its_id_twice_is_left_out_as_unkeyed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (kept under either ID it could shadow, or stand for, another node)
    twice = node_text("n1", "a").replace('"ID": "n1"', '"ID": "n1", "ID": "n2"')
    sw = engine(monkeypatch, {"/nodes": f'[{twice}, {node_text("n2", "b")}]',
                              "/nodes/n1": twice})
    assert [(n.id, n.unread) for n in sw.nodes()] == [("n2", "")]
    (said,) = sw.unkeyed().nodes
    assert "node 1 of 2 (hostname 'a') naming its ID twice" in said, said
    with pytest.raises(SwarmUnkeyed, match="naming its ID twice"):
        sw.node("n1")


@pytest.mark.parametrize("after", [
    ",",  # cut after the entry: the entries after it unseen
    ', {"ID": "n3",',  # cut inside the next one
    f', {node_text("n3", "c")} garbage',  # no end of the list
    f' {node_text("n3", "c")}]',  # no comma between two entries
    "] trailing",  # more after the list's end
])
def test_a_list_naming_a_key_twice_that_is_no_json_fails_whole(
        monkeypatch: pytest.MonkeyPatch, after: str) -> None:
    # (read entry by entry, a cut answer was a shorter list: its missing nodes unseen)
    twice = node_text("n2", "b", ', "gpu": "no"')
    sw = engine(monkeypatch, {"/nodes": f"[{node_text('n1', 'a')}, {twice}{after}"})
    with pytest.raises(SwarmError, match="not read"):
        sw.nodes()


def test_an_inspect_naming_a_key_twice_with_more_after_it_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sw = engine(monkeypatch, {"/nodes/n2": node_text("n2", "b", ', "gpu": "no"') + " {}"})
    with pytest.raises(SwarmError, match="not read"):
        sw.node("n2")


def test_a_service_naming_a_key_twice_read_to_write_is_refused_as_unread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (UnreadSpec: its writers skip that service alone, as for a part they cannot read)
    sw = engine(monkeypatch, {"/services/s2": service_text("s2", "llm", ', "Name": "x"')})
    with pytest.raises(UnreadWrite, match="'Name' twice"):
        sw.update_service_spec("s2", lambda spec: {**spec, "Name": "y"})
    assert sw.writes == 0


def test_a_node_naming_a_key_twice_read_to_write_its_labels_names_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sw = engine(monkeypatch, {"/nodes/n2": node_text("n2", "b", ', "gpu": "no"')})
    with pytest.raises(SwarmError, match=r"label write refused: node b: .*'gpu' twice"):
        sw.update_node_labels("n2", lambda cur: {**cur, "x": "1"})
    assert sw.writes == 0


def test_an_answer_nested_too_deep_to_decode_is_the_engines_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (a bare RecursionError passed every reader that fails one object alone)
    deep = "[" * 200_000 + "]" * 200_000
    sw = engine(monkeypatch, {"/nodes": deep, "/nodes/n1": f'{{"ID": "n1", "Spec": {deep}}}'})
    with pytest.raises(SwarmError, match="nested too deep"):
        sw.nodes()
    with pytest.raises(SwarmError, match="nested too deep"):
        sw.node("n1")


@pytest.mark.parametrize(("path", "answer"), [
    ("/info", "[1]"),
    ("/info", '{"Swarm": "x"}'),
    ("/info", '{"Swarm": {"NodeID": 7}}'),
    ("/swarm", "[]"),
    ("/swarm", '{"Spec": "x"}'),
    ("/swarm", '{"Spec": {"Labels": ["k"]}}'),
    ("/swarm", '{"Spec": {"Labels": {"k": 1}}}'),
    ("/swarm", '{"TLSInfo": "x"}'),
])
def test_an_answer_read_whole_that_is_not_what_docker_sends_is_the_engines_error(
        monkeypatch: pytest.MonkeyPatch, path: str, answer: str) -> None:
    # (an AttributeError out of is_leader passed the leader check's SwarmError, the
    # term kept; out of swarm_labels, every reader that fails one step alone)
    sw = engine(monkeypatch, {path: answer})
    read = {"/info": sw.is_leader, "/swarm": (
        sw.trust_root if "TLSInfo" in answer else sw.swarm_labels)}[path]
    with pytest.raises(SwarmError, match="check any proxy"):
        read()


def test_a_swarm_object_without_its_version_is_not_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sw = engine(monkeypatch, {"/swarm": '{"Spec": {"Labels": {}}, "Version": {}}'})
    with pytest.raises(SwarmError, match="check any proxy"):
        sw.update_swarm_labels(lambda cur: {**cur, "k": "v"})
    assert sw.writes == 0


def test_a_service_naming_its_id_twice_read_to_write_is_refused_as_unread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (the engine's error failed every writer that skips a service it cannot read alone)
    twice = service_text("s2", "llm").replace('"ID": "s2"', '"ID": "s2", "ID": "s3"')
    sw = engine(monkeypatch, {"/services/s2": twice})
    with pytest.raises(UnreadWrite, match=r"service write refused: .*'ID' twice") as got:
        sw.update_service_spec("s2", lambda spec: {**spec, "Name": "y"})
    assert FIX in str(got.value) and sw.writes == 0


def test_a_service_read_without_its_id_to_write_is_refused_as_unread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (a proxy that drops the ID, swarm.unkeyed: the engine's error failed every writer
    # that skips a service it cannot read alone, as for one naming its ID twice)
    sw = engine(monkeypatch, {"/services/s2": service_text("s2", "llm").replace(
        '"ID": "s2", ', "")})
    with pytest.raises(UnreadWrite, match=r"service write refused: .*without an ID"):
        sw.update_service_spec("s2", lambda spec: {**spec, "Name": "y"})
    assert sw.writes == 0


@pytest.mark.parametrize("raw", [
    node_text("n2", "b").replace('"ID": "n2"', '"ID": "n2", "ID": "n3"'),  # its ID twice
    node_text("n2", "b").replace('"ID": "n2", ', ""),  # none (a proxy that drops it)
])
def test_a_node_read_without_one_id_to_write_its_labels_is_refused_naming_it(
        monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    # (as for a service: the engine's error, which named neither the node nor the fix)
    sw = engine(monkeypatch, {"/nodes/n2": raw})
    with pytest.raises(SwarmError, match=r"label write refused: node n2: ") as got:
        sw.update_node_labels("n2", lambda cur: {**cur, "x": "1"})
    assert FIX in str(got.value) or "check any proxy" in str(got.value), got.value
    assert sw.writes == 0
