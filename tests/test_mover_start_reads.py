"""What ``Mover.start`` reads to count the moves in flight against its budgets: the
records on the swarm object and the services they name, one inspect each, never the
swarm's whole service list (seconds at 25,000 services, once per move it started).
Pure, over the recording Swarm stand-in (tests/support/forged.py).

The budgets still hold on what Swarm says: two starts in one cycle, a move another
manager (a leader before this one, or preemption's mover) recorded, its label lost or
not; a record whose service is gone is not a move in flight, as before.

The moved service's holdings (``why_not_movable``) are read from the nodes that carry
its ledger label, one filtered list, never every node of the swarm (0.5 s at 5,000
nodes, once per move started). Every holding counts, also one on a node the move does
not touch where no task of it runs: the refusals are those of the full ledger.
"""

from __future__ import annotations

import json
import re
import socketserver
import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from support.forged import (
    DGX_F,
    R4090_F,
    T_UUID,
    P,
    RecordingSwarm,
    held_labels,
    repin_move,
    sw_node,
    victim_cluster,
    victim_move,
)

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.placement import MOVE_STATE, assign_key
from swarmgpu.manager.rebalance.mover import Mover, MoveState, read_records, record_key
from swarmgpu.manager.rebalance.moves import Move, Outcome, Trigger
from swarmgpu.swarm.client import SwarmClient, SwarmError, SwarmNode, SwarmService


class Listing(RecordingSwarm):
    """The stand-in, counting its full service and node lists."""

    lists = 0
    node_lists = 0

    def services(self) -> list[SwarmService]:
        self.lists += 1
        return super().services()

    def nodes(self) -> list[SwarmNode]:
        self.node_lists += 1
        return super().nodes()


def _cluster(*more: SwarmNode) -> Listing:
    base = victim_cluster({})
    return Listing([*base.nodes(), *more], base.services(), base.tasks())


def _third_move() -> Move:
    """third (RTX 4090 GPU 0) onto the DGX's free GPU 1."""
    return Move(service="third", service_id="id-third", source_node="n-4090",
                source_host="gpu-node-2", source_uuids=(T_UUID,), source_milli=(1000,),
                target_node="n-dgx", target_host="gpu-node-1", target_gpus=(1,),
                target_uuids=(DGX_F.gpus[1].uuid,), target_milli=(1000,),
                trigger=Trigger.HOTSPOT, window_s=5.0, reason="test", gain="test")


def _mover(sw: RecordingSwarm, cycle: int, node: int) -> Mover:
    cfg = RebalanceConfig(dry_run=False, max_moves_per_cycle=cycle, max_moves_per_node=node)
    return Mover(sw, cfg, prefix=P, dry_run=False,  # type: ignore[arg-type]
                 clock=lambda: 1000.0)


def test_moves_started_in_a_cycle_list_no_service_of_the_swarm() -> None:
    sw = _cluster()
    nodes, services, tasks = sw.nodes(), sw.services(), sw.tasks()
    sw.lists = 0
    _mover(sw, 2, 2).run_cycle([victim_move(), _third_move()], nodes, services, tasks)
    assert set(read_records(sw.swarm_labels(), P)) == {"id-victim", "id-third"}
    assert sw.lists == 0  # the cycle's own list was handed in; it was listed once per start


@pytest.mark.parametrize(("cycle", "node", "key"), [
    (1, 9, "max_moves_per_cycle"), (9, 1, "max_moves_per_node")])
def test_two_starts_in_one_cycle_spend_the_budget(cycle: int, node: int, key: str) -> None:
    """As preemption starts them (``Mover.start``, no ``admit`` before it)."""
    sw = _cluster()
    m = _mover(sw, cycle, node)
    assert m.start(victim_move(), sw.service("id-victim")).ok
    got = m.start(_third_move(), sw.service("id-third"))
    assert not got.ok and got.budget is not None and got.budget.key == key
    assert set(read_records(sw.swarm_labels(), P)) == {"id-victim"}
    assert sw.lists == 0


@pytest.mark.parametrize("label", [True, False])
def test_a_move_another_manager_recorded_spends_the_budget(label: bool) -> None:
    """Another mover (a leader before this one) started it; its service's move label
    is there, or was lost (a re-deploy): its record counts all the same."""
    sw = _cluster()
    assert _mover(sw, 1, 9).start(victim_move(), sw.service("id-victim")).ok
    if not label:
        def drop(spec: dict[str, Any]) -> dict[str, Any]:
            spec["Labels"].pop(P + MOVE_STATE)
            return spec

        sw.update_service_spec("id-victim", drop)
    m = _mover(sw, 1, 9)  # this manager never saw it start
    got = m.start(_third_move(), sw.service("id-third"))
    assert got.budget is not None and got.budget.key == "max_moves_per_cycle"
    assert set(read_records(sw.swarm_labels(), P)) == {"id-victim"}


