"""A move between nodes and a node whose engine answer cannot be read in part
(``SwarmNode.unread``): its labels as Swarm has them are not known and every write to
it is refused (``swarm.client``), so no move starts onto or off it, and a move in flight
whose source or target becomes unread is held as it is, said, until it reads.

Before, a move off a source unread in a part other than its labels started (its target
opened, the spec written) though the source could never be closed; and a move in flight
whose source's labels became unreadable was judged from labels read as none: the source
taken for closed, the move finished, and the source's entry and gate left behind.
Pure, over the recording Swarm stand-in: victim moves from gpu-node-1 (n-dgx) to
gpu-node-2 (n-4090)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import pytest
from support.forged import (
    R4090_F,
    V_UUID,
    P,
    RecordingSwarm,
    repin_move,
    victim_cluster,
    victim_move,
    warned_cycles,
)

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.placement import assign_key, gate_key
from swarmgpu.manager.rebalance.mover import Mover, read_records
from swarmgpu.manager.rebalance.moves import Outcome
from swarmgpu.swarm.client import SwarmError, SwarmTask

NEW = R4090_F.gpus[1].uuid  # the victim's target GPU
UNREAD = ("node {}: Description.Resources is str 'x', not an object (Docker sends one; "
          "check any proxy); swarmgpu places nothing on it and writes none of its labels "
          "until it reads")


class UnreadRefused(RecordingSwarm):
    """The stand-in refusing a label write to an unread node, as ``SwarmClient`` does."""

    def update_node_labels(self, node_id: str,
                           compute: Callable[[Mapping[str, str]], Mapping[str, str] | None],
                           **kw: Any) -> bool:
        if self.node(node_id).unread:
            raise SwarmError(f"label write refused: {self.node(node_id).unread}")
        return super().update_node_labels(node_id, compute, **kw)


def _swarm() -> UnreadRefused:
    sw = victim_cluster({})
    return UnreadRefused(sw.nodes(), sw.services(), sw.tasks())


def _unread(sw: RecordingSwarm, nid: str, labels: bool = False) -> None:
    """Node ``nid`` unread; ``labels``: its Spec.Labels the part (read as none)."""
    n = sw.node(nid)
    sw._nodes[nid] = replace(n, unread=UNREAD.format(n.hostname),
                             labels={} if labels else n.labels)


def _mover(sw: RecordingSwarm, now: list[float]) -> Mover:
    cfg = RebalanceConfig(dry_run=False, move_timeout_s=120.0, make_before_break=False)
    return Mover(sw, cfg, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]


@pytest.mark.parametrize("which", ["n-dgx", "n-4090"])
def test_no_move_starts_off_or_onto_an_unread_node(which: str) -> None:
    sw, now = _swarm(), [1000.0]
    _unread(sw, which)
    m = _mover(sw, now)
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    (r,) = m.recent
    assert r.outcome == Outcome.REFUSED
    assert UNREAD.format(sw.node(which).hostname) in r.detail
    assert sw.calls == []  # nothing written: no record, no spec, no gate


@pytest.mark.parametrize("labels", [False, True])
@pytest.mark.parametrize("which", ["n-dgx", "n-4090"])
def test_a_move_whose_node_becomes_unread_is_held_as_it_is(which: str, labels: bool) -> None:
    sw, now = _swarm(), [1000.0]
    m = _mover(sw, now)
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in m.recent] == [Outcome.STARTED]
    sw.run_task(SwarmTask("t-new", "id-victim", "n-4090", 1, "running", "running", ()))
    sw.stop_tasks("id-victim", "n-dgx")
    kept = sw.node(which).labels
    _unread(sw, which, labels)
    before, record = list(sw.calls), read_records(sw.swarm_labels(), P)
    said = warned_cycles(sw, m, now)
    assert not [ln for ln in said if "ERROR" in ln], said  # held, no step tried and failed
    assert any("held as it is" in ln and "gpu-node" in ln for ln in said)
    assert sw.calls == before  # no step tried: every write there would be refused
    assert read_records(sw.swarm_labels(), P) == record  # still in flight, as it was
    assert [r.outcome for r in m.recent] == [Outcome.STARTED]
    sw._nodes[which] = replace(sw.node(which), unread="", labels=kept)  # read whole again
    assert kept[assign_key(P, "victim")] == (V_UUID if which == "n-dgx" else NEW)
    for _ in range(3):
        now[0] += 5.0
        m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert read_records(sw.swarm_labels(), P) == {}
    assert gate_key(P, "victim") not in sw.node("n-dgx").labels  # the source closed


def test_a_repin_whose_node_becomes_unread_is_held_as_it_is() -> None:
    """third's repin on gpu-node-2, at step 2; gpu-node-2's Spec.Labels then unreadable:
    its entry read as gone, the repin was left (its record dropped, the spec pointed
    back) though the node's labels were never read. Now it is held as it is."""
    sw, now = _swarm(), [1000.0]
    m = _mover(sw, now)
    m.run_cycle([repin_move()], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in m.recent] == [Outcome.STARTED]
    kept = sw.node("n-4090").labels
    _unread(sw, "n-4090", labels=True)
    before, record = list(sw.calls), read_records(sw.swarm_labels(), P)
    said = warned_cycles(sw, m, now)
    assert not [ln for ln in said if "ERROR" in ln], said  # held, no step tried and failed
    assert any("held as it is" in ln and "gpu-node" in ln for ln in said)
    assert sw.calls == before and read_records(sw.swarm_labels(), P) == record
    assert [r.outcome for r in m.recent] == [Outcome.STARTED]
    sw._nodes["n-4090"] = replace(sw.node("n-4090"), unread="", labels=kept)
    sw.stop_tasks("id-third", "n-4090")  # Swarm let the old task go: step 3 is due
    now[0] += 5.0
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert sw.calls[len(before):] == [("node", "n-4090")]  # read whole again: it goes on
    assert sw.node("n-4090").labels[gate_key(P, "third")] == "true"


