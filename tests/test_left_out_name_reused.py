"""A move record of a service not listed, while the list left a service out
(``swarm.unkeyed``), is held: that service may be the one left out. Not when its name
is listed under another ID: Swarm's names are unique and never change, so the record's
service is gone (a new service took its name).

Before, such a record was held as long as any service was left out: counted in flight
by the movers' budgets, and its name read as a move under way by preemption, which
then passed the new service by as a victim (``record.recorded``)."""

from __future__ import annotations

from dataclasses import replace

from support.forged import P, RecordingSwarm, victim_cluster, victim_move

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.rebalance.mover import Mover, read_records
from swarmgpu.manager.rebalance.record import recorded
from swarmgpu.manager.rebalance.verdict import verify
from swarmgpu.swarm.swarmservice import SwarmService

LEFT = ("the engine's answer lists service 2 of 3 with ID None, not a non-empty text: "
        "it is left out")


def _renamed_in() -> tuple[RecordingSwarm, list[SwarmService]]:
    """The victim's move started; the list then has a new service of its name."""
    sw = victim_cluster({})
    cfg = RebalanceConfig(dry_run=False, move_timeout_s=120.0, make_before_break=False)
    m = Mover(sw, cfg, prefix=P, dry_run=False, clock=lambda: 1000.0)  # type: ignore[arg-type]
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    assert len(read_records(sw.swarm_labels(), P)) == 1
    listed = [s if s.name != "victim" else replace(s, id="id-victim-new", labels={})
              for s in sw.services()]
    return sw, listed


def test_a_record_whose_name_another_listed_service_carries_is_gone_though_one_was_left_out(
) -> None:
    sw, listed = _renamed_in()
    records = read_records(sw.swarm_labels(), P)
    v = verify(listed, records, P, left_out=(LEFT,))
    assert v.held == {} and v.gone == records
    assert v.in_flight() == []


def test_a_new_service_of_a_gone_ones_name_is_no_move_in_flight_though_one_was_left_out(
) -> None:
    sw, listed = _renamed_in()
    assert recorded(listed, sw.swarm_labels(), P, left_out=True) == set()
