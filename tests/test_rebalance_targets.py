"""Rebalancing, pure: a move's target judged as the pass's other moves and Swarm will
leave it. Each policy's move is checked against the load (utilisation) and the share the
moves proposed before it in the same pass already put on that target."""

from __future__ import annotations

import dataclasses
from typing import Any

from support.health import mark, setup
from support.health import plan as health_plan
from support.rebalance import CFG, F1, F2, FACTS, U2, P, cluster, feed, node, running, service
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


# --- a move's target as Swarm's filters judge it -------------------------------------

HOT = {float(t): {0: 97.0} for t in range(13)}  # gpu-node-2 GPU 0, shared by a and b
PORT = {"EndpointSpec": {"Ports": [{"Protocol": "tcp", "TargetPort": 80,
                                    "PublishedPort": 8000, "PublishMode": "host"}]}}


def with_spec(svcs: list[SwarmService], spec: dict[str, Any]) -> list[SwarmService]:
    return [dataclasses.replace(s, spec={"Name": s.name, **spec}) for s in svcs]


def hot_moves(nodes: list[SwarmNode], svcs: list[SwarmService], tasks: list[SwarmTask]
              ) -> tuple[list[tuple[str, str]], list[str]]:
    """(service, target host) of each move of one pass over ``HOT``, and its notes."""
    sig = Signals(CFG)
    times = [float(t) for t in range(13)]
    feed(sig, nodes, times, HOT)
    prop = plan_moves(Inputs(nodes, svcs, tasks, FACTS, read_ledger(nodes, P), sig.gpus,
                             sig.nodes, CFG, times[-1], (), P))
    return [(m.service, m.target_host) for m in prop.moves], prop.notes


def test_the_cluster_without_a_filter_moves_a_to_gpu_node_1() -> None:
    assert hot_moves(*cluster())[0] == [("a", "gpu-node-1")]


def test_a_target_lacking_a_volume_plugin_the_service_needs_is_no_target() -> None:
    """Swarm's PluginFilter would leave the moved task pending on gpu-node-1 (its
    engine has no rexray/s3fs), and the move would roll back after move_timeout_s."""
    nodes, svcs, tasks = cluster()
    mount = {"Type": "volume", "Target": "/d",
             "VolumeOptions": {"DriverConfig": {"Name": "rexray/s3fs"}}}
    svcs = with_spec(svcs, {"TaskTemplate": {"ContainerSpec": {"Mounts": [mount]}}})
    nodes = [dataclasses.replace(nodes[0], plugins=(("Volume", "local"),)),
             dataclasses.replace(nodes[1], plugins=(("Volume", "local"),
                                                    ("Volume", "rexray/s3fs")))]
    moves, notes = hot_moves(nodes, svcs, tasks)
    assert moves == [] and any("no verified-free target" in n for n in notes), notes


def test_a_target_where_another_task_binds_the_host_port_is_no_target() -> None:
    nodes, svcs, tasks = cluster()
    proxy = dataclasses.replace(service("proxy", {}), constraints=(), spec=PORT)
    svcs = [*with_spec(svcs, PORT), proxy]
    assert hot_moves(nodes, svcs, [*tasks, running("proxy", "n1")])[0] == []


def test_a_target_without_the_cpu_the_task_reserves_is_no_target() -> None:
    """gpu-node-1 has 4 CPUs, 3.5 reserved by another task; a reserves 1."""
    nodes, svcs, tasks = cluster()
    one_cpu = {"TaskTemplate": {"Resources": {"Reservations": {"NanoCPUs": 10**9}}}}
    nodes = [dataclasses.replace(nodes[0], cpu_milli=4000, memory_mib=65536), nodes[1]]
    hog = dataclasses.replace(running("hog", "n1"), cpu_milli=3500)
    assert hot_moves(nodes, with_spec(svcs, one_cpu), [*tasks, hog])[0] == []


def test_a_target_of_another_platform_is_no_target() -> None:
    nodes, svcs, tasks = cluster()
    arm = {"TaskTemplate": {"Placement": {"Platforms": [{"OS": "linux",
                                                         "Architecture": "arm64"}]}}}
    nodes = [dataclasses.replace(n, os="linux", arch="x86_64") for n in nodes]
    assert hot_moves(nodes, with_spec(svcs, arm), tasks)[0] == []


def test_a_platform_constraint_the_target_meets_lets_the_move_go() -> None:
    """node.platform.os is a field Swarm reads; before, any field but labels, hostname,
    id and role made every target "unsure" and the service never moved."""
    nodes, svcs, tasks = cluster()
    nodes = [dataclasses.replace(n, os="linux", arch="x86_64") for n in nodes]
    svcs = [dataclasses.replace(s, constraints=(*s.constraints, "node.platform.os==linux"))
            for s in svcs]
    assert hot_moves(nodes, svcs, tasks)[0] == [("a", "gpu-node-1")]


