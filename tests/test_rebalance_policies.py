"""Rebalancing, pure: windows from real Prometheus text, policies, budget, cooldown."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import pytest
from support.rebalance import (
    CFG,
    F1,
    F2,
    FACTS,
    U2,
    P,
    cluster,
    feed,
    load_rebalance,
    node,
    page,
    running,
    service,
)

from swarmgpu.core.config import ConfigError, RebalanceConfig
from swarmgpu.manager.placement import MOVE_STATE, read_ledger
from swarmgpu.manager.rebalance.admission import admit
from swarmgpu.manager.rebalance.context import Inputs, constraints_allow
from swarmgpu.manager.rebalance.mover import MoveState
from swarmgpu.manager.rebalance.moves import Move, Trigger, moves_to_dicts, render_moves
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.record import record_key, unreadable_of
from swarmgpu.manager.rebalance.scrape import NodeScrape, judge
from swarmgpu.manager.rebalance.signals import Signals
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask


def inputs(sig: Signals, nodes: list[SwarmNode], svcs: list[SwarmService],
           tasks: list[SwarmTask], now: float, cfg: RebalanceConfig = CFG,
           pending: Sequence[str] = ()) -> Inputs:
    return Inputs(nodes, svcs, tasks, FACTS, read_ledger(nodes, P), sig.gpus, sig.nodes, cfg,
                  now, pending, P)


def hot_run(util_at: Mapping[float, float], cfg: RebalanceConfig = CFG,
            **kw: Mapping[str, str]) -> list[Move]:
    nodes, svcs, tasks = cluster(**kw)
    sig = Signals(cfg)
    times = [float(t) for t in range(0, 13)]
    feed(sig, nodes, times, {t: {0: util_at.get(t, 5.0)} for t in times})
    return plan_moves(inputs(sig, nodes, svcs, tasks, times[-1], cfg)).moves


def test_sustained_hot_spot_moves_one_share_to_a_verified_target() -> None:
    moves = hot_run({float(t): 97.0 for t in range(13)})
    assert len(moves) == 1
    (m,) = moves
    assert m.trigger is Trigger.HOTSPOT and m.source_host == "gpu-node-2"
    assert m.service == "a"  # equal shares: by name, deterministic
    assert m.target_host == "gpu-node-1" and m.target_milli == (500,)
    dgx = {g.uuid: g for g in F1.gpus}
    assert not dgx[m.target_uuids[0]].mig_enabled
    d = moves_to_dicts(moves)["proposed"][0]
    assert set(d) >= {"service", "from", "to", "gpus", "trigger", "window", "reason", "gain"}
    assert d["window"] == 5 and "above 85% util" in d["reason"]
    assert "gpu-node-2 -> gpu-node-1" in render_moves(moves)


def test_short_spike_moves_nothing() -> None:
    assert hot_run({10.0: 99.0, 11.0: 99.0, 12.0: 99.0}) == []


def test_opt_out_service_never_moves_the_other_one_does() -> None:
    always = {float(t): 97.0 for t in range(13)}
    moves = hot_run(always, extra={f"{P}rebalance": "never"})
    assert [m.service for m in moves] == ["b"]
    assert hot_run(always, extra={f"{P}rebalance": "never"},
                   b_labels={f"{P}rebalance": "never"}) == []


def test_a_service_whose_move_record_cannot_be_read_is_not_proposed_the_other_is() -> None:
    """a's own record cannot be read: a is proposed by no policy (before: every cycle,
    refused only when its move started), the plan says why once, and b moves instead."""
    nodes, svcs, tasks = cluster()
    sig = Signals(CFG)
    times = [float(t) for t in range(0, 13)]
    feed(sig, nodes, times, {t: {0: 97.0} for t in times})
    key = record_key(P, "id-a")
    bad = unreadable_of(svcs, {key: '{"id": 1}', record_key(P, "id-gone"): "x"}, P)
    prop = plan_moves(dataclasses.replace(inputs(sig, nodes, svcs, tasks, times[-1]),
                                          unreadable=bad))
    assert [m.service for m in prop.moves] == ["b"]
    assert [n for n in prop.notes if "remove it by hand" in n] == [
        f"a is not moved: its move record {key} cannot be read: check the service's gates, "
        "then remove it by hand (swarmgpu audit: move-record-unreadable)"]


def test_broken_metrics_make_the_node_unknown_not_idle() -> None:
    nodes, svcs, tasks = cluster()
    sig = Signals(CFG)
    times = [float(t) for t in range(13)]
    warnings = feed(sig, nodes, times, {t: {0: 97.0} for t in times}, broken={11.0, 12.0})
    assert any("gpu-node-2" in w and "UNKNOWN" in w for w in warnings), warnings
    assert not sig.nodes["n2"].known
    assert plan_moves(inputs(sig, nodes, svcs, tasks, 12.0)).moves == []


def test_dead_target_exporter_means_no_target() -> None:
    nodes, svcs, tasks = cluster()
    sig = Signals(CFG)
    for t in range(13):
        scr = {"n2": judge(nodes[1], "u", page(F2, {0: 97.0}), float(t)),
               "n1": NodeScrape("n1", "gpu-node-1", "u", float(t), None, "unreachable")}
        sig.observe(scr, FACTS, {"n1": "gpu-node-1", "n2": "gpu-node-2"},
                    read_ledger(nodes, P), float(t))
    prop = plan_moves(inputs(sig, nodes, svcs, tasks, 12.0))
    assert prop.moves == [] and "gpu-node-1" in prop.unknown_nodes
    assert any("no verified-free target" in n for n in prop.notes)


def test_global_and_unconverged_services_are_not_moved() -> None:
    always = {float(t): 97.0 for t in range(13)}
    nodes, svcs, tasks = cluster()
    svcs = [dataclasses.replace(svcs[0], mode="global", replicas=None), svcs[1]]
    sig = Signals(CFG)
    times = [float(t) for t in range(13)]
    feed(sig, nodes, times, {t: {0: always[t]} for t in times})
    assert [m.service for m in plan_moves(inputs(sig, nodes, svcs, tasks, 12.0)).moves] == ["b"]
    pending_b = [tasks[0], dataclasses.replace(tasks[1], state="pending")]
    svcs2 = cluster()[1]
    assert [m.service for m in plan_moves(inputs(sig, nodes, svcs2, pending_b, 12.0)).moves] \
        == ["a"]


def _move(svc: str, src: str, dst: str) -> Move:
    return Move(svc, f"id-{svc}", src, src, ("u",), (500,), dst, dst, (0,), ("v",), (500,),
                Trigger.HOTSPOT, 5, "r", "g")


def _many(n: int) -> tuple[list[SwarmService], list[SwarmTask], dict[str, dict[str, object]]]:
    svcs = [service(f"s{i}", {f"{P}gpu-fraction": "0.5"}) for i in range(n)]
    tasks = [running(f"s{i}", f"src{i}") for i in range(n)]
    nodes = [node(f"src{i}", f"src{i}", {f"{P}assign.s{i}": "GPU-x@500"}) for i in range(n)]
    return svcs, tasks, read_ledger(nodes, P)  # type: ignore[return-value]


def test_budget_per_cycle_and_per_node_hold() -> None:
    svcs, tasks, ledger = _many(5)
    moves = [_move(f"s{i}", f"src{i}", f"dst{i}") for i in range(5)]
    cfg = dataclasses.replace(CFG, max_moves_per_cycle=2, max_moves_per_node=1)
    ok, refused = admit(moves, [], {s.name: s for s in svcs}, tasks, ledger,  # type: ignore[arg-type]
                        cfg, P, 1000.0)
    assert [m.service for m in ok] == ["s0", "s1"]
    assert len(refused) == 3 and all("per cycle" in why for _, why in refused)
    same_target = [_move(f"s{i}", f"src{i}", "dst") for i in range(3)]
    ok, refused = admit(same_target, [], {s.name: s for s in svcs}, tasks, ledger,  # type: ignore[arg-type]
                        cfg, P, 1000.0)
    assert len(ok) == 1 and all("per node" in why for _, why in refused)
    flying = MoveState("x", "s4", "src4", "src4", (), (), "dst4", "dst4", (), (), True, 1, 0,
                       0.0, "hotspot", "r")
    ok, _ = admit(moves[:2], [flying, flying], {s.name: s for s in svcs}, tasks,
                  ledger, cfg, P, 1000.0)  # type: ignore[arg-type]
    assert ok == []  # moves in flight use the budget


def test_cooldown_holds_and_then_lets_go() -> None:
    svcs, tasks, ledger = _many(1)
    svcs = [dataclasses.replace(svcs[0], labels={**svcs[0].labels,
                                                 f"{P}state.moved-at": "1000"})]
    by = {s.name: s for s in svcs}
    m = [_move("s0", "src0", "dst0")]
    ok, refused = admit(m, [], by, tasks, ledger, CFG, P, 1000.0 + 299)  # type: ignore[arg-type]
    assert ok == [] and "cooling down" in refused[0][1]
    ok, _ = admit(m, [], by, tasks, ledger, CFG, P, 1000.0 + 301)  # type: ignore[arg-type]
    assert len(ok) == 1
    moving = [dataclasses.replace(svcs[0], labels={f"{P}gpu-fraction": "0.5",
                                                   P + MOVE_STATE: "{}"})]
    # A move label alone (no record of the daemon's) is nobody's move: admitted.
    ok, refused = admit(m, [], {"s0": moving[0]}, tasks, ledger, CFG, P, 5000.0)  # type: ignore[arg-type]
    assert len(ok) == 1, refused
    # Its record in flight: refused (the budget of one move per cycle says so first
    # with CFG's; a budget of two leaves "in progress" as the reason).
    record = MoveState("mv1", "s0", "src0", "src0", ("u",), (500,), "dst0", "dst0", ("v",),
                       (500,), False, 1, 0, 4000.0, "hotspot", "r", service_id="id-s0")
    two = dataclasses.replace(CFG, max_moves_per_cycle=2, max_moves_per_node=2)
    ok, refused = admit(m, [record], {"s0": moving[0]}, tasks, ledger, two, P, 5000.0)  # type: ignore[arg-type]
    assert ok == [] and "in progress" in refused[0][1]


def test_defrag_finds_the_fewest_moves_for_a_pending_request() -> None:
    # gpu-node-2: a (1 GPU) on GPU 0 blocks nothing alone; pending p wants all 8 GPUs.
    n2 = {f"{P}assign.a": U2[0], f"{P}service.a": "true"}
    nodes = [node("n1", "gpu-node-1", {}), node("n2", "gpu-node-2", n2)]
    svcs = [service("a", {f"{P}gpus": "1"}), service("p", {f"{P}gpus": "8"})]
    tasks = [running("a", "n2")]
    sig = Signals(CFG)
    times = [float(t) for t in range(13)]
    feed(sig, nodes, times, {})
    prop = plan_moves(inputs(sig, nodes, svcs, tasks, 12.0, pending=["p"]))
    assert [(m.service, m.trigger, m.target_host) for m in prop.moves] == \
        [("a", Trigger.DEFRAG, "gpu-node-1")]


def test_defrag_moves_the_least_gpu_when_plans_move_as_many_tasks() -> None:
    # Pending p wants 7 whole GPUs. gpu-node-1 (GPU 0 is MIG) has them if x's whole GPU
    # moves; gpu-node-2 if one of the halves y, z moves. One move either way: the shared
    # search (allocator.rescue.plans, what the replay carries out) moves the least GPU;
    # the policy once took the first node by hostname and moved the whole GPU.
    n1 = {f"{P}assign.x": F1.gpus[1].uuid, f"{P}service.x": "true"}
    n2 = {f"{P}assign.y": f"{U2[0]}@500", f"{P}service.y": "true",
          f"{P}assign.z": f"{U2[1]}@500", f"{P}service.z": "true"}
    nodes = [node("n1", "gpu-node-1", n1), node("n2", "gpu-node-2", n2)]
    half = {f"{P}gpu-fraction": "0.5"}
    svcs = [service("x", {f"{P}gpus": "1"}), service("y", half), service("z", half),
            service("p", {f"{P}gpus": "7"})]
    tasks = [running("x", "n1"), running("y", "n2"), running("z", "n2")]
    sig = Signals(CFG)
    feed(sig, nodes, [float(t) for t in range(13)], {})
    prop = plan_moves(inputs(sig, nodes, svcs, tasks, 12.0, pending=["p"]))
    assert [(m.service, m.target_host) for m in prop.moves if m.trigger is Trigger.DEFRAG] \
        == [("y", "gpu-node-1")]


def test_config_validation_names_the_key() -> None:
    assert RebalanceConfig().cooldown_s >= 300
    with pytest.raises(ConfigError, match=r"rebalance\.hotspot\.clear_pct: must be <= util_pct"):
        load_rebalance({"hotspot": {"clear_pct": 90}})
    with pytest.raises(ConfigError, match="policies"):
        load_rebalance({"policies": "hotspot,magic"})
    with pytest.raises(ConfigError, match="metrics_url_template"):
        load_rebalance({"metrics_url_template": "http://localhost:9400/metrics"})





def test_a_move_target_is_judged_by_every_constraint_but_the_gate() -> None:
    """Only the service's gate in its exact form (``==true``, which the move opens) is
    left out; the owner's ``== false`` on its gate label is judged as Swarm will."""
    s, open_gate = service("s", {}), node("n1", "h1", {P + "service.s": "true"})
    assert constraints_allow(s, node("n0", "h0", {}), P)  # its gate: opened by the move
    s = dataclasses.replace(s, constraints=(f"node.labels.{P}service.s==false",))
    assert not constraints_allow(s, open_gate, P)


def test_unknown_nodes_of_one_hostname_are_listed_each() -> None:
    """Two nodes may share a hostname (one re-joined under a new ID, or two machines
    named alike). Before: keyed by hostname, two nodes whose metrics are unknown were
    one entry."""
    nodes = [dataclasses.replace(n, hostname="gpu-node-1") for n in cluster()[0]]
    svcs, tasks = cluster()[1:]
    sig = Signals(CFG)
    for t in range(13):
        scr = {n.id: NodeScrape(n.id, n.hostname, "u", float(t), None, "unreachable")
               for n in nodes}
        sig.observe(scr, FACTS, {n.id: n.hostname for n in nodes}, read_ledger(nodes, P),
                    float(t))
    prop = plan_moves(inputs(sig, nodes, svcs, tasks, 12.0))
    assert sorted(prop.unknown_nodes) == ["gpu-node-1 (n1)", "gpu-node-1 (n2)"]
