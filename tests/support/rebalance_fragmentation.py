"""Fractional holders on two nodes for the fragmentation policy.

First written in tests/test_rebalance_fragmentation.py."""

from __future__ import annotations

from collections.abc import Mapping

from support.rebalance import CFG, F1, FACTS, U2, P, feed, node, running, service
from swarmgpu.allocator.fragmentation import TypicalTask
from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.placement import read_ledger
from swarmgpu.manager.rebalance.context import Inputs
from swarmgpu.manager.rebalance.moves import Move
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.signals import Signals
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

U1 = [g.uuid for g in F1.gpus]  # gpu-node-1 (DGX A100): GPU 0 runs MIG
HALF = {f"{P}gpu-fraction": "0.5"}
WHOLE = {f"{P}gpus": "1"}


def two_half_used(a_labels: Mapping[str, str] | None = None,
                  b_labels: Mapping[str, str] | None = None,
                  ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask]]:
    """a holds half of gpu-node-1 GPU 1, b half of gpu-node-2 GPU 0; w (one whole GPU) is
    annotated too, so the workload has whole-GPU tasks that the two halves hinder."""
    n1 = {f"{P}assign.a": f"{U1[1]}@500", f"{P}service.a": "true"}
    n2 = {f"{P}assign.b": f"{U2[0]}@500", f"{P}service.b": "true"}
    nodes = [node("n1", "gpu-node-1", n1), node("n2", "gpu-node-2", n2)]
    svcs = [service("a", {**HALF, **(a_labels or {})}),
            service("b", {**HALF, **(b_labels or {})}), service("w", WHOLE)]
    return nodes, svcs, [running("a", "n1"), running("b", "n2")]


def plan(nodes: list[SwarmNode], svcs: list[SwarmService], tasks: list[SwarmTask],
         cfg: RebalanceConfig = CFG, workload: tuple[TypicalTask, ...] | None = None,
         moving: frozenset[str] = frozenset(),
         held: Mapping[tuple[str, str], tuple[str, int]] | None = None,
         held_shares: Mapping[tuple[str, str], int] | None = None,
         stale: frozenset[str] = frozenset()) -> list[Move]:
    """``held``: the GPUs preemptions hold (``Inputs.held``); ``held_shares``: of those,
    stopping tasks' shares (``Inputs.held_shares``); ``stale``: ``Inputs.stale``."""
    sig = Signals(cfg)
    times = [float(t) for t in range(13)]
    feed(sig, nodes, times, {})  # every GPU idle and known
    inp = Inputs(nodes, svcs, tasks, FACTS, read_ledger(nodes, P), sig.gpus, sig.nodes, cfg,
                 times[-1], (), P, workload, moving, held=held or {},
                 held_shares=held_shares or {}, stale=stale)
    return plan_moves(inp).moves
