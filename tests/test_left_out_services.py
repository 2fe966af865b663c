"""A service the engine lists without an ID is left out of the list alone
(``swarm.unkeyed``). While the list left one out, a service not listed may be that one:
it is never taken for removed where the daemon writes or releases.

Before, the mover dropped the move record of a service not listed (its move under way,
its gates and ledger then left to a placement that holds them), and the moves' budgets
(the mover's, over-share's) counted no such move in flight. Pure, over the recording
Swarm stand-in: victim moves from gpu-node-1 (n-dgx) to gpu-node-2 (n-4090)."""

from __future__ import annotations

from dataclasses import replace

from support.forged import (
    R4090_F,
    P,
    RecordingSwarm,
    sw_node,
    sw_svc,
    victim_cluster,
    victim_move,
    warned_cycles,
)

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, Planner, gate_key
from swarmgpu.manager.placement.nominated import Nomination, Nominations, live_nominations
from swarmgpu.manager.placement.preemptroom import Room
from swarmgpu.manager.placement.records import PlacementPlan, Status
from swarmgpu.manager.rebalance.mover import Mover, read_records
from swarmgpu.manager.rebalance.record import MoveState, record_key, recorded
from swarmgpu.manager.rebalance.verdict import verify, verify_scope
from swarmgpu.manager.web.cluster_view import build_cluster, render_status
from swarmgpu.swarm.client import SwarmTask
from swarmgpu.swarm.unkeyed import Unkeyed

LEFT = ("the engine's answer lists service 2 of 3 with ID None, not a non-empty text: "
        "it is left out")


