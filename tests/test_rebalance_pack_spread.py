"""Rebalancing, pure: the consolidation (idle clean-up) and spread policies.

Real inputs end to end: GPU facts from the `topo -m` captures of tests/support/gpu_nodes.py,
metrics rendered as the agent's Prometheus page and parsed back (``judge``), windows
from :class:`Signals`, then ``plan_moves`` and the mover's ``admit`` budget.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from support.gpu_nodes import DGX_A100, RTX4090

from swarmgpu.agent.metrics import render_metrics
from swarmgpu.core.config import RebalanceConfig
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.rebalanceconfig import ConsolidationConfig, HotspotConfig
from swarmgpu.core.samples import GpuSample
from swarmgpu.manager.placement import (
    ServicePlan,
    env_template,
    gate_constraint,
    read_ledger,
)
from swarmgpu.manager.rebalance.admission import admit
from swarmgpu.manager.rebalance.attribution import service_states
from swarmgpu.manager.rebalance.context import Inputs
from swarmgpu.manager.rebalance.moves import Move, Trigger
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.scrape import NodeScrape, judge
from swarmgpu.manager.rebalance.signals import Signals, fragmentation_pct
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
# Short windows; consolidation.frag_pct 15: one 0.3 share on each of two of eight GPUs
# already leaves 19% of gpu-node-2's free share on partly used GPUs.
CFG = RebalanceConfig(dry_run=False, hotspot=HotspotConfig(window_s=5),
                      consolidation=ConsolidationConfig(idle_window_s=5, frag_window_s=5,
                                                        frag_pct=15.0),
                      max_gap_s=2, min_samples=3, cooldown_s=300, policies="consolidation")
SPREAD = dataclasses.replace(CFG, policies="spread")
F1, F2 = DGX_A100.facts(), RTX4090.facts()


def _renamed(f: NodeFacts, host: str, tag: str) -> NodeFacts:
    """Another machine of the same model: own hostname, own GPU UUIDs."""
    gpus = tuple(dataclasses.replace(g, uuid=g.uuid[:-4] + tag) for g in f.gpus)
    return dataclasses.replace(f, hostname=host, gpus=gpus)


F3 = _renamed(F2, "gpu-node-3", "ee03")
F4 = _renamed(F2, "gpu-node-4", "ee04")
FACTS = {"n1": F1, "n2": F2, "n3": F3, "n4": F4}
U1 = [g.uuid for g in F1.gpus]  # U1[0] is the MIG GPU of the DGX
U2 = [g.uuid for g in F2.gpus]
U3 = [g.uuid for g in F3.gpus]
HOSTS = {n: f.hostname for n, f in FACTS.items()}
Util = Callable[[float, str, int], float | None]  # (time, node id, GPU index) -> util


def node(nid: str, labels: Mapping[str, str], availability: str = "active") -> SwarmNode:
    return SwarmNode(nid, HOSTS[nid], "10.0.0." + nid[-1], "worker", "ready", availability,
                     dict(labels), {}, 1, {}, {})


def holds(svc: str, uuid: str, milli: int | None = None) -> dict[str, str]:
    """Ledger + gate labels of a node holding ``uuid`` (a share, or the whole GPU)."""
    return {f"{P}assign.{svc}": uuid if milli is None else f"{uuid}@{milli}",
            f"{P}service.{svc}": "true"}


def service(name: str, labels: Mapping[str, str]) -> SwarmService:
    return SwarmService(f"id-{name}", name, dict(labels), (gate_constraint(P, name),),
                        (env_template(P),), "replicated", 1, None, 1)


def frac(name: str, f: float, **extra: str) -> SwarmService:
    return service(name, {f"{P}gpu-fraction": str(f), **{P + k: v for k, v in extra.items()}})


def running(nodes: Sequence[SwarmNode]) -> list[SwarmTask]:
    """One running task per holding in the nodes' ledgers (a converged swarm)."""
    return [SwarmTask(f"t-{svc}", f"id-{svc}", nid, 1, "running", "running", ())
            for svc, by in read_ledger(nodes, P).items() for nid in by]


