"""Rebalancing, pure: a move's target judged as the pass's other moves and Swarm will
leave it. Each policy's move is checked against the load (utilisation) and the share the
moves proposed before it in the same pass already put on that target."""

from __future__ import annotations

import dataclasses

from support.rebalance import CFG, F1, FACTS, U2, P, feed, node, running, service
from support.rebalance_fragmentation import two_half_used

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.placement import read_ledger
from swarmgpu.manager.rebalance.context import Inputs
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.signals import Signals
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

# Every budget lets two moves through: the policy alone must keep them off one GPU.
TWO = dataclasses.replace(CFG, max_moves_per_cycle=2, max_moves_per_node=2)
COOL = 1  # gpu-node-1's only GPU below hotspot.clear_pct (GPU 0 is MIG; the rest hot)
UTIL1 = {i: (40.0 if i == COOL else 95.0) for i in range(len(F1.gpus))}


def two_hot() -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """gpu-node-2: GPU 0 shared by a (0.2) and b (0.7), GPU 1 by c (0.2) and d (0.7)."""
    n2: dict[str, str] = {}
    for svc, gpu, milli in (("a", 0, 200), ("b", 0, 700), ("c", 1, 200), ("d", 1, 700)):
        n2 |= {f"{P}assign.{svc}": f"{U2[gpu]}@{milli}", f"{P}service.{svc}": "true"}
    nodes = [node("n1", "gpu-node-1", {}), node("n2", "gpu-node-2", n2)]
    svcs = [service(s, {f"{P}gpu-fraction": f}) for s, f in
            (("a", "0.2"), ("b", "0.7"), ("c", "0.2"), ("d", "0.7"))]
    return nodes, svcs, [running(s.name, "n2") for s in svcs]


def planned(nodes: list[SwarmNode], svcs: list[SwarmService], tasks: list[SwarmTask],
            util2: dict[int, float], cfg: RebalanceConfig = TWO,
            util1: dict[int, float] | None = None) -> tuple[Signals, Inputs]:
    sig = Signals(cfg)
    times = [float(t) for t in range(13)]
    feed(sig, nodes, times, {t: util2 for t in times}, util1=util1 or UTIL1)
    return sig, Inputs(nodes, svcs, tasks, FACTS, read_ledger(nodes, P), sig.gpus,
                       sig.nodes, cfg, times[-1], (), P)


def test_two_hot_spots_do_not_both_move_onto_one_cool_gpu() -> None:
    """Each hot GPU gives up its smallest holder (about 20 points of util each: 90% split
    0.2 : 0.7). gpu-node-1's one cool GPU (40%) takes one (60%, below clear_pct 75);
    before, the second was judged against the 40% alone and took it too (80%)."""
    nodes, svcs, tasks = two_hot()
    _sig, inp = planned(nodes, svcs, tasks, {0: 90.0, 1: 90.0})
    prop = plan_moves(inp)
    (m,) = prop.moves  # (the hotter GPU first; here by UUID: c's)
    assert m.service in ("a", "c") and m.target_uuids == (F1.gpus[COOL].uuid,)
    other, gpu = ("c", 1) if m.service == "a" else ("a", 0)
    assert f"hot spot gpu-node-2 GPU {gpu}: no verified-free target for {other}" \
        in prop.notes, prop.notes


def test_two_idle_gpus_do_not_both_consolidate_onto_one_busy_shared_gpu() -> None:
    """gpu-node-2's GPUs 0 and 1 idle (10%), each with one 0.3 share (x, y): each is
    freed by moving its holder onto a partly used GPU. gpu-node-1's one such GPU (z's,
    60%) takes one (70%); before, each statement was judged against its 60% alone and
    both went there (80%, above clear_pct 75)."""
    n2: dict[str, str] = {}
    for svc, gpu in (("x", 0), ("y", 1)):
        n2 |= {f"{P}assign.{svc}": f"{U2[gpu]}@300", f"{P}service.{svc}": "true"}
    n1 = {f"{P}assign.z": f"{F1.gpus[COOL].uuid}@300", f"{P}service.z": "true"}
    nodes = [node("n1", "gpu-node-1", n1), node("n2", "gpu-node-2", n2)]
    svcs = [service(s, {f"{P}gpu-fraction": "0.3"}) for s in ("x", "y", "z")]
    tasks = [running("x", "n2"), running("y", "n2"), running("z", "n1")]
    cfg = dataclasses.replace(TWO, policies="consolidation", consolidation=dataclasses.replace(
        TWO.consolidation, frag_pct=15.0))
    _sig, inp = planned(nodes, svcs, tasks, {i: 10.0 for i in range(len(U2))}, cfg,
                        util1={**UTIL1, COOL: 60.0})
    moves = plan_moves(inp).moves
    assert [m.target_uuids for m in moves] == [(F1.gpus[COOL].uuid,)], moves


def test_a_fragmentation_move_counts_the_load_of_the_share_it_moves() -> None:
    """b (half of gpu-node-2 GPU 0, 40% there) would join a on gpu-node-1 GPU 1 (50%):
    90% with b's load, above clear_pct 75. The search judges each GPU by its reading
    alone; before, the move was proposed."""
    nodes, svcs, tasks = two_half_used()
    cfg = dataclasses.replace(TWO, policies="fragmentation")
    _sig, inp = planned(nodes, svcs, tasks, {0: 40.0}, cfg,
                        util1={i: 50.0 if i == 1 else 5.0 for i in range(len(F1.gpus))})
    prop = plan_moves(inp)
    assert prop.moves == []
    assert any(n.startswith("fragmentation: b not moved to gpu-node-1 GPU 1: with its load "
                            "(about 40 points)") for n in prop.notes), prop.notes