def test_two_moves_of_one_pass_publishing_one_host_port_do_not_share_a_target() -> None:
    """a and c (from two hot GPUs) publish 8000 in host mode; gpu-node-1 has room and
    load for both, but Swarm runs one task with that port per node."""
    nodes, svcs, tasks = two_hot()
    svcs = [dataclasses.replace(s, spec=PORT) if s.name in ("a", "c") else s for s in svcs]
    util1 = {**UTIL1, COOL + 1: 10.0}  # a second cool GPU: the load is no obstacle
    _sig, inp = planned(nodes, svcs, tasks, {0: 90.0, 1: 90.0}, util1=util1)
    assert len(plan_moves(inp).moves) == 1


def test_a_health_move_goes_only_where_swarm_would_run_the_task() -> None:
    """The holder of a failed GPU: gpu-node-1 (the only healthy room) binds its host
    port through another service's task, or lacks its CPU: it stays, and the plan says
    no healthy GPU is free for it. Before, the move was proposed and rolled back."""
    nodes, svcs, tasks = setup({"a": [U2[0]]})
    proxy = dataclasses.replace(service("proxy", {}), constraints=(), spec=PORT)
    port = [dataclasses.replace(s, spec=PORT) if s.name == "a" else s for s in svcs]
    one_cpu = {"TaskTemplate": {"Resources": {"Reservations": {"NanoCPUs": 10**9}}}}
    cpu = [dataclasses.replace(s, spec=one_cpu) if s.name == "a" else s for s in svcs]
    small = [dataclasses.replace(nodes[0], cpu_milli=4000), nodes[1]]
    hog = dataclasses.replace(running("hog", "n1"), cpu_milli=3500)
    assert len(health_plan(nodes, svcs, tasks, mark(F2, failed=[0])).moves) == 1
    for at, ss, ts in ((nodes, [*port, proxy], [*tasks, running("proxy", "n1")]),
                       (small, cpu, [*tasks, hog])):
        p = health_plan(at, ss, ts, mark(F2, failed=[0]))
        assert p.moves == [] and any("a on gpu-node-2 stays: no healthy GPU free" in n
                                     for n in p.notes), p.notes


def test_fragmentation_moves_go_only_where_swarm_would_run_the_task() -> None:
    """b (half of gpu-node-2 GPU 0) would join a on gpu-node-1 (a joining b gains less:
    no move). gpu-node-1's engine lacks the volume plugin both need: no move. gpu-node-1
    without the CPU b reserves: b is not moved there, and a, whose node then has too
    little CPU left for the workload's halves, joins b on gpu-node-2 (the search counts
    CPU as FGD's score does; until stop 67 it chose gpu-node-1 for b, and the last check
    dropped the move and proposed none). Before, b moved to gpu-node-1 either way."""
    nodes, svcs, tasks = two_half_used()
    cfg = dataclasses.replace(TWO, policies="fragmentation")
    mount = {"Type": "volume", "Target": "/d",
             "VolumeOptions": {"DriverConfig": {"Name": "rexray/s3fs"}}}
    plugin = with_spec(svcs[:2], {"TaskTemplate": {"ContainerSpec": {"Mounts": [mount]}}})
    with_plugins = [dataclasses.replace(nodes[0], plugins=(("Volume", "local"),)),
                    dataclasses.replace(nodes[1], plugins=(("Volume", "rexray/s3fs"),))]
    moves = plan_moves(planned(with_plugins, [*plugin, svcs[2]], tasks, {}, cfg)[1]).moves
    assert moves == []
    one_cpu = {"TaskTemplate": {"Resources": {"Reservations": {"NanoCPUs": 10**9}}}}
    small = [dataclasses.replace(nodes[0], cpu_milli=4000), nodes[1]]
    hog = dataclasses.replace(running("hog", "n1"), cpu_milli=3500)
    prop = plan_moves(planned(small, [*with_spec(svcs[:2], one_cpu), svcs[2]],
                              [*tasks, hog], {}, cfg)[1])
    assert [(m.service, m.target_host) for m in prop.moves] == [("a", "gpu-node-2")], \
        prop.notes


def test_defrag_makes_room_only_where_swarm_would_run_the_pending_task() -> None:
    """p (8 GPUs) fits gpu-node-2 once a moves off it, but p's constraint keeps it off
    gpu-node-2: no move (before, a was moved for a room p could never take)."""
    n2 = {f"{P}assign.a": U2[0], f"{P}service.a": "true"}
    nodes = [node("n1", "gpu-node-1", {}), node("n2", "gpu-node-2", n2)]
    p = service("p", {f"{P}gpus": "8"})
    svcs = [service("a", {f"{P}gpus": "1"}), p]
    cfg = dataclasses.replace(CFG, policies="defrag")
    sig = Signals(cfg)
    times = [float(t) for t in range(13)]
    feed(sig, nodes, times, {})

    def moves(pending: SwarmService) -> list[str]:
        inp = Inputs(nodes, [svcs[0], pending], [running("a", "n2")], FACTS,
                     read_ledger(nodes, P), sig.gpus, sig.nodes, cfg, times[-1], ["p"], P)
        return [m.service for m in plan_moves(inp).moves]

    assert moves(p) == ["a"]
    held_off = dataclasses.replace(p, constraints=(*p.constraints,
                                                   "node.hostname!=gpu-node-2"))
    assert moves(held_off) == []