def page(f: NodeFacts, util: Callable[[int], float | None]) -> str:
    samples = [GpuSample(uuid=g.uuid, index=g.index, util_pct=util(g.index), fb_used_mib=1000,
                         fb_free_mib=g.memory_mib - 1000, mem_copy_util_pct=None, temp_c=None,
                         power_w=None)
               for g in f.gpus if not g.mig_enabled]
    return render_metrics(f, samples).decode()


def idle(_t: float, _n: str, _i: int) -> float | None:
    return 5.0


def observe(nodes: Sequence[SwarmNode], times: Sequence[float], util: Util = idle,
            broken: Callable[[float, str], bool] = lambda t, n: False,
            cfg: RebalanceConfig = CFG, sig: Signals | None = None) -> tuple[Signals, list[str]]:
    """Scrape (rendered agent pages, parsed back) at each time; the windows after."""
    sig = sig or Signals(cfg)
    warnings: list[str] = []
    ledger = read_ledger(nodes, P)
    for t in times:
        scr: dict[str, NodeScrape] = {}
        for n in nodes:
            text = page(FACTS[n.id], lambda i, n=n, t=t: util(t, n.id, i))  # type: ignore[misc]
            if broken(t, n.id):
                text = "<html><body>502 Bad Gateway</body></html>\n"
            scr[n.id] = judge(n, "http://x/metrics", text, t)
        warnings = sig.observe(scr, {n.id: FACTS[n.id] for n in nodes},
                               {n.id: n.hostname for n in nodes}, ledger, t)
    return sig, warnings


def plan(sig: Signals, nodes: list[SwarmNode], svcs: list[SwarmService], now: float,
         cfg: RebalanceConfig = CFG, tasks: list[SwarmTask] | None = None) -> list[Move]:
    inp = Inputs(nodes, svcs, running(nodes) if tasks is None else tasks,
                 {n.id: FACTS[n.id] for n in nodes}, read_ledger(nodes, P), sig.gpus,
                 sig.nodes, cfg, now, (), P)
    return plan_moves(inp).moves


T = [float(t) for t in range(13)]  # 13 one-second scrapes: every 5 s window is covered


# --- consolidation / idle clean-up ------------------------------------------------------

def pack_cluster(a_milli: int = 300, b_milli: int = 300, c_milli: int = 500,
                 **a_extra: str) -> tuple[list[SwarmNode], list[SwarmService]]:
    """gpu-node-2: a on GPU 0, b on GPU 1 (both idle); gpu-node-1: c on GPU 1 (partly used)."""
    n2 = {**holds("a", U2[0], a_milli), **holds("b", U2[1], b_milli)}
    nodes = [node("n1", holds("c", U1[1], c_milli)), node("n2", n2)]
    svcs = [frac("a", a_milli / 1000, **a_extra), frac("b", b_milli / 1000),
            frac("c", c_milli / 1000)]
    return nodes, svcs


def test_consolidation_packs_an_idle_share_onto_a_partly_used_gpu() -> None:
    nodes, svcs = pack_cluster()
    on_n2 = {s: h["n2"] for s, h in read_ledger(nodes, P).items() if "n2" in h}
    assert round(fragmentation_pct(F2, on_n2)) == 19  # 1400 of 7400 free milli
    sig, warnings = observe(nodes, T)
    assert warnings == []
    moves = plan(sig, nodes, svcs, T[-1])
    # a goes onto c's half-used GPU (never onto a whole free GPU: that would not pack);
    # then that GPU has 200 milli left, too little for b, which stays.
    assert [(m.service, m.trigger, m.source_host, m.target_host, m.target_uuids,
             m.target_milli) for m in moves] == \
        [("a", Trigger.CONSOLIDATION, "gpu-node-2", "gpu-node-1", (U1[1],), (300,))]
    m = moves[0]
    assert m.window_s == CFG.consolidation.idle_window_s
    assert "gpu-node-2 GPU 0 under 15% util for 5s" in m.reason
    assert "fragmented" in m.reason and m.gain == "frees gpu-node-2 GPU 0 as a whole GPU"
    # The service state of a service with a consolidation move proposed: IdleCleanup;
    # one with a move in flight: Rebalancing; the rest keep their placement state.
    plans = [ServicePlan(s.name, s.id, None, "", "placed", "Active") for s in svcs]
    assert service_states(plans, {"c"}, [x.service for x in moves
                                         if x.trigger is Trigger.CONSOLIDATION]) == \
        {"a": "IdleCleanup", "b": "Active", "c": "Rebalancing"}