@pytest.mark.parametrize("gone", ["n-4090", "n-dgx"])
def test_a_move_whose_node_left_while_its_other_is_unread_waits_said_once(gone: str) -> None:
    """victim's move in flight; one of its nodes leaves the swarm while the other is
    unread. The move ends on the node left, a write there: refused, it was tried (an
    error) each cycle until the node read. Now it waits as it is, said once; read
    again, the move ends there."""
    sw, now = _swarm(), [1000.0]
    m = _mover(sw, now)
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    assert [r.outcome for r in m.recent] == [Outcome.STARTED]
    left = "n-dgx" if gone == "n-4090" else "n-4090"
    kept = sw.node(left).labels
    del sw._nodes[gone]  # docker node rm
    _unread(sw, left)
    before, record = list(sw.calls), read_records(sw.swarm_labels(), P)
    said = warned_cycles(sw, m, now)
    assert not [ln for ln in said if "ERROR" in ln], said  # no refused write tried
    held = [ln for ln in said if "held as it is" in ln]
    assert len(held) == 1 and "left the swarm" in held[0], said  # once, not a cycle
    assert sw.calls == before and read_records(sw.swarm_labels(), P) == record
    sw._nodes[left] = replace(sw.node(left), unread="", labels=kept)  # read whole again
    now[0] += 5.0
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert read_records(sw.swarm_labels(), P) == {}  # ended on the node left
    assert sw.node(left).labels.get(gate_key(P, "victim")) == "true"


@pytest.mark.parametrize("repin", [False, True])
def test_a_move_held_on_an_unread_node_is_said_once_while_it_lasts(repin: bool) -> None:
    """(it was said each cycle: a warning a cycle for as long as the node is unread)"""
    sw, now = _swarm(), [1000.0]
    m = _mover(sw, now)
    m.run_cycle([repin_move() if repin else victim_move()], sw.nodes(), sw.services(),
                sw.tasks())
    _unread(sw, "n-4090")
    said = warned_cycles(sw, m, now)
    assert len([ln for ln in said if "held as it is" in ln]) == 1, said
