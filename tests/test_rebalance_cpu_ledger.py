"""The rebalancer's ledger and CPU, as placement and Swarm count them. Pure.

- The fragmentation policy searches on an allocator that counts what the nodes' tasks
  reserve, with each share's own reservation: a node with GPUs free but no CPU left is
  not chosen (before, the search chose it and the last check dropped it, with every
  move after it).
- A fragmentation move the last check drops is searched again, without that target.
- The ledger is the one placement's writes of this cycle leave (those that landed:
  tests/test_rebalance_landed.py): a move onto GPUs placed in this same cycle is
  refused at planning, not at the mover's start.
- A holding whose task does not exist yet reserves its service's CPU for the rebalancer,
  as it does for placement.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from support.forged import RecordingSwarm, sw_svc
from support.rebalance import CFG, FACTS, U2, P, cluster, feed, node, page, running, service
from support.rebalance_fragmentation import U1, plan, two_half_used

from swarmgpu.core.config import Config
from swarmgpu.manager.placement import NodeWrites, PlacementPlan, Planner, read_ledger
from swarmgpu.manager.placement.records import ReplicaPlacement, ServicePlan, Status
from swarmgpu.manager.rebalance.context import Inputs
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.scrape import judge
from swarmgpu.manager.rebalance.signals import Signals
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask


def _cpu(s: SwarmService, milli: int) -> SwarmService:
    res = {"TaskTemplate": {"Resources": {"Reservations": {"NanoCPUs": milli * 10**6}}}}
    return dataclasses.replace(s, spec={"Name": s.name, **res})


def _task(name: str, nid: str, milli: int) -> SwarmTask:
    return dataclasses.replace(running(name, nid), cpu_milli=milli)


def _cpu_full_n1() -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """``two_half_used`` with 8 CPUs a node, a and b reserving 1 each, and c (no GPU)
    reserving the 7 gpu-node-1 has left beside a."""
    nodes, svcs, _tasks = two_half_used()
    nodes = [dataclasses.replace(n, cpu_milli=8000) for n in nodes]
    c = dataclasses.replace(service("c", {}), constraints=())
    svcs = [_cpu(svcs[0], 1000), _cpu(svcs[1], 1000), svcs[2], c]
    tasks = [_task("a", "n1", 1000), _task("b", "n2", 1000), _task("c", "n1", 7000)]
    return nodes, svcs, tasks


def test_fragmentation_does_not_choose_a_node_without_the_cpu_a_share_reserves() -> None:
    """b would join a on gpu-node-1 (the search's order), but gpu-node-1 has no CPU left
    for b's task: a joins b on gpu-node-2 instead."""
    assert [(m.service, m.target_host) for m in plan(*two_half_used())] == \
        [("b", "gpu-node-1")]
    assert [(m.service, m.target_host, m.target_uuids) for m in plan(*_cpu_full_n1())] == \
        [("a", "gpu-node-2", (U2[0],))]


def test_a_fragmentation_move_the_last_check_drops_is_searched_again() -> None:
    """b would join a on gpu-node-1 GPU 1 (20% busy), which b's own load (60%) would
    take to hotspot.clear_pct (75%): dropped; e, whose GPU is idle, joins a there
    instead (before, the pass ended at the first drop)."""
    n1 = {f"{P}assign.a": f"{U1[1]}@500", f"{P}service.a": "true"}
    n2 = {f"{P}assign.b": f"{U2[0]}@500", f"{P}service.b": "true",
          f"{P}assign.e": f"{U2[1]}@500", f"{P}service.e": "true"}
    nodes = [node("n1", "gpu-node-1", n1), node("n2", "gpu-node-2", n2)]
    half = {f"{P}gpu-fraction": "0.5"}
    svcs = [service(x, half) for x in "abe"] + [service("w", {f"{P}gpus": "1"})]
    tasks = [running("a", "n1"), running("b", "n2"), running("e", "n2")]
    sig = Signals(CFG)
    times = [float(t) for t in range(13)]
    feed(sig, nodes, times, {t: {0: 60.0, 1: 0.0} for t in times}, util1={1: 20.0})
    inp = Inputs(nodes, svcs, tasks, FACTS, read_ledger(nodes, P), sig.gpus, sig.nodes,
                 CFG, times[-1], (), P)
    prop = plan_moves(inp)
    assert [(m.service, m.target_host, m.target_uuids) for m in prop.moves] == \
        [("e", "gpu-node-1", (U1[1],))]
    assert any(n.startswith("fragmentation: b not moved to gpu-node-1 GPU 1: with its load")
               for n in prop.notes), prop.notes


def _hot_targets(nodes: list[SwarmNode], svcs: list[SwarmService], tasks: list[SwarmTask],
                 placed: Mapping[str, tuple[str, ...]] | None = None
                 ) -> list[tuple[str, str]]:
    sig = Signals(CFG)
    times = [float(t) for t in range(13)]
    feed(sig, nodes, times, {float(t): {0: 97.0} for t in range(13)})
    prop = plan_moves(Inputs(nodes, svcs, tasks, FACTS, read_ledger(nodes, P), sig.gpus,
                             sig.nodes, CFG, times[-1], (), P, placed=placed or {}))
    return [(m.service, m.target_host) for m in prop.moves]


def test_a_holding_whose_task_does_not_exist_yet_reserves_its_cpu() -> None:
    """q holds gpu-node-1 GPU 1 (placed in an earlier cycle; Swarm has not made its task
    yet) and reserves 3.5 of its 4 CPUs: a (1 CPU) is not moved there."""
    nodes, svcs, tasks = cluster()
    n1 = {f"{P}assign.q": U1[1], f"{P}service.q": "true"}
    nodes = [dataclasses.replace(nodes[0], labels=n1, cpu_milli=4000), nodes[1]]
    q = _cpu(service("q", {f"{P}gpus": "1"}), 3500)
    svcs = [*(_cpu(s, 1000) for s in svcs), q]
    assert _hot_targets(nodes, svcs, tasks) == []
    # Once q's task runs, the task's own reservation counts (not twice).
    assert _hot_targets(nodes, svcs, [*tasks, _task("q", "n1", 3500)]) == []
    roomy = [dataclasses.replace(nodes[0], cpu_milli=5000), nodes[1]]
    assert _hot_targets(roomy, svcs, [*tasks, _task("q", "n1", 3500)]) == \
        [("a", "gpu-node-1")]
    assert _hot_targets(roomy, svcs, tasks) == [("a", "gpu-node-1")]
    # Placed this cycle as well (``Inputs.placed``): counted once.
    assert _hot_targets(roomy, svcs, tasks, {"q": ("n1",)}) == [("a", "gpu-node-1")]


def test_gpus_placed_in_this_cycle_are_no_target(tmp_path: Path) -> None:
    """The daemon's step, after placement: q was placed this cycle on gpu-node-1's seven
    whole GPUs (its ledger entry is in the plan's writes, not in the snapshot). a, on a
    hot GPU of gpu-node-2, has nowhere to go: no move is proposed (before, a move onto
    one of q's GPUs was proposed, and refused only when the mover started it)."""
    from swarmgpu.manager.cycle.rebalance import Rebalancer
    from swarmgpu.manager.cycle.session import CycleSession
    from swarmgpu.manager.daemon import Daemon
    from swarmgpu.manager.nodes.sync import Snapshot

    nodes, svcs, tasks = cluster()
    sw = RecordingSwarm(nodes, [sw_svc(s.name, s.labels) for s in svcs], tasks)
    cfg = Config(state_dir=str(tmp_path), rebalance=dataclasses.replace(
        CFG, dry_run=True, trust_unauthenticated_metrics=True, policies="hotspot"))
    rb = Rebalancer(Daemon(cfg, swarm=sw))  # type: ignore[arg-type]
    whole = [g for g in FACTS["n1"].gpus if not g.mig_enabled]
    q = ServicePlan("q", "id-q", None, "", Status.PLACED, "Bound", (ReplicaPlacement(
        "n1", "gpu-node-1", tuple(g.index for g in whole), tuple(g.uuid for g in whole),
        (1000,) * len(whole)),), new=True)
    plan = PlacementPlan(services=[q], node_set={"n1": {
        f"{P}assign.q": ",".join(g.uuid for g in whole), f"{P}service.q": "true"}})
    plan.landed = NodeWrites(set=dict(plan.node_set))  # as placement's writer made them

    def cycle(at: float, with_q: bool) -> list[tuple[str, str]]:
        session = CycleSession(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {},
                                        swarm_labels=sw.swarm_labels(), taken_at=at))
        session.facts = dict(FACTS)
        session.scrapes = {n.id: judge(n, "http://x/metrics", page(
            FACTS[n.id], {0: 97.0} if n.id == "n2" else {}), at) for n in nodes}
        session.placement = plan if with_q else PlacementPlan()
        session.planner = Planner(prefix=P)
        rb.run(session)
        assert rb.last is not None
        return [(m.service, m.target_host) for m in rb.last.moves]

    for t in range(12):
        cycle(float(t), with_q=True)
    assert cycle(12.0, with_q=True) == []
    assert cycle(13.0, with_q=False) == [("a", "gpu-node-1")]  # the plan's alone
