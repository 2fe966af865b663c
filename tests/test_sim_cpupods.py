"""``simulate --cpu-pods swarm``: the trace's CPU-only pods placed by a model of Swarm's
own scheduler (``swarmgpu.sim.swarm_sched``), as in the product, for every policy alike:
the scheduler's order on small hand-made clusters, its task counts through the
planner's replay, and the option end to end (the default's output unchanged)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

from support.sim import default_sample, node_spec

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.values import Choice, Demand
from swarmgpu.sim.baselines import BestFitScorer
from swarmgpu.sim.cli_entry import run_simulate, unused_option
from swarmgpu.sim.replay import replay
from swarmgpu.sim.swarm_replay import FragmentationMover, Replay
from swarmgpu.sim.swarm_sched import SwarmScheduler
from swarmgpu.sim.trace import load_nodes, load_pods
from swarmgpu.sim.traces import bundled

CPU = Demand(cpu_milli=4000, memory_mib=1024)


def cluster(*cpus: int) -> Allocator:
    """Nodes n0, n1, ... with one GPU each and the CPU milli given."""
    alloc = Allocator(BestFitScorer())
    for i, cpu in enumerate(cpus):
        alloc.add_node(node_spec(f"n{i}", 1, cpu), rank=i)
    return alloc


def test_the_node_with_the_fewest_tasks_among_those_with_room() -> None:
    alloc = cluster(64000, 64000, 64000, 64000)
    sched = SwarmScheduler(42)
    for node, tasks in (("n0", 3), ("n1", 1), ("n2", 2), ("n3", 0)):
        for _ in range(tasks):
            sched.add(node)
    # n3 has no task but too little CPU left (ResourceFilter): n1, the fewest of the rest
    alloc.commit(Choice("n3", (), (), 0.0, "", 62000, 0))
    got = sched.pick(alloc, CPU)
    assert got is not None and got.node == "n1" and got.gpus == ()
    assert (got.cpu_milli, got.memory_mib) == (4000, 1024)
    # exactly the reservation left passes (Swarm refuses only more than is available)
    alloc.release(Choice("n3", (), (), 0.0, "", 2000, 0))
    assert sched.pick(alloc, CPU) == Choice("n3", (), (), 0.0, "Swarm's scheduler", 4000, 1024)
    alloc.set_blocked("n3", True)  # not ready or not active (ReadyFilter)
    assert (got := sched.pick(alloc, CPU)) is not None and got.node == "n1"


def test_memory_filters_too_and_no_node_leaves_the_task_pending() -> None:
    alloc = cluster(64000, 64000)
    sched = SwarmScheduler(1)
    sched.add("n1")
    alloc.commit(Choice("n0", (), (), 0.0, "", 0, (1 << 20) - 512))
    got = sched.pick(alloc, CPU)
    assert got is not None and got.node == "n1"  # n0 has fewer tasks, not the memory
    assert sched.pick(alloc, Demand(cpu_milli=65000)) is None


def test_a_task_reserving_nothing_skips_the_resource_filter() -> None:
    alloc = cluster(64000, 64000)
    sched = SwarmScheduler(1)
    sched.add("n1")
    alloc.commit(Choice("n0", (), (), 0.0, "", 64000, 1 << 20))  # n0 full
    got = sched.pick(alloc, Demand())
    assert got is not None and got.node == "n0"


def test_fewer_tasks_of_the_service_comes_before_fewer_tasks() -> None:
    alloc = cluster(64000, 64000)
    sched = SwarmScheduler(1)
    sched.add("n0", "web")
    for _ in range(3):
        sched.add("n1", "db")
    got = sched.pick(alloc, CPU, "web")
    assert got is not None and got.node == "n1"
    got = sched.pick(alloc, CPU, "db")
    assert got is not None and got.node == "n0"


def test_ties_are_drawn_from_the_seed_and_moves_are_counted() -> None:
    alloc = cluster(64000, 64000, 64000)
    picks: Counter[str] = Counter()
    sched = SwarmScheduler(7)
    sched.add("n2")
    for _ in range(200):
        got = sched.pick(alloc, CPU)
        assert got is not None
        picks[got.node] += 1
    assert set(picks) == {"n0", "n1"} and min(picks.values()) > 60  # never the busier n2
    a, b = SwarmScheduler(7), SwarmScheduler(7)
    assert [a.pick(alloc, CPU) for _ in range(20)] == [b.pick(alloc, CPU) for _ in range(20)]
    sched.add("n1")
    sched.moved([("n2", "n0")])  # n2's task moved to n0: n2 is now the one with none
    got = sched.pick(alloc, CPU)
    assert got is not None and got.node == "n2"
    assert (sched.tasks["n0"], sched.tasks["n1"], sched.tasks["n2"]) == (1, 1, 0)


def test_every_pod_placed_by_swarm_is_counted_on_its_node_in_the_planner_replay() -> None:
    """GPU pods (the planner's holdings, moves included) and CPU-only pods (Swarm's)
    count on their node, as Swarm counts the tasks there."""
    nodes, pods = default_sample(220, 80)
    rp = Replay(nodes, pods, 42, cpu_pods="swarm")
    res = rp.run(10.0, FragmentationMover(), defrag_every=25, min_batch=1)
    sched = rp.world.sched
    assert sched is not None and res.moves > 0
    want = Counter(nid for (_svc, nid), h in rp.planner.cluster.held_items()
                   if h.choice is not None and h.choice.gpus)
    want.update(t.node_id for t in rp.world.cpu_tasks.values())
    assert +sched.tasks == want and rp.world.cpu_tasks
    policy = Replay(nodes, pods, 42).run(10.0, FragmentationMover(), 25, 1)
    assert policy.alloc_pct_at != res.alloc_pct_at  # another placement of the CPU pods


def test_baseline_replay_places_cpu_pods_by_swarm_deterministically() -> None:
    nodes_csv, pods_csv = bundled("default")
    nodes = load_nodes(nodes_csv)[:40]
    pods = load_pods(pods_csv)[:300]
    a = replay(nodes, pods, "fgd", 3, cpu_pods="swarm")
    b = replay(nodes, pods, "fgd", 3, cpu_pods="swarm")
    c = replay(nodes, pods, "fgd", 3)
    assert a.alloc_pct_at == b.alloc_pct_at and a.failed_at == b.failed_at
    assert a.pods == c.pods and a.alloc_pct_at != c.alloc_pct_at


def test_the_option_is_refused_where_it_is_not_read() -> None:
    base = {"policies": ["fgd"], "bound": "lp", "online_at": 95}
    # --departures and --priorities place CPU-only pods as policy does: swarm is refused
    why = unused_option({"--cpu-pods"}, departures=True, priorities=False, cpu_pods="swarm",
                        **base)
    assert why is not None and why.startswith("--cpu-pods swarm applies without --departures")
    why = unused_option({"--cpu-pods"}, departures=False, priorities=True, cpu_pods="swarm",
                        **base)
    assert why is not None and why.startswith("--cpu-pods swarm applies without --departures")
    assert unused_option({"--cpu-pods"}, departures=False, priorities=False, **base) is None
    text, rc = run_simulate("n.csv", "p.csv", ["fgd"], [1], False, None, cpu_pods="kube")
    assert rc == 2 and "--cpu-pods 'kube'" in text
    text, rc = run_simulate("n.csv", "p.csv", ["fgd"], [1], False, None, True,
                            cpu_pods="swarm")
    assert rc == 2 and "without --departures" in text


def test_simulate_cpu_pods_swarm_end_to_end() -> None:
    args = ["--seeds", "42", "--bound", "off", "--policy", "bestfit"]
    run = [sys.executable, "-m", "swarmgpu.cli", "simulate", *args]
    sub = subprocess.run([*run, "--cpu-pods", "swarm", "--json"], capture_output=True,
                         text=True, timeout=300, check=True)
    got = json.loads(sub.stdout)
    assert got["cpu_pods"] == "swarm"
    text = subprocess.run([*run, "--cpu-pods", "swarm"], capture_output=True, text=True,
                          timeout=300, check=True).stdout
    assert "placed by a model of Swarm's scheduler" in text
    default = json.loads(subprocess.run([*run, "--json"], capture_output=True, text=True,
                                        timeout=300, check=True).stdout)
    assert "cpu_pods" not in default  # the default's output is as before, byte for byte
    assert default["policies"] != got["policies"]
