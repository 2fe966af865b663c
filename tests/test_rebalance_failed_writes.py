"""A placement whose write did not land refuses moves for its cycle only. Pure.

The rebalancer counts this cycle's placements (``placed_of``: the plan's, landed or not)
against a move's target, and the mover admits on the snapshot's ledger: both can only
refuse more. Neither is remembered: ``placed`` is read from each cycle's plan and the
ledger from each cycle's snapshot, and a refused move leaves no back-off. So a write that
failed does not refuse a tenant's moves forever: the next cycle judges afresh (while
placement keeps choosing that node for the service, its CPU counts there, as placement's
own allocator counts it).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from support.forged import RecordingSwarm, reserving, sw_svc
from support.rebalance import CFG, P, cluster, hot_cycle

from swarmgpu.core.config import Config
from swarmgpu.manager.placement import NodeWrites, PlacementPlan
from swarmgpu.manager.placement.records import ReplicaPlacement, ServicePlan, Status


def test_a_failed_placement_write_refuses_a_move_for_its_cycle_only(tmp_path: Path) -> None:
    """gpu-node-1 has 4 CPUs; q (3.5 reserved, no GPU) was placed there this cycle but
    its write did not land (``plan.landed`` empty). a (1 CPU), on a hot GPU of
    gpu-node-2, is not moved there while the plan places q there; the first cycle whose
    plan does not, the move is proposed and admitted again (dry-run: its outcome said)."""
    from swarmgpu.manager.cycle.rebalance import Rebalancer
    from swarmgpu.manager.daemon import Daemon
    from swarmgpu.manager.rebalance.moves import Outcome

    nodes, svcs, tasks = cluster()
    nodes = [dataclasses.replace(nodes[0], cpu_milli=4000, memory_mib=65536), nodes[1]]
    q = reserving(sw_svc("q", {f"{P}gpus": "0"}), 3500)
    services = [*(reserving(sw_svc(s.name, s.labels), 1000) for s in svcs), q]
    tasks = [dataclasses.replace(t, cpu_milli=1000) for t in tasks]
    sw = RecordingSwarm(nodes, services, tasks)
    cfg = Config(state_dir=str(tmp_path), rebalance=dataclasses.replace(
        CFG, dry_run=True, trust_unauthenticated_metrics=True, policies="hotspot"))
    rb = Rebalancer(Daemon(cfg, swarm=sw))  # type: ignore[arg-type]
    placed = ServicePlan("q", q.id, None, "", Status.PLACED, "Bound",
                         (ReplicaPlacement("n1", "gpu-node-1", (), (), ()),), new=True)
    failed = PlacementPlan(services=[placed])
    failed.landed = NodeWrites()  # its write failed: nothing landed

    def cycle(at: float, plan: PlacementPlan) -> list[tuple[str, str]]:
        return hot_cycle(rb, sw, sw.nodes(), at, plan)

    for t in range(12):
        cycle(float(t), failed)
    assert cycle(12.0, failed) == []  # q's CPU counted on gpu-node-1 (placed_of)
    assert cycle(13.0, failed) == []  # placement still means q there: still counted
    assert cycle(14.0, PlacementPlan()) == [("a", "gpu-node-1")]  # no memory of it
    said = [o for o in rb.mover.outcomes.recent if o.service == "a"]
    assert [o.outcome for o in said] == [Outcome.DRY_RUN], said  # admitted on the snapshot