def test_a_record_whose_service_is_gone_spends_no_budget() -> None:
    """Its gates and ledger are placement's to release; the next cycle drops it."""
    sw = _cluster()
    other = _mover(sw, 1, 9)
    assert other.start(victim_move(), sw.service("id-victim")).ok
    st = read_records(sw.swarm_labels(), P)["id-victim"]
    sw.update_swarm_labels(lambda cur: {**{k: v for k, v in cur.items()
                                           if k != record_key(P, "id-victim")},
                                        record_key(P, "id-gone"): st.to_json()})
    m = _mover(sw, 1, 9)
    assert m.start(_third_move(), sw.service("id-third")).ok
    assert [r.outcome for r in m.recent] == [Outcome.STARTED]


class Inspecting(Listing):
    """The stand-in, answering an inspect of an id no engine has the shape of as the
    socket proxy does (403) and the SDK (an empty id: NullResource), and counting them."""

    inspected: list[str]

    def service(self, service_id: str) -> SwarmService:
        self.inspected.append(service_id)
        if not service_id:
            raise SwarmError("Resource ID was not provided")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", service_id):
            raise SwarmError(f"403 Client Error: the proxy refuses {service_id!r}")
        return super().service(service_id)


@pytest.mark.parametrize("key", ["", "a/b", "../id-victim", "x" * 129, "id victim", "-x",
                                 "id-victim?x=1"])
def test_a_record_under_a_key_that_is_no_service_id_spends_no_budget(key: str) -> None:
    """A move record is anyone's label: one under a key that is no service id (empty,
    with a /, too long) names no service, as the cycle's whole list reads it. Inspected,
    the engine refused it (the proxy's 403, the SDK's NullResource): ``start`` failed,
    and preemption stopped its victim instead of moving it."""
    sw = _cluster()
    sw = Inspecting(sw.nodes(), sw.services(), sw.tasks())
    sw.inspected = []
    assert _mover(sw, 1, 9).start(victim_move(), sw.service("id-victim")).ok
    st = read_records(sw.swarm_labels(), P)["id-victim"]
    sw.update_swarm_labels(lambda cur: {**{k: v for k, v in cur.items()
                                           if k != record_key(P, "id-victim")},
                                        record_key(P, key): st.to_json()})
    m = _mover(sw, 1, 9)
    sw.inspected = []
    assert m.start(_third_move(), sw.service("id-third")).ok
    assert key not in sw.inspected


def test_a_started_move_lists_no_node_of_the_swarm() -> None:
    """Between nodes and on one node (a repin), by a cycle and by preemption's start."""
    sw = _cluster()
    nodes, services, tasks = sw.nodes(), sw.services(), sw.tasks()
    sw.node_lists = 0
    _mover(sw, 3, 3).run_cycle([victim_move()], nodes, services, tasks)
    got = _mover(sw, 3, 3).start(repin_move(), sw.service("id-third"))
    assert got.ok, got.why
    assert set(read_records(sw.swarm_labels(), P)) == {"id-victim", "id-third"}
    assert sw.node_lists == 0  # it was listed once per start, for one service's holdings


def _refusal(sw: Listing, m: Move) -> str:
    mover = _mover(sw, 9, 9)
    got = mover.start(m, sw.service(m.service_id))
    assert not got.ok and got.why is not None
    assert [r.outcome for r in mover.recent] == [Outcome.REFUSED]
    assert read_records(sw.swarm_labels(), P) == {}
    assert sw.node_lists == 0
    return got.why


OTHER = R4090_F.gpus[3].uuid  # a GPU of a node neither move touches


def test_a_holding_on_a_node_the_move_does_not_touch_refuses_it() -> None:
    """victim holds a GPU on a third node where no task of it runs (placement not done,
    or a holding left behind): two placed, one running, as the full ledger says. Read
    from the move's nodes and the task's only, it would be started, and the surge's task
    could start on that node, whose gate is open, instead of on the target."""
    sw = _cluster(sw_node("n-other", "gpu-node-3", held_labels("victim", "n-other", OTHER)))
    assert _refusal(sw, victim_move()) == (
        "not converged (1 running of 1, 2 placed); moved only once stable")
    sw = _cluster(sw_node("n-other", "gpu-node-3", held_labels("third", "n-other", OTHER)))
    assert _refusal(sw, repin_move()) == (
        "not converged (1 running of 1, 2 placed); moved only once stable")


def test_a_holding_on_the_new_node_already_refuses_the_move() -> None:
    sw = _cluster()
    sw.update_node_labels("n-4090", lambda cur: {
        **cur, **held_labels("victim", "n-4090", R4090_F.gpus[2].uuid)})
    sw.node_lists = 0
    assert _refusal(sw, victim_move()) == "victim already holds GPUs on gpu-node-2"


