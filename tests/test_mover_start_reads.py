"""What ``Mover.start`` reads to count the moves in flight against its budgets: the
records on the swarm object and the services they name, one inspect each, never the
swarm's whole service list (seconds at 25,000 services, once per move it started).
Pure, over the recording Swarm stand-in (tests/support/forged.py).

The budgets still hold on what Swarm says: two starts in one cycle, a move another
manager (a leader before this one, or preemption's mover) recorded, its label lost or
not; a record whose service is gone is not a move in flight, as before.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.forged import DGX_F, T_UUID, P, RecordingSwarm, victim_cluster, victim_move

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.placement import MOVE_STATE
from swarmgpu.manager.rebalance.mover import Mover, read_records, record_key
from swarmgpu.manager.rebalance.moves import Move, Outcome, Trigger
from swarmgpu.swarm.client import SwarmService


class Listing(RecordingSwarm):
    """The stand-in, counting its full service lists."""

    lists = 0

    def services(self) -> list[SwarmService]:
        self.lists += 1
        return super().services()


def _cluster() -> Listing:
    base = victim_cluster({})
    return Listing(base.nodes(), base.services(), base.tasks())


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