def test_consolidation_moves_every_holder_or_none() -> None:
    # gpu-node-2 GPU 0 is shared by a (300) and b (600); c's GPU on gpu-node-1 has 500
    # free: a would fit, b not, so moving a alone would not free the GPU: no move.
    cfg = dataclasses.replace(CFG, consolidation=dataclasses.replace(  # 100 of 7100 free
        CFG.consolidation, frag_pct=1.0))  # milli partial: 1.4%
    n2 = {**holds("a", U2[0], 300), **holds("b", U2[0], 600)}
    nodes = [node("n1", holds("c", U1[1], 500)), node("n2", n2)]
    svcs = [frac("a", 0.3), frac("b", 0.6), frac("c", 0.5)]
    sig, _ = observe(nodes, T, cfg=cfg)
    assert sig.nodes["n2"].frag.name == "TRUE" and sig.gpus[("n2", U2[0])].idle.name == "TRUE"
    assert plan(sig, nodes, svcs, T[-1], cfg) == []
    # With a second half-used GPU (d on GPU 2) both fit: both are proposed, together.
    nodes = [node("n1", {**holds("c", U1[1], 500), **holds("d", U1[2], 300)}), node("n2", n2)]
    svcs.append(frac("d", 0.3))
    sig, _ = observe(nodes, T, cfg=cfg)
    moves = plan(sig, nodes, svcs, T[-1], cfg)
    assert sorted((m.service, m.target_uuids[0]) for m in moves) == [("a", U1[1]), ("b", U1[2])]
    assert {m.trigger for m in moves} == {Trigger.CONSOLIDATION}
    # The budget lets one start per cycle (and one per node): the other waits its turn.
    ok, refused = admit(moves, [], {s.name: s for s in svcs}, running(nodes),
                        read_ledger(nodes, P), cfg, P, T[-1])
    assert len(ok) == 1 and len(refused) == 1 and "per cycle" in refused[0][1]
    wide = dataclasses.replace(cfg, max_moves_per_cycle=2)
    ok, refused = admit(moves, [], {s.name: s for s in svcs}, running(nodes),
                        read_ledger(nodes, P), wide, P, T[-1])
    assert len(ok) == 1 and "per node" in refused[0][1]  # both leave gpu-node-2


def test_consolidation_short_dip_and_busy_gpu_move_nothing() -> None:
    nodes, svcs = pack_cluster()
    busy: Util = lambda t, n, i: 60.0 if n == "n2" and i in (0, 1) else 5.0  # noqa: E731

    def dip(t: float, n: str, i: int) -> float | None:
        return 5.0 if t >= 10 else busy(t, n, i)  # idle for the last 3 s of a 5 s window

    for util in (busy, dip):
        sig, _ = observe(nodes, T, util)
        assert sig.gpus[("n2", U2[0])].idle.name != "TRUE"
        assert plan(sig, nodes, svcs, T[-1]) == [], util
    # Idle for the whole window: the move comes.
    late: Util = lambda t, n, i: 5.0 if t >= 6 else busy(t, n, i)  # noqa: E731
    sig, _ = observe(nodes, T, late)
    assert [m.service for m in plan(sig, nodes, svcs, T[-1])] == ["a"]


