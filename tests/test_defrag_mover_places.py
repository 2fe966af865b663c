"""Defrag's search asks whether a holding can go elsewhere on the GPUs its move may
land on (``policies/defrag._movers_room``): held ones counted used (stop 76), and those
``Context.find_target`` never takes: a GPU hot, or its metrics unknown, and every GPU of
a node whose metrics are unknown. Counted free, the search took a holding for movable
where its move then found no target, and plans whose tasks had nowhere to go used up
``MAX_TRIES`` before a workable one was tried. Pure: real facts and metrics pages,
``plan_moves``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from support.defrag_cluster import RTX, defrag_cluster
from support.rebalance import CFG, P, page
from support.rebalance import service as rebalance_service

from swarmgpu.manager.placement import ClusterAllocator, read_ledger
from swarmgpu.manager.rebalance.context import Context, Inputs
from swarmgpu.manager.rebalance.moves import Trigger
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.policies.defrag import Defrag
from swarmgpu.manager.rebalance.scrape import judge
from swarmgpu.manager.rebalance.signals import Signals


def _inputs(util: Mapping[int, float], unread: Set[str] = frozenset(),
            pending: Sequence[str] = ("p",), gpus: str = "2", pinned: bool = False
            ) -> Inputs:
    """gpu-node-2..5 (two RTX 4090s each): a<k> (1 GPU, 4090s only) on GPU 0, GPU 1 free
    at ``util`` (by GPU index); gpu-node-6: b and c (1 GPU each, any model); gpu-node-1:
    7 whole A100s free. No metrics page is read of the nodes in ``unread``. The
    ``pending`` services each want ``gpus`` RTX 4090s. ``pinned``: a<k> constrained to
    its own node (``node.hostname==gpu-node-<k>``)."""
    nodes, svcs, tasks, facts = defrag_cluster(
        [rebalance_service(p, {f"{P}gpus": gpus, **RTX}) for p in pending], pinned)
    sig = Signals(CFG)
    ledger = read_ledger(nodes, P)
    for t in (float(t) for t in range(13)):
        scr = {n.id: judge(n, "http://x/metrics", page(
            facts[n.id], util if n.id not in ("n1", "n6") else {}), t)
            for n in nodes if n.id not in unread}
        sig.observe(scr, facts, {n.id: n.hostname for n in nodes}, ledger, t)
    return Inputs(nodes, svcs, tasks, facts, ledger, sig.gpus, sig.nodes, CFG, 12.0,
                  list(pending), P)


def _defrag(util: Mapping[int, float], unread: Set[str] = frozenset(), pinned: bool = False
            ) -> list[tuple[str, str, str]]:
    inp = _inputs(util, unread, pinned=pinned)
    return sorted((m.service, m.source_node, m.target_node) for m in plan_moves(inp).moves
                  if m.trigger is Trigger.DEFRAG)


def test_defrag_counts_no_hot_gpu_as_a_movers_place() -> None:
    """GPU 1 of gpu-node-2..5 busy (95%, a process outside Swarm): no target of a<k>'s
    move. The search counted them a<k>'s other place, so the four one-move plans used
    up every try and the workable one (b and c off gpu-node-6, onto gpu-node-1's A100s)
    was never tried."""
    assert _defrag({1: 95.0}) == [("b", "n6", "n1"), ("c", "n6", "n1")]
    (m,) = _defrag({})  # GPU 1 idle: one move off gpu-node-2 is cheapest, beside it
    assert m[:2] == ("a2", "n2")


def test_defrag_counts_no_gpu_of_a_node_without_metrics_as_a_movers_place() -> None:
    """No metrics read of gpu-node-2..5: their GPUs are no target of any move (not
    verified free), so a<k> cannot move; b and c make room on gpu-node-6."""
    got = _defrag({}, unread={"n2", "n3", "n4", "n5"})
    assert got == [("b", "n6", "n1"), ("c", "n6", "n1")]


def test_defrag_counts_no_node_a_movers_own_rules_refuse_as_its_place() -> None:
    """a<k> constrained to its own node: Swarm runs its task nowhere else, so its move
    finds no target. The search asked by demand alone, took a<k> for movable onto GPU 1
    of another node, and the four one-move plans used up every try; b and c make room
    on gpu-node-6 (any free GPU)."""
    assert [m[:2] for m in _defrag({}, pinned=True)] == [("b", "n6"), ("c", "n6")]


def test_defrag_builds_the_movers_room_once_a_pass_while_no_plan_is_made() -> None:
    """Three pending services no plan makes room for (3 RTX 4090s: no node has them):
    the movers' room is built once for all, not again for each (a whole allocator
    each, most of defrag's time on a big cluster where pending requests find no plan);
    each pending request's own room is counted on the pass's kept allocator and taken
    back (``Context.trial``: before stop 78, one built for each)."""
    ctx = Context.build(_inputs({}, pending=("p", "q", "r"), gpus="3"))
    built: list[object] = []
    real = ctx.allocator

    def counting(*args: object) -> ClusterAllocator:
        built.append(args)
        return real(*args)  # type: ignore[arg-type]

    ctx.allocator = counting  # type: ignore[method-assign]
    Defrag(CFG.defrag).propose(ctx)
    assert not ctx.moves
    assert len(built) == 1 + 1