def _started() -> tuple[RecordingSwarm, list[float], Mover]:
    sw, now = victim_cluster({}), [1000.0]
    cfg = RebalanceConfig(dry_run=False, move_timeout_s=120.0, make_before_break=False)
    m = Mover(sw, cfg, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    assert len(read_records(sw.swarm_labels(), P)) == 1
    return sw, now, m


def test_a_move_record_of_a_service_not_listed_is_held_while_the_list_left_one_out() -> None:
    sw, now, m = _started()
    sw.left_out = Unkeyed(services=(LEFT,))
    before, record = list(sw.calls), read_records(sw.swarm_labels(), P)
    said = warned_cycles(sw, m, now, "victim")
    assert read_records(sw.swarm_labels(), P) == record  # not dropped: still in flight
    assert sw.calls == before  # nothing written
    held = [ln for ln in said if "held as it is" in ln]
    assert len(held) == 1 and LEFT in held[0]  # said once while it lasts
    # listed again: the move goes on from its record, to its end
    sw.left_out = Unkeyed()
    sw.run_task(SwarmTask("t-new", "id-victim", "n-4090", 1, "running", "running", ()))
    for _ in range(4):
        now[0] += 5.0
        m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
        sw.stop_tasks("id-victim", "n-dgx")
    assert read_records(sw.swarm_labels(), P) == {}
    assert gate_key(P, "victim") not in sw.node("n-dgx").labels  # finished: source closed


def test_a_move_record_of_a_service_not_listed_is_dropped_when_none_was_left_out() -> None:
    sw, now, m = _started()
    warned_cycles(sw, m, now, "victim")
    assert read_records(sw.swarm_labels(), P) == {}  # removed mid-move, as before


def _record() -> dict[str, MoveState]:
    sw, _now, _m = _started()
    return read_records(sw.swarm_labels(), P)


def test_a_record_of_a_service_not_listed_counts_in_flight_while_one_was_left_out() -> None:
    records = _record()
    (st,) = records.values()
    v = verify([], records, P, left_out=(LEFT,))
    assert v.gone == {} and v.held == records and v.in_flight() == [st]
    assert verify_scope(records, [], P, None, (), (LEFT,)).in_flight() == [st]  # over-share's
    assert verify([], records, P).in_flight() == []  # none left out: gone


def test_an_unreadable_record_of_no_listed_service_is_kept_while_one_was_left_out() -> None:
    bad = {"id-victim"}
    assert verify([], {}, P, bad).unreadable_gone == bad  # dropped by the mover
    assert verify([], {}, P, bad, left_out=(LEFT,)).unreadable_gone == set()


def test_the_mover_keeps_an_unreadable_record_of_no_listed_service_while_one_was_left_out(
) -> None:
    sw = victim_cluster({})
    key = record_key(P, "id-gone")
    sw._swarm_labels[key] = "not a record"
    sw.left_out = Unkeyed(services=(LEFT,))
    m = Mover(sw, RebalanceConfig(dry_run=False), prefix=P,  # type: ignore[arg-type]
              dry_run=False, clock=lambda: 1000.0)
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert sw.swarm_labels()[key] == "not a record"


R = tuple(g.uuid for g in R4090_F.gpus)  # 8 RTX 4090s on n-4090
HOLD = Nomination("first", 100, "n-4090", R)  # first's preemption freed them all


def test_a_preemptors_hold_stays_while_the_list_left_one_out() -> None:
    """first (preemptor) is not listed: its hold ended at once, its GPUs free to
    second, though first may be the service the list left out."""
    assert live_nominations([HOLD], {"second"}) == []  # none left out: removed
    assert live_nominations([HOLD], {"second"}, left_out=True) == [HOLD]
    nodes = [sw_node("n-4090", "gpu-node-2")]
    second = sw_svc("second", {f"{P}gpus": "8", f"{P}priority": "100",
                               f"{P}gpu-product": "*RTX 4090*"})
    tasks = [SwarmTask("t-second", second.id, "", 1, "pending", "running", ())]
    facts = {"n-4090": R4090_F}
    plan = Planner(prefix=P).plan(nodes, [second], tasks, facts, now=1000.0,
                                  nominated=[HOLD], unkeyed=Unkeyed(services=(LEFT,)))
    (sp,) = plan.services
    assert sp.status == Status.PENDING and "held for first" in (sp.reason or ""), sp


def test_the_preempter_keeps_a_hold_whose_preemptor_is_not_listed_while_one_was_left_out(
) -> None:
    noms = Nominations(30.0)
    noms.by["first"] = (HOLD, 1000.0, 1000.0)
    noms.keep(PlacementPlan(), 1005.0, left_out=True)
    assert noms.current(1005.0) == (HOLD,)
    noms.keep(PlacementPlan(), 1031.0, left_out=True)  # settled: it ends as ever
    assert noms.current(1031.0) == ()
    noms.by["first"] = (HOLD, 1000.0, 1000.0)
    noms.keep(PlacementPlan(), 1005.0)  # none left out: gone
    assert noms.current(1005.0) == ()


def test_preemption_reads_a_record_of_a_service_not_listed_as_a_move_while_one_was_left_out(
) -> None:
    """The victim moved for a preemptor, then not listed: its move read as ended, so its
    preemptor no longer waited for it (``Preempter.moving``) and could stop another."""
    sw, _now, _m = _started()
    labels = sw.swarm_labels()
    listed = [s for s in sw.services() if s.name != "victim"]
    assert recorded(sw.services(), labels, P) == {"victim"}
    assert recorded(listed, labels, P) == set()  # none left out: gone
    assert recorded(listed, labels, P, left_out=True) == {"victim"}


def test_status_says_each_entry_the_lists_left_out() -> None:
    """As `plan` says them (``commands.plan``): before, `status` and the map's document
    said nothing of them, its services' list short of one with no word why."""
    left = Unkeyed(nodes=("the engine's answer lists node 1 of 2 with ID None",),
                   services=(LEFT,))
    doc = build_cluster(Snapshot([sw_node("n-4090", "gpu-node-2")], [], [], {},
                                 unkeyed=left), None)
    assert doc["unkeyed"] == list(left.said())
    text = render_status(doc).splitlines()
    at = text.index("left out of the engine's lists:")
    assert text[at + 1:at + 3] == [f"  {m}" for m in left.said()]
    none = build_cluster(Snapshot([sw_node("n-4090", "gpu-node-2")], [], [], {}), None)
    assert none["unkeyed"] == [] and "left out" not in render_status(none)


def test_preemption_counts_a_holder_not_listed_as_using_its_whole_node() -> None:
    """Placement keeps the holding of a service not listed while the list left one out:
    before, preemption's room read its CPU and memory as free (no reservation known,
    no task of a listed service), a preemptor fitting where that holder's task may run."""
    node = replace(sw_node("n-4090", "gpu-node-2"), cpu_milli=8000, memory_mib=16000)
    holdings = {"n-4090": {"first": Holding("first", "n-4090", R[:1], (1000,))}}
    room = Room.of([node], [], [], holdings)
    assert room.left["n-4090"] == (0, 0)  # unknown: its node's whole, as an unread spec's
    runs = SwarmTask("t-first", "id-first", "n-4090", 1, "running", "running", (),
                     cpu_milli=2000, memory_mib=4000)
    room = Room.of([node], [], [runs], holdings)  # its task counted: what it reserves
    assert room.left["n-4090"] == (6000, 12000)