def test_consolidation_waits_for_the_fragmentation_window_too() -> None:
    # The ledger became fragmented only 2 s ago (b just placed): idle GPUs alone move
    # nothing until the node has been fragmented for frag_window_s.
    nodes, svcs = pack_cluster()
    before = [nodes[0], node("n2", holds("a", U2[0], 300))]
    sig, _ = observe(before, T[:10])  # 700 of 7700 free milli partial: 9% < 15%
    assert sig.nodes["n2"].frag.name == "FALSE"
    sig, _ = observe(nodes, T[10:], sig=sig)
    assert sig.nodes["n2"].frag.name != "TRUE"
    assert plan(sig, nodes, svcs, T[-1]) == []
    sig, _ = observe(nodes, [float(t) for t in range(13, 19)], sig=sig)
    assert sig.nodes["n2"].frag.name == "TRUE"
    assert [m.service for m in plan(sig, nodes, svcs, 18.0)] == ["a"]


def test_consolidation_respects_opt_out_unknown_targets_and_hot_targets() -> None:
    nodes, svcs = pack_cluster(rebalance="never")
    sig, _ = observe(nodes, T)
    assert [m.service for m in plan(sig, nodes, svcs, T[-1])] == ["b"]  # a opted out
    nodes, svcs = pack_cluster()
    # c's GPU (the only partly used target) is busy: adding a would heat it past clear.
    warm: Util = lambda t, n, i: 72.0 if n == "n1" and i == 1 else 5.0  # noqa: E731
    sig, _ = observe(nodes, T, warm)
    assert plan(sig, nodes, svcs, T[-1]) == []
    # gpu-node-1's exporter serves garbage: it is UNKNOWN, so never a target.
    sig, warnings = observe(nodes, T, broken=lambda t, n: n == "n1" and t >= 10)
    assert any(w.startswith("gpu-node-1: metrics at http://x/metrics unusable") for w in warnings)
    assert plan(sig, nodes, svcs, T[-1]) == []


def test_consolidation_never_swaps_two_idle_holders_between_their_gpus() -> None:
    """a idles alone on gpu-node-2 GPU 0, d alone on gpu-node-3 GPU 0 (both nodes
    fragmented): a packs onto d's GPU, and then d stays (a GPU a move lands on is not
    freed). Before, d was judged by the holders read before a's move and went to a's
    GPU (its source, reserved, looked partly used): a swap that freed no GPU, proposed
    again after each cooldown."""
    cfg = dataclasses.replace(CFG, consolidation=dataclasses.replace(  # 700 of 7700
        CFG.consolidation, frag_pct=5.0))  # free milli partial: 9%
    nodes = [node("n2", holds("a", U2[0], 300)), node("n3", holds("d", U3[0], 300))]
    svcs = [frac("a", 0.3), frac("d", 0.3)]
    sig, _ = observe(nodes, T, cfg=cfg)
    moves = plan(sig, nodes, svcs, T[-1], cfg)
    assert [(m.service, m.target_node, m.target_uuids) for m in moves] == \
        [("a", "n3", (U3[0],))]


# --- spread -------------------------------------------------------------------------------

def squeezed(n3_labels: Mapping[str, str] | None = None, n3_availability: str = "active"
             ) -> tuple[list[SwarmNode], list[SwarmService]]:
    """gpu-node-2 full (s0..s7, one GPU each); gpu-node-3 (same model) has joined."""
    n2: dict[str, str] = {}
    for i in range(8):
        n2.update(holds(f"s{i}", U2[i]))
    nodes = [node("n2", n2), node("n3", n3_labels or {}, n3_availability)]
    return nodes, [service(f"s{i}", {f"{P}gpus": "1"}) for i in range(8)]


def test_spread_gives_one_holding_back_to_a_node_that_joined() -> None:
    nodes, svcs = squeezed()
    sig, _ = observe(nodes, T, cfg=SPREAD)
    moves = plan(sig, nodes, svcs, T[-1], SPREAD)
    assert len(moves) == 1  # one per squeezed node per pass
    (m,) = moves
    assert (m.service, m.trigger, m.source_host, m.target_host) == \
        ("s0", Trigger.SPREAD, "gpu-node-2", "gpu-node-3")
    assert m.window_s is None and m.target_uuids[0] in U3
    assert "gpu-node-2 has 100% of its GPU share allocated (> 90%)" in m.reason
    assert "gpu-node-3 0% (< 10%)" in m.reason and m.gain == "1 GPU moves to the emptier node"