@pytest.mark.parametrize("gone", ["n-dgx", "n-4090"])
def test_a_node_of_the_move_that_is_gone_starts_nothing(gone: str) -> None:
    """It left the swarm (``docker node rm``) after the cycle's read: the engine's 404,
    nothing written; ``run_cycle`` records the move failed."""
    base = _cluster()
    sw = Listing([n for n in base.nodes() if n.id != gone], base.services(), base.tasks())
    mover = _mover(sw, 9, 9)
    with pytest.raises(SwarmError):
        mover.start(victim_move(), sw.service("id-victim"))
    mover.run_cycle([victim_move()], base.nodes(), base.services(), base.tasks())
    assert [r.outcome for r in mover.recent] == [Outcome.FAILED]
    assert read_records(sw.swarm_labels(), P) == {}
    assert sw.calls == []


class _Engine(socketserver.UnixStreamServer):
    paths: list[str]


class _Answer(socketserver.StreamRequestHandler):
    """Any GET: one node holding a GPU (the version probe reads what it needs)."""

    server: _Engine

    def handle(self) -> None:
        path = self.rfile.readline().split(b" ")[1].decode()
        while self.rfile.readline() not in (b"\r\n", b""):
            pass
        self.server.paths.append(path)
        body = json.dumps([{"ID": "n-dgx", "Spec": {"Labels": {"k": "v"}}}] if "/nodes" in path
                          else {"ApiVersion": "1.41", "Version": "20.10.24"}).encode()
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def test_the_engine_filters_the_nodes_by_the_ledger_label(tmp_path: Path) -> None:
    """``node.label`` (Engine API 1.39): the key alone, any value; a key the filter would
    read as key=value is refused, naming it, before any call."""
    srv = _Engine(str(tmp_path / "engine.sock"), _Answer)
    srv.paths = []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        client = SwarmClient(f"unix://{srv.server_address}", timeout_s=5)
        got = client.nodes_with_label(assign_key(P, "victim"))
        asked = [p for p in srv.paths if "/nodes" in p]
        with pytest.raises(SwarmError, match="a=b"):
            client.nodes_with_label("a=b")
    finally:
        srv.shutdown()
        srv.server_close()
    assert [n.id for n in got] == ["n-dgx"]
    (path,) = asked
    query = parse_qs(urlsplit(path).query)
    assert json.loads(query["filters"][0]) == {"node.label": [assign_key(P, "victim")]}
    assert len([p for p in srv.paths if "/nodes" in p]) == 1


class Garbled(Listing):
    """Victim's next spec write raises what the client never foresaw: an error that is
    no SwarmError (a bug, or input no one foresaw)."""

    garbled = True

    def update_service_spec(self, service_id: str, compute: Any, **kw: Any) -> bool:
        if service_id == "id-victim" and self.garbled:
            self.garbled = False
            raise TypeError("'NoneType' object is not subscriptable")
        return super().update_service_spec(service_id, compute, **kw)


def test_a_move_that_raises_at_its_start_fails_alone() -> None:
    """victim's first step raises: it is recorded failed, third (the next of the batch)
    starts; victim's record, written before the step, is judged from Swarm next cycle
    (its label never landed: rolled back, the record gone, no surge or move label left,
    its cooldown started as after any roll-back; said failed only). Before:
    the exception left ``run_cycle``: third never started, and the cycle (health's moves
    after it) ended there."""
    base = victim_cluster({})
    sw = Garbled(base.nodes(), base.services(), base.tasks())
    before = sw.service("id-victim").spec
    m = _mover(sw, 2, 2)
    m.run_cycle([victim_move(), _third_move()], sw.nodes(), sw.services(), sw.tasks())
    got = {r.service: r for r in m.recent}
    assert got["victim"].outcome is Outcome.FAILED
    assert got["victim"].detail.startswith("TypeError: 'NoneType' object is not subscr")
    assert got["third"].outcome is Outcome.STARTED
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert set(read_records(sw.swarm_labels(), P)) == {"id-third"}
    spec = sw.service("id-victim").spec
    assert (spec["Mode"], spec["TaskTemplate"]) == (before["Mode"], before["TaskTemplate"])
    assert P + MOVE_STATE not in spec["Labels"]
    # one outcome per move: the roll-back of a start said failed says nothing more
    assert [r.outcome for r in m.recent if r.service == "victim"] == [Outcome.FAILED]


def test_a_move_in_flight_that_raises_stops_no_other_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """victim's move is in flight and its advance raises (no SwarmError): it is logged
    and tried next cycle, and third's new move still starts. Before: the exception left
    ``run_cycle`` before any new move."""
    sw = _cluster()
    m = _mover(sw, 2, 2)
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())

    def boom(sid: str, st: MoveState) -> None:
        raise KeyError(sid)

    monkeypatch.setattr(m, "advance", boom)
    m.run_cycle([_third_move()], sw.nodes(), sw.services(), sw.tasks())
    assert set(read_records(sw.swarm_labels(), P)) == {"id-victim", "id-third"}
    assert [(r.service, r.outcome) for r in m.recent] == [
        ("victim", Outcome.STARTED), ("third", Outcome.STARTED)]
