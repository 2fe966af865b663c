"""What a move in flight reads of the nodes, each cycle (``Mover.advance``/``recover``
and a repin's): the move's own nodes, one inspect each by id, never the swarm's whole
node list (0.5 s at 5,000 nodes, once per move in flight per cycle, against the 1 s
steady cycle). Pure, over the recording Swarm stand-in (tests/support/forged.py).

A node of the move that is gone (the engine's 404 for its id) ends the move as a node
missing from the whole list did: between nodes, target gone rolled back and source gone
done on the target; a repin's node gone, the repin ends (advance: failed; a lost move
label: rolled back). Only the exact id is that node: the engine also answers an inspect
by hostname or id prefix, which the whole list never matched.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from support.forged import P, RecordingSwarm, repin_move, victim_cluster, victim_move

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.placement import MOVE_STATE, gate_key
from swarmgpu.manager.rebalance.mover import Mover, read_records, record_key
from swarmgpu.manager.rebalance.moves import Outcome
from swarmgpu.swarm.client import SwarmNode, SwarmNotFound, SwarmTask


class Listing(RecordingSwarm):
    """The stand-in, counting its full node lists."""

    node_lists = 0

    def nodes(self) -> list[SwarmNode]:
        self.node_lists += 1
        return super().nodes()


def _mover(sw: RecordingSwarm) -> Mover:
    cfg = RebalanceConfig(dry_run=False, max_moves_per_cycle=9, max_moves_per_node=9,
                          move_timeout_s=120.0)
    return Mover(sw, cfg, prefix=P, dry_run=False,  # type: ignore[arg-type]
                 clock=lambda: 1000.0)


def _in_flight(cls: type[Listing] = Listing) -> Listing:
    """victim moving from the DGX to the 4090, third repinned on the 4090: both started."""
    base = victim_cluster({})
    sw = cls(base.nodes(), base.services(), base.tasks())
    m = _mover(sw)
    assert m.start(victim_move(), sw.service("id-victim")).ok
    assert m.start(repin_move(), sw.service("id-third")).ok
    assert set(read_records(sw.swarm_labels(), P)) == {"id-victim", "id-third"}
    return sw


def _cycle(sw: Listing) -> dict[str, Outcome]:
    """One cycle of a mover (a new leader's or the next), on the cycle's own read."""
    nodes, services, tasks = sw.nodes(), sw.services(), sw.tasks()
    sw.node_lists = 0
    m = _mover(sw)
    m.run_cycle([], nodes, services, tasks)
    return {r.service: r.outcome for r in m.recent}


def _lose_move_labels(sw: RecordingSwarm) -> None:
    """A stack re-deploy rewrote both services' labels: their moves are recovered."""
    def drop(spec: dict[str, Any]) -> dict[str, Any]:
        spec["Labels"].pop(P + MOVE_STATE)
        return spec

    for sid in ("id-victim", "id-third"):
        sw.update_service_spec(sid, drop)


def test_moves_in_flight_advance_listing_no_node_of_the_swarm() -> None:
    sw = _in_flight()
    sw.run_task(SwarmTask("t-victim-2", "id-victim", "n-4090", 1, "running", "running", ()))
    assert _cycle(sw) == {}
    assert sw.node_lists == 0  # it was listed once per move in flight
    # Each made its next step from the nodes it read: the surge's task runs on the
    # target, so the source closes; the repin closes its node's gate (step 2).
    assert gate_key(P, "victim") not in sw.node("n-dgx").labels
    assert gate_key(P, "third") not in sw.node("n-4090").labels


def test_moves_whose_label_was_lost_recover_listing_no_node_of_the_swarm() -> None:
    sw = _in_flight()
    _lose_move_labels(sw)
    # victim's source still open: rolled back; third's ledger already names its new GPUs
    assert _cycle(sw) == {"victim": Outcome.ROLLED_BACK, "third": Outcome.DONE}
    assert sw.node_lists == 0
    assert read_records(sw.swarm_labels(), P) == {}


def _gone(sw: Listing, node_id: str) -> None:
    del sw._nodes[node_id]  # `docker node rm`: its inspect is the engine's 404
    with pytest.raises(SwarmNotFound):
        sw.node(node_id)


@pytest.mark.parametrize(("gone", "lost", "want"), [
    # the DGX is the victim move's source; the 4090 its target and third's repin node
    ("n-dgx", False, {"victim": Outcome.DONE}),
    ("n-dgx", True, {"victim": Outcome.DONE, "third": Outcome.DONE}),
    ("n-4090", False, {"victim": Outcome.ROLLED_BACK, "third": Outcome.FAILED}),
    ("n-4090", True, {"victim": Outcome.ROLLED_BACK, "third": Outcome.ROLLED_BACK}),
])
def test_a_node_of_the_move_that_is_gone_ends_it_as_before(
        gone: str, lost: bool, want: dict[str, Outcome]) -> None:
    """Advanced (``lost``: recovered, the move labels gone) after the node left: the
    outcome a node missing from the whole list gave, no step error; its record goes."""
    sw = _in_flight()
    if lost:
        _lose_move_labels(sw)
    _gone(sw, gone)
    assert _cycle(sw) == want
    left = set() if lost or gone == "n-4090" else {"id-third"}  # third carries on
    assert set(read_records(sw.swarm_labels(), P)) == left


class Resolving(Listing):
    """The engine's inspect: an id, or else a hostname or a unique id prefix."""

    def node(self, node_id: str) -> SwarmNode:
        hits = [n for n in self._nodes.values()
                if n.id == node_id or n.hostname == node_id or n.id.startswith(node_id)]
        if len(hits) != 1:
            raise SwarmNotFound(f"node {node_id} not found")
        return hits[0]


@pytest.mark.parametrize(("new_id", "host"), [("n-other", "n-4090"),
                                             ("n-4090-new", "gpu-node-3")])
def test_a_node_that_answers_to_the_id_as_another_is_not_the_moves(new_id: str,
                                                                   host: str) -> None:
    """The 4090 left; another node answers an inspect of its id, by hostname or as an
    id prefix (the engine resolves either): it is not the move's node, as in the whole
    list; the moves end as for a node gone and leave that node's labels alone."""
    sw = _in_flight(Resolving)
    old = sw._nodes.pop("n-4090")
    sw._nodes[new_id] = dataclasses.replace(old, id=new_id, hostname=host, labels={})
    assert sw.node("n-4090").id == new_id
    assert _cycle(sw) == {"victim": Outcome.ROLLED_BACK, "third": Outcome.FAILED}
    assert sw.node(new_id).labels == {}
    assert read_records(sw.swarm_labels(), P) == {}


class Asking(Listing):
    """The stand-in, keeping each node id asked of the engine."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.asked: list[str] = []

    def node(self, node_id: str) -> SwarmNode:
        self.asked.append(node_id)
        return super().node(node_id)


@pytest.mark.parametrize("target", ["", "../services/id-victim", "n-4090/update", 7])
def test_a_record_naming_no_node_id_asks_the_engine_nothing(target: object) -> None:
    """A record's target that cannot be a node id (the record is the swarm object's
    label, anyone's with the manager API): no node's, as in the whole list, never a path
    sent to the engine. The move is rolled back as for a target gone."""
    sw = _in_flight(Asking)
    st = read_records(sw.swarm_labels(), P)["id-victim"]
    bad = json.dumps({**json.loads(st.to_json()), "target": target})
    sw.update_swarm_labels(lambda cur: {**cur, record_key(P, "id-victim"): bad})
    sw.asked = []
    assert _cycle(sw)["victim"] == Outcome.ROLLED_BACK
    assert target not in sw.asked and set(sw.asked) <= {"n-dgx", "n-4090"}
    assert "id-victim" not in read_records(sw.swarm_labels(), P)