def test_spread_never_moves_a_holding_that_would_leave_the_target_above_the_source() -> None:
    """big holds all eight GPUs of gpu-node-2; gpu-node-3 joined empty. Moving big would
    leave gpu-node-3 full and gpu-node-2 empty: the next pass, after the cooldown, would
    move it back, and so on. Before, spread proposed it (the target was only checked to
    be below low_pct before the move)."""
    nodes = [node("n2", {f"{P}assign.big": ",".join(U2), f"{P}service.big": "true"}),
             node("n3", {})]
    svcs = [service("big", {f"{P}gpus": "8"})]
    sig, _ = observe(nodes, T, cfg=SPREAD)
    assert plan(sig, nodes, svcs, T[-1], SPREAD) == []


def test_spread_waits_until_the_new_node_has_known_metrics() -> None:
    # gpu-node-3 joined 2 s ago: its metrics do not cover a window yet, so it is not a
    # verified target; once they do, the move comes.
    nodes, svcs = squeezed()
    sig, _ = observe(nodes[:1], T[:10], cfg=SPREAD)
    sig, _ = observe(nodes, T[10:], cfg=SPREAD, sig=sig)
    assert not sig.nodes["n3"].known
    assert plan(sig, nodes, svcs, T[-1], SPREAD) == []
    sig, _ = observe(nodes, [float(t) for t in range(13, 19)], cfg=SPREAD, sig=sig)
    assert sig.nodes["n3"].known
    assert [m.target_host for m in plan(sig, nodes, svcs, 18.0, SPREAD)] == ["gpu-node-3"]


def test_spread_dead_band_drained_target_and_budget() -> None:
    # gpu-node-3 already 25% allocated (above spread.low_pct): inside the dead band.
    nodes, svcs = squeezed({**holds("x", U3[0]), **holds("y", U3[1])})
    svcs += [service("x", {f"{P}gpus": "1"}), service("y", {f"{P}gpus": "1"})]
    sig, _ = observe(nodes, T, cfg=SPREAD)
    assert plan(sig, nodes, svcs, T[-1], SPREAD) == []
    # A freed node that is drained takes nothing.
    nodes, svcs = squeezed(n3_availability="drain")
    sig, _ = observe(nodes, T, cfg=SPREAD)
    assert plan(sig, nodes, svcs, T[-1], SPREAD) == []
    # Two squeezed nodes (the DGX's 7 whole GPUs full too) and two empty ones: one move
    # per squeezed node, each to its own empty node; then one starts per cycle.
    n1_full: dict[str, str] = {}
    for i in range(1, 8):
        n1_full.update(holds(f"d{i}", U1[i]))
    nodes, svcs = squeezed()
    nodes += [node("n1", n1_full), node("n4", {})]
    svcs += [service(f"d{i}", {f"{P}gpus": "1"}) for i in range(1, 8)]
    sig, _ = observe(nodes, T, cfg=SPREAD)
    moves = plan(sig, nodes, svcs, T[-1], SPREAD)
    assert sorted(m.source_host for m in moves) == ["gpu-node-1", "gpu-node-2"]
    assert sorted(m.target_host for m in moves) == ["gpu-node-3", "gpu-node-4"]
    ok, refused = admit(moves, [], {s.name: s for s in svcs}, running(nodes),
                        read_ledger(nodes, P), SPREAD, P, T[-1])
    assert len(ok) == 1 and len(refused) == 1 and "per cycle" in refused[0][1]
    # With only one empty node, the second squeezed node waits for the next pass.
    sig, _ = observe(nodes[:3], T, cfg=SPREAD)
    assert len(plan(sig, nodes[:3], svcs, T[-1], SPREAD)) == 1
